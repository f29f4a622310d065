#include "dataplane/routing/passthrough_router.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "dataplane/routing/clock.h"
#include "dataplane/routing/routing_table.h"

namespace kwd::routing {
namespace {

v1::Group* AddGroup(v1::Snapshot* snapshot, const std::string& key,
                    std::initializer_list<std::pair<const char*, uint32_t>> servers) {
  v1::Group* group = snapshot->add_groups();
  group->set_key(key);
  group->set_kind(v1::KIND_JAVA);
  group->set_strategy(v1::STRATEGY_WEIGHTED_ROUND_ROBIN);
  uint32_t port = 9000;
  for (const auto& [name, capacity] : servers) {
    v1::Server* server = group->add_servers();
    server->set_name(name);
    server->set_address("127.0.0.1");
    server->set_port(port++);
    server->set_capacity(capacity);
    server->set_state(v1::SERVER_STATE_READY);
  }
  return group;
}

class PassthroughRouterTest : public ::testing::Test {
 protected:
  std::shared_ptr<const RoutingTable> Build(const v1::Snapshot& snapshot) {
    std::string error;
    auto table = RoutingTable::Build(snapshot, TableContext{&sessions_, &health_}, &error);
    EXPECT_NE(table, nullptr) << error;
    return table;
  }
  v1::Snapshot Snapshot(bool with_default) {
    v1::Snapshot s;
    AddGroup(&s, "ns/a", {{"a1", 1}, {"a2", 3}});
    AddGroup(&s, "ns/d", {{"d1", 1}});
    v1::Group* sticky = AddGroup(&s, "ns/s", {{"s1", 1}, {"s2", 1}});
    sticky->mutable_session_affinity()->mutable_client_ip()->set_enabled(true);
    sticky->mutable_session_affinity()->mutable_client_ip()->set_ipv4_mask(0xFFFFFF00);
    auto vhost = [&](const std::string& host, const std::string& group) {
      v1::VirtualHost* v = s.add_virtual_hosts();
      v->set_host(host);
      v->set_passthrough_group(group);
    };
    if (with_default) {
      vhost("", "ns/d");
    }
    vhost("*.w.example.com", "ns/a");
    vhost("a.example.com", "ns/a");
    vhost("http-only.example.com", "");
    vhost("s.example.com", "ns/s");
    return s;
  }
  std::string Server(PassthroughRouter& router, const std::string& sni,
                     const std::string& client = "192.0.2.1") {
    PassthroughDecision d = router.Route(sni, client);
    std::string name = d.server == nullptr ? "" : d.server->name;
    router.Complete(&d);
    return name;
  }

  session::SessionRegistry sessions_;
  ServerHealthRegistry health_;
  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>(0);
};

TEST_F(PassthroughRouterTest, ExactThenWildcardThenDefault) {
  auto table = Build(Snapshot(true));
  EXPECT_EQ(table->FindPassthroughGroup("a.example.com"), table->FindGroup("ns/a"));
  EXPECT_EQ(table->FindPassthroughGroup("x.y.w.example.com"), table->FindGroup("ns/a"));
  EXPECT_EQ(table->FindPassthroughGroup("unknown.example.com"), table->FindGroup("ns/d"));
  EXPECT_EQ(table->FindPassthroughGroup(""), table->FindGroup("ns/d"));
  // A host without a passthrough group falls back to the default.
  EXPECT_EQ(table->FindPassthroughGroup("http-only.example.com"), table->FindGroup("ns/d"));
  auto no_default = Build(Snapshot(false));
  EXPECT_EQ(no_default->FindPassthroughGroup("unknown.example.com"), -1);
  EXPECT_EQ(no_default->FindPassthroughGroup(""), -1);
}

TEST_F(PassthroughRouterTest, SnapshotNamingAnUnknownGroupOrABadMaskIsRefused) {
  v1::Snapshot unknown = Snapshot(true);
  unknown.mutable_virtual_hosts(1)->set_passthrough_group("ns/missing");
  std::string error;
  EXPECT_EQ(RoutingTable::Build(unknown, TableContext{&sessions_, &health_}, &error), nullptr);
  EXPECT_NE(error.find("passthrough group names unknown group ns/missing"), std::string::npos)
      << error;
  v1::Snapshot holes = Snapshot(true);
  holes.mutable_groups(2)->mutable_session_affinity()->mutable_client_ip()->set_ipv4_mask(
      0xFF00FF00);
  EXPECT_EQ(RoutingTable::Build(holes, TableContext{&sessions_, &health_}, &error), nullptr);
  EXPECT_NE(error.find("not a contiguous IPv4 mask"), std::string::npos) << error;
}

TEST_F(PassthroughRouterTest, CapacityRatioAndOpenConnectionsCount) {
  PassthroughRouter router(clock_);
  router.Apply(Build(Snapshot(false)));
  std::map<std::string, int> counts;
  for (int i = 0; i < 40; ++i) {
    ++counts[Server(router, "a.example.com")];
  }
  EXPECT_EQ(counts["a1"], 10);
  EXPECT_EQ(counts["a2"], 30);
  PassthroughDecision none = router.Route("nope.example.com", "192.0.2.1");
  EXPECT_EQ(none.group, nullptr);
  EXPECT_EQ(none.reason, PassthroughReason::kNoGroup);
}

TEST_F(PassthroughRouterTest, RetryPassesOverTheFailedServer) {
  PassthroughRouter router(clock_);
  router.Apply(Build(Snapshot(false)));
  for (int i = 0; i < 10; ++i) {
    PassthroughDecision first = router.Route("a.example.com", "192.0.2.1");
    const int failed = first.server_index;
    router.Complete(&first);
    PassthroughDecision retry = router.Route("a.example.com", "192.0.2.1", failed);
    ASSERT_NE(retry.server, nullptr);
    EXPECT_NE(retry.server_index, failed);
    router.Complete(&retry);
  }
}

TEST_F(PassthroughRouterTest, ClientIpAffinityAndUnhealthyServers) {
  PassthroughRouter router(clock_);
  auto table = Build(Snapshot(false));
  router.Apply(table);
  const std::string first = Server(router, "s.example.com", "10.0.0.1");
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(Server(router, "s.example.com", "10.0.0." + std::to_string(i * 40)), first);
  }
  PassthroughDecision d = router.Route("s.example.com", "10.0.0.7");
  EXPECT_EQ(d.reason, PassthroughReason::kAffinity);
  router.Complete(&d);
  // The client's server goes down: balanced anew to the other one.
  const GroupEntry& group = table->groups()[table->FindGroup("ns/s")];
  group.servers[group.FindServer(first)].health->healthy.store(false);
  const std::string second = Server(router, "s.example.com", "10.0.0.1");
  EXPECT_NE(second, first);
  EXPECT_FALSE(second.empty());
  group.servers[group.FindServer(second)].health->healthy.store(false);
  PassthroughDecision none = router.Route("s.example.com", "10.0.0.1");
  EXPECT_EQ(none.server, nullptr);
  EXPECT_EQ(none.reason, PassthroughReason::kNoServer);
}

}  // namespace
}  // namespace kwd::routing
