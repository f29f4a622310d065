// Black-box tests of `kwd-controller serve`: the real binary against the fake
// API server (tests/fake_apiserver), observed through its admin port and the
// fake's object store and request log.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>


#include "common/crypto.h"
#include "common/file.h"
#include "controller/cli/cli.h"
#include "controller/kube/kube_client.h"
#include "tests/fake_apiserver/fake_apiserver_process.h"
#include "tests/support/http_client.h"
#include "tests/support/process.h"
#include "tests/support/test_pki.h"

namespace kwd::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

json LogonGroup(const std::string& name, const std::string& service, json extra_spec = {}) {
  json spec = {{"kind", "abap"}, {"backend", {{"service", {{"name", service}, {"port", 8000}}}}}};
  if (extra_spec.is_object()) {
    spec.update(extra_spec);
  }
  return {{"apiVersion", "dispatch.kwd.io/v1alpha1"},
          {"kind", "LogonGroup"},
          {"metadata", {{"name", name}, {"namespace", "erp"}}},
          {"spec", spec}};
}

struct Ep {
  std::string pod;
  std::string ip;
  bool ready = true;
  bool serving = true;
  bool terminating = false;
};

json Slice(const std::string& service, const std::vector<Ep>& endpoints) {
  json items = json::array();
  for (const Ep& ep : endpoints) {
    items.push_back(
        {{"addresses", {ep.ip}},
         {"conditions",
          {{"ready", ep.ready}, {"serving", ep.serving}, {"terminating", ep.terminating}}},
         {"targetRef", {{"kind", "Pod"}, {"namespace", "erp"}, {"name", ep.pod}}}});
  }
  return {{"apiVersion", "discovery.k8s.io/v1"},
          {"kind", "EndpointSlice"},
          {"metadata",
           {{"name", service + "-abc"},
            {"namespace", "erp"},
            {"labels", {{"kubernetes.io/service-name", service}}}}},
          {"addressType", "IPv4"},
          {"endpoints", items},
          {"ports", {{{"name", "http"}, {"port", 8000}, {"protocol", "TCP"}}}}};
}

json Pod(const std::string& name, const std::string& instance, int capacity) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", name},
            {"namespace", "erp"},
            {"annotations",
             {{"dispatch.kwd.io/instance-name", instance},
              {"dispatch.kwd.io/capacity", std::to_string(capacity)}}}}},
          {"status", {{"phase", "Running"}}}};
}

json UrlMapping(const std::string& prefix, const std::string& group) {
  return {{"apiVersion", "dispatch.kwd.io/v1alpha1"},
          {"kind", "UrlMapping"},
          {"metadata", {{"name", "erp"}, {"namespace", "erp"}}},
          {"spec",
           {{"defaultGroups", {{"abap", "diag"}}},
            {"rules", {{{"prefix", prefix}, {"kind", "abap"}, {"logonGroup", group}}}}}}};
}

std::optional<json> Snapshot(uint16_t port) {
  HttpReply reply = HttpGet(port, "/debug/snapshot");
  if (reply.status != 200) {
    return std::nullopt;
  }
  return json::parse(reply.body, nullptr, false);
}

const json* FindGroup(const json& snapshot, const std::string& key) {
  if (!snapshot.contains("groups")) {
    return nullptr;
  }
  for (const json& group : snapshot["groups"]) {
    if (group.value("key", "") == key) {
      return &group;
    }
  }
  return nullptr;
}

// "name:capacity:state" of each server of group `key`, or "absent".
std::string Servers(uint16_t port, const std::string& key) {
  auto snapshot = Snapshot(port);
  if (!snapshot) {
    return "no snapshot";
  }
  const json* group = FindGroup(*snapshot, key);
  if (group == nullptr) {
    return "absent";
  }
  std::string out;
  for (const json& server : group->value("servers", json::array())) {
    if (!out.empty()) {
      out += ",";
    }
    std::string state = server.value("state", "");
    out += server.value("name", "") + ":" + std::to_string(server.value("capacity", 0)) +
           (state == "SERVER_STATE_DRAINING" ? ":draining" : "");
  }
  return out;
}

double Metric(uint16_t port, const std::string& series) {
  HttpReply reply = HttpGet(port, "/metrics");
  std::istringstream lines(reply.body);
  std::string line;
  double sum = 0;
  bool found = false;
  while (std::getline(lines, line)) {
    if (line.rfind(series, 0) == 0 && line.size() > series.size() &&
        (line[series.size()] == ' ' || line[series.size()] == '{' ||
         line[series.size() - 1] == '}')) {
      sum += std::stod(line.substr(line.rfind(' ') + 1));
      found = true;
    }
  }
  return found ? sum : -1;
}

class ServeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_ = std::make_unique<FakeApiServer>();
    client_ = std::make_unique<kube::KubeClient>(fake_->Config());
    dir_ = fs::temp_directory_path() /
           ("kwd-serve-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream(dir_ / "kubeconfig")
        << "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster: {server: '"
        << fake_->address() << "'}\nusers:\n- name: u\n  user: {}\ncontexts:\n- name: c\n"
        << "  context: {cluster: fake, user: u, namespace: default}\ncurrent-context: c\n";
  }
  void TearDown() override {
    controllers_.clear();
    if (!HasFailure()) {
      fs::remove_all(dir_);
    }
  }

  Process& Start(std::vector<std::string> extra = {}) {
    uint16_t port = ReserveFreePort();
    std::vector<std::string> argv = {BinaryPath("kwd-controller"),
                                     "serve",
                                     "--source=kube",
                                     "--kubeconfig",
                                     (dir_ / "kubeconfig").string(),
                                     "--admin-listen",
                                     "127.0.0.1:" + std::to_string(port),
                                     "--hold-off",
                                     "5ms",
                                     "--log-level",
                                     "debug"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    std::string log = (dir_ / ("controller-" + std::to_string(controllers_.size()) + ".log"));
    controllers_.push_back(std::make_unique<Process>(argv, log));
    EXPECT_TRUE(controllers_.back()->started()) << controllers_.back()->Log();
    return *controllers_.back();
  }

  json Get(const std::string& kind, const std::string& name) {
    std::string plural = kind == "LogonGroup" ? "logongroups" : "urlmappings";
    return client_->Get("/apis/dispatch.kwd.io/v1alpha1/namespaces/erp/" + plural + "/" + name)
        .body;
  }

  // The condition `type` of an object's status, or null.
  json Condition(const std::string& kind, const std::string& name, const std::string& type) {
    json object = Get(kind, name);
    if (!object.contains("status") || !object["status"].is_object()) {
      return nullptr;
    }
    for (const json& condition : object["status"].value("conditions", json::array())) {
      if (condition.value("type", "") == type) {
        return condition;
      }
    }
    return nullptr;
  }

  // A spec edit as kubectl makes it: the fake's control API replaces the whole
  // object, so carry the current status over.
  void Edit(json object) {
    json current = Get(object["kind"], object["metadata"]["name"]);
    if (current.contains("status")) {
      object["status"] = current["status"];
    }
    fake_->Upsert(object);
  }

  int StatusPatches() {
    int count = 0;
    for (const json& request : fake_->Requests()) {
      std::string path = request.value("path", "");
      if (request.value("method", "") == "PATCH" && path.size() > 7 &&
          path.substr(path.size() - 7) == "/status") {
        ++count;
      }
    }
    return count;
  }

  void Seed() {
    fake_->Upsert(Pod("erp-0", "erp0_ERP_00", 6));
    fake_->Upsert(Pod("erp-1", "erp1_ERP_00", 3));
    fake_->Upsert(Slice("erp-abap", {{"erp-0", "10.0.0.1"}, {"erp-1", "10.0.0.2"}}));
    fake_->Upsert(LogonGroup("public", "erp-abap"));
    fake_->Upsert(LogonGroup("diag", "erp-abap"));
    fake_->Upsert(UrlMapping("/sap/", "public"));
  }

  std::unique_ptr<FakeApiServer> fake_;
  std::unique_ptr<kube::KubeClient> client_;
  fs::path dir_;
  std::vector<std::unique_ptr<Process>> controllers_;
};

TEST_F(ServeTest, InitialSyncPublishesTheSnapshotAndWritesStatus) {
  Seed();
  fake_->Upsert(LogonGroup("broken", "erp-abap", {{"strategy", "fastest"}}));
  Process& controller = Start();
  ASSERT_TRUE(WaitFor([&] { return HttpGet(controller.port(), "/readyz").status == 200; }))
      << controller.Log();
  EXPECT_EQ(Servers(controller.port(), "erp/public"), "erp0_ERP_00:6,erp1_ERP_00:3");
  EXPECT_EQ(Servers(controller.port(), "erp/broken"), "absent");
  ASSERT_TRUE(WaitFor([&] { return Condition("LogonGroup", "public", "Accepted").is_object(); }))
      << controller.Log();
  json accepted = Condition("LogonGroup", "public", "Accepted");
  EXPECT_EQ(accepted["status"], "True");
  EXPECT_EQ(accepted["observedGeneration"], 1);
  EXPECT_EQ(Get("LogonGroup", "public")["status"]["readyServers"], 2);
  EXPECT_EQ(Condition("LogonGroup", "public", "ResolvedRefs")["status"], "True");
  ASSERT_TRUE(WaitFor([&] { return Condition("LogonGroup", "broken", "Accepted").is_object(); }));
  EXPECT_EQ(Condition("LogonGroup", "broken", "Accepted")["status"], "False");
  EXPECT_EQ(Condition("LogonGroup", "broken", "Accepted")["reason"], "InvalidStrategy");
  ASSERT_TRUE(WaitFor([&] { return Condition("UrlMapping", "erp", "Accepted").is_object(); }));
  EXPECT_EQ(Condition("UrlMapping", "erp", "Accepted")["status"], "True");
  EXPECT_EQ(Metric(controller.port(), "kwd_controller_leader"), 1);
  EXPECT_GE(Metric(controller.port(), "kwd_controller_lists_total"), 4);
  EXPECT_EQ(controller.Stop(), 0);
}

