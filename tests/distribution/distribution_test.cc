// End to end: kwd-controller serve --source=dir plus two kwd-proxy serve
// --controller processes and demo backends, all real processes on loopback.

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include <nlohmann/json.hpp>

#include "kwd/v1/discovery.grpc.pb.h"
#include "tests/distribution/cluster_fixture.h"
#include "tests/support/http_client.h"
#include "tests/support/process.h"

namespace kwd {
namespace {

namespace fs = std::filesystem;
using testing::BinaryPath;
using testing::ClusterTest;
using testing::ControllerVersion;
using testing::ErpUrlMappingYaml;
using testing::HttpGet;
using testing::LogonGroupYaml;
using testing::ReserveFreePort;
using testing::StaticServer;
using testing::WaitFor;

std::string Config(uint16_t backend0, uint16_t backend1, bool with_second, bool with_poison) {
  std::vector<StaticServer> servers = {{"erp0_ERP_00", backend0}};
  if (with_second) {
    servers.push_back({"erp1_ERP_00", backend1});
  }
  std::string yaml = LogonGroupYaml("public", servers);
  if (with_poison) {
    yaml += "---\n" + LogonGroupYaml("poison", {{"erp0_ERP_00", backend0, std::nullopt}});
  }
  return yaml + "---\n" + ErpUrlMappingYaml();
}

// Writes atomically (rename) so the controller never reads half a file.
void WriteConfig(const fs::path& dir, const std::string& yaml) {
  fs::path temp = dir / ".erp.yaml.tmp";
  {
    std::ofstream out(temp);
    out << yaml;
  }
  fs::rename(temp, dir / "erp.yaml");
}

// The value of an unlabelled series, or -1.
double Metric(uint16_t admin_port, const std::string& name) {
  auto reply = HttpGet(admin_port, "/metrics");
  size_t at = reply.body.find("\n" + name + " ");
  if (at == std::string::npos) {
    return -1;
  }
  return std::stod(reply.body.substr(at + name.size() + 2));
}

// The proxy's applied version ("" if none), as the controller labels it.
std::string ProxyVersion(uint16_t admin_port) {
  auto reply = HttpGet(admin_port, "/metrics");
  std::string prefix = "kwd_proxy_snapshot_info{version=\"";
  size_t at = 0;
  while ((at = reply.body.find(prefix, at)) != std::string::npos) {
    size_t end = reply.body.find('"', at + prefix.size());
    std::string version = reply.body.substr(at + prefix.size(), end - at - prefix.size());
    if (reply.body.compare(end, 4, "\"} 1") == 0) {
      return version;
    }
    at = end;
  }
  return "";
}

class DistributionTest : public ClusterTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(MakeDir("kwd-distribution"));
    for (const char* instance : {"erp0_ERP_00", "erp1_ERP_00"}) {
      ASSERT_NO_FATAL_FAILURE(StartBackend(instance));
    }
    WriteConfig(dir_, Config(backends_[0]->port(), backends_[1]->port(), false, false));
    grpc_port_ = ReserveFreePort();
    controller_admin_ = ReserveFreePort();
    StartController();
  }

  void StartController() {
    StartControllerWith({BinaryPath("kwd-controller"), "serve", "--source=dir:" + dir_.string(),
                         "--grpc-listen", "127.0.0.1:" + std::to_string(grpc_port_),
                         "--admin-listen", "127.0.0.1:" + std::to_string(controller_admin_),
                         "--poll-interval", "50ms"});
  }

  void StartProxy(const std::string& node, const std::string& reject_group = "") {
    uint16_t admin = ReserveFreePort();
    std::vector<std::string> argv = {"/usr/bin/env"};
    if (!reject_group.empty()) {
      argv.push_back("KWD_TEST_REJECT_GROUP=" + reject_group);
    }
    for (std::string& arg : ProxyArgs(node, admin)) {
      argv.push_back(std::move(arg));
    }
    StartProxyWith(node, admin, std::move(argv));
  }

  bool AllProxiesRun(const std::string& version) {
    return WaitFor([&] {
      for (auto& proxy : proxies_) {
        if (ProxyVersion(proxy.admin) != version) {
          return false;
        }
      }
      return true;
    });
  }

  std::string Logs() {
    std::string logs = controller_ ? controller_->Log() : "";
    for (auto& proxy : proxies_) {
      logs += proxy.process->Log();
    }
    return logs;
  }
};

