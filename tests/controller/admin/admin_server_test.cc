#include "controller/admin/admin_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/http_client.h"
#include "tests/support/process.h"

namespace kwd::controller_admin {
namespace {

TEST(ParseHostPortTest, Table) {
  struct Case {
    std::string text;
    bool ok;
    std::string host;
    uint16_t port;
  };
  std::vector<Case> cases = {{"0.0.0.0:9902", true, "0.0.0.0", 9902},
                             {"127.0.0.1:0", true, "127.0.0.1", 0},
                             {"[::1]:80", true, "::1", 80},
                             {"localhost", false, "", 0},
                             {":80", false, "", 0},
                             {"1.2.3.4:", false, "", 0},
                             {"1.2.3.4:70000", false, "", 0},
                             {"1.2.3.4:8x", false, "", 0}};
  for (const Case& c : cases) {
    std::string host;
    uint16_t port = 0;
    EXPECT_EQ(ParseHostPort(c.text, &host, &port), c.ok) << c.text;
    if (c.ok) {
      EXPECT_EQ(host, c.host) << c.text;
      EXPECT_EQ(port, c.port) << c.text;
    }
  }
}

TEST(AdminServerTest, ServesMetricsHealthReadinessAndSnapshot) {
  std::atomic<bool> ready{false};
  LatestSnapshot latest;
  AdminHandlers handlers;
  handlers.metrics = [] { return std::string("kwd_controller_leader 1\n"); };
  handlers.ready = [&] { return ready.load(); };
  handlers.snapshot = [&]() -> std::optional<std::string> {
    auto result = latest.Get();
    if (!result) {
      return std::nullopt;
    }
    return "{\"version\":\"" + result->snapshot.version() + "\"}";
  };
  AdminOptions options;
  options.host = "127.0.0.1";
  options.port = testing::ReserveFreePort();
  AdminServer server(options, handlers);
  std::string error;
  ASSERT_TRUE(server.Start(&error)) << error;

  EXPECT_EQ(testing::HttpGet(options.port, "/healthz").status, 200);
  EXPECT_EQ(testing::HttpGet(options.port, "/readyz").status, 503);
  EXPECT_EQ(testing::HttpGet(options.port, "/debug/snapshot").status, 503);
  testing::HttpReply metrics = testing::HttpGet(options.port, "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_EQ(metrics.body, "kwd_controller_leader 1\n");
  EXPECT_EQ(testing::HttpGet(options.port, "/nope").status, 404);

  auto result = std::make_shared<compile::CompileResult>();
  result->snapshot.set_version("abc");
  latest.Publish(result);
  ready = true;
  EXPECT_EQ(testing::HttpGet(options.port, "/readyz").status, 200);
  testing::HttpReply snapshot = testing::HttpGet(options.port, "/debug/snapshot");
  EXPECT_EQ(snapshot.status, 200);
  EXPECT_EQ(snapshot.body, "{\"version\":\"abc\"}\n");
  server.Stop();
}

TEST(AdminServerTest, AnAddressInUseIsAnError) {
  AdminOptions options;
  options.host = "127.0.0.1";
  options.port = testing::ReserveFreePort();
  AdminServer first(options, {});
  std::string error;
  ASSERT_TRUE(first.Start(&error)) << error;
  AdminServer second(options, {});
  EXPECT_FALSE(second.Start(&error));
  EXPECT_NE(error.find("cannot listen"), std::string::npos);
}

TEST(AdminServerTest, ServesThePageAndTheState) {
  AdminHandlers handlers;
  handlers.state = [] { return std::string("{\"proxies\":[]}\n"); };
  AdminOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  AdminServer server(options, handlers);
  std::string error;
  ASSERT_TRUE(server.Start(&error)) << error;
  testing::HttpReply bare = testing::HttpGet(server.port(), "/admin");
  testing::HttpReply slash = testing::HttpGet(server.port(), "/admin/");
  EXPECT_EQ(bare.status, 200);
  EXPECT_EQ(bare.body, slash.body);
  EXPECT_NE(bare.body.find("fetch(\"/admin/api/state\""), std::string::npos);
  EXPECT_NE(bare.body.find("rel=\"icon\" type=\"image/svg+xml\" href=\"data:"), std::string::npos);
  EXPECT_EQ(bare.body.find("innerHTML"), std::string::npos);
  EXPECT_EQ(bare.body.find("http://"), std::string::npos);
  testing::HttpReply state = testing::HttpGet(server.port(), "/admin/api/state");
  EXPECT_EQ(state.status, 200);
  EXPECT_EQ(state.body, "{\"proxies\":[]}\n");
  server.Stop();

  AdminServer without(options, {});
  ASSERT_TRUE(without.Start(&error)) << error;
  EXPECT_EQ(testing::HttpGet(without.port(), "/admin/api/state").status, 503);
}

// A real controller and proxy: the controller's state names the proxy, the
// objects with their conditions and the compile's problems.
TEST(AdminServerBlackBoxTest, StateShowsProxiesObjectsAndCompileProblems) {
  std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "kwd-admin-state";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "config");
  std::ofstream(dir / "config" / "objects.yaml") << R"(apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {name: public, namespace: erp}
spec:
  kind: abap
  backend:
    staticServers:
      - {name: app1, address: 127.0.0.1, port: 1, capacity: 2}
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {name: broken, namespace: erp}
spec:
  kind: abap
  strategy: fastest
  backend:
    staticServers:
      - {name: app1, address: 127.0.0.1, port: 1}
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {name: erp, namespace: erp}
spec:
  defaultGroups: {abap: public, java: public}
  rules:
    - {prefix: /sap/, kind: abap, logonGroup: public}
)";
  uint16_t admin = testing::ReserveFreePort();
  uint16_t grpc = testing::ReserveFreePort();
  testing::Process controller(
      {testing::BinaryPath("kwd-controller"), "serve", "--source=dir:" + (dir / "config").string(),
       "--admin-listen", "127.0.0.1:" + std::to_string(admin), "--grpc-listen",
       "127.0.0.1:" + std::to_string(grpc)},
      (dir / "controller.log").string());
  ASSERT_TRUE(controller.started()) << controller.Log();
  uint16_t proxy_admin = testing::ReserveFreePort();
  testing::Process proxy({testing::BinaryPath("kwd-proxy"), "serve", "--controller",
                          "127.0.0.1:" + std::to_string(grpc), "--listen", "127.0.0.1:0",
                          "--admin-listen", "127.0.0.1:" + std::to_string(proxy_admin), "--node-id",
                          "state-proxy", "--access-log", "off"},
                         (dir / "proxy.log").string());
  ASSERT_TRUE(proxy.started()) << proxy.Log();