TEST_F(ServeTest, EveryKindOfChangeReachesTheSnapshot) {
  Seed();
  Process& controller = Start();
  uint16_t port = controller.port();
  ASSERT_TRUE(WaitFor([&] { return Servers(port, "erp/public") == "erp0_ERP_00:6,erp1_ERP_00:3"; }))
      << controller.Log();

  // Pod annotation change.
  fake_->Upsert(Pod("erp-1", "erp1_ERP_00", 4));
  EXPECT_TRUE(WaitFor([&] { return Servers(port, "erp/public") == "erp0_ERP_00:6,erp1_ERP_00:4"; }))
      << Servers(port, "erp/public");
  // An endpoint terminating but serving drains; a not-ready one leaves.
  fake_->Upsert(Slice("erp-abap", {{"erp-0", "10.0.0.1", false, true, true},
                                   {"erp-1", "10.0.0.2", false, false, false}}));
  EXPECT_TRUE(WaitFor([&] { return Servers(port, "erp/public") == "erp0_ERP_00:6:draining"; }))
      << Servers(port, "erp/public");
  // LogonGroup add, modify, delete.
  fake_->Upsert(LogonGroup("extra", "erp-abap"));
  EXPECT_TRUE(WaitFor([&] { return Servers(port, "erp/extra") != "absent"; }));
  fake_->Upsert(LogonGroup("extra", "erp-abap", {{"strategy", "simple_weighted_round_robin"}}));
  EXPECT_TRUE(WaitFor([&] {
    auto snapshot = Snapshot(port);
    const json* group = snapshot ? FindGroup(*snapshot, "erp/extra") : nullptr;
    return group != nullptr &&
           group->value("strategy", "") == "STRATEGY_SIMPLE_WEIGHTED_ROUND_ROBIN";
  }));
  fake_->Remove(LogonGroup("extra", "erp-abap"));
  EXPECT_TRUE(WaitFor([&] { return Servers(port, "erp/extra") == "absent"; }));
  // UrlMapping change.
  fake_->Upsert(UrlMapping("/irj/", "diag"));
  EXPECT_TRUE(WaitFor([&] {
    auto snapshot = Snapshot(port);
    return snapshot && snapshot->dump().find("\"/irj/\"") != std::string::npos &&
           snapshot->dump().find("\"/sap/\"") == std::string::npos;
  }));
  EXPECT_EQ(controller.Stop(), 0);
}

TEST_F(ServeTest, CompactionAndDroppedWatchesMissNothing) {
  Seed();
  Process& controller = Start();
  uint16_t port = controller.port();
  ASSERT_TRUE(WaitFor([&] { return HttpGet(port, "/readyz").status == 200; }));
  double relists = Metric(port, "kwd_controller_relists_total");
  // Changes while watches are cut, then history compacted: only a relist sees them.
  fake_->Control("stall-watches", {{"stalled", true}});
  fake_->Upsert(Pod("erp-0", "erp0_ERP_00", 2));
  fake_->Upsert(LogonGroup("late", "erp-abap"));
  fake_->Control("compact", {{"expireWatches", true}});
  fake_->Control("drop-watches");
  fake_->Control("stall-watches", {{"stalled", false}});
  EXPECT_TRUE(WaitFor([&] { return Servers(port, "erp/late") == "erp0_ERP_00:2,erp1_ERP_00:3"; },
                      seconds(20)))
      << Servers(port, "erp/late") << controller.Log();
  EXPECT_GT(Metric(port, "kwd_controller_relists_total"), relists);
  // And the watches work again afterwards.
  fake_->Remove(LogonGroup("late", "erp-abap"));
  EXPECT_TRUE(WaitFor([&] { return Servers(port, "erp/late") == "absent"; }));
  EXPECT_EQ(controller.Stop(), 0);
}

