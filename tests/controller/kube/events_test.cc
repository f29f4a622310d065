// Kubernetes Events (events.k8s.io/v1) and the affinity-key Secret, against
// the fake API server (tests/fake_apiserver), which checks an Event's required
// fields like the real API does.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "controller/kube/event_recorder.h"
#include "controller/kube/kube_client.h"
#include "tests/fake_apiserver/fake_apiserver_process.h"
#include "tests/support/http_client.h"
#include "tests/support/process.h"

namespace kwd {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::FakeApiServer;

json Events(kube::KubeClient& client, const std::string& ns) {
  return client.Get("/apis/events.k8s.io/v1/namespaces/" + ns + "/events").body["items"];
}

TEST(EventRecorderTest, PostsEventsShapedLikeTheRealApiAndDeduplicates) {
  FakeApiServer fake;
  kube::KubeClient client(fake.Config());
  kube::EventRecorderOptions options;
  options.reporting_instance = "kwd-controller-0_abc123";
  kube::EventRecorder recorder(client, options);
  kube::EventObjectRef ref{"dispatch.kwd.io/v1alpha1", "LogonGroup", "erp", "public", "uid-1"};
  recorder.Record(ref, "Warning", "InvalidStrategy", "Validate",
                  "Accepted=False: spec.strategy: \"fastest\"");
  recorder.Record(ref, "Warning", "InvalidStrategy", "Validate",
                  "Accepted=False: spec.strategy: \"fastest\"");  // the same: dropped
  recorder.Record(ref, "Warning", "InvalidStrategy", "Validate", std::string(3000, 'x'));
  recorder.Flush();
  json items = Events(client, "erp");
  ASSERT_EQ(items.size(), 2u) << items.dump();
  const json& event = items[0];
  EXPECT_EQ(event["type"], "Warning");
  EXPECT_EQ(event["reason"], "InvalidStrategy");
  EXPECT_EQ(event["action"], "Validate");
  EXPECT_EQ(event["reportingController"], "dispatch.kwd.io/kwd-controller");
  EXPECT_EQ(event["reportingInstance"], "kwd-controller-0_abc123");
  EXPECT_EQ(event["regarding"], json({{"apiVersion", "dispatch.kwd.io/v1alpha1"},
                                      {"kind", "LogonGroup"},
                                      {"namespace", "erp"},
                                      {"name", "public"},
                                      {"uid", "uid-1"}}));
  EXPECT_TRUE(std::regex_match(event["eventTime"].get<std::string>(),
                               std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z)")))
      << event["eventTime"];
  EXPECT_EQ(event["metadata"]["name"].get<std::string>().rfind("public.", 0), 0u);
  EXPECT_EQ(items[1]["note"].get<std::string>().size(), 1024u);  // the API's limit
}

TEST(EventRecorderTest, ARefusedEventIsDroppedNotFatal) {
  FakeApiServer fake;
  kube::KubeClient client(fake.Config());
  kube::EventRecorder recorder(client, {});  // no reporting instance: the API refuses (422)
  recorder.Record({"v1", "Pod", "erp", "p", ""}, "Normal", "Test", "Test", "note");
  recorder.Flush();
  EXPECT_EQ(Events(client, "erp").size(), 0u);
}

class ControllerAgainstFakeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_ = std::make_unique<FakeApiServer>();
    client_ = std::make_unique<kube::KubeClient>(fake_->Config());
    dir_ = fs::temp_directory_path() /
           ("kwd-events-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    kubeconfig_ = (dir_ / "kubeconfig").string();
    std::ofstream(kubeconfig_)
        << "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster: {server: '"
        << fake_->address() << "'}\nusers:\n- name: u\n  user: {}\ncontexts:\n- name: c\n"
        << "  context: {cluster: fake, user: u, namespace: default}\ncurrent-context: c\n";
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<FakeApiServer> fake_;
  std::unique_ptr<kube::KubeClient> client_;
  fs::path dir_;
  std::string kubeconfig_;
};

json LogonGroup(const std::string& name, const std::string& strategy) {
  json server = {{"name", "s1"}, {"address", "127.0.0.1"}, {"port", 8000}};
  json spec = {{"kind", "abap"}, {"strategy", strategy}};
  spec["backend"]["staticServers"] = json::array({server});
  return {{"apiVersion", "dispatch.kwd.io/v1alpha1"},
          {"kind", "LogonGroup"},
          {"metadata", {{"name", name}, {"namespace", "erp"}}},
          {"spec", spec}};
}

// The controller (leader) records a Warning Event for a rejected LogonGroup,
// a Normal one when it is accepted again, and its leadership changes.
TEST_F(ControllerAgainstFakeTest, RejectedObjectsAndLeadershipBecomeEvents) {
  fake_->Upsert(LogonGroup("broken", "fastest"));
  fake_->Upsert(LogonGroup("good", "weighted_round_robin"));
  testing::Process controller(
      {testing::BinaryPath("kwd-controller"), "serve", "--source=kube", "--kubeconfig", kubeconfig_,
       "--admin-listen", "127.0.0.1:" + std::to_string(testing::ReserveFreePort()), "--grpc-listen",
       "127.0.0.1:0", "--hold-off", "5ms", "--leader-elect", "--leader-election-namespace", "kwd",
       "--leader-election-identity", "replica-a"},
      (dir_ / "controller.log").string());
  ASSERT_TRUE(controller.started()) << controller.Log();
  auto find = [&](const std::string& ns, const std::string& reason) -> json {
    for (const json& event : Events(*client_, ns)) {
      if (event.value("reason", "") == reason) {
        return event;
      }
    }
    return nullptr;
  };
  ASSERT_TRUE(testing::WaitFor([&] { return !find("erp", "InvalidStrategy").is_null(); },
                               std::chrono::seconds(15)))
      << controller.Log();
  json warning = find("erp", "InvalidStrategy");
  EXPECT_EQ(warning["type"], "Warning");
  EXPECT_EQ(warning["regarding"]["kind"], "LogonGroup");
  EXPECT_EQ(warning["regarding"]["name"], "broken");
  EXPECT_FALSE(warning["regarding"].value("uid", "").empty());
  EXPECT_NE(warning["note"].get<std::string>().find("fastest"), std::string::npos);
  EXPECT_EQ(warning["reportingInstance"], "replica-a");
  // Nothing for the accepted one.
  for (const json& event : Events(*client_, "erp")) {
    EXPECT_NE(event["regarding"]["name"], "good") << event.dump();
  }
  ASSERT_TRUE(testing::WaitFor([&] { return !find("kwd", "LeaderElected").is_null(); }));
  EXPECT_EQ(find("kwd", "LeaderElected")["regarding"]["kind"], "Lease");
  // Fixed: accepted again.
  json fixed = LogonGroup("broken", "weighted_round_robin");
  json current =
      client_->Get("/apis/dispatch.kwd.io/v1alpha1/namespaces/erp/logongroups/broken").body;
  fixed["status"] = current["status"];
  fake_->Upsert(fixed);
  EXPECT_TRUE(testing::WaitFor([&] {
    json event = find("erp", "Accepted");
    return !event.is_null() && event["type"] == "Normal";
  })) << Events(*client_, "erp").dump();
  // Stopping gives up the lease: recorded too.
  EXPECT_EQ(controller.Stop(), 0);
  EXPECT_FALSE(find("kwd", "LeadershipLost").is_null()) << Events(*client_, "kwd").dump();
}

// `kwd-controller ensure-affinity-key` (the chart's hook Job) creates the
// Secret once and never changes it.
TEST_F(ControllerAgainstFakeTest, EnsureAffinityKeyCreatesTheSecretOnce) {
  std::string command = testing::BinaryPath("kwd-controller") +
                        " ensure-affinity-key --namespace kwd --secret wd-kwd-affinity-key "
                        "--key affinity.key --kubeconfig " +
                        kubeconfig_ + " 2>&1";
  auto run = [&](std::string* out) {
    FILE* pipe = popen(command.c_str(), "r");
    char buffer[1024];
    size_t n = 0;
    while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) {
      out->append(buffer, n);
    }
    int status = pclose(pipe);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  std::string out;
  ASSERT_EQ(run(&out), 0) << out;
  EXPECT_NE(out.find("created"), std::string::npos) << out;
  std::string path = "/api/v1/namespaces/kwd/secrets/wd-kwd-affinity-key";
  json secret = client_->Get(path).body;
  std::string key = secret["data"]["affinity.key"];
  EXPECT_GE(key.size(), 40u);  // base64 of 43 characters of Base64url (32 random bytes)
  out.clear();
  ASSERT_EQ(run(&out), 0) << out;
  EXPECT_NE(out.find("kept"), std::string::npos) << out;
  EXPECT_EQ(client_->Get(path).body["data"]["affinity.key"], key);
  // A Secret without the key is not changed: an error naming it.
  fake_->Upsert({{"apiVersion", "v1"},
                 {"kind", "Secret"},
                 {"metadata", {{"name", "wd-kwd-affinity-key"}, {"namespace", "kwd"}}},
                 {"data", {{"other", "eA=="}}}});
  out.clear();
  EXPECT_EQ(run(&out), 1) << out;
  EXPECT_NE(out.find("exists without key affinity.key"), std::string::npos) << out;
}

}  // namespace
}  // namespace kwd
