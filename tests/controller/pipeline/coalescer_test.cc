#include "controller/pipeline/coalescer.h"

#include <gtest/gtest.h>

namespace kwd::pipeline {
namespace {

using std::chrono::milliseconds;
using TimePoint = Coalescer::TimePoint;

TEST(CoalescerTest, NothingPendingHasNoDeadline) {
  Coalescer coalescer(milliseconds(10), milliseconds(100));
  EXPECT_FALSE(coalescer.Deadline().has_value());
  EXPECT_FALSE(coalescer.Due(TimePoint{} + milliseconds(1000)));
}

TEST(CoalescerTest, FiresHoldOffAfterTheLastChange) {
  Coalescer coalescer(milliseconds(10), milliseconds(100));
  TimePoint t0 = TimePoint{} + milliseconds(1000);
  coalescer.Note(t0);
  EXPECT_EQ(*coalescer.Deadline(), t0 + milliseconds(10));
  coalescer.Note(t0 + milliseconds(5));
  EXPECT_EQ(*coalescer.Deadline(), t0 + milliseconds(15));
  EXPECT_FALSE(coalescer.Due(t0 + milliseconds(14)));
  EXPECT_TRUE(coalescer.Due(t0 + milliseconds(15)));
  coalescer.Reset();
  EXPECT_FALSE(coalescer.pending());
}

TEST(CoalescerTest, ASteadyTrickleIsCappedByMaxDelay) {
  Coalescer coalescer(milliseconds(10), milliseconds(100));
  TimePoint t0 = TimePoint{} + milliseconds(1000);
  for (int i = 0; i <= 95; i += 5) {
    coalescer.Note(t0 + milliseconds(i));
    EXPECT_FALSE(coalescer.Due(t0 + milliseconds(i))) << i;
  }
  EXPECT_EQ(*coalescer.Deadline(), t0 + milliseconds(100));
  EXPECT_TRUE(coalescer.Due(t0 + milliseconds(100)));
}

TEST(CoalescerTest, ZeroHoldOffIsDueAtOnce) {
  Coalescer coalescer(milliseconds(0), milliseconds(0));
  TimePoint t0 = TimePoint{} + milliseconds(1);
  coalescer.Note(t0);
  EXPECT_TRUE(coalescer.Due(t0));
}

}  // namespace
}  // namespace kwd::pipeline
