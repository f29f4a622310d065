#include "common/snapshot_delta.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "common/snapshot_io.h"

namespace kwd {
namespace {

v1::Snapshot MakeSnapshot() {
  v1::Snapshot snapshot;
  for (int g = 0; g < 4; ++g) {
    auto* group = snapshot.add_groups();
    group->set_key("erp/group" + std::to_string(g));
    group->set_kind(v1::KIND_ABAP);
    group->set_strategy(v1::STRATEGY_WEIGHTED_ROUND_ROBIN);
    for (int s = 0; s < 3; ++s) {
      auto* server = group->add_servers();
      server->set_name("srv" + std::to_string(g) + std::to_string(s));
      server->set_address("10.0." + std::to_string(g) + "." + std::to_string(s));
      server->set_port(8000);
      server->set_capacity(3);
      server->set_state(v1::SERVER_STATE_READY);
    }
  }
  auto* host = snapshot.add_virtual_hosts();
  host->set_default_abap_group("erp/group0");
  auto* rule = host->add_rules();
  rule->set_prefix("/sap/");
  rule->set_kind(v1::KIND_ABAP);
  rule->set_group("erp/group1");
  auto* source = snapshot.add_sources();
  source->set_kind("LogonGroup");
  source->set_namespace_("erp");
  source->set_name("group0");
  source->set_generation(1);
  StampSnapshotVersion(&snapshot);
  return snapshot;
}

std::string Bytes(const google::protobuf::Message& message) {
  std::string bytes;
  message.SerializeToString(&bytes);
  return bytes;
}

struct EndpointChange {
  const char* name;
  std::function<void(v1::Snapshot*)> change;
  std::vector<std::string> changed_groups;
};

class EndpointDeltaTest : public testing::TestWithParam<EndpointChange> {};

// Applying the delta to the old snapshot gives the new one byte for byte
// (so its content hash is the new version); applying it again undoes it.
TEST_P(EndpointDeltaTest, RoundTrips) {
  const v1::Snapshot from = MakeSnapshot();
  v1::Snapshot to = from;
  GetParam().change(&to);
  StampSnapshotVersion(&to);
  ASSERT_NE(from.version(), to.version());
  ASSERT_TRUE(CheckSnapshot(from).empty());

  auto delta = ComputeEndpointDelta(from, to);
  ASSERT_TRUE(delta.has_value());
  EXPECT_EQ(delta->base_version(), from.version());
  // The digests' shortcut (what the controller uses) finds the same delta.
  SnapshotDigests from_digests = ComputeSnapshotDigests(from);
  SnapshotDigests to_digests = ComputeSnapshotDigests(to);
  auto digested = ComputeEndpointDelta(from, to, &from_digests, &to_digests);
  ASSERT_TRUE(digested.has_value());
  EXPECT_EQ(Bytes(*digested), Bytes(*delta));
  std::vector<std::string> groups;
  for (const auto& changed : delta->groups()) {
    groups.push_back(changed.group());
  }
  EXPECT_EQ(groups, GetParam().changed_groups);

  v1::Snapshot patched = from;
  SnapshotDigests digests = ComputeSnapshotDigests(from);
  std::vector<int> changed;
  std::string error;
  ASSERT_TRUE(SwapDeltaServers(&patched, &*delta, &changed, &error)) << error;
  EXPECT_EQ(changed.size(), GetParam().changed_groups.size());
  for (int index : changed) {
    UpdateGroupDigest(patched, index, &digests);
  }
  // Re-hashing only the changed groups gives the new version.
  EXPECT_EQ(digests.Version(), to.version());
  patched.set_version(to.version());
  EXPECT_EQ(Bytes(patched), Bytes(to));
  EXPECT_EQ(ComputeSnapshotVersion(patched), to.version());
  auto problems = CheckSnapshot(patched);
  EXPECT_TRUE(problems.empty()) << problems.front();

  ASSERT_TRUE(SwapDeltaServers(&patched, &*delta, nullptr, &error)) << error;
  patched.set_version(from.version());
  EXPECT_EQ(Bytes(patched), Bytes(from));
}

INSTANTIATE_TEST_SUITE_P(
    Changes, EndpointDeltaTest,
    testing::Values(EndpointChange{"capacity",
                                   [](v1::Snapshot* s) {
                                     s->mutable_groups(2)->mutable_servers(1)->set_capacity(7);
                                   },
                                   {"erp/group2"}},
                    EndpointChange{"draining",
                                   [](v1::Snapshot* s) {
                                     s->mutable_groups(0)->mutable_servers(0)->set_state(
                                         v1::SERVER_STATE_DRAINING);
                                   },
                                   {"erp/group0"}},
                    EndpointChange{"server_removed",
                                   [](v1::Snapshot* s) {
                                     s->mutable_groups(3)->mutable_servers()->RemoveLast();
                                   },
                                   {"erp/group3"}},
                    EndpointChange{"server_added",
                                   [](v1::Snapshot* s) {
                                     auto* server = s->mutable_groups(1)->add_servers();
                                     server->set_name("srv19");
                                     server->set_address("10.0.1.9");
                                     server->set_port(8000);
                                     server->set_capacity(1);
                                     server->set_state(v1::SERVER_STATE_READY);
                                   },
                                   {"erp/group1"}},
                    EndpointChange{"all_servers_gone",
                                   [](v1::Snapshot* s) { s->mutable_groups(1)->clear_servers(); },
                                   {"erp/group1"}},
                    EndpointChange{"three_groups",
                                   [](v1::Snapshot* s) {
                                     s->mutable_groups(0)->mutable_servers(2)->set_address(
                                         "10.9.9.9");
                                     s->mutable_groups(1)->mutable_servers(0)->set_port(8001);
                                     s->mutable_groups(3)->mutable_servers(1)->set_pod("erp/p");
                                   },
                                   {"erp/group0", "erp/group1", "erp/group3"}}),
    [](const testing::TestParamInfo<EndpointChange>& info) { return info.param.name; });

struct OtherChange {
  const char* name;
  std::function<void(v1::Snapshot*)> change;
};

class NotEndpointOnlyTest : public testing::TestWithParam<OtherChange> {};

TEST_P(NotEndpointOnlyTest, NeedsTheFullSnapshot) {
  const v1::Snapshot from = MakeSnapshot();
  v1::Snapshot to = from;
  GetParam().change(&to);
  StampSnapshotVersion(&to);
  ASSERT_NE(from.version(), to.version());
  EXPECT_FALSE(ComputeEndpointDelta(from, to).has_value());
  SnapshotDigests from_digests = ComputeSnapshotDigests(from);
  SnapshotDigests to_digests = ComputeSnapshotDigests(to);
  EXPECT_FALSE(ComputeEndpointDelta(from, to, &from_digests, &to_digests).has_value());
}

INSTANTIATE_TEST_SUITE_P(
    Changes, NotEndpointOnlyTest,
    testing::Values(
        OtherChange{
            "group_strategy",
            [](v1::Snapshot* s) { s->mutable_groups(1)->set_strategy(v1::STRATEGY_ADAPTIVE); }},
        OtherChange{"group_strategy_and_servers",
                    [](v1::Snapshot* s) {
                      s->mutable_groups(1)->set_strategy(v1::STRATEGY_ADAPTIVE);
                      s->mutable_groups(1)->mutable_servers(0)->set_capacity(9);
                    }},
        OtherChange{"group_added", [](v1::Snapshot* s) { s->add_groups()->set_key("erp/group9"); }},
        OtherChange{"group_removed", [](v1::Snapshot* s) { s->mutable_groups()->RemoveLast(); }},
        OtherChange{"group_renamed",
                    [](v1::Snapshot* s) { s->mutable_groups(3)->set_key("erp/group3b"); }},
        OtherChange{"rule",
                    [](v1::Snapshot* s) {
                      s->mutable_virtual_hosts(0)->mutable_rules(0)->set_group("erp/group2");
                    }},
        OtherChange{"source_generation",
                    [](v1::Snapshot* s) { s->mutable_sources(0)->set_generation(2); }}),
    [](const testing::TestParamInfo<OtherChange>& info) { return info.param.name; });

// Digests never computed (a hand-built result) must not pass for equal ones.
TEST(EndpointDelta, UnsetDigestsCompareEveryPart) {
  v1::Snapshot from;
  from.add_virtual_hosts()->set_host("a.example");
  StampSnapshotVersion(&from);
  v1::Snapshot to;
  to.add_virtual_hosts()->set_host("b.example");
  StampSnapshotVersion(&to);
  SnapshotDigests unset;
  EXPECT_FALSE(ComputeEndpointDelta(from, to, &unset, &unset).has_value());
}

TEST(EndpointDelta, SameContentGivesAnEmptyDelta) {
  const v1::Snapshot from = MakeSnapshot();
  auto delta = ComputeEndpointDelta(from, from);
  ASSERT_TRUE(delta.has_value());
  EXPECT_EQ(delta->groups_size(), 0);
}

TEST(EndpointDelta, UnknownGroupChangesNothing) {
  const v1::Snapshot from = MakeSnapshot();
  v1::Snapshot patched = from;
  v1::SnapshotDelta delta;
  auto* first = delta.add_groups();
  first->set_group("erp/group0");
  first->add_servers()->set_name("x");
  delta.add_groups()->set_group("erp/nope");
  std::string error;
  EXPECT_FALSE(SwapDeltaServers(&patched, &delta, nullptr, &error));
  EXPECT_NE(error.find("erp/nope"), std::string::npos) << error;
  EXPECT_EQ(Bytes(patched), Bytes(from));
}

TEST(EndpointDelta, GroupNamedTwiceIsRejected) {
  v1::Snapshot patched = MakeSnapshot();
  const std::string before = Bytes(patched);
  v1::SnapshotDelta delta;
  delta.add_groups()->set_group("erp/group1");
  delta.add_groups()->set_group("erp/group1");
  std::string error;
  EXPECT_FALSE(SwapDeltaServers(&patched, &delta, nullptr, &error));
  EXPECT_NE(error.find("twice"), std::string::npos) << error;
  EXPECT_EQ(Bytes(patched), before);
}

}  // namespace
}  // namespace kwd
