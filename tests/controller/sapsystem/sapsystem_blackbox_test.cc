// SAP system discovery end to end: the fake message server (with fake
// application servers), a real kwd-controller following a directory with a
// SapSystem and LogonGroups that take their servers from it, and a real
// kwd-proxy fed by the controller, all on loopback.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "controller/kube/kube_client.h"
#include "tests/fake_apiserver/fake_apiserver_process.h"
#include "tests/fake_sap/fake_message_server_process.h"
#include "tests/support/http_client.h"
#include "tests/support/process.h"

namespace kwd::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using std::chrono::seconds;

// "name/capacity" of each server of group `key` in the controller's snapshot.
std::string Servers(uint16_t admin, const std::string& key) {
  HttpReply reply = HttpGet(admin, "/debug/snapshot");
  json snapshot = json::parse(reply.body, nullptr, false);
  if (reply.status != 200 || !snapshot.is_object()) {
    return "no snapshot";
  }
  for (const json& group : snapshot.value("groups", json::array())) {
    if (group.value("key", "") != key) {
      continue;
    }
    std::string out;
    for (const json& server : group.value("servers", json::array())) {
      out += (out.empty() ? "" : ",") + server.value("name", "") + "/" +
             std::to_string(server.value("capacity", 0));
    }
    return out;
  }
  return "absent";
}

double Metric(uint16_t port, const std::string& series) {
  std::istringstream lines(HttpGet(port, "/metrics").body);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(series + " ", 0) == 0) {
      return std::stod(line.substr(series.size() + 1));
    }
  }
  return -1;
}

// The condition `type` of object kind/name in /debug/objects, or null.
json Condition(uint16_t admin, const std::string& kind, const std::string& name,
               const std::string& type) {
  json objects = json::parse(HttpGet(admin, "/debug/objects").body, nullptr, false);
  if (!objects.is_object()) {
    return nullptr;
  }
  for (const json& object : objects["objects"]) {
    if (object["kind"] == kind && object["name"] == name) {
      for (const json& condition : object["conditions"]) {
        if (condition["type"] == type) {
          return condition;
        }
      }
    }
  }
  return nullptr;
}

class SapSystemBlackBoxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = "/tmp/kwd-sapsystem-XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    fs::create_directories(dir_ / "objects");
    fake_ = std::make_unique<FakeMessageServer>(
        json{{"sid", "FAK"},
             {"instances",
              {{{"name", "a_FAK_00"}, {"lb", 2}, {"serve", true}},
               {{"name", "b_FAK_01"}, {"lb", 1}, {"serve", true}}}},
             {"groups", {{"PUBLIC", {"b_FAK_01"}}}}},
        (dir_ / "fake.log").string());
    std::ofstream(dir_ / "objects" / "erp.yaml")
        << "apiVersion: dispatch.kwd.io/v1alpha1\n"
           "kind: SapSystem\n"
           "metadata: {name: fak, namespace: erp}\n"
           "spec:\n"
           "  sid: FAK\n"
           "  messageServer: {host: 127.0.0.1, httpPort: "
        << fake_->port()
        << "}\n"
           "  refreshIntervalSeconds: 1\n"
           "  logonGroups: true\n"
           "  allowedNetworks: [127.0.0.0/8]  # the fake's servers are on loopback\n"
           "---\n"
           "apiVersion: dispatch.kwd.io/v1alpha1\n"
           "kind: LogonGroup\n"
           "metadata: {name: diag, namespace: erp}\n"
           "spec:\n"
           "  kind: abap\n"
           "  backend: {sapSystem: {name: fak}}\n"
           "  healthCheck: {intervalSeconds: 1}\n"
           "---\n"
           "apiVersion: dispatch.kwd.io/v1alpha1\n"
           "kind: LogonGroup\n"
           "metadata: {name: public, namespace: erp}\n"
           "spec:\n"
           "  kind: abap\n"
           "  backend: {sapSystem: {name: fak, logonGroup: PUBLIC}}\n"
           "---\n"
           "apiVersion: dispatch.kwd.io/v1alpha1\n"
           "kind: UrlMapping\n"
           "metadata: {name: erp, namespace: erp}\n"
           "spec:\n"
           "  defaultRootHandler: abap\n"
           "  defaultGroups: {abap: diag, java: diag}\n"
           "  rules:\n"
           "    - {prefix: /sap/bc/gui/, kind: abap, logonGroup: public}\n";
    admin_ = ReserveFreePort();
    grpc_ = ReserveFreePort();
    controller_ = std::make_unique<Process>(
        std::vector<std::string>{BinaryPath("kwd-controller"), "serve",
                                 "--source=dir:" + (dir_ / "objects").string(), "--admin-listen",
                                 "127.0.0.1:" + std::to_string(admin_), "--grpc-listen",
                                 "127.0.0.1:" + std::to_string(grpc_), "--hold-off", "5ms",
                                 "--sapsystem-timeout", "2s"},
        (dir_ / "controller.log").string());
    ASSERT_TRUE(controller_->started()) << controller_->Log();
    proxy_admin_ = ReserveFreePort();
    proxy_ = std::make_unique<Process>(
        std::vector<std::string>{BinaryPath("kwd-proxy"), "serve", "--controller",
                                 "127.0.0.1:" + std::to_string(grpc_), "--listen", "127.0.0.1:0",
                                 "--admin-listen", "127.0.0.1:" + std::to_string(proxy_admin_),
                                 "--node-id", "sap", "--access-log", "off"},
        (dir_ / "proxy.log").string());
    ASSERT_TRUE(proxy_->started()) << proxy_->Log();
  }

  void TearDown() override {
    proxy_.reset();
    controller_.reset();
    fake_.reset();
    if (!HasFailure()) {
      fs::remove_all(dir_);
    } else {
      std::cerr << "logs kept in " << dir_ << "\n";
    }
  }

  // Sends `n` requests to `path` through the proxy; counts X-Instance.
  std::map<std::string, int> Spread(int n, const std::string& path = "/sap/bc/x") {
    std::map<std::string, int> counts;
    for (int i = 0; i < n; ++i) {
      HttpReply reply = HttpGet(proxy_->port(), path);
      counts[reply.status == 200 ? reply.Header("X-Instance") : std::to_string(reply.status)]++;
    }
    return counts;
  }

  // Waits until the proxy sends every one of a few requests to `instances` only.
  bool ProxyServesOnly(const std::set<std::string>& instances) {
    return WaitFor(
        [&] {
          for (const auto& [name, count] : Spread(6)) {
            if (!instances.contains(name)) {
              return false;
            }
          }
          return true;
        },
        seconds(20));
  }

  fs::path dir_;
  std::unique_ptr<FakeMessageServer> fake_;
  std::unique_ptr<Process> controller_;
  std::unique_ptr<Process> proxy_;
  uint16_t admin_ = 0;
  uint16_t grpc_ = 0;
  uint16_t proxy_admin_ = 0;
};

