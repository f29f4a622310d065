// Fifty in-process subscribers (the real client) against the real server:
// every change reaches all of them, and all end on the same version.

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <vector>

#include "common/snapshot_io.h"
#include "controller/grpc/snapshot_server.h"
#include "dataplane/xds/snapshot_client.h"

namespace kwd {
namespace {

using std::chrono::seconds;

std::shared_ptr<const compile::CompileResult> Result(int servers) {
  auto result = std::make_shared<compile::CompileResult>();
  auto* group = result->snapshot.add_groups();
  group->set_key("erp/public");
  group->set_kind(v1::KIND_ABAP);
  group->set_strategy(v1::STRATEGY_WEIGHTED_ROUND_ROBIN);
  for (int i = 0; i < servers; ++i) {
    auto* server = group->add_servers();
    char name[32];
    std::snprintf(name, sizeof name, "erp%04d_ERP_00", i);
    server->set_name(name);
    server->set_address("10.0.0.1");
    server->set_port(static_cast<uint32_t>(3200 + i));
    server->set_capacity(1);
    server->set_state(v1::SERVER_STATE_READY);
  }
  StampSnapshotVersion(&result->snapshot);
  return result;
}

TEST(FiftySubscribersTest, AllReachTheSameVersion) {
  MetricsRegistry metrics;
  snapshot_server::SnapshotServerOptions options;
  options.listen = "127.0.0.1:0";
  snapshot_server::SnapshotServer server(options, &metrics);
  std::string error;
  ASSERT_TRUE(server.Start(&error)) << error;
  server.Publish(Result(10));

  constexpr int kSubscribers = 50;
  std::atomic<int> applies{0};
  std::vector<std::unique_ptr<xds::SnapshotClient>> clients;
  for (int i = 0; i < kSubscribers; ++i) {
    xds::SnapshotClientOptions client_options;
    client_options.target = "127.0.0.1:" + std::to_string(server.port());
    client_options.node_id = "proxy-" + std::to_string(i);
    clients.push_back(std::make_unique<xds::SnapshotClient>(
        client_options,
        [&](const v1::Snapshot& snapshot, std::string* apply_error) {
          std::vector<std::string> problems = CheckSnapshot(snapshot);
          if (!problems.empty()) {
            *apply_error = problems.front();
            return false;
          }
          applies.fetch_add(1);
          return true;
        },
        nullptr));
    clients.back()->Start();
  }
  // Several changes in a row, faster than some subscribers apply them: the
  // newest one wins everywhere.
  std::shared_ptr<const compile::CompileResult> last;
  for (int servers = 11; servers <= 15; ++servers) {
    last = Result(servers);
    server.Publish(last);
  }
  for (auto& client : clients) {
    EXPECT_TRUE(client->WaitForVersion(last->snapshot.version(), seconds(30)));
    EXPECT_EQ(client->nacks(), 0u);
  }
  EXPECT_GE(applies.load(), kSubscribers);
  for (auto& client : clients) {
    client->Stop();
  }
}

}  // namespace
}  // namespace kwd