TEST_F(ServeTest, StatusIsWrittenOnlyWhenItChanges) {
  Seed();
  Process& controller = Start();
  uint16_t port = controller.port();
  ASSERT_TRUE(WaitFor([&] { return Metric(port, "kwd_controller_status_writes_total") >= 3; }))
      << controller.Log();
  ASSERT_TRUE(WaitFor([&] { return Condition("UrlMapping", "erp", "Accepted").is_object(); }));
  EXPECT_EQ(StatusPatches(), 3);  // two LogonGroups, one UrlMapping: once each
  json before = Condition("LogonGroup", "public", "Accepted");

  // A relist of everything (compaction) that changes nothing writes nothing.
  client_->Delete("/_fake/requests");
  double relists = Metric(port, "kwd_controller_relists_total");
  fake_->Control("compact", {{"expireWatches", true}});
  ASSERT_TRUE(WaitFor([&] { return Metric(port, "kwd_controller_relists_total") >= relists + 4; }))
      << controller.Log();
  EXPECT_FALSE(WaitFor([&] { return StatusPatches() > 0; }, milliseconds(300)));

  // A spec change writes the new observedGeneration and keeps lastTransitionTime.
  Edit(LogonGroup("public", "erp-abap", {{"defaultCapacity", 2}}));
  ASSERT_TRUE(WaitFor([&] {
    return Condition("LogonGroup", "public", "Accepted").value("observedGeneration", 0) == 2;
  }));
  EXPECT_EQ(Condition("LogonGroup", "public", "Accepted")["lastTransitionTime"],
            before["lastTransitionTime"]);
  EXPECT_EQ(StatusPatches(), 1);
  EXPECT_EQ(controller.Stop(), 0);
}

TEST_F(ServeTest, OneLeaderWritesStatusAndAnotherTakesOverAfterSigkill) {
  Seed();
  std::vector<std::string> election = {"--leader-elect",
                                       "--leader-election-namespace",
                                       "kwd-system",
                                       "--lease-duration",
                                       "2s",
                                       "--renew-deadline",
                                       "1500ms",
                                       "--retry-period",
                                       "200ms"};
  Process& a = Start(election);
  Process& b = Start(election);
  auto leader = [&](Process& p) { return Metric(p.port(), "kwd_controller_leader") == 1; };
  ASSERT_TRUE(WaitFor([&] { return leader(a) || leader(b); })) << a.Log() << b.Log();
  ASSERT_TRUE(WaitFor([&] { return Condition("UrlMapping", "erp", "Accepted").is_object(); }));
  Process& first = leader(a) ? a : b;
  Process& second = leader(a) ? b : a;
  EXPECT_FALSE(leader(second));
  // The fake shows a patched status before the controller has read the
  // reply and counted the write.
  EXPECT_TRUE(WaitFor([&] {
    return Metric(first.port(), "kwd_controller_status_writes_total{result=\"ok\"}") >= 3;
  }));
  EXPECT_EQ(Metric(second.port(), "kwd_controller_status_writes_total{result=\"ok\"}"), 0);
  // The follower compiled the same snapshot.
  ASSERT_TRUE(WaitFor([&] { return Snapshot(second.port()).has_value(); }));
  EXPECT_EQ((*Snapshot(second.port()))["version"], (*Snapshot(first.port()))["version"]);

  auto killed_at = std::chrono::steady_clock::now();
  first.Kill();
  ASSERT_TRUE(WaitFor([&] { return leader(second); }, seconds(10))) << second.Log();
  auto takeover = std::chrono::steady_clock::now() - killed_at;
  EXPECT_LT(takeover, seconds(2) + milliseconds(1500)) << "lease 2s, retry 200ms";
  Edit(LogonGroup("public", "erp-abap", {{"defaultCapacity", 3}}));
  EXPECT_TRUE(WaitFor([&] {
    return Condition("LogonGroup", "public", "Accepted").value("observedGeneration", 0) == 2;
  }));
  EXPECT_GE(Metric(second.port(), "kwd_controller_status_writes_total{result=\"ok\"}"), 1);
  EXPECT_EQ(second.Stop(), 0);
}