  nlohmann::json state;
  ASSERT_TRUE(testing::WaitFor([&] {
    testing::HttpReply reply = testing::HttpGet(admin, "/admin/api/state");
    if (reply.status != 200) {
      return false;
    }
    state = nlohmann::json::parse(reply.body);
    return state["proxies"].size() == 1 && state["proxies"][0]["current"] == true;
  })) << state.dump(1)
      << controller.Log();
  EXPECT_EQ(state["ready"], true);
  std::string version = state["snapshot"]["version"];
  EXPECT_FALSE(version.empty());
  EXPECT_TRUE(state["snapshot"]["published_at"].is_string());
  EXPECT_EQ(state["snapshot"]["groups"], 1);
  const nlohmann::json& p = state["proxies"][0];
  EXPECT_EQ(p["node_id"], "state-proxy");
  EXPECT_EQ(p["replica"], "this");
  EXPECT_EQ(p["acked_version"], version);
  EXPECT_TRUE(p["peer"].is_string());
  EXPECT_TRUE(p["connected_since"].is_string());
  EXPECT_TRUE(p["last_nack"].is_null());

  ASSERT_EQ(state["objects"].size(), 3u);
  std::map<std::string, nlohmann::json> objects;
  for (const nlohmann::json& object : state["objects"]) {
    objects[object["kind"].get<std::string>() + " " + object["name"].get<std::string>()] = object;
  }
  const nlohmann::json& pub = objects["LogonGroup public"];
  EXPECT_EQ(pub["ready_servers"], 1);
  std::map<std::string, std::string> conditions;
  for (const nlohmann::json& c : pub["conditions"]) {
    conditions[c["type"]] = c["status"];
  }
  EXPECT_EQ(conditions["Accepted"], "True");
  EXPECT_EQ(conditions["Programmed"], "True");
  EXPECT_TRUE(objects["UrlMapping erp"]["ready_servers"].is_null());

