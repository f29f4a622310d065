#include "controller/grpc/programmed.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>

namespace kwd::snapshot_server {
namespace {

v1::Snapshot SnapshotWith(int64_t lg_generation, int64_t um_generation) {
  v1::Snapshot snapshot;
  auto* lg = snapshot.add_sources();
  lg->set_kind("LogonGroup");
  lg->set_namespace_("erp");
  lg->set_name("public");
  lg->set_generation(lg_generation);
  auto* um = snapshot.add_sources();
  um->set_kind("UrlMapping");
  um->set_namespace_("erp");
  um->set_name("erp");
  um->set_generation(um_generation);
  return snapshot;
}

TEST(SnapshotIncludesTest, MatchesKindNamespaceNameAndNewerGenerations) {
  v1::Snapshot snapshot = SnapshotWith(3, 1);
  EXPECT_TRUE(SnapshotIncludes(snapshot, "LogonGroup", "erp", "public", 3));
  EXPECT_TRUE(SnapshotIncludes(snapshot, "LogonGroup", "erp", "public", 2));
  EXPECT_FALSE(SnapshotIncludes(snapshot, "LogonGroup", "erp", "public", 4));
  EXPECT_FALSE(SnapshotIncludes(snapshot, "UrlMapping", "erp", "public", 1));
  EXPECT_FALSE(SnapshotIncludes(snapshot, "LogonGroup", "other", "public", 1));
  EXPECT_TRUE(SnapshotIncludes(snapshot, "UrlMapping", "erp", "erp", 1));
}

TEST(ProgrammedConditionTest, Table) {
  // v1: generation 1 of the LogonGroup, v2: generation 2.
  std::map<std::string, v1::Snapshot, std::less<>> snapshots = {{"v1", SnapshotWith(1, 1)},
                                                                {"v2", SnapshotWith(2, 1)}};
  SnapshotLookup lookup = [&](std::string_view version) -> const v1::Snapshot* {
    auto it = snapshots.find(version);
    return it == snapshots.end() ? nullptr : &it->second;
  };
  struct Case {
    std::string name;
    int64_t generation;
    std::vector<ProxyVersions> proxies;
    std::string status;
    std::string reason;
    std::string message_part;
  };
  std::vector<Case> cases = {
      {"no proxies", 2, {}, "False", "NoProxies", "no proxy"},
      {"all run the generation",
       2,
       {{"a", "v2", "", ""}, {"b", "v2", "", ""}},
       "True",
       "Programmed",
       "2 of 2"},
      {"a newer snapshot counts", 1, {{"a", "v2", "", ""}}, "True", "Programmed", "1 of 1"},
      {"one still on the old one",
       2,
       {{"a", "v2", "", ""}, {"b", "v1", "", ""}},
       "False",
       "Pending",
       "1 of 2"},
      {"one has nothing yet", 2, {{"a", "", "", ""}}, "False", "Pending", "0 of 1"},
      {"unknown version is not programmed",
       2,
       {{"a", "gone", "", ""}},
       "False",
       "Pending",
       "0 of 1"},
      {"a NACK of the generation",
       2,
       {{"a", "v2", "", ""}, {"b", "v1", "v2", "group erp/public is broken"}},
       "False",
       "Rejected",
       "proxy b rejected the snapshot: group erp/public is broken"},
      {"a NACK of an older snapshot does not matter",
       2,
       {{"a", "v2", "v1", "old problem"}},
       "True",
       "Programmed",
       "1 of 1"},
      {"first rejecting node by name",
       2,
       {{"z", "v1", "v2", "from z"}, {"m", "v1", "v2", "from m"}},
       "False",
       "Rejected",
       "proxy m rejected"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    compile::Condition condition =
        ProgrammedCondition("LogonGroup", "erp", "public", c.generation, c.proxies, lookup);
    EXPECT_EQ(condition.type, "Programmed");
    EXPECT_EQ(condition.status, c.status);
    EXPECT_EQ(condition.reason, c.reason);
    EXPECT_NE(condition.message.find(c.message_part), std::string::npos) << condition.message;
  }
}

// 1,000 proxies on three versions fold into three entries, and the
// condition from them is the one from every proxy: counts summed, the
// Rejected message naming the lowest node id of every rejecting group.
TEST(ProgrammedConditionTest, FoldedProxiesGiveTheSameCondition) {
  std::map<std::string, v1::Snapshot, std::less<>> snapshots = {{"v1", SnapshotWith(1, 1)},
                                                                {"v2", SnapshotWith(2, 1)}};
  SnapshotLookup lookup = [&](std::string_view version) -> const v1::Snapshot* {
    auto it = snapshots.find(version);
    return it == snapshots.end() ? nullptr : &it->second;
  };
  std::vector<ProxyVersions> proxies;
  for (int i = 0; i < 1000; ++i) {
    char node[16];
    std::snprintf(node, sizeof node, "p%04d", 999 - i);  // the lowest names come last
    if (i % 10 == 0) {
      proxies.push_back({node, "v1", "v2", std::string("from ") + node});
    } else if (i % 10 == 1) {
      proxies.push_back({node, "v2", "", "", /*unresponsive=*/true});
    } else {
      proxies.push_back({node, "v2", "", ""});
    }
  }
  std::vector<ProxyFold> folds = FoldProxies(proxies);
  ASSERT_EQ(folds.size(), 3u);
  std::size_t total = 0;
  for (const ProxyFold& fold : folds) {
    total += fold.count;
  }
  EXPECT_EQ(total, 1000u);
  compile::Condition condition =
      ProgrammedCondition("LogonGroup", "erp", "public", 2, folds, lookup);
  EXPECT_EQ(condition.status, "False");
  EXPECT_EQ(condition.reason, "Rejected");
  // p0009 (i = 990) is the lowest name of the rejecting proxies.
  EXPECT_NE(condition.message.find("proxy p0009 rejected the snapshot: from p0009 (800 of 900 "
                                   "connected proxies run generation 2; 100 more proxies do not "
                                   "answer snapshots (not counted))"),
            std::string::npos)
      << condition.message;
  compile::Condition unfolded =
      ProgrammedCondition("LogonGroup", "erp", "public", 2, proxies, lookup);
  EXPECT_EQ(unfolded.message, condition.message);
  // Generation 1: every answering proxy runs it.
  condition = ProgrammedCondition("LogonGroup", "erp", "public", 1, folds, lookup);
  EXPECT_EQ(condition.status, "True");
  EXPECT_NE(condition.message.find("900 of 900"), std::string::npos) << condition.message;
}

}  // namespace
}  // namespace kwd::snapshot_server
