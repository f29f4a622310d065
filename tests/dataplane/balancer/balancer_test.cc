#include "dataplane/balancer/balancer.h"

#include <gtest/gtest.h>

#include <deque>
#include <random>
#include <string>
#include <vector>

namespace kwd::balancer {
namespace {

// A group's servers as the routing table would hand them to a balancer.
struct Group {
  std::deque<ServerHealth> health;  // stable addresses
  std::vector<ServerInput> inputs;

  void Add(uint32_t capacity, bool ready = true) {
    health.emplace_back();
    inputs.push_back(ServerInput{capacity, ready, &health.back()});
  }
};

// weighted_round_robin's rule by a plain scan over the balancer's own
// counters: the usable server with the lowest (load + 1) / capacity, the
// first of equals; -1 when none is usable.
int RuleChoice(const Balancer& balancer, const Group& group) {
  int want = -1;
  for (size_t i = 0; i < group.inputs.size(); ++i) {
    if (!group.inputs[i].Usable()) {
      continue;
    }
    const uint64_t load = balancer.assigned(i) + balancer.outstanding(i) + 1;
    if (want < 0 || LoadPerCapacityLess(load, group.inputs[i].capacity,
                                        balancer.assigned(want) + balancer.outstanding(want) + 1,
                                        group.inputs[want].capacity)) {
      want = static_cast<int>(i);
    }
  }
  return want;
}

// Runs `count` sequential requests (each completed before the next) and
// returns the chosen servers as letters A, B, C... ('-' for none).
std::string Sequence(Balancer& balancer, const Group& group, int count, int64_t now_ms = 0) {
  std::string out;
  for (int i = 0; i < count; ++i) {
    int chosen = balancer.Pick(group.inputs, now_ms);
    out += chosen < 0 ? '-' : static_cast<char>('A' + chosen);
    if (chosen >= 0) {
      balancer.Complete(chosen);
    }
  }
  return out;
}

TEST(BalancerTest, SeedSequences) {
  struct Case {
    const char* name;
    v1::Strategy strategy;
    std::vector<uint32_t> capacities;
    int requests;
    std::string want;
  };
  const Case cases[] = {
      {"wrr seed A6 B3", v1::STRATEGY_WEIGHTED_ROUND_ROBIN, {6, 3}, 12, "AABAABAABAAB"},
      {"swrr seed A6 B3", v1::STRATEGY_SIMPLE_WEIGHTED_ROUND_ROBIN, {6, 3}, 15, "AAAAAABBBAAAAAA"},
      {"wrr equal capacities alternate", v1::STRATEGY_WEIGHTED_ROUND_ROBIN, {1, 1, 1}, 6, "ABCABC"},
      {"wrr ties go to the earlier server", v1::STRATEGY_WEIGHTED_ROUND_ROBIN, {2, 2}, 4, "ABAB"},
      {"swrr capacity one each",
       v1::STRATEGY_SIMPLE_WEIGHTED_ROUND_ROBIN,
       {1, 2, 1},
       8,
       "ABBCABBC"},
      {"adaptive without RTT is wrr", v1::STRATEGY_ADAPTIVE, {6, 3}, 6, "AABAAB"},
      {"unspecified is wrr", v1::STRATEGY_UNSPECIFIED, {6, 3}, 6, "AABAAB"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Group group;
    for (uint32_t capacity : c.capacities) {
      group.Add(capacity);
    }
    auto balancer = MakeBalancer(c.strategy, group.inputs.size(), 25000);
    EXPECT_EQ(Sequence(*balancer, group, c.requests), c.want);
  }
}

TEST(BalancerTest, LoadPerCapacityComparisonIsExactAtAnySize) {
  constexpr uint64_t kMax = ~uint64_t{0};
  constexpr uint32_t kMaxCapacity = ~uint32_t{0};
  struct Case {
    uint64_t load_a;
    uint32_t capacity_a;
    uint64_t load_b;
    uint32_t capacity_b;
    bool less;
  };
  const Case cases[] = {
      {1, 1, 2, 1, true},
      {2, 1, 2, 1, false},  // equal is not less
      {2, 2, 1, 1, false},  // 1/1 == 2/2
      {3, 6, 1, 1, true},
      {(uint64_t{1} << 32) - 1, kMaxCapacity, (uint64_t{1} << 32) - 1, kMaxCapacity - 1, true},
      // Products beyond 64 bits: the 128-bit path.
      {uint64_t{1} << 32, kMaxCapacity, (uint64_t{1} << 32) + 1, kMaxCapacity, true},
      {kMax, kMaxCapacity, kMax, kMaxCapacity - 1, true},
      {kMax, kMaxCapacity - 1, kMax, kMaxCapacity, false},
      {kMax - 1, 1, kMax, 1, true},
      {kMax, 2, kMax - 1, 1, true},  // ~2^63 < ~2^64
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.load_a) + "/" + std::to_string(c.capacity_a) + " < " +
                 std::to_string(c.load_b) + "/" + std::to_string(c.capacity_b));
    EXPECT_EQ(LoadPerCapacityLess(c.load_a, c.capacity_a, c.load_b, c.capacity_b), c.less);
  }
}

// weighted_round_robin keeps its best server in a tree updated as counters
// change; every pick must still be the plain rule over the current counters
// and health, through sticky counts, completions, health flips, load resets
// and rebinds.
TEST(BalancerTest, WeightedRoundRobinMatchesAScanOfTheRuleUnderRandomTraffic) {
  std::mt19937 random(12345);
  for (int round = 0; round < 20; ++round) {
    Group group;
    const int servers = 1 + static_cast<int>(random() % 40);
    for (int i = 0; i < servers; ++i) {
      group.Add(1 + random() % 7, random() % 8 != 0);
    }
    auto balancer = MakeBalancer(v1::STRATEGY_WEIGHTED_ROUND_ROBIN, group.inputs.size(), 1000);
    int64_t now_ms = 0;
    for (int step = 0; step < 3000; ++step) {
      const uint32_t op = random() % 100;
      const size_t target = random() % group.inputs.size();
      if (op < 45) {
        // The rule, from the balancer's own counters before the pick.
        const int want = RuleChoice(*balancer, group);
        ASSERT_EQ(balancer->Pick(group.inputs, now_ms), want)
            << "round " << round << " step " << step;
      } else if (op < 80) {
        balancer->Complete(target);
      } else if (op < 90) {
        balancer->CountSticky(target, now_ms);
      } else if (op < 96) {
        group.health[target].healthy = !group.health[target].healthy;
      } else if (op < 98) {
        // Every other step of this kind resets `assigned`; the sticky count
        // makes the reset happen here rather than inside the next Pick,
        // where the expectation above could not see it.
        now_ms += 600;
        balancer->CountSticky(target, now_ms);
      } else {
        std::vector<int> same(group.inputs.size());
        for (size_t i = 0; i < same.size(); ++i) {
          same[i] = static_cast<int>(i);
        }
        balancer->Rebind(same);
      }
    }
  }
}

// The tree's layout does not show in its choices: every group size (the
// leaves past the last server padded up to a power of two), capacities up
// to 2^32 - 1 (products near 2^64), servers that are not ready at any
// place (all of them too) and several counters changed between two choices
// (one replay per server, or a rebuild) give the rule's server.
TEST(BalancerTest, WeightedRoundRobinMatchesAScanAtEveryGroupSize) {
  std::mt19937 random(2525);
  for (int servers = 1; servers <= 70; ++servers) {
    for (int shape = 0; shape < 4; ++shape) {
      Group group;
      for (int i = 0; i < servers; ++i) {
        uint32_t capacity = 1 + random() % 5;
        if (shape == 1) {
          capacity = random() % 2 == 0 ? ~uint32_t{0} - random() % 3 : 1 + random() % 3;
        }
        // shape 2: every server draining; shape 3: every other one.
        const bool ready = shape == 2 ? false : shape == 3 ? i % 2 == 1 : random() % 6 != 0;
        group.Add(capacity, ready);
      }
      auto balancer = MakeBalancer(v1::STRATEGY_WEIGHTED_ROUND_ROBIN, group.inputs.size(), 0);
      std::vector<int> open;  // picked, not completed
      for (int step = 0; step < 400; ++step) {
        const int want = RuleChoice(*balancer, group);
        const int got = balancer->Pick(group.inputs, 0);
        ASSERT_EQ(got, want) << servers << " servers, shape " << shape << ", step " << step;
        if (got >= 0) {
          open.push_back(got);
        }
        // Zero to three completions and sticky counts before the next choice.
        for (uint32_t n = random() % 4; n > 0; --n) {
          if (random() % 2 == 0 && !open.empty()) {
            const size_t k = random() % open.size();
            balancer->Complete(static_cast<size_t>(open[k]));
            open.erase(open.begin() + static_cast<std::ptrdiff_t>(k));
          } else {
            balancer->CountSticky(random() % group.inputs.size(), 0);
          }
        }
      }
    }
  }
}

// The tree compares one-word keys while the capacities' lcm and the loads
// keep them exact: capacities 2^26 and 2^26 + 1 beside 1 (32 leaves) leave
// room for a load of 31 on a capacity-1 server. Sticky requests push it
// past that one at a time (the tree turns wide: the key would wrap around
// 2^64 to a winning value at a load of 64), a load reset brings it back
// (narrow again); every pick on the way is the rule's. Two counters change
// between two picks, so that the choices replay leaves.
TEST(BalancerTest, WeightedRoundRobinStaysExactWhenLoadsOutgrowTheOneWordKeys) {
  Group group;
  for (uint32_t capacity : {1u, 1u << 26, (1u << 26) + 1, 1u}) {
    group.Add(capacity);
  }
  while (group.inputs.size() < 20) {
    group.Add(1u << 26);
  }
  auto balancer = MakeBalancer(v1::STRATEGY_WEIGHTED_ROUND_ROBIN, group.inputs.size(), 1000);
  int narrow_picks = 0;
  int wide_picks = 0;
  const auto pick = [&](int64_t now_ms) {
    const int want = RuleChoice(*balancer, group);
    const int got = balancer->Pick(group.inputs, now_ms);
    EXPECT_EQ(got, want) << "load of server 0: " << balancer->assigned(0) + 1;
    (balancer->narrow_tree() ? narrow_picks : wide_picks) += 1;
    if (got >= 0) {
      balancer->Complete(static_cast<size_t>(got));
    }
  };
  // The large servers' loads grow past 64 (server 0 is never picked).
  for (int i = 0; i < 1500; ++i) {
    pick(0);
  }
  EXPECT_TRUE(balancer->narrow_tree());
  // Server 0's load grows by one between two picks.
  for (int i = 0; i < 100; ++i) {
    balancer->CountSticky(0, 0);
    balancer->Complete(0);
    pick(0);
  }
  EXPECT_FALSE(balancer->narrow_tree());
  // The next interval starts over: assigned is reset (by the sticky count,
  // not inside a pick, where the expectation could not see it).
  balancer->CountSticky(1, 1000);
  for (int i = 0; i < 100; ++i) {
    pick(1000);
  }
  EXPECT_TRUE(balancer->narrow_tree());
  EXPECT_GT(narrow_picks, 1500);
  EXPECT_GT(wide_picks, 50);
}

TEST(BalancerTest, FactoryPicksTheStrategy) {
  for (v1::Strategy strategy : {v1::STRATEGY_WEIGHTED_ROUND_ROBIN,
                                v1::STRATEGY_SIMPLE_WEIGHTED_ROUND_ROBIN, v1::STRATEGY_ADAPTIVE}) {
    EXPECT_EQ(MakeBalancer(strategy, 1, 0)->strategy(), strategy);
  }
  EXPECT_EQ(StrategyName(v1::STRATEGY_ADAPTIVE), "adaptive");
}

TEST(BalancerTest, WeightedRoundRobinCountsOutstanding) {
  Group group;
  group.Add(1);
  group.Add(1);
  auto balancer = MakeBalancer(v1::STRATEGY_WEIGHTED_ROUND_ROBIN, 2, 0);
  // A is busy with two unanswered requests; B answers every time.
  EXPECT_EQ(balancer->Pick(group.inputs, 0), 0);
  EXPECT_EQ(balancer->Pick(group.inputs, 0), 1);
  balancer->Complete(1);
  // A: assigned 1 + outstanding 1 + 1 = 3; B: 1 + 0 + 1 = 2.
  EXPECT_EQ(balancer->Pick(group.inputs, 0), 1);
  EXPECT_EQ(balancer->outstanding(0), 1u);
  EXPECT_EQ(balancer->outstanding(1), 1u);
  EXPECT_EQ(balancer->assigned(1), 2u);
  balancer->Complete(0);
  balancer->Complete(0);  // an extra completion never underflows
  EXPECT_EQ(balancer->outstanding(0), 0u);
}

TEST(BalancerTest, StickyRequestsCountAsLoad) {
  Group group;
  group.Add(1);
  group.Add(1);
  auto balancer = MakeBalancer(v1::STRATEGY_WEIGHTED_ROUND_ROBIN, 2, 0);
  balancer->CountSticky(0, 0);
  balancer->CountSticky(0, 0);
  EXPECT_EQ(balancer->Pick(group.inputs, 0), 1);
  EXPECT_EQ(balancer->outstanding(0), 2u);
}

TEST(BalancerTest, AssignedResetsEveryInterval) {
  Group group;
  group.Add(6);
  group.Add(3);
  auto balancer = MakeBalancer(v1::STRATEGY_WEIGHTED_ROUND_ROBIN, 2, 25000);
  EXPECT_EQ(Sequence(*balancer, group, 3, 0), "AAB");
  EXPECT_EQ(Sequence(*balancer, group, 1, 24999), "A");  // not yet reset: A=3,B=1
  EXPECT_EQ(balancer->assigned(0), 3u);
  EXPECT_EQ(Sequence(*balancer, group, 1, 25000), "A");  // reset: starts over
  EXPECT_EQ(balancer->assigned(0), 1u);
  EXPECT_EQ(balancer->assigned(1), 0u);
  EXPECT_EQ(Sequence(*balancer, group, 5, 25001), "ABAAB");
}

TEST(BalancerTest, ZeroIntervalNeverResets) {
  Group group;
  group.Add(1);
  auto balancer = MakeBalancer(v1::STRATEGY_WEIGHTED_ROUND_ROBIN, 1, 0);
  Sequence(*balancer, group, 3, 0);
  Sequence(*balancer, group, 1, int64_t{1} << 40);
  EXPECT_EQ(balancer->assigned(0), 4u);
}

TEST(BalancerTest, UnusableServersAreSkipped) {
  for (v1::Strategy strategy : {v1::STRATEGY_WEIGHTED_ROUND_ROBIN,
                                v1::STRATEGY_SIMPLE_WEIGHTED_ROUND_ROBIN, v1::STRATEGY_ADAPTIVE}) {
    SCOPED_TRACE(StrategyName(strategy));
    Group group;
    group.Add(2);
    group.Add(1, /*ready=*/false);  // draining: no new traffic
    group.Add(2);
    auto balancer = MakeBalancer(strategy, 3, 0);
    group.health[0].healthy = false;
    EXPECT_EQ(Sequence(*balancer, group, 4), "CCCC");
    group.health[2].healthy = false;
    EXPECT_EQ(Sequence(*balancer, group, 2), "--");
    group.health[0].healthy = true;
    EXPECT_EQ(Sequence(*balancer, group, 1), "A");
  }
}

TEST(BalancerTest, SimpleWeightedRoundRobinMovesOnWhenTheCurrentServerFails) {
  Group group;
  group.Add(3);
  group.Add(2);
  auto balancer = MakeBalancer(v1::STRATEGY_SIMPLE_WEIGHTED_ROUND_ROBIN, 2, 0);
  EXPECT_EQ(Sequence(*balancer, group, 2), "AA");
  group.health[0].healthy = false;
  EXPECT_EQ(Sequence(*balancer, group, 3), "BBB");  // B repeats: it is the only one
  group.health[0].healthy = true;
  EXPECT_EQ(Sequence(*balancer, group, 4), "BAAA");
}

TEST(BalancerTest, AdaptivePrefersTheFasterServer) {
  Group group;
  group.Add(1);
  group.Add(1);
  group.health[0].smoothed_rtt_us = 2000;  // A is twice as slow
  group.health[1].smoothed_rtt_us = 1000;
  auto balancer = MakeBalancer(v1::STRATEGY_ADAPTIVE, 2, 0);
  // Costs (n+1)*rtt: A 2000,4000,.. B 1000,2000,3000,..; ties to A.
  EXPECT_EQ(Sequence(*balancer, group, 6), "BABBAB");
}

TEST(BalancerTest, AdaptiveUsesTheMeanForUnmeasuredServers) {
  Group group;
  group.Add(1);
  group.Add(1);
  group.Add(1);
  group.health[0].smoothed_rtt_us = 1000;
  group.health[1].smoothed_rtt_us = 3000;
  // C is unmeasured: weighs the mean, 2000.
  auto balancer = MakeBalancer(v1::STRATEGY_ADAPTIVE, 3, 0);
  // A:1000,2000,3000,4000 B:3000,6000 C:2000,4000 -> A A? first A(1000), then
  // A(2000) ties C(2000) -> A, then B(3000) A(3000) C(2000) -> C, then A(3000).
  EXPECT_EQ(Sequence(*balancer, group, 4), "AACA");
}

TEST(BalancerTest, RebindCarriesCountersByServer) {
  Group group;
  group.Add(1);
  group.Add(1);
  auto balancer = MakeBalancer(v1::STRATEGY_WEIGHTED_ROUND_ROBIN, 2, 0);
  balancer->Pick(group.inputs, 0);  // A, still outstanding
  // New list: a new server first, then old B, then old A.
  const int new_to_old[] = {-1, 1, 0};
  balancer->Rebind(new_to_old);
  ASSERT_EQ(balancer->size(), 3u);
  EXPECT_EQ(balancer->outstanding(2), 1u);
  EXPECT_EQ(balancer->assigned(2), 1u);
  EXPECT_EQ(balancer->outstanding(0), 0u);
  balancer->Complete(2);
  EXPECT_EQ(balancer->outstanding(2), 0u);
}

}  // namespace
}  // namespace kwd::balancer