  ASSERT_EQ(state["compile_problems"].size(), 1u) << state["compile_problems"].dump(1);
  const nlohmann::json& problem = state["compile_problems"][0];
  EXPECT_EQ(problem["name"], "broken");
  EXPECT_EQ(problem["type"], "Accepted");
  EXPECT_EQ(problem["reason"], "InvalidStrategy");

  // The proxy's own page names where its snapshots come from.
  testing::HttpReply proxy_state = testing::HttpGet(proxy_admin, "/admin/api/state");
  ASSERT_EQ(proxy_state.status, 200);
  nlohmann::json source = nlohmann::json::parse(proxy_state.body)["snapshot_source"];
  EXPECT_EQ(source["kind"], "controller");
  EXPECT_EQ(source["connected"], true);
  EXPECT_EQ(source["last_applied"]["version"], version);
  EXPECT_TRUE(source["last_rejected"].is_null());
  EXPECT_EQ(proxy.Stop(), 0);
  EXPECT_EQ(controller.Stop(), 0);
}

// The admin port bounds what a client can make it hold: an oversize head is
// answered 431 as soon as it passes the limit, and the process does not grow
// by what the client sent (before: cpprest buffered all of it).
TEST(AdminServerBlackBoxTest, OversizeHeadIsRefusedWithoutGrowing) {
  std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "kwd-admin-limits";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "config");
  uint16_t port = testing::ReserveFreePort();
  testing::Process controller(
      {testing::BinaryPath("kwd-controller"), "serve", "--source=dir:" + (dir / "config").string(),
       "--admin-listen", "127.0.0.1:" + std::to_string(port)},
      (dir / "controller.log").string());
  ASSERT_TRUE(controller.started()) << controller.Log();
  ASSERT_EQ(testing::HttpGet(port, "/healthz").status, 200);
  long before_kib = controller.PeakRssKiB();
  ASSERT_GT(before_kib, 0);

  size_t sent = 0;
  testing::HttpReply reply = testing::SendEndlessHead(port, size_t{64} << 20, &sent);
  EXPECT_EQ(reply.status, 431) << "sent " << sent << " bytes";
  long grown_kib = controller.PeakRssKiB() - before_kib;
  RecordProperty("peak_rss_growth_kib", static_cast<int>(grown_kib));
  EXPECT_LT(grown_kib, 8 * 1024) << "sent " << sent << " bytes";
  EXPECT_EQ(testing::HttpGet(port, "/healthz").status, 200);  // still serving
  EXPECT_EQ(controller.Stop(), 0);
}

// Limits of the admin port, with small values so each shows quickly.
class AdminLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    AdminOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    options.limits.max_head_bytes = 1024;
    options.limits.max_body_bytes = 2048;
    options.limits.max_connections = 2;
    options.limits.request_timeout_ms = 300;
    AdminHandlers handlers;
    handlers.metrics = [] { return std::string("m 1\n"); };
    server_ = std::make_unique<AdminServer>(options, handlers);
    std::string error;
    ASSERT_TRUE(server_->Start(&error)) << error;
    port_ = server_->port();
    ASSERT_NE(port_, 0);
  }

  testing::HttpReply Raw(const std::string& request) {
    testing::HttpClient client(port_);
    return client.Request(request, request.starts_with("HEAD") ? "HEAD" : "GET");
  }

  std::unique_ptr<AdminServer> server_;
  uint16_t port_ = 0;
};