TEST_F(SapSystemBlackBoxTest, InstancesFollowTheMessageServer) {
  // The instances appear with their capacities (LB=) and are balanced by them.
  ASSERT_TRUE(WaitFor([&] { return Servers(admin_, "erp/diag") == "a_FAK_00/2,b_FAK_01/1"; },
                      seconds(20)))
      << Servers(admin_, "erp/diag") << "\n" << controller_->Log();
  EXPECT_EQ(Servers(admin_, "erp/public"), "b_FAK_01/1");
  ASSERT_TRUE(WaitFor([&] { return HttpGet(proxy_admin_, "/readyz").status == 200; }, seconds(20)));
  ASSERT_TRUE(ProxyServesOnly({"a_FAK_00", "b_FAK_01"})) << proxy_->Log();
  std::map<std::string, int> counts = Spread(30);
  EXPECT_EQ(counts["a_FAK_00"] + counts["b_FAK_01"], 30);
  EXPECT_GE(counts["a_FAK_00"], 18) << "capacity 2 against 1";
  EXPECT_LE(counts["a_FAK_00"], 22);
  // The SMLG group PUBLIC: only b.
  for (const auto& [name, count] : Spread(4, "/sap/bc/gui/x")) {
    EXPECT_EQ(name, "b_FAK_01");
  }
  EXPECT_EQ(Metric(admin_, "kwd_controller_sapsystem_servers{sapsystem=\"erp/fak\"}"), 2);
  json refreshed = Condition(admin_, "SapSystem", "fak", "Refreshed");
  EXPECT_EQ(refreshed.value("status", ""), "True") << refreshed;

  // One leaves the list: it leaves the snapshot and the proxy.
  fake_->Set({{"instances", {{{"name", "a_FAK_00"}, {"lb", 2}, {"serve", true}}}}});
  ASSERT_TRUE(WaitFor([&] { return Servers(admin_, "erp/diag") == "a_FAK_00/2"; }, seconds(20)))
      << Servers(admin_, "erp/diag");
  EXPECT_TRUE(ProxyServesOnly({"a_FAK_00"}));
  const double servers_before = Metric(admin_, "kwd_controller_snapshots_published_total");

  // Errors keep the last good list: an error status, garbage, an empty list.
  for (const json& failure : {json{{"mode", "status"}, {"status", 500}}, json{{"mode", "garbage"}},
                              json{{"mode", "empty"}}}) {
    const double errors_before =
        Metric(admin_, "kwd_controller_sapsystem_refresh_errors_total{sapsystem=\"erp/fak\"}");
    fake_->Set(failure);
    ASSERT_TRUE(WaitFor(
        [&] {
          return Metric(admin_,
                        "kwd_controller_sapsystem_refresh_errors_total{sapsystem=\"erp/fak\"}") >=
                 errors_before + 2;
        },
        seconds(20)))
        << failure;
    EXPECT_EQ(Servers(admin_, "erp/diag"), "a_FAK_00/2") << failure;
    json condition = Condition(admin_, "SapSystem", "fak", "Refreshed");
    EXPECT_EQ(condition.value("status", ""), "False") << condition;
    EXPECT_NE(condition.value("message", "").find("keeping the last good list of 1 instances"),
              std::string::npos)
        << condition;
  }
  EXPECT_TRUE(ProxyServesOnly({"a_FAK_00"}));
  // Failures that repeat change nothing: at most one snapshot per new
  // failure reason (the LogonGroups' inputs), not one per poll.
  EXPECT_LE(Metric(admin_, "kwd_controller_snapshots_published_total"), servers_before + 3);

  // Recovery applies the new list.
  fake_->Set({{"mode", "ok"},
              {"instances",
               {{{"name", "a_FAK_00"}, {"lb", 2}, {"serve", true}},
                {{"name", "c_FAK_02"}, {"lb", 4}, {"serve", true}}}}});
  ASSERT_TRUE(WaitFor([&] { return Servers(admin_, "erp/diag") == "a_FAK_00/2,c_FAK_02/4"; },
                      seconds(20)))
      << Servers(admin_, "erp/diag");
  EXPECT_TRUE(ProxyServesOnly({"a_FAK_00", "c_FAK_02"}));
  EXPECT_EQ(Condition(admin_, "SapSystem", "fak", "Refreshed").value("status", ""), "True");
}