TEST_F(DistributionTest, AChangeReachesBothProxies) {
  StartProxy("proxy-a");
  StartProxy("proxy-b");
  std::string first = ControllerVersion(controller_admin_);
  ASSERT_TRUE(AllProxiesRun(first)) << Logs();
  for (auto& proxy : proxies_) {
    EXPECT_EQ(HttpGet(proxy.admin, "/readyz").status, 200);
    auto reply = HttpGet(proxy.process->port(), "/sap/bc/ping");
    EXPECT_EQ(reply.status, 200);
    EXPECT_EQ(reply.Header("X-Served-By"), "erp0_ERP_00");
  }
  ASSERT_TRUE(
      WaitFor([&] { return Metric(controller_admin_, "kwd_controller_connected_proxies") == 2; }));

  WriteConfig(dir_, Config(backends_[0]->port(), backends_[1]->port(), true, false));
  ASSERT_TRUE(WaitFor([&] { return ControllerVersion(controller_admin_) != first; })) << Logs();
  std::string second = ControllerVersion(controller_admin_);
  ASSERT_TRUE(AllProxiesRun(second)) << Logs();
  for (auto& proxy : proxies_) {
    std::set<std::string> served;
    for (int i = 0; i < 4; ++i) {
      served.insert(HttpGet(proxy.process->port(), "/sap/bc/ping").Header("X-Served-By"));
    }
    EXPECT_EQ(served, (std::set<std::string>{"erp0_ERP_00", "erp1_ERP_00"}));
  }
  // Files carry no metadata.generation, so a new server is an endpoint-only
  // change: each proxy got it as a delta.
  EXPECT_EQ(Metric(controller_admin_, "kwd_controller_snapshot_delta_pushes_total"), 2);
  for (auto& proxy : proxies_) {
    EXPECT_EQ(Metric(proxy.admin, "kwd_proxy_snapshot_deltas_applied_total"), 1);
  }
  EXPECT_EQ(Metric(controller_admin_, "kwd_controller_snapshot_nacks_total"), 0);
}

TEST_F(DistributionTest, AnInvalidSnapshotIsNackedAndTheOldOneKeepsServing) {
  StartProxy("proxy-a", "erp/poison");
  StartProxy("proxy-b");
  std::string good = ControllerVersion(controller_admin_);
  ASSERT_TRUE(AllProxiesRun(good)) << Logs();

  WriteConfig(dir_, Config(backends_[0]->port(), backends_[1]->port(), false, true));
  ASSERT_TRUE(WaitFor([&] {
    return Metric(controller_admin_, "kwd_controller_snapshot_nacks_total") == 1;
  })) << Logs();
  std::string poisoned = ControllerVersion(controller_admin_);
  ASSERT_NE(poisoned, good);
  // proxy-b took it, proxy-a kept the last good one and still serves with it.
  ASSERT_TRUE(WaitFor([&] { return ProxyVersion(proxies_[1].admin) == poisoned; }));
  EXPECT_EQ(ProxyVersion(proxies_[0].admin), good);
  EXPECT_EQ(HttpGet(proxies_[0].process->port(), "/sap/bc/ping").status, 200);
  EXPECT_EQ(Metric(proxies_[0].admin, "kwd_proxy_snapshot_nacks_total"), 1);
  EXPECT_NE(proxies_[0].process->Log().find("rejected by KWD_TEST_REJECT_GROUP"),
            std::string::npos);

  // Reverted: both run the good version again.
  WriteConfig(dir_, Config(backends_[0]->port(), backends_[1]->port(), false, false));
  ASSERT_TRUE(AllProxiesRun(good)) << Logs();
}

TEST_F(DistributionTest, ControllerKilledUnderLoadThenRestartedProxiesResync) {
  StartProxy("proxy-a");
  StartProxy("proxy-b");
  std::string first = ControllerVersion(controller_admin_);
  ASSERT_TRUE(AllProxiesRun(first)) << Logs();

  std::atomic<bool> stop{false};
  std::atomic<int> sent{0};
  std::atomic<int> failed{0};
  std::thread load([&] {
    while (!stop.load()) {
      for (auto& proxy : proxies_) {
        auto reply = HttpGet(proxy.process->port(), "/sap/bc/ping");
        sent.fetch_add(1);
        if (reply.status != 200) {
          failed.fetch_add(1);
        }
      }
    }
  });
  ASSERT_TRUE(WaitFor([&] { return sent.load() >= 50; }));
  controller_->Kill();
  for (auto& proxy : proxies_) {
    EXPECT_TRUE(
        WaitFor([&] { return Metric(proxy.admin, "kwd_proxy_controller_connected") == 0; }));
  }
  int at_kill = sent.load();
  ASSERT_TRUE(WaitFor([&] { return sent.load() >= at_kill + 200; }));
  for (auto& proxy : proxies_) {
    EXPECT_EQ(HttpGet(proxy.admin, "/readyz").status, 200);
  }

  // Restarted with a changed configuration: the proxies reconnect and resync.
  WriteConfig(dir_, Config(backends_[0]->port(), backends_[1]->port(), true, false));
  StartController();
  std::string second = ControllerVersion(controller_admin_);
  ASSERT_NE(second, first);
  ASSERT_TRUE(AllProxiesRun(second)) << Logs();
  int at_resync = sent.load();
  ASSERT_TRUE(WaitFor([&] { return sent.load() >= at_resync + 50; }));
  stop = true;
  load.join();
  EXPECT_EQ(failed.load(), 0) << "of " << sent.load();
  EXPECT_GE(sent.load(), 300);
}