// With two replicas, the leader's Programmed counts the proxies streaming
// from the follower too (each replica reports its proxies in a Lease).
TEST_F(ServeTest, ProgrammedCountsTheProxiesOfEveryReplica) {
  Seed();
  std::vector<uint16_t> grpc_ports = {ReserveFreePort(), ReserveFreePort()};
  std::vector<Process*> replicas;
  for (uint16_t grpc_port : grpc_ports) {
    replicas.push_back(&Start({"--leader-elect", "--leader-election-namespace", "kwd-system",
                               "--lease-duration", "2s", "--renew-deadline", "1500ms",
                               "--retry-period", "200ms", "--grpc-listen",
                               "127.0.0.1:" + std::to_string(grpc_port)}));
  }
  auto leader = [&](Process& p) { return Metric(p.port(), "kwd_controller_leader") == 1; };
  ASSERT_TRUE(WaitFor([&] { return leader(*replicas[0]) || leader(*replicas[1]); }));
  const size_t follower = leader(*replicas[0]) ? 1 : 0;
  auto start_proxy = [&](const std::string& node, const std::string& reject_group) {
    std::vector<std::string> argv = {"/usr/bin/env"};
    if (!reject_group.empty()) {
      argv.push_back("KWD_TEST_REJECT_GROUP=" + reject_group);
    }
    for (std::string arg : {BinaryPath("kwd-proxy"), std::string("serve"),
                            std::string("--controller"),
                            "127.0.0.1:" + std::to_string(grpc_ports[follower]),
                            std::string("--listen"), std::string("127.0.0.1:0"),
                            std::string("--admin-listen"),
                            "127.0.0.1:" + std::to_string(ReserveFreePort()),
                            std::string("--node-id"), node, std::string("--access-log"),
                            std::string("off")}) {
      argv.push_back(arg);
    }
    auto proxy = std::make_unique<Process>(argv, (dir_ / (node + ".log")).string());
    EXPECT_TRUE(proxy->started());
    return proxy;
  };
  auto programmed = [&] {
    json condition = Condition("LogonGroup", "public", "Programmed");
    return condition.is_object() ? condition : json::object();  // not written yet
  };

  // Only the follower has a proxy, and it rejects the snapshot.
  auto rejecting = start_proxy("proxy-on-follower", "erp/public");
  EXPECT_TRUE(WaitFor([&] { return programmed().value("reason", "") == "Rejected"; }))
      << programmed().dump();
  EXPECT_NE(programmed().value("message", "").find("proxy proxy-on-follower rejected"),
            std::string::npos)
      << programmed().dump();
  EXPECT_EQ(programmed().value("status", ""), "False");

  // It goes; one that takes the snapshot comes, still on the follower.
  EXPECT_EQ(rejecting->Stop(), 0);
  EXPECT_TRUE(WaitFor([&] { return programmed().value("reason", "") == "NoProxies"; }))
      << programmed().dump();
  auto good = start_proxy("good-proxy-on-follower", "");
  EXPECT_TRUE(WaitFor([&] { return programmed().value("status", "") == "True"; }))
      << programmed().dump();
  EXPECT_EQ(programmed().value("message", ""), "1 of 1 connected proxies run generation 1");
  const size_t leader_index = 1 - follower;
  EXPECT_EQ(Metric(replicas[leader_index]->port(), "kwd_controller_remote_proxies"), 1);
  EXPECT_EQ(Metric(replicas[leader_index]->port(), "kwd_controller_connected_proxies"), 0);
  EXPECT_EQ(good->Stop(), 0);
  // A stopped replica deletes its report.
  EXPECT_EQ(replicas[follower]->Stop(), 0);
  json leases = client_->List("/apis/coordination.k8s.io/v1/namespaces/kwd-system/leases",
                              "dispatch.kwd.io/proxy-report=true")
                    .items;
  EXPECT_EQ(leases.size(), 1u) << leases.dump();
}

TEST_F(ServeTest, DirSourcePicksUpAFileChange) {
  fs::path config = dir_ / "config";
  fs::create_directories(config);
  auto write = [&](int capacity) {
    std::ofstream(config / "group.yaml")
        << "apiVersion: dispatch.kwd.io/v1alpha1\nkind: LogonGroup\n"
        << "metadata: {name: diag, namespace: default}\nspec:\n  backend:\n    staticServers:\n"
        << "      - {name: s1, address: 127.0.0.1, port: 8000, capacity: " << capacity << "}\n";
  };
  write(2);
  uint16_t port = ReserveFreePort();
  Process controller(
      {BinaryPath("kwd-controller"), "serve", "--source=dir:" + config.string(), "--admin-listen",
       "127.0.0.1:" + std::to_string(port), "--poll-interval", "50ms"},
      (dir_ / "dir.log").string());
  ASSERT_TRUE(controller.started());
  EXPECT_EQ(controller.first_line(), "listening 127.0.0.1:" + std::to_string(port));
  ASSERT_TRUE(WaitFor([&] { return Servers(port, "default/diag") == "s1:2"; })) << controller.Log();
  write(15);
  EXPECT_TRUE(WaitFor([&] { return Servers(port, "default/diag") == "s1:15"; }))
      << controller.Log();
  std::ofstream(config / "group.yaml") << "kind: [broken\n";
  EXPECT_FALSE(
      WaitFor([&] { return Servers(port, "default/diag") != "s1:15"; }, milliseconds(300)));
  EXPECT_EQ(Metric(port, "kwd_controller_leader"), 0);
  EXPECT_EQ(controller.Stop(), 0);
}