// UrlMapping.spec.fromSapSystem: the ICF URL prefixes the application
// servers serve become rules (an SMLG group to its LogonGroup), follow the
// map at the next refresh, and a failed fetch keeps the last good ones.
TEST_F(SapSystemBlackBoxTest, UrlMapFromTheSystem) {
  ASSERT_TRUE(
      WaitFor([&] { return Servers(admin_, "erp/diag") == "a_FAK_00/2,b_FAK_01/1"; }, seconds(20)));
  ASSERT_TRUE(WaitFor([&] { return HttpGet(proxy_admin_, "/readyz").status == 200; }, seconds(20)));
  // No URL map asked for yet: ResolvedRefs=False says why.
  fake_->Set({{"url_prefixes", {{{"prefix", "/sap/zz/"}, {"group", "PUBLIC"}}}}});
  std::string objects;
  {
    std::ifstream in(dir_ / "objects" / "erp.yaml");
    objects.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto write = [&](const std::string& text) {
    std::ofstream(dir_ / "erp.yaml.tmp") << text;
    fs::rename(dir_ / "erp.yaml.tmp", dir_ / "objects" / "erp.yaml");
  };
  auto replace = [](std::string text, const std::string& from, const std::string& to) {
    text.replace(text.find(from), from.size(), to);
    return text;
  };
  std::string with_mapping = replace(objects, "  defaultRootHandler: abap\n",
                                     "  defaultRootHandler: abap\n  fromSapSystem: fak\n");
  write(with_mapping);
  ASSERT_TRUE(WaitFor(
      [&] {
        return Condition(admin_, "UrlMapping", "erp", "ResolvedRefs").value("reason", "") ==
               "NoUrlMap";
      },
      seconds(20)))
      << Condition(admin_, "UrlMapping", "erp", "ResolvedRefs");

  // The SapSystem fetches the map: /sap/zz/ goes to PUBLIC's LogonGroup (b only).
  write(replace(with_mapping, "  logonGroups: true\n", "  logonGroups: true\n  urlMap: true\n"));
  auto only_b = [&](const std::string& path) {
    return WaitFor(
        [&] {
          auto counts = Spread(4, path);
          return counts.size() == 1 && counts.begin()->first == "b_FAK_01";
        },
        seconds(20));
  };
  ASSERT_TRUE(only_b("/sap/zz/x")) << controller_->Log();
  EXPECT_EQ(Condition(admin_, "UrlMapping", "erp", "ResolvedRefs").value("status", ""), "True");
  // Other paths still go to diag (both instances).
  EXPECT_TRUE(ProxyServesOnly({"a_FAK_00", "b_FAK_01"}));
  EXPECT_EQ(Spread(12, "/sap/bc/x").size(), 2u);

  // The map changes: the rules follow at the next refresh.
  fake_->Set({{"url_prefixes", {{{"prefix", "/sap/yy/"}, {"group", "PUBLIC"}}}}});
  ASSERT_TRUE(only_b("/sap/yy/x"));
  EXPECT_EQ(Spread(12, "/sap/zz/x").size(), 2u) << "/sap/zz/ is no rule any more";

  // A failed fetch keeps the last good prefixes.
  fake_->Set({{"url_map_mode", "garbage"}});
  ASSERT_TRUE(WaitFor(
      [&] {
        return Condition(admin_, "SapSystem", "fak", "Refreshed").value("reason", "") ==
               "UrlMapFailed";
      },
      seconds(20)))
      << Condition(admin_, "SapSystem", "fak", "Refreshed");
  EXPECT_TRUE(only_b("/sap/yy/x"));
}

// LogonGroup.spec.backend.staticServers[].drain: the drained server takes no
// new balanced traffic on the proxy but keeps its sticky (sap-contextid)
// traffic; undrained, it is balanced again. (The fake application servers
// stand in as static servers.)
TEST_F(SapSystemBlackBoxTest, DrainedStaticServerKeepsStickyTrafficOnly) {
  ASSERT_TRUE(
      WaitFor([&] { return Servers(admin_, "erp/diag") == "a_FAK_00/2,b_FAK_01/1"; }, seconds(20)));
  auto write = [&](bool drain) {
    std::ofstream(dir_ / "drain.yaml.tmp")
        << "apiVersion: dispatch.kwd.io/v1alpha1\n"
           "kind: LogonGroup\n"
           "metadata: {name: static, namespace: erp}\n"
           "spec:\n"
           "  kind: abap\n"
           "  backend:\n"
           "    staticServers:\n"
           "      - {name: a_FAK_00, address: 127.0.0.1, port: "
        << fake_->AppPort("a_FAK_00")
        << "}\n"
           "      - {name: b_FAK_01, address: 127.0.0.1, port: "
        << fake_->AppPort("b_FAK_01") << ", drain: " << (drain ? "true" : "false")
        << "}\n"
           "---\n"
           "apiVersion: dispatch.kwd.io/v1alpha1\n"
           "kind: UrlMapping\n"
           "metadata: {name: drain, namespace: erp}\n"
           "spec:\n"
           "  rules:\n"
           "    - {prefix: /drain/, logonGroup: static}\n";
    fs::rename(dir_ / "drain.yaml.tmp", dir_ / "objects" / "drain.yaml");
  };
  auto sticky_to_b = [&] {
    HttpClient client(proxy_->port());
    HttpReply reply = client.Get("/drain/x", {"Cookie: sap-contextid=SID%3aANON%3ab_FAK_01%3aabc"});
    return reply.status == 200 ? reply.Header("X-Instance") : std::to_string(reply.status);
  };
  write(true);
  ASSERT_TRUE(WaitFor(
      [&] {
        auto counts = Spread(4, "/drain/x");
        return counts.size() == 1 && counts.begin()->first == "a_FAK_00";
      },
      seconds(20)))
      << controller_->Log();
  // Balanced traffic: a only, however many requests.
  std::map<std::string, int> counts = Spread(20, "/drain/x");
  EXPECT_EQ(counts["a_FAK_00"], 20) << "b is draining";
  // Sticky traffic keeps b.
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(sticky_to_b(), "b_FAK_01");
  }
  json accepted = Condition(admin_, "LogonGroup", "static", "Accepted");
  EXPECT_NE(accepted.value("message", "").find("(1 draining)"), std::string::npos) << accepted;

  // Undrained: balanced again (capacity 1 each).
  write(false);
  ASSERT_TRUE(WaitFor([&] { return Spread(6, "/drain/x").size() == 2; }, seconds(20)));
  EXPECT_EQ(sticky_to_b(), "b_FAK_01");
}

