#include "controller/admin/admin_server.h"

#include <gtest/gtest.h>

#include <atomic>

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

}  // namespace
}  // namespace kwd::controller_admin