// Issue 10 item 15: an invalid edit keeps the group's last accepted
// version in the snapshot; the object says Accepted=False (status, the
// admin's /debug/objects, kwd_controller_objects_rejected).
TEST_F(ServeTest, InvalidEditKeepsTheLastAcceptedVersionServed) {
  Seed();
  Process& controller = Start();
  uint16_t port = controller.port();
  ASSERT_TRUE(WaitFor([&] { return Servers(port, "erp/public") == "erp0_ERP_00:6,erp1_ERP_00:3"; }))
      << controller.Log();
  EXPECT_EQ(Metric(port, "kwd_controller_objects_rejected{kind=\"LogonGroup\"}"), 0);

  json bad = LogonGroup("public", "erp-abap", {{"strategy", "fastest_first"}});
  bad["metadata"]["generation"] = 2;
  Edit(bad);
  ASSERT_TRUE(WaitFor([&] {
    json accepted = Condition("LogonGroup", "public", "Accepted");
    return accepted.is_object() && accepted.value("status", "") == "False";
  })) << controller.Log();
  EXPECT_EQ(Condition("LogonGroup", "public", "Accepted").value("reason", ""), "InvalidStrategy");
  EXPECT_NE(Condition("LogonGroup", "public", "Accepted")
                .value("message", "")
                .find("serving the last accepted version"),
            std::string::npos);
  EXPECT_EQ(Servers(port, "erp/public"), "erp0_ERP_00:6,erp1_ERP_00:3");
  EXPECT_EQ(Metric(port, "kwd_controller_objects_rejected{kind=\"LogonGroup\"}"), 1);
  json objects = json::parse(HttpGet(port, "/debug/objects").body);
  EXPECT_EQ(objects["rejected"], 1);
  bool found = false;
  for (const json& object : objects["objects"]) {
    if (object["kind"] == "LogonGroup" && object["name"] == "public") {
      found = true;
      EXPECT_EQ(object["accepted"], false);
      EXPECT_EQ(object["servingLastGood"], true);
      EXPECT_EQ(object["lastGoodGeneration"], 1);
    }
  }
  EXPECT_TRUE(found) << objects.dump();
  // An endpoint change still reaches the group's last accepted version.
  fake_->Upsert(Pod("erp-1", "erp1_ERP_00", 4));
  EXPECT_TRUE(WaitFor([&] { return Servers(port, "erp/public") == "erp0_ERP_00:6,erp1_ERP_00:4"; }))
      << Servers(port, "erp/public");

  // A field this controller does not know (a newer CRD): the same.
  json unknown = LogonGroup("public", "erp-abap", {{"strategee", "adaptive"}});
  unknown["metadata"]["generation"] = 3;
  Edit(unknown);
  EXPECT_TRUE(WaitFor([&] {
    json accepted = Condition("LogonGroup", "public", "Accepted");
    return accepted.is_object() &&
           accepted.value("message", "").find("spec.strategee: unknown field") != std::string::npos;
  })) << controller.Log();
  EXPECT_EQ(Servers(port, "erp/public"), "erp0_ERP_00:6,erp1_ERP_00:4");

  // Fixed: accepted again, nothing rejected.
  json fixed = LogonGroup("public", "erp-abap", {{"strategy", "adaptive"}});
  fixed["metadata"]["generation"] = 4;
  Edit(fixed);
  EXPECT_TRUE(WaitFor([&] {
    return Metric(port, "kwd_controller_objects_rejected{kind=\"LogonGroup\"}") == 0;
  })) << controller.Log();
  // The status is written after the compile that cleared the metric.
  EXPECT_TRUE(WaitFor([&] {
    return Condition("LogonGroup", "public", "Accepted").value("status", "") == "True";
  })) << controller.Log();

  // A group that was never valid stays absent.
  fake_->Upsert(LogonGroup("never", "erp-abap", {{"strategy", "fastest_first"}}));
  EXPECT_TRUE(WaitFor(
      [&] { return Metric(port, "kwd_controller_objects_rejected{kind=\"LogonGroup\"}") == 1; }));
  EXPECT_EQ(Servers(port, "erp/never"), "absent");
  EXPECT_EQ(controller.Stop(), 0);
}

