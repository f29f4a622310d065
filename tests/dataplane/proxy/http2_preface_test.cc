#include "dataplane/proxy/http2_connection.h"

#include <gtest/gtest.h>

#include <string>

namespace kwd::proxy {
namespace {

TEST(Http2Preface, WholePrefaceMatches) {
  EXPECT_EQ(MatchHttp2Preface("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), PrefaceMatch::kYes);
  // Frames that follow in the same read do not matter.
  EXPECT_EQ(MatchHttp2Preface(std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\x12\x04", 28)),
            PrefaceMatch::kYes);
}

TEST(Http2Preface, EveryProperPrefixWaitsForMore) {
  std::string preface(kHttp2Preface);
  for (size_t n = 1; n < preface.size(); ++n) {
    EXPECT_EQ(MatchHttp2Preface(preface.substr(0, n)), PrefaceMatch::kPartial) << n;
  }
}

TEST(Http2Preface, HttpOneRequestsDoNotMatch) {
  EXPECT_EQ(MatchHttp2Preface("GET / HTTP/1.1\r\n"), PrefaceMatch::kNo);
  EXPECT_EQ(MatchHttp2Preface("POST / HTTP/1.1\r\n"), PrefaceMatch::kNo);
  // "PRI" as an HTTP/1.1 method, or a preface that goes wrong late.
  EXPECT_EQ(MatchHttp2Preface("PRI / HTTP/1.1\r\n"), PrefaceMatch::kNo);
  EXPECT_EQ(MatchHttp2Preface("PRI * HTTP/2.0\r\n\r\nSX\r\n\r\n"), PrefaceMatch::kNo);
  EXPECT_EQ(MatchHttp2Preface("p"), PrefaceMatch::kNo);
}

}  // namespace
}  // namespace kwd::proxy
