#include "dataplane/http/h2_stream_ids.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>

namespace kwd::http {
namespace {

TEST(H2StreamIdSetTest, IdsInOrderTakeOneRange) {
  H2StreamIdSet set;
  EXPECT_EQ(set.ranges(), 0u);
  EXPECT_FALSE(set.Contains(1));
  for (int32_t id = 1; id < 20000; id += 2) {
    set.Add(id);
  }
  EXPECT_EQ(set.ranges(), 1u);
  EXPECT_TRUE(set.Contains(1));
  EXPECT_TRUE(set.Contains(19999));
  EXPECT_FALSE(set.Contains(20001));
  EXPECT_FALSE(set.Contains(2));  // even ids are never in it
  EXPECT_FALSE(set.Contains(0));
  EXPECT_FALSE(set.Contains(-1));
}

TEST(H2StreamIdSetTest, GapsFillAndRangesJoin) {
  H2StreamIdSet set;
  set.Add(1);
  set.Add(5);
  set.Add(9, 13);
  EXPECT_EQ(set.ranges(), 3u);
  EXPECT_FALSE(set.Contains(3));
  EXPECT_FALSE(set.Contains(7));
  set.Add(3);
  EXPECT_EQ(set.ranges(), 2u);  // 1-5, 9-13
  set.Add(7);
  EXPECT_EQ(set.ranges(), 1u);
  for (int32_t id = 1; id <= 13; id += 2) {
    EXPECT_TRUE(set.Contains(id)) << id;
  }
  set.Add(3, 11);  // inside: nothing changes
  EXPECT_EQ(set.ranges(), 1u);
  EXPECT_FALSE(set.Contains(15));
}

TEST(H2StreamIdSetTest, BadArgumentsAreIgnored) {
  H2StreamIdSet set;
  set.Add(0);
  set.Add(-3);
  set.Add(4);
  set.Add(7, 3);
  set.Add(3, 6);
  EXPECT_EQ(set.ranges(), 0u);
}

TEST(H2StreamIdSetTest, TheHighestIdsDoNotOverflow) {
  H2StreamIdSet set;
  set.Add(INT32_MAX);
  set.Add(INT32_MAX - 4);
  EXPECT_EQ(set.ranges(), 2u);
  set.Add(INT32_MAX - 2);
  EXPECT_EQ(set.ranges(), 1u);
  EXPECT_TRUE(set.Contains(INT32_MAX));
  EXPECT_TRUE(set.Contains(INT32_MAX - 4));
  EXPECT_FALSE(set.Contains(INT32_MAX - 6));
}

// Beyond kMaxRanges the lowest range goes: only forgetting, never an id
// that was not added.
TEST(H2StreamIdSetTest, TooManyRangesForgetTheLowest) {
  H2StreamIdSet set;
  const int32_t n = static_cast<int32_t>(H2StreamIdSet::kMaxRanges) + 3;
  for (int32_t i = 0; i < n; ++i) {
    set.Add(1 + 4 * i);  // 1, 5, 9, ...: never adjacent
  }
  EXPECT_EQ(set.ranges(), H2StreamIdSet::kMaxRanges);
  EXPECT_FALSE(set.Contains(1));
  EXPECT_FALSE(set.Contains(9));
  EXPECT_TRUE(set.Contains(1 + 4 * 3));
  EXPECT_TRUE(set.Contains(1 + 4 * (n - 1)));
  for (int32_t id = 3; id < 4 * n; id += 4) {
    EXPECT_FALSE(set.Contains(id)) << id;
  }
}

// Against std::set over ids added in a scrambled order: the same answers
// while it fits, and never an id that was not added once it overflows.
TEST(H2StreamIdSetTest, AgreesWithAPlainSet) {
  uint32_t state = 12345;
  for (int round = 0; round < 200; ++round) {
    H2StreamIdSet set;
    std::set<int32_t> added;
    bool overflowed = false;
    for (int i = 0; i < 60; ++i) {
      state = state * 1103515245u + 12345u;
      int32_t low = 1 + 2 * static_cast<int32_t>((state >> 16) % 64);
      int32_t high = low + 2 * static_cast<int32_t>((state >> 8) % 3);
      set.Add(low, high);
      for (int32_t id = low; id <= high; id += 2) {
        added.insert(id);
      }
      overflowed = overflowed || set.ranges() == H2StreamIdSet::kMaxRanges;
      for (int32_t id = -1; id < 140; ++id) {
        if (overflowed) {
          ASSERT_TRUE(!set.Contains(id) || added.count(id) == 1) << round << " " << id;
        } else {
          ASSERT_EQ(set.Contains(id), added.count(id) == 1) << round << " " << id;
        }
      }
    }
  }
}

}  // namespace
}  // namespace kwd::http