// Issue 23 item 2: a message server that lists the proxy's own admin port
// on 127.0.0.1 made /admin/api/state readable on the traffic port. Without
// allowedNetworks naming loopback the instance is skipped, says why, and
// the traffic port answers 503.
TEST_F(SapSystemBlackBoxTest, LoopbackInstanceIsRefusedWithoutAllowedNetworks) {
  ASSERT_TRUE(WaitFor([&] { return Servers(admin_, "erp/diag") == "a_FAK_00/2,b_FAK_01/1"; },
                      seconds(20)));
  fake_->Set({{"instances",
               {{{"name", "evil_FAK_09"}, {"host", "127.0.0.1"}, {"http", proxy_admin_}}}}});
  std::ofstream(dir_ / "evil.yaml.tmp")
      << "apiVersion: dispatch.kwd.io/v1alpha1\n"
         "kind: SapSystem\n"
         "metadata: {name: evil, namespace: erp}\n"
         "spec:\n"
         "  messageServer: {host: 127.0.0.1, httpPort: "
      << fake_->port()
      << "}\n"
         "  refreshIntervalSeconds: 1\n"
         "---\n"
         "apiVersion: dispatch.kwd.io/v1alpha1\n"
         "kind: LogonGroup\n"
         "metadata: {name: evil, namespace: erp}\n"
         "spec:\n"
         "  kind: abap\n"
         "  backend: {sapSystem: {name: evil}}\n"
         "---\n"
         "apiVersion: dispatch.kwd.io/v1alpha1\n"
         "kind: UrlMapping\n"
         "metadata: {name: evil, namespace: erp}\n"
         "spec:\n"
         "  rules:\n"
         "    - {prefix: /admin/, logonGroup: evil}\n";
  fs::rename(dir_ / "evil.yaml.tmp", dir_ / "objects" / "evil.yaml");
  json refreshed;
  ASSERT_TRUE(WaitFor(
      [&] {
        refreshed = Condition(admin_, "SapSystem", "evil", "Refreshed");
        return refreshed.is_object() &&
               refreshed.value("message", "").find("refused") != std::string::npos;
      },
      seconds(20)))
      << refreshed << "\n" << controller_->Log();
  EXPECT_NE(refreshed.value("message", "").find(
                "instance \"evil_FAK_09\": host \"127.0.0.1\": address \"127.0.0.1\" refused: "
                "loopback address, not in spec.allowedNetworks"),
            std::string::npos)
      << refreshed;
  EXPECT_EQ(Servers(admin_, "erp/evil"), "");
  ASSERT_TRUE(WaitFor([&] { return HttpGet(proxy_->port(), "/admin/api/state").status == 503; },
                      seconds(20)));
  HttpReply reply = HttpGet(proxy_->port(), "/admin/api/state");
  EXPECT_EQ(reply.body.find("node_id"), std::string::npos) << reply.body;
  EXPECT_GE(Metric(admin_,
                   "kwd_controller_sapsystem_entries_skipped{sapsystem=\"erp/evil\",reason=\"refused_"
                   "address\"}"),
            1);
  EXPECT_NE(controller_->Log().find("instances skipped: address refused"), std::string::npos);
}

// A refresh that changes nothing compiles nothing.
TEST_F(SapSystemBlackBoxTest, UnchangedListCompilesNothing) {
  ASSERT_TRUE(WaitFor([&] { return Servers(admin_, "erp/diag") == "a_FAK_00/2,b_FAK_01/1"; },
                      seconds(20)));
  const std::size_t polls = fake_->ListRequests();
  const double compiles = Metric(admin_, "kwd_controller_compile_seconds_count");
  ASSERT_TRUE(WaitFor([&] { return fake_->ListRequests() >= polls + 3; }, seconds(20)));
  EXPECT_EQ(Metric(admin_, "kwd_controller_compile_seconds_count"), compiles);
}

