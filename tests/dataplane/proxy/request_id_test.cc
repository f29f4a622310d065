#include "dataplane/proxy/request_id.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace kwd::proxy {
namespace {

TEST(RequestIdTest, GeneratedIdsAre32HexDigitsAndDistinct) {
  std::set<std::string> seen;
  std::string id;
  for (int i = 0; i < 1000; ++i) {
    GenerateRequestId(&id);
    ASSERT_EQ(id.size(), 32u);
    EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
    EXPECT_TRUE(ValidRequestId(id));
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 1000u);
}

TEST(RequestIdTest, OnlySaneIdsAreKept) {
  EXPECT_TRUE(ValidRequestId("abc-123_x.y:z"));
  EXPECT_TRUE(ValidRequestId("dGVzdA=="));
  EXPECT_TRUE(ValidRequestId(std::string(128, 'a')));
  EXPECT_FALSE(ValidRequestId(std::string(129, 'a')));
  EXPECT_FALSE(ValidRequestId(""));
  EXPECT_FALSE(ValidRequestId("a b"));
  EXPECT_FALSE(ValidRequestId("a\"b"));
  EXPECT_FALSE(ValidRequestId("a\r\nSet-Cookie: x=1"));
  EXPECT_FALSE(ValidRequestId("\xc3\xa9"));
}

// W3C Trace Context, traceparent: version-traceid-parentid-flags.
TEST(RequestIdTest, TraceIdFromTraceparent) {
  EXPECT_EQ(TraceIdFromTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            "4bf92f3577b34da6a3ce929d0e0e4736");
  // A later version may add fields after a dash.
  EXPECT_EQ(TraceIdFromTraceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-x"),
            "4bf92f3577b34da6a3ce929d0e0e4736");
  for (const char* bad : {
           "",
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",  // 00 has no more fields
           "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // version ff
           "00-00000000000000000000000000000000-00f067aa0ba902b7-01",    // zero trace id
           "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",    // zero parent id
           "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",    // upper case
           "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",     // short trace id
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",     // short flags
           "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
           "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
       }) {
    EXPECT_EQ(TraceIdFromTraceparent(bad), "") << bad;
  }
}

}  // namespace
}  // namespace kwd::proxy
