#include "common/snapshot_io.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <gtest/gtest.h>

#include <string>

#include "common/crypto.h"

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

// The version's definition, computed the plain way: copy, clear `version`,
// serialize deterministically, SHA-256, hex.
std::string ReferenceVersion(const v1::Snapshot& snapshot) {
  v1::Snapshot copy = snapshot;
  copy.clear_version();
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    copy.SerializeToCodedStream(&coded);
  }
  return HexEncode(Sha256(bytes));
}

TEST(SnapshotIoTest, VersionIgnoresTheVersionFieldWhateverItHolds) {
  v1::Snapshot s = ValidSnapshot();
  const std::string want = ReferenceVersion(s);
  // Empty, the stamped hash, and lengths that need a one- and a two-byte
  // length varint.
  for (const std::string& version :
       {std::string(), s.version(), std::string(1, 'x'), std::string(127, 'v'),
        std::string(128, 'v'), std::string(70000, 'w')}) {
    s.set_version(version);
    EXPECT_EQ(ComputeSnapshotVersion(s), want) << version.size();
  }
  v1::Snapshot empty;
  EXPECT_EQ(ComputeSnapshotVersion(empty), ReferenceVersion(empty));
  EXPECT_EQ(ComputeSnapshotVersion(empty), HexEncode(Sha256("")));
}

TEST(SnapshotIoTest, VersionOfALargeSnapshotMatchesTheDefinition) {
  // Far larger than the hashing stream's buffer.
  v1::Snapshot s = ValidSnapshot();
  for (int i = 0; i < 5000; ++i) {
    auto* server = s.mutable_groups(0)->add_servers();
    server->set_name("server-" + std::to_string(i));
    server->set_address("10.0.0." + std::to_string(i % 250));
    server->set_port(8000);
    server->set_capacity(1 + i % 3);
    server->set_state(v1::SERVER_STATE_READY);
  }
  s.set_version("stale");
  EXPECT_EQ(ComputeSnapshotVersion(s), ReferenceVersion(s));
  StampSnapshotVersion(&s);
  EXPECT_EQ(s.version(), ReferenceVersion(s));
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
      {"dangling rule group",
       [](v1::Snapshot* s) {
         s->mutable_virtual_hosts(0)->mutable_rules(0)->set_group("erp/nope");
       },
       "unknown group erp/nope"},
      {"zero capacity",
       [](v1::Snapshot* s) { s->mutable_groups(0)->mutable_servers(1)->set_capacity(0); },
       "capacity 0"},
      {"unsorted servers",
       [](v1::Snapshot* s) { s->mutable_groups(0)->mutable_servers(0)->set_name("Z"); },
       "not sorted"},
      {"bad prefix",
       [](v1::Snapshot* s) { s->mutable_virtual_hosts(0)->mutable_rules(0)->set_prefix("/sap"); },
       "must start and end with /"},
      {"star in the middle",
       [](v1::Snapshot* s) {
         auto* p = s->mutable_virtual_hosts(0)->add_permissions();
         p->set_action(v1::PERMISSION_ACTION_DENY);
         p->set_pattern("/sap/*/x");
       },
       "only at the start or the end"},
      {"stale version",
       [](v1::Snapshot* s) { s->mutable_groups(0)->set_load_reset_interval_seconds(7); },
       "version does not match"},
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
