#include "dataplane/xds/snapshot_client.h"

#include <gtest/gtest.h>

#include "common/snapshot_io.h"
#include "controller/grpc/snapshot_server.h"

namespace kwd::xds {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(BackoffDelayTest, Table) {
  BackoffPolicy policy;  // 100 ms doubling up to 5 s, jitter 0.5
  struct Case {
    int failures;
    double random01;
    int64_t want_ms;
  };
  std::vector<Case> cases = {
      {1, 0.0, 100},  {2, 0.0, 200},   {3, 0.0, 400},  {6, 0.0, 3200},
      {7, 0.0, 5000}, {50, 0.0, 5000}, {1, 0.5, 75},   {3, 0.999, 200},
      {7, 1.0, 2500}, {0, 0.0, 100},   {2, -1.0, 200}, {2, 2.0, 100},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::to_string(c.failures) + " failures, random " + std::to_string(c.random01));
    EXPECT_EQ(BackoffDelay(policy, c.failures, c.random01).count(), c.want_ms);
  }
}

TEST(CheckClientTlsTest, CertificateAndKeyGoTogether) {
  std::string error;
  EXPECT_FALSE(CheckClientTls({"", "/nonexistent/cert.pem", "", ""}, &error));
  EXPECT_NE(error.find("both"), std::string::npos);
  EXPECT_FALSE(CheckClientTls({"/nonexistent/ca.pem", "", "", ""}, &error));
  EXPECT_NE(error.find("--controller-ca"), std::string::npos) << error;
  EXPECT_NE(error.find("/nonexistent/ca.pem"), std::string::npos) << error;
  EXPECT_TRUE(CheckClientTls({"", "", "", ""}, &error));
}

std::shared_ptr<const compile::CompileResult> Result(int capacity) {
  auto result = std::make_shared<compile::CompileResult>();
  auto* group = result->snapshot.add_groups();
  group->set_key("erp/public");
  auto* server = group->add_servers();
  server->set_name("erp0_ERP_00");
  server->set_address("127.0.0.1");
  server->set_port(3200);
  server->set_capacity(static_cast<uint32_t>(capacity));
  StampSnapshotVersion(&result->snapshot);
  return result;
}

TEST(SnapshotClientTest, RetriesUntilTheControllerAppears) {
  // Bind to learn a free port, then stop: nothing listens there now.
  int port = 0;
  {
    snapshot_server::SnapshotServerOptions options;
    options.listen = "127.0.0.1:0";
    snapshot_server::SnapshotServer probe(options, nullptr);
    std::string error;
    ASSERT_TRUE(probe.Start(&error)) << error;
    port = probe.port();
  }
  MetricsRegistry metrics;
  SnapshotClientOptions options;
  options.target = "127.0.0.1:" + std::to_string(port);
  options.node_id = "proxy-a";
  options.backoff.initial = milliseconds(10);
  options.backoff.max = milliseconds(100);
  int applies = 0;
  SnapshotClient client(
      options,
      [&](const v1::Snapshot&, std::string*) {
        ++applies;
        return true;
      },
      &metrics);
  client.Start();
  EXPECT_FALSE(client.WaitForConnected(true, milliseconds(300)));
  EXPECT_EQ(client.version(), "");
  EXPECT_EQ(client.streams_started(), 0u);

  snapshot_server::SnapshotServerOptions server_options;
  server_options.listen = options.target;
  snapshot_server::SnapshotServer server(server_options, nullptr);
  std::string error;
  ASSERT_TRUE(server.Start(&error)) << error;
  auto result = Result(2);
  server.Publish(result);
  ASSERT_TRUE(client.WaitForVersion(result->snapshot.version(), seconds(10)));
  EXPECT_TRUE(client.WaitForConnected(true, seconds(1)));
  EXPECT_EQ(applies, 1);
  EXPECT_EQ(metrics.GetGauge("kwd_proxy_controller_connected", "").Value(), 1.0);
  EXPECT_GE(metrics.GetCounter("kwd_proxy_snapshot_acks_total", "").Value(), 1u);
  client.Stop();
  EXPECT_FALSE(client.connected());
}

}  // namespace
}  // namespace kwd::xds
