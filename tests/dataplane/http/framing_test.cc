#include "dataplane/http/framing.h"

#include <gtest/gtest.h>

#include <string>

namespace kwd::http {
namespace {

struct Analyzed {
  ParseResult parse;
  FramingResult framing;
  RequestInfo info;
};

Analyzed AnalyzeText(std::string_view text, FramingLimits limits = {}) {
  static RequestHead head;  // large; keep it off the stack of every call
  Analyzed a;
  RequestParser parser;
  a.parse = parser.Parse(text, &head);
  if (a.parse.complete()) {
    a.framing = AnalyzeRequest(head, limits, &a.info);
  }
  return a;
}

TEST(AnalyzeRequest, BodyKinds) {
  struct Case {
    std::string_view request;
    BodyKind body;
    uint64_t length;
  };
  const Case cases[] = {
      {"GET / HTTP/1.1\r\nHost: h\r\n\r\n", BodyKind::kNone, 0},
      {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n", BodyKind::kNone, 0},
      {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 42\r\n\r\n", BodyKind::kContentLength, 42},
      {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 007\r\n\r\n", BodyKind::kContentLength, 7},
      {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
       BodyKind::kContentLength, 5},
      {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5, 5\r\n\r\n", BodyKind::kContentLength, 5},
      {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n", BodyKind::kChunked, 0},
      {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: CHUNKED\r\n\r\n", BodyKind::kChunked, 0},
      {"POST / HTTP/1.0\r\nContent-Length: 1\r\n\r\n", BodyKind::kContentLength, 1},
  };
  for (const Case& c : cases) {
    Analyzed a = AnalyzeText(c.request);
    ASSERT_TRUE(a.parse.complete()) << c.request;
    ASSERT_TRUE(a.framing.ok()) << c.request << ParseErrorName(a.framing.error);
    EXPECT_EQ(a.info.body, c.body) << c.request;
    EXPECT_EQ(a.info.content_length, c.length) << c.request;
  }
}

TEST(AnalyzeRequest, BodyLimitIs413) {
  FramingLimits limits;
  limits.max_body_bytes = 10;
  EXPECT_TRUE(
      AnalyzeText("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\n", limits).framing.ok());
  Analyzed a = AnalyzeText("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\n", limits);
  EXPECT_EQ(a.framing.http_status, 413);
  EXPECT_EQ(a.framing.error, ParseError::kBodyTooLarge);
  // Default: SAP's 100 MB.
  EXPECT_EQ(AnalyzeText("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 104857601\r\n\r\n")
                .framing.http_status,
            413);
  EXPECT_TRUE(
      AnalyzeText("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 104857600\r\n\r\n").framing.ok());
}

TEST(AnalyzeRequest, KeepAliveByVersionAndConnection) {
  struct Case {
    std::string_view request;
    bool keep_alive;
  };
  const Case cases[] = {
      {"GET / HTTP/1.1\r\nHost: h\r\n\r\n", true},
      {"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", false},
      {"GET / HTTP/1.1\r\nHost: h\r\nConnection: foo, Close\r\n\r\n", false},
      {"GET / HTTP/1.0\r\n\r\n", false},
      {"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", true},
      {"GET / HTTP/1.0\r\nConnection: Keep-Alive, close\r\n\r\n", false},
  };
  for (const Case& c : cases) {
    Analyzed a = AnalyzeText(c.request);
    ASSERT_TRUE(a.framing.ok()) << c.request;
    EXPECT_EQ(a.info.keep_alive, c.keep_alive) << c.request;
  }
}

TEST(AnalyzeRequest, ExpectAndUpgrade) {
  Analyzed expect =
      AnalyzeText("PUT / HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\nContent-Length: 3\r\n\r\n");
  EXPECT_TRUE(expect.info.expect_continue);
  EXPECT_FALSE(AnalyzeText("PUT / HTTP/1.0\r\nExpect: 100-continue\r\n\r\n").info.expect_continue);

  Analyzed ws = AnalyzeText(
      "GET /ws HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n"
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n");
  EXPECT_TRUE(ws.info.upgrade_websocket);
  EXPECT_EQ(ws.info.upgrade, "websocket");
  Analyzed no_connection = AnalyzeText("GET /ws HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n\r\n");
  EXPECT_FALSE(no_connection.info.upgrade_websocket);
  Analyzed post = AnalyzeText(
      "POST /ws HTTP/1.1\r\nHost: h\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n");
  EXPECT_FALSE(post.info.upgrade_websocket);
}

TEST(AnalyzeRequest, HostRules) {
  struct Case {
    std::string_view request;
    int status;  // 0: accepted
    std::string_view host;
  };
  const Case cases[] = {
      {"GET / HTTP/1.1\r\nHost: erp.example:8000\r\n\r\n", 0, "erp.example:8000"},
      {"GET / HTTP/1.1\r\nHost: [::1]:8000\r\n\r\n", 0, "[::1]:8000"},
      {"GET / HTTP/1.1\r\nHost:\r\n\r\n", 0, ""},
      {"GET / HTTP/1.0\r\n\r\n", 0, ""},
      {"GET http://abs.example/x HTTP/1.1\r\nHost: other\r\n\r\n", 0, "abs.example"},
      {"GET / HTTP/1.1\r\n\r\n", 400, ""},
      {"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", 400, ""},
      {"GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n", 400, ""},
      {"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400, ""},
      {"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", 400, ""},
      {"GET / HTTP/1.1\r\nHost: user@a\r\n\r\n", 400, ""},
      {"GET / HTTP/1.1\r\nHost: a:99999\r\n\r\n", 400, ""},
  };
  for (const Case& c : cases) {
    Analyzed a = AnalyzeText(c.request);
    ASSERT_TRUE(a.parse.complete()) << c.request;
    EXPECT_EQ(a.framing.http_status, c.status) << c.request;
    if (c.status == 0) {
      EXPECT_EQ(a.info.host, c.host) << c.request;
    }
  }
}

ResponseInfo AnalyzeResponseText(std::string_view text, std::string_view method,
                                 FramingResult* result) {
  ResponseParser parser;
  static ResponseHead head;
  EXPECT_TRUE(parser.Parse(text, &head).complete()) << text;
  ResponseInfo info;
  *result = AnalyzeResponse(head, method, &info);
  return info;
}

TEST(AnalyzeResponse, BodyKinds) {
  struct Case {
    std::string_view response;
    std::string_view method;
    BodyKind body;
    bool keep_alive;
    bool interim;
  };
  const Case cases[] = {
      {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", "GET", BodyKind::kContentLength, true,
       false},
      {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", "HEAD", BodyKind::kNone, true, false},
      {"HTTP/1.1 204 No Content\r\n\r\n", "GET", BodyKind::kNone, true, false},
      {"HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n", "GET", BodyKind::kNone,
       true, false},
      {"HTTP/1.1 100 Continue\r\n\r\n", "POST", BodyKind::kNone, true, true},
      {"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n", "GET", BodyKind::kTunnel,
       false, false},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", "GET", BodyKind::kChunked, true,
       false},
      {"HTTP/1.1 200 OK\r\n\r\n", "GET", BodyKind::kUntilClose, false, false},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", "GET", BodyKind::kUntilClose, false,
       false},
      {"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", "GET", BodyKind::kContentLength, false,
       false},
      {"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\n", "GET",
       BodyKind::kContentLength, false, false},
      {"HTTP/1.1 200 Connection established\r\n\r\n", "CONNECT", BodyKind::kTunnel, false, false},
  };
  for (const Case& c : cases) {
    FramingResult result;
    ResponseInfo info = AnalyzeResponseText(c.response, c.method, &result);
    ASSERT_TRUE(result.ok()) << c.response;
    EXPECT_EQ(info.body, c.body) << c.response;
    EXPECT_EQ(info.keep_alive, c.keep_alive) << c.response;
    EXPECT_EQ(info.interim, c.interim) << c.response;
  }
}

TEST(AnalyzeResponse, RejectsAmbiguousFramingWith502) {
  const std::string_view bad[] = {
      "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 5,,5\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 5, \r\n\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
      "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
  };
  for (std::string_view response : bad) {
    FramingResult result;
    AnalyzeResponseText(response, "GET", &result);
    EXPECT_EQ(result.http_status, 502) << response;
  }
}

TEST(AnalyzeRequest, PlainLengthsAgreeWithListedOnes) {
  // One plain number per field (the fast path) and lists must agree alike.
  EXPECT_EQ(AnalyzeText("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n"
                        "Content-Length: 6\r\n\r\n")
                .framing.error,
            ParseError::kConflictingContentLength);
  EXPECT_EQ(AnalyzeText("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n"
                        "Content-Length: 5, 6\r\n\r\n")
                .framing.error,
            ParseError::kConflictingContentLength);
  EXPECT_EQ(AnalyzeText("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5, 5\r\n"
                        "Content-Length: 5\r\n\r\n")
                .info.content_length,
            5u);
  EXPECT_EQ(AnalyzeText("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5x\r\n\r\n").framing.error,
            ParseError::kBadContentLength);
  // 18 digits take the fast path; longer ones the checked one.
  EXPECT_EQ(AnalyzeText("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 000000000000000012\r\n\r\n")
                .info.content_length,
            12u);
  EXPECT_EQ(
      AnalyzeText("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999999999999\r\n\r\n")
          .framing.error,
      ParseError::kBadContentLength);
}

TEST(HasToken, MatchesListElementsCaseInsensitively) {
  EXPECT_TRUE(HasToken("keep-alive, Upgrade", "upgrade"));
  EXPECT_TRUE(HasToken(" close ", "close"));
  EXPECT_FALSE(HasToken("closed", "close"));
  EXPECT_FALSE(HasToken("", "close"));
  // Lists no longer than the token: the whole list is the one element.
  EXPECT_TRUE(HasToken("CLOSE", "close"));
  EXPECT_FALSE(HasToken("clos", "close"));
  EXPECT_FALSE(HasToken("clos,", "close"));
  EXPECT_FALSE(HasToken(",lose", "close"));
}

}  // namespace
}  // namespace kwd::http
