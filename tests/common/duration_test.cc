#include "common/duration.h"

#include <gtest/gtest.h>

#include <string>

#include "common/build_info.h"

namespace kwd {
namespace {

TEST(DurationTest, ParsesEveryUnit) {
  std::string error;
  int64_t ms = -1;
  struct Case {
    const char* text;
    int64_t ms;
  };
  for (Case c : {Case{"0ms", 0}, Case{"500ms", 500}, Case{"10s", 10'000}, Case{"2m", 120'000},
                 Case{"1h", 3'600'000}, Case{"0s", 0}}) {
    EXPECT_TRUE(ParseDurationMs(c.text, &ms, &error)) << c.text << ": " << error;
    EXPECT_EQ(ms, c.ms) << c.text;
  }
}

TEST(DurationTest, RefusesABareNumberAndOtherUnitsSayingWhy) {
  std::string error;
  int64_t ms = 7;
  EXPECT_FALSE(ParseDurationMs("10", &ms, &error));
  EXPECT_EQ(error, "\"10\" needs a unit: ms, s, m or h (e.g. 10s)");
  for (const char* bad : {"", "s", "-1s", "1.5s", "10x", "10 s", "10S", "1d", " 1s", "1s ",
                          "99999999999999999999h", "9223372036854775807h"}) {
    error.clear();
    EXPECT_FALSE(ParseDurationMs(bad, &ms, &error)) << bad;
    EXPECT_FALSE(error.empty()) << bad;
  }
  EXPECT_EQ(ms, 7);  // untouched on failure
}

TEST(DurationTest, FormatsWithTheLargestExactUnit) {
  EXPECT_EQ(FormatDurationMs(3'600'000), "1h");
  EXPECT_EQ(FormatDurationMs(90'000), "90s");
  EXPECT_EQ(FormatDurationMs(120'000), "2m");
  EXPECT_EQ(FormatDurationMs(1500), "1500ms");
  EXPECT_EQ(FormatDurationMs(0), "0ms");
  std::string error;
  int64_t ms = 0;
  for (int64_t value : {int64_t{1}, int64_t{999}, int64_t{60'000}, int64_t{7'200'000}}) {
    ASSERT_TRUE(ParseDurationMs(FormatDurationMs(value), &ms, &error));
    EXPECT_EQ(ms, value);
  }
}

TEST(VersionTest, LineNamesProgramVersionAndRevision) {
  EXPECT_EQ(VersionLine("kwd-proxy"), "kwd-proxy " + std::string(KwdVersion()) + " (revision " +
                                          std::string(KwdRevision()) + ")");
  EXPECT_NE(KwdVersion(), "0.0.0");  // set by CMake from the project version
}

}  // namespace
}  // namespace kwd
