#include "common/snapshot_io.h"

#include <gtest/gtest.h>

namespace kwd {
namespace {

v1::Snapshot ValidSnapshot() {
  v1::Snapshot s;
  auto* g = s.add_groups();
  g->set_key("erp/public");
  g->set_kind(v1::KIND_ABAP);
  g->set_strategy(v1::STRATEGY_WEIGHTED_ROUND_ROBIN);
  for (const char* name : {"A", "B"}) {
    auto* server = g->add_servers();
    server->set_name(name);
    server->set_address("127.0.0.1");
    server->set_port(8000);
    server->set_capacity(1);
    server->set_state(v1::SERVER_STATE_READY);
  }
  auto* vh = s.add_virtual_hosts();
  vh->set_default_root_handler(v1::KIND_JAVA);
  vh->set_default_abap_group("erp/public");
  auto* rule = vh->add_rules();
  rule->set_prefix("/sap/");
  rule->set_kind(v1::KIND_ABAP);
  rule->set_group("erp/public");
  StampSnapshotVersion(&s);
  return s;
}

TEST(SnapshotIoTest, VersionIsAContentHash) {
  v1::Snapshot a = ValidSnapshot();
  v1::Snapshot b = ValidSnapshot();
  EXPECT_EQ(a.version().size(), 64u);
  EXPECT_EQ(a.version(), b.version());
  b.mutable_groups(0)->mutable_servers(0)->set_capacity(2);
  EXPECT_NE(ComputeSnapshotVersion(b), a.version());
}

TEST(SnapshotIoTest, JsonRoundTripKeepsContentAndVersion) {
  v1::Snapshot a = ValidSnapshot();
  v1::Snapshot back;
  std::string error;
  ASSERT_TRUE(SnapshotFromJson(SnapshotToJson(a), &back, &error)) << error;
  EXPECT_EQ(back.SerializeAsString(), a.SerializeAsString());
  EXPECT_TRUE(CheckSnapshot(back).empty());
}

TEST(SnapshotIoTest, RejectsJsonWithUnknownFields) {
  v1::Snapshot out;
  std::string error;
  EXPECT_FALSE(SnapshotFromJson(R"({"groupz": []})", &out, &error));
  EXPECT_NE(error.find("kwd.v1.Snapshot"), std::string::npos);
}

TEST(SnapshotIoTest, CheckFindsBrokenInvariants) {
  struct Case {
    const char* name;
    void (*mutate)(v1::Snapshot*);
    const char* expect;
  };
  const Case cases[] = {
      {"dangling rule group", [](v1::Snapshot* s) {
         s->mutable_virtual_hosts(0)->mutable_rules(0)->set_group("erp/nope");
       }, "unknown group erp/nope"},
      {"zero capacity", [](v1::Snapshot* s) {
         s->mutable_groups(0)->mutable_servers(1)->set_capacity(0);
       }, "capacity 0"},
      {"unsorted servers", [](v1::Snapshot* s) {
         s->mutable_groups(0)->mutable_servers(0)->set_name("Z");
       }, "not sorted"},
      {"bad prefix", [](v1::Snapshot* s) {
         s->mutable_virtual_hosts(0)->mutable_rules(0)->set_prefix("/sap");
       }, "must start and end with /"},
      {"star in the middle", [](v1::Snapshot* s) {
         auto* p = s->mutable_virtual_hosts(0)->add_permissions();
         p->set_action(v1::PERMISSION_ACTION_DENY);
         p->set_pattern("/sap/*/x");
       }, "only at the start or the end"},
      {"stale version", [](v1::Snapshot* s) {
         s->mutable_groups(0)->set_load_reset_interval_seconds(7);
       }, "version does not match"},
  };
  for (const auto& c : cases) {
    v1::Snapshot s = ValidSnapshot();
    c.mutate(&s);
    auto problems = CheckSnapshot(s);
    ASSERT_FALSE(problems.empty()) << c.name;
    bool found = false;
    for (const auto& p : problems) {
      found = found || p.find(c.expect) != std::string::npos;
    }
    EXPECT_TRUE(found) << c.name << ": " << problems.front();
  }
}

}  // namespace
}  // namespace kwd