TEST_F(AdminLimitsTest, HeadAndBodyLimits) {
  testing::HttpReply ok = Raw("GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(ok.body, "m 1\n");
  EXPECT_EQ(ok.Header("connection"), "close");
  EXPECT_EQ(ok.Header("cache-control"), "no-store");

  std::string big_field = "X-A: " + std::string(1100, 'a') + "\r\n";
  EXPECT_EQ(Raw("GET /metrics HTTP/1.1\r\n" + big_field + "\r\n").status, 431);
  // A body within the limit is read and dropped; a larger one is refused
  // from its Content-Length, before any of it is read.
  EXPECT_EQ(
      Raw("GET /metrics HTTP/1.1\r\nContent-Length: 2048\r\n\r\n" + std::string(2048, 'b')).status,
      200);
  EXPECT_EQ(Raw("GET /metrics HTTP/1.1\r\nContent-Length: 2049\r\n\r\n").status, 413);
  EXPECT_EQ(Raw("GET /metrics HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n").status,
            400);
  EXPECT_EQ(Raw("GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n").status,
            411);
  EXPECT_EQ(Raw("GET /metrics HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab").status,
            400);
}

TEST_F(AdminLimitsTest, MalformedRequestsAre400) {
  for (const std::string request : {
           "GET /metrics\r\n\r\n",
           "GET metrics HTTP/1.1\r\n\r\n",
           "GET /me trics HTTP/1.1\r\n\r\n",
           "GET /metrics HTTP/1.1\r\n folded: x\r\n\r\n",
           "GET /metrics HTTP/1.1\r\nBad Name: x\r\n\r\n",
           "GET /metrics HTTP/1.1\r\nX: a\nY: b\r\n\r\n",
           "G(T /metrics HTTP/1.1\r\n\r\n",
       }) {
    EXPECT_EQ(Raw(request).status, 400) << request;
  }
  EXPECT_EQ(Raw("GET /metrics HTTP/2.0\r\n\r\n").status, 505);
  testing::HttpReply head = Raw("HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.Header("content-length"), "4");
  EXPECT_EQ(head.body, "");
}

TEST_F(AdminLimitsTest, SlowConnectionsTimeOut) {
  testing::HttpClient slow1(port_);
  testing::HttpClient slow2(port_);
  ASSERT_TRUE(slow1.Send("GET /metrics HTTP/1.1\r\nX: "));
  ASSERT_TRUE(slow2.Send("GET /met"));
  EXPECT_EQ(slow1.Read().status, 408);
  EXPECT_EQ(slow2.Read().status, 408);
}

TEST(AdminConnectionCapTest, ANewConnectionTakesTheSlotOfTheOldestUnfinishedOne) {
  AdminOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.limits.max_connections = 2;
  options.limits.request_timeout_ms = 20000;  // far longer than the test may wait
  AdminServer server(options, AdminHandlers{});
  std::string error;
  ASSERT_TRUE(server.Start(&error)) << error;
  // Two clients that never finish their heads take both slots.
  testing::HttpClient slow1(server.port(), std::chrono::seconds(10));
  ASSERT_TRUE(slow1.Send("GET /metrics HTTP/1.1\r\nX: "));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // slow1 is the older one
  testing::HttpClient slow2(server.port(), std::chrono::seconds(10));
  ASSERT_TRUE(slow2.Send("GET /hea"));
  // A probe is served at once (before: only after the 20 s request timeout),
  // in the slot of the oldest unfinished request, which is closed unanswered.
  auto start = std::chrono::steady_clock::now();
  testing::HttpReply probe = testing::HttpGet(server.port(), "/healthz");
  EXPECT_EQ(probe.status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(slow1.Read().status, 0) << "closed without an answer";
  // The younger one keeps its slot and is answered when its head completes.
  ASSERT_TRUE(slow2.Send("lthz HTTP/1.1\r\nHost: localhost\r\n\r\n"));
  EXPECT_EQ(slow2.Read().status, 200);
}

}  // namespace
}  // namespace kwd::controller_admin