// Kube mode: the SapSystem's status subresource says what the poller found.
TEST(SapSystemKubeTest, StatusWritten) {
  std::string pattern = "/tmp/kwd-sapsystem-kube-XXXXXX";
  ASSERT_NE(mkdtemp(pattern.data()), nullptr);
  fs::path dir = pattern;
  FakeApiServer api;
  FakeMessageServer ms(json{{"instances",
                             {{{"name", "a_FAK_00"}, {"lb", 2}, {"serve", true}},
                              {{"name", "b_FAK_01"}, {"lb", 1}, {"serve", true}}}}});
  std::ofstream(dir / "kubeconfig")
      << "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster: {server: '"
      << api.address() << "'}\nusers:\n- name: u\n  user: {}\ncontexts:\n- name: c\n"
      << "  context: {cluster: fake, user: u, namespace: default}\ncurrent-context: c\n";
  api.Upsert({{"apiVersion", "dispatch.kwd.io/v1alpha1"},
              {"kind", "SapSystem"},
              {"metadata", {{"name", "fak"}, {"namespace", "erp"}}},
              {"spec",
               {{"sid", "FAK"},
                {"messageServer", {{"host", "127.0.0.1"}, {"httpPort", ms.port()}}},
                {"refreshIntervalSeconds", 1},
                {"allowedNetworks", {"127.0.0.0/8"}}}}});
  api.Upsert({{"apiVersion", "dispatch.kwd.io/v1alpha1"},
              {"kind", "LogonGroup"},
              {"metadata", {{"name", "diag"}, {"namespace", "erp"}}},
              {"spec", {{"kind", "abap"}, {"backend", {{"sapSystem", {{"name", "fak"}}}}}}}});
  uint16_t admin = ReserveFreePort();
  Process controller({BinaryPath("kwd-controller"), "serve", "--source=kube", "--kubeconfig",
                      (dir / "kubeconfig").string(), "--admin-listen",
                      "127.0.0.1:" + std::to_string(admin), "--grpc-listen", "127.0.0.1:0",
                      "--hold-off", "5ms"},
                     (dir / "controller.log").string());
  ASSERT_TRUE(controller.started());
  kube::KubeClient client(api.Config());
  auto get = [&](const std::string& plural, const std::string& name) {
    return client.Get("/apis/dispatch.kwd.io/v1alpha1/namespaces/erp/" + plural + "/" + name).body;
  };
  auto condition = [](const json& object, const std::string& type) {
    for (const json& c : object["status"].value("conditions", json::array())) {
      if (c.value("type", "") == type) {
        return c;
      }
    }
    return json();
  };
  json system;
  ASSERT_TRUE(WaitFor(
      [&] {
        system = get("sapsystems", "fak");
        return system.contains("status") && system["status"].value("servers", 0) == 2 &&
               condition(system, "Refreshed").value("status", "") == "True";
      },
      seconds(20)))
      << system.dump(2) << "\n" << controller.Log();
  EXPECT_EQ(condition(system, "Accepted").value("status", ""), "True");
  EXPECT_EQ(condition(system, "Refreshed").value("reason", ""), "Refreshed");
  EXPECT_EQ(condition(system, "Programmed"), json()) << "not a proxy's concern";
  std::string refreshed_at = system["status"].value("lastRefreshTime", "");
  EXPECT_EQ(refreshed_at.size(), 20u) << system["status"];
  EXPECT_EQ(system["status"].value("observedGeneration", -1), system["metadata"].value("generation", 0));
  json group;
  ASSERT_TRUE(WaitFor(
      [&] {
        group = get("logongroups", "diag");
        return group.contains("status") && group["status"].value("readyServers", 0) == 2;
      },
      seconds(20)))
      << group.dump(2);

  // A failing message server: Refreshed=False with the reason; servers stay.
  ms.Set({{"mode", "status"}, {"status", 503}});
  ASSERT_TRUE(WaitFor(
      [&] {
        system = get("sapsystems", "fak");
        return condition(system, "Refreshed").value("reason", "") == "HTTPError";
      },
      seconds(20)))
      << system.dump(2);
  EXPECT_EQ(condition(system, "Refreshed").value("status", ""), "False");
  EXPECT_NE(condition(system, "Refreshed").value("message", "").find("HTTP 503"), std::string::npos);
  EXPECT_EQ(system["status"].value("servers", 0), 2);
  EXPECT_EQ(get("logongroups", "diag")["status"].value("readyServers", 0), 2);
  controller.Stop();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kwd::testing