// Dir mode: a compile-time rejection keeps the object's last good version;
// a file that does not load keeps every last good object and is logged
// with file:line.
TEST_F(ServeTest, DirSourceKeepsTheLastGoodVersionOfAnInvalidFile) {
  fs::path config = dir_ / "config";
  fs::create_directories(config);
  auto write = [&](const std::string& extra) {
    std::ofstream(config / "group.yaml")
        << "apiVersion: dispatch.kwd.io/v1alpha1\nkind: LogonGroup\n"
        << "metadata: {name: diag, namespace: default}\nspec:\n"
        << extra << "  backend:\n    staticServers:\n"
        << "      - {name: s1, address: 127.0.0.1, port: 8000, capacity: 2}\n";
  };
  write("");
  uint16_t port = ReserveFreePort();
  Process controller(
      {BinaryPath("kwd-controller"), "serve", "--source=dir:" + config.string(), "--admin-listen",
       "127.0.0.1:" + std::to_string(port), "--poll-interval", "50ms"},
      (dir_ / "dir.log").string());
  ASSERT_TRUE(controller.started());
  ASSERT_TRUE(WaitFor([&] { return Servers(port, "default/diag") == "s1:2"; })) << controller.Log();
  write("  strategy: fastest_first\n");
  ASSERT_TRUE(WaitFor([&] {
    return Metric(port, "kwd_controller_objects_rejected{kind=\"LogonGroup\"}") == 1;
  })) << controller.Log();
  EXPECT_EQ(Servers(port, "default/diag"), "s1:2");
  EXPECT_TRUE(WaitFor([&] {
    return controller.Log().find("object rejected") != std::string::npos;
  })) << controller.Log();
  write("  strategee: adaptive\n");
  std::string where = (config / "group.yaml").string() + ":5:3";
  EXPECT_TRUE(WaitFor([&] {
    return controller.Log().find(where +
                                 ": LogonGroup default/diag: spec.strategee: unknown field") !=
           std::string::npos;
  })) << controller.Log();
  EXPECT_EQ(Servers(port, "default/diag"), "s1:2");
  EXPECT_EQ(controller.Stop(), 0);
}

json TlsSecret(const std::string& name, const std::string& cert, const std::string& key,
               const std::string& type = "kubernetes.io/tls") {
  return {{"apiVersion", "v1"},
          {"kind", "Secret"},
          {"metadata", {{"name", name}, {"namespace", "erp"}}},
          {"type", type},
          {"data", {{"tls.crt", Base64Encode(cert)}, {"tls.key", Base64Encode(key)}}}};
}

// The certPem the snapshot carries for certificate `name`, "" when absent.
std::string SnapshotCertificate(uint16_t port, const std::string& name) {
  auto snapshot = Snapshot(port);
  if (!snapshot || !snapshot->contains("certificates")) {
    return "";
  }
  for (const json& certificate : (*snapshot)["certificates"]) {
    if (certificate.value("name", "") == name) {
      return certificate.value("certPem", "");
    }
  }
  return "";
}

// Issue 27 item 3: UrlMapping.spec.tls Secrets through the Kubernetes
// source: created later, updated, deleted; dropped on arrival when no
// mapping names them, fetched when one starts to; keys never shown.
TEST_F(ServeTest, TlsSecretsResolveUpdateAndDeleteThroughTheWatch) {
  std::string error;
  ASSERT_TRUE(MakeSelfSignedPair(dir_.string(), "one", "a.example", &error)) << error;
  ASSERT_TRUE(MakeSelfSignedPair(dir_.string(), "two", "a.example", &error)) << error;
  auto read = [&](const std::string& file) {
    std::string text;
    EXPECT_TRUE(ReadWholeFile((dir_ / file).string(), &text));
    return text;
  };
  const std::string one_cert = read("one.pem"), one_key = read("one.key");
  const std::string two_cert = read("two.pem"), two_key = read("two.key");
  Seed();
  json mapping = UrlMapping("/sap/", "public");
  mapping["spec"]["hosts"] = {"a.example"};
  mapping["spec"]["tls"] = {{{"hosts", {"a.example"}}, {"secretName", "erp-tls"}}};
  fake_->Upsert(mapping);
  // Secrets no mapping names: dropped on arrival.
  fake_->Upsert(TlsSecret("late-tls", two_cert, two_key));
  fake_->Upsert({{"apiVersion", "v1"},
                 {"kind", "Secret"},
                 {"metadata", {{"name", "db-password"}, {"namespace", "erp"}}},
                 {"stringData", {{"password", "hunter2"}}}});
  Process& controller = Start();
  uint16_t port = controller.port();
  ASSERT_TRUE(WaitFor([&] {
    json resolved = Condition("UrlMapping", "erp", "ResolvedRefs");
    return resolved.is_object() && resolved.value("reason", "") == "SecretNotFound";
  })) << controller.Log();
  EXPECT_NE(Condition("UrlMapping", "erp", "ResolvedRefs")["message"].get<std::string>().find(
                "Secret erp/erp-tls not found"),
            std::string::npos);
  EXPECT_EQ(Metric(port, "kwd_controller_objects{kind=\"Secret\"}"), 0);

  // Created later: resolves, and the snapshot carries it.
  fake_->Upsert(TlsSecret("erp-tls", one_cert, one_key));
  ASSERT_TRUE(WaitFor([&] { return SnapshotCertificate(port, "erp/erp-tls") == one_cert; }))
      << controller.Log();
  EXPECT_TRUE(WaitFor([&] {
    return Condition("UrlMapping", "erp", "ResolvedRefs").value("status", "") == "True";
  }));
  EXPECT_EQ(Metric(port, "kwd_controller_objects{kind=\"Secret\"}"), 1);

  // Updated: the snapshot follows.
  fake_->Upsert(TlsSecret("erp-tls", two_cert, two_key));
  EXPECT_TRUE(WaitFor([&] { return SnapshotCertificate(port, "erp/erp-tls") == two_cert; }))
      << controller.Log();

  // A key that does not match: InvalidCertificate, the certificate leaves.
  fake_->Upsert(TlsSecret("erp-tls", one_cert, two_key));
  EXPECT_TRUE(WaitFor([&] {
    return Condition("UrlMapping", "erp", "ResolvedRefs").value("reason", "") ==
           "InvalidCertificate";
  })) << controller.Log();
  EXPECT_EQ(SnapshotCertificate(port, "erp/erp-tls"), "");

  // Deleted: SecretNotFound.
  fake_->Remove(TlsSecret("erp-tls", one_cert, one_key));
  EXPECT_TRUE(WaitFor([&] {
    return Condition("UrlMapping", "erp", "ResolvedRefs").value("reason", "") ==
           "SecretNotFound";
  }));

  // A Secret dropped on arrival and named later is fetched.
  mapping["spec"]["tls"] = {{{"hosts", {"a.example"}}, {"secretName", "late-tls"}}};
  Edit(mapping);
  EXPECT_TRUE(WaitFor([&] { return SnapshotCertificate(port, "erp/late-tls") == two_cert; }))
      << controller.Log();
  bool fetched = false;
  for (const json& request : fake_->Requests()) {
    fetched = fetched || (request.value("method", "") == "GET" &&
                          request.value("path", "") == "/api/v1/namespaces/erp/secrets/late-tls");
  }
  EXPECT_TRUE(fetched);

  // No key in what the controller shows or logs.
  std::string shown = HttpGet(port, "/debug/snapshot").body + HttpGet(port, "/debug/objects").body +
                      HttpGet(port, "/admin/api/state").body + controller.Log();
  for (const std::string& key : {one_key, two_key}) {
    EXPECT_EQ(shown.find(key.substr(key.find('\n') + 1, 40)), std::string::npos);
  }
  EXPECT_EQ(shown.find("PRIVATE KEY"), std::string::npos);
  EXPECT_EQ(shown.find("hunter2"), std::string::npos);
  EXPECT_EQ(controller.Stop(), 0);
}