// The Programmed condition of LogonGroup "public" in /admin/api/state.
nlohmann::json Programmed(uint16_t admin_port) {
  auto objects = nlohmann::json::parse(HttpGet(admin_port, "/admin/api/state").body, nullptr, false);
  if (!objects.is_object()) {
    return nlohmann::json::object();
  }
  for (const auto& object : objects["objects"]) {
    if (object["kind"] == "LogonGroup" && object["name"] == "public") {
      for (const auto& condition : object["conditions"]) {
        if (condition["type"] == "Programmed") {
          return condition;
        }
      }
    }
  }
  return nlohmann::json::object();
}

// Issue 23 item 7: anything that reaches the gRPC port could subscribe and
// never ACK, holding every object at Programmed=False Pending. With
// --proxy-ack-timeout it is listed and counted as unresponsive but no
// longer holds Programmed; a NACK text of 40,000 bytes is cut.
TEST_F(DistributionTest, ASilentClientOnTheGrpcPortDoesNotHoldProgrammed) {
  controller_.reset();
  grpc_port_ = ReserveFreePort();  // fresh ports: the old ones may linger a moment
  controller_admin_ = ReserveFreePort();
  StartControllerWith({BinaryPath("kwd-controller"), "serve", "--source=dir:" + dir_.string(),
                       "--grpc-listen", "127.0.0.1:" + std::to_string(grpc_port_),
                       "--admin-listen", "127.0.0.1:" + std::to_string(controller_admin_),
                       "--poll-interval", "50ms", "--proxy-ack-timeout", "500ms"});
  StartProxy("proxy-a");
  ASSERT_TRUE(AllProxiesRun(ControllerVersion(controller_admin_))) << Logs();
  ASSERT_TRUE(WaitFor([&] { return Programmed(controller_admin_).value("status", "") == "True"; }))
      << Programmed(controller_admin_);

  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(grpc_port_),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::SnapshotDiscovery::NewStub(channel);
  grpc::ClientContext context;
  auto stream = stub->StreamSnapshots(&context);
  v1::SnapshotRequest hello;
  hello.set_node_id("silent");
  ASSERT_TRUE(stream->Write(hello));
  v1::SnapshotResponse response;
  ASSERT_TRUE(stream->Read(&response));  // and never answered
  // Waited for at first, as any proxy; then no longer counted.
  ASSERT_TRUE(WaitFor([&] {
    return Metric(controller_admin_, "kwd_controller_unresponsive_proxies") == 1;
  })) << Logs();
  ASSERT_TRUE(WaitFor([&] {
    nlohmann::json programmed = Programmed(controller_admin_);
    return programmed.value("status", "") == "True" &&
           programmed.value("message", "").find("1 more proxy does not answer") !=
               std::string::npos;
  })) << Programmed(controller_admin_);
  EXPECT_EQ(Metric(controller_admin_, "kwd_controller_connected_proxies"), 2);
  EXPECT_NE(controller_->Log().find("a proxy does not answer snapshots"), std::string::npos);
  auto state = nlohmann::json::parse(HttpGet(controller_admin_, "/admin/api/state").body);
  for (const auto& proxy : state["proxies"]) {
    EXPECT_EQ(proxy.value("unresponsive", false), proxy.value("node_id", "") == "silent") << proxy;
  }

  // Its NACK of 40,000 bytes: bounded, one line.
  v1::SnapshotRequest nack;
  nack.set_node_id("silent");
  nack.set_response_nonce(response.nonce());
  nack.mutable_error_detail()->set_message("line one\nline two " + std::string(40'000, 'x'));
  ASSERT_TRUE(stream->Write(nack));
  ASSERT_TRUE(WaitFor([&] {
    return Programmed(controller_admin_).value("reason", "") == "Rejected";
  })) << Programmed(controller_admin_);
  std::string message = Programmed(controller_admin_).value("message", "");
  EXPECT_LE(message.size(), 4096u);
  EXPECT_EQ(message.find('\n'), std::string::npos);
  EXPECT_NE(message.find("proxy silent rejected the snapshot: line one\\nline two xxx"),
            std::string::npos)
      << message.substr(0, 200);
  context.TryCancel();
}

}  // namespace
}  // namespace kwd