// RBAC without Secrets (controller.rbac.readSecrets=false, or an older
// chart): the controller still becomes ready and serves the routes; the
// mapping says SecretNotFound.
TEST_F(ServeTest, ForbiddenSecretsDoNotStallTheController) {
  Seed();
  json mapping = UrlMapping("/sap/", "public");
  mapping["spec"]["hosts"] = {"a.example"};
  mapping["spec"]["tls"] = {{{"hosts", {"a.example"}}, {"secretName", "erp-tls"}}};
  fake_->Upsert(mapping);
  fake_->Control("fail", {{"count", 100000}, {"code", 403}, {"match", "/secrets"}});
  Process& controller = Start();
  uint16_t port = controller.port();
  ASSERT_TRUE(WaitFor([&] { return HttpGet(port, "/readyz").status == 200; })) << controller.Log();
  EXPECT_EQ(Servers(port, "erp/public"), "erp0_ERP_00:6,erp1_ERP_00:3");
  EXPECT_TRUE(WaitFor([&] {
    json resolved = Condition("UrlMapping", "erp", "ResolvedRefs");
    return resolved.is_object() && resolved.value("reason", "") == "SecretNotFound";
  })) << controller.Log();
  EXPECT_NE(controller.Log().find("not allowed to list this resource (RBAC)"), std::string::npos);
  EXPECT_EQ(controller.Stop(), 0);
}

TEST(ServeFlagsTest, UsageErrorsExitTwo) {
  std::vector<std::vector<std::string>> cases = {
      {"serve"},
      {"serve", "--source=dir:/tmp", "--hold-off", "10"},
      {"serve", "--source=kube", "--admin-listen", "nowhere"},
      {"serve", "--source=dir:/tmp", "--leader-elect"},
      {"serve", "--source=kube", "--bogus"},
      {"serve", "--source=kube", "--leader-elect", "--lease-duration", "1s", "--renew-deadline",
       "2s"},
  };
  for (const auto& args : cases) {
    std::ostringstream out;
    std::ostringstream err;
    EXPECT_EQ(cli::RunController(args, out, err), 2) << args.back();
    EXPECT_EQ(out.str(), "") << args.back();
    EXPECT_NE(err.str().find("kwd-controller serve: "), std::string::npos) << err.str();
  }
  std::ostringstream out;
  std::ostringstream err;
  EXPECT_EQ(cli::RunController({"serve", "--help"}, out, err), 0);
  EXPECT_NE(out.str().find("--leader-elect"), std::string::npos);
}

}  // namespace
}  // namespace kwd::testing
