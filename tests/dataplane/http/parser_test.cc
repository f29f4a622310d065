#include "dataplane/http/parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kwd::http {
namespace {

ParseResult ParseWhole(std::string_view bytes, RequestHead* head, HeadLimits limits = {}) {
  RequestParser parser(limits);
  return parser.Parse(bytes, head);
}

// Feeds a growing copy of the bytes one at a time, like a socket that
// delivers one byte per read; the buffer is reallocated now and then.
// `buffer` must outlive the head's views.
ParseResult ParseByteByByte(std::string_view bytes, RequestHead* head, HeadLimits limits = {},
                            std::string* kept = nullptr) {
  RequestParser parser(limits);
  std::string local;
  std::string& buffer = kept != nullptr ? *kept : local;
  buffer.clear();
  buffer.shrink_to_fit();
  ParseResult r;
  for (char c : bytes) {
    buffer.push_back(c);
    r = parser.Parse(buffer, head);
    if (!r.partial()) {
      return r;
    }
  }
  return r;
}

TEST(RequestParser, ParsesSimpleGet) {
  RequestHead head;
  std::string_view req =
      "GET /sap/bc/ping?x=1 HTTP/1.1\r\nHost: a.example:8080\r\nAccept:  */* \r\n\r\n";
  ParseResult r = ParseWhole(req, &head);
  ASSERT_TRUE(r.complete()) << ParseErrorName(r.error);
  EXPECT_EQ(r.consumed, req.size());
  EXPECT_EQ(head.method, "GET");
  EXPECT_EQ(head.target, "/sap/bc/ping?x=1");
  EXPECT_EQ(head.target_form, TargetForm::kOrigin);
  EXPECT_EQ(head.version_minor, 1);
  ASSERT_EQ(head.header_count, 2u);
  EXPECT_EQ(head.headers[0].name, "Host");
  EXPECT_EQ(head.headers[0].value, "a.example:8080");
  EXPECT_EQ(head.headers[1].value, "*/*");
  ASSERT_NE(head.Find("accept"), nullptr);
  EXPECT_EQ(head.Find("missing"), nullptr);
  // Views point into the caller's buffer: no copies.
  EXPECT_EQ(head.method.data(), req.data());
}

// Values are validated eight bytes at a time: a control byte (or DEL) is
// refused wherever it sits in a long value, HTAB and obs-text are kept.
TEST(RequestParser, RefusesControlBytesAtEveryPositionOfALongValue) {
  for (char bad : {'\x00', '\x01', '\x0b', '\x1f', '\x7f'}) {
    // Past 200 bytes: the line-end scan checks the bytes after the first 64
    // of the line itself, the field check the ones before.
    for (size_t pos = 0; pos < 200; ++pos) {
      std::string value(200, 'a');
      value[pos] = bad;
      std::string req = "GET / HTTP/1.1\r\nHost: h\r\nCookie: " + value + "\r\n\r\n";
      RequestHead head;
      ParseResult r = ParseWhole(req, &head);
      ASSERT_TRUE(r.failed()) << "byte " << int(bad) << " at " << pos;
      EXPECT_EQ(r.error, ParseError::kControlChar) << "byte " << int(bad) << " at " << pos;
    }
  }
  std::string value = "a\tb \x80\xff~!" + std::string(4096, 'x') + "\t\x7e";
  std::string req = "GET / HTTP/1.1\r\nHost: h\r\nCookie: " + value + "\r\n\r\n";
  RequestHead head;
  ParseResult r = ParseWhole(req, &head);
  ASSERT_TRUE(r.complete()) << ParseErrorName(r.error);
  ASSERT_NE(head.Find("cookie"), nullptr);
  EXPECT_EQ(head.Find("cookie")->value, value);
  // No tab: the long value is checked by the line-end scan alone.
  std::string plain = "\x80\xff" + std::string(300, 'y') + "\xfe";
  req = "GET / HTTP/1.1\r\nHost: h\r\nCookie: " + plain + "\r\n\r\n";
  r = ParseWhole(req, &head);
  ASSERT_TRUE(r.complete()) << ParseErrorName(r.error);
  EXPECT_EQ(head.Find("cookie")->value, plain);
}

TEST(RequestParser, StopsAtEndOfHeadForPipelining) {
  RequestHead head;
  std::string_view req = "GET /a HTTP/1.1\r\nHost: h\r\n\r\nGET /b HTTP/1.1\r\n";
  ParseResult r = ParseWhole(req, &head);
  ASSERT_TRUE(r.complete());
  EXPECT_EQ(req.substr(r.consumed), "GET /b HTTP/1.1\r\n");
}

TEST(RequestParser, ToleratesOneLeadingEmptyLine) {
  RequestHead head;
  EXPECT_TRUE(ParseWhole("\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n", &head).complete());
  ParseResult two = ParseWhole("\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n", &head);
  EXPECT_TRUE(two.failed());
  EXPECT_EQ(two.http_status, 400);
}

TEST(RequestParser, PartialUntilEmptyLine) {
  RequestHead head;
  RequestParser parser;
  std::string buffer = "GET / HTTP/1.1\r\nHost: h\r\n";
  EXPECT_TRUE(parser.Parse(buffer, &head).partial());
  buffer += "\r";
  EXPECT_TRUE(parser.Parse(buffer, &head).partial());
  buffer += "\n";
  ParseResult r = parser.Parse(buffer, &head);
  ASSERT_TRUE(r.complete());
  EXPECT_EQ(r.consumed, buffer.size());
  EXPECT_EQ(head.header_count, 1u);
}

TEST(RequestParser, TargetForms) {
  struct Case {
    std::string_view request;
    TargetForm form;
    std::string_view authority;
    std::string_view path_and_query;
  };
  const Case cases[] = {
      {"GET http://Example.com:80/a?b HTTP/1.1\r\nHost: x\r\n\r\n", TargetForm::kAbsolute,
       "Example.com:80", "/a?b"},
      {"GET https://[::1]:8443 HTTP/1.1\r\nHost: x\r\n\r\n", TargetForm::kAbsolute, "[::1]:8443",
       ""},
      {"CONNECT erp.example:443 HTTP/1.1\r\nHost: erp.example:443\r\n\r\n", TargetForm::kAuthority,
       "erp.example:443", ""},
      {"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", TargetForm::kAsterisk, "", ""},
      {"GET /sap(bD1lbiZjPTAwMQ==)/bc/bsp;jsessionid=1?a=%20b HTTP/1.1\r\nHost: x\r\n\r\n",
       TargetForm::kOrigin, "", "/sap(bD1lbiZjPTAwMQ==)/bc/bsp;jsessionid=1?a=%20b"},
  };
  for (const Case& c : cases) {
    RequestHead head;
    ParseResult r = ParseWhole(c.request, &head);
    ASSERT_TRUE(r.complete()) << c.request << " " << ParseErrorName(r.error);
    EXPECT_EQ(head.target_form, c.form) << c.request;
    EXPECT_EQ(head.authority, c.authority) << c.request;
    EXPECT_EQ(head.path_and_query, c.path_and_query) << c.request;
  }
}

struct RejectCase {
  std::string name;
  std::string request;
  int status;
  ParseError error;
};

std::vector<RejectCase> RejectCases() {
  std::string big_target = "/" + std::string(9000, 'a');
  return {
      {"lowercase_version", "GET / http/1.1\r\n\r\n", 400, ParseError::kBadVersion},
      {"version_2", "GET / HTTP/2.0\r\n\r\n", 505, ParseError::kUnsupportedVersion},
      {"version_1_2", "GET / HTTP/1.2\r\n\r\n", 505, ParseError::kUnsupportedVersion},
      {"version_0_9", "GET / HTTP/0.9\r\n\r\n", 505, ParseError::kUnsupportedVersion},
      {"version_long", "GET / HTTP/1.10\r\n\r\n", 400, ParseError::kBadVersion},
      {"missing_version", "GET /\r\n\r\n", 400, ParseError::kBadRequestLine},
      {"double_space", "GET  / HTTP/1.1\r\n\r\n", 400, ParseError::kBadRequestLine},
      {"trailing_space", "GET / HTTP/1.1 \r\n\r\n", 400, ParseError::kBadVersion},
      {"bad_method", "G(T / HTTP/1.1\r\n\r\n", 400, ParseError::kBadMethod},
      {"nul_in_method", std::string("G\0T / HTTP/1.1\r\n\r\n", 19), 400, ParseError::kBadMethod},
      {"space_in_target", "GET /a b HTTP/1.1\r\n\r\n", 400, ParseError::kBadVersion},
      {"fragment", "GET /a#b HTTP/1.1\r\n\r\n", 400, ParseError::kBadTarget},
      {"quote_in_target", "GET /a\"b HTTP/1.1\r\n\r\n", 400, ParseError::kBadTarget},
      {"bad_pct", "GET /a%2 HTTP/1.1\r\n\r\n", 400, ParseError::kBadTarget},
      {"bad_pct_hex", "GET /a%zz HTTP/1.1\r\n\r\n", 400, ParseError::kBadTarget},
      {"star_not_options", "GET * HTTP/1.1\r\n\r\n", 400, ParseError::kBadTarget},
      {"authority_not_connect", "GET example.com:80 HTTP/1.1\r\n\r\n", 400, ParseError::kBadTarget},
      {"connect_origin", "CONNECT /a HTTP/1.1\r\n\r\n", 400, ParseError::kBadTarget},
      {"connect_no_port", "CONNECT example.com HTTP/1.1\r\n\r\n", 400, ParseError::kBadTarget},
      {"absolute_userinfo", "GET http://u@h/ HTTP/1.1\r\n\r\n", 400, ParseError::kBadTarget},
      {"absolute_empty_host", "GET http:///a HTTP/1.1\r\n\r\n", 400, ParseError::kBadTarget},
      {"absolute_bad_port", "GET http://h:8x/ HTTP/1.1\r\n\r\n", 400, ParseError::kBadTarget},
      {"absolute_big_port", "GET http://h:65536/ HTTP/1.1\r\n\r\n", 400, ParseError::kBadTarget},
      {"absolute_ftp", "GET ftp://h/ HTTP/1.1\r\n\r\n", 400, ParseError::kBadTarget},
      {"absolute_bad_host_char", "GET http://h{x/ HTTP/1.1\r\n\r\n", 400, ParseError::kBadTarget},
      {"target_too_long", "GET " + big_target + " HTTP/1.1\r\n\r\n", 414,
       ParseError::kTargetTooLong},
      {"bare_lf_request_line", "GET / HTTP/1.1\nHost: h\r\n\r\n", 400, ParseError::kBareLf},
      {"bare_lf_header", "GET / HTTP/1.1\r\nHost: h\n\r\n", 400, ParseError::kBareLf},
      {"bare_cr_header", "GET / HTTP/1.1\r\nHost: h\rX: y\r\n\r\n", 400, ParseError::kBareCr},
      {"bare_cr_request_line", "GET /\r HTTP/1.1\r\n\r\n", 400, ParseError::kBareCr},
      {"nul_in_value", std::string("GET / HTTP/1.1\r\nX: a\0b\r\n\r\n", 27), 400,
       ParseError::kControlChar},
      {"del_in_value", "GET / HTTP/1.1\r\nX: a\x7f\r\n\r\n", 400, ParseError::kControlChar},
      {"obs_fold", "GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n", 400, ParseError::kObsFold},
      {"obs_fold_tab", "GET / HTTP/1.1\r\nX: a\r\n\tb\r\n\r\n", 400, ParseError::kObsFold},
      {"space_before_colon", "GET / HTTP/1.1\r\nHost : h\r\n\r\n", 400,
       ParseError::kSpaceBeforeColon},
      {"tab_before_colon", "GET / HTTP/1.1\r\nHost\t: h\r\n\r\n", 400,
       ParseError::kSpaceBeforeColon},
      {"empty_name", "GET / HTTP/1.1\r\n: h\r\n\r\n", 400, ParseError::kBadHeaderName},
      {"no_colon", "GET / HTTP/1.1\r\nHost h\r\n\r\n", 400, ParseError::kBadHeaderName},
      {"non_token_name", "GET / HTTP/1.1\r\nHo(st: h\r\n\r\n", 400, ParseError::kBadHeaderName},
  };
}

// HTTP/2's :path goes through ParseRequestTarget: it refuses exactly the
// targets the request line refuses and finds the same form and parts.
TEST(RequestParser, ParseRequestTargetAgreesWithTheRequestLine) {
  struct Case {
    std::string method;
    std::string target;
  };
  const std::vector<Case> cases = {
      {"GET", "/a/b?c=d"},  {"GET", "/sap/bc/x#/../../admin/x"},
      {"GET", "/a\"b"},     {"GET", "/a%2"},
      {"GET", "/a%zz"},     {"GET", "*"},
      {"OPTIONS", "*"},     {"GET", "?a=1"},
      {"GET", "a/b"},       {"GET", "http://u@h/x"},
      {"GET", "http:///x"}, {"GET", "http://h:8080/p?q"},
      {"GET", "https://h"}, {"GET", "ftp://h/"},
      {"GET", "/x\x80"},    {"GET", "/x\xff"},
      {"GET", "/x<"},       {"GET", "/x>"},
      {"GET", "/x{"},       {"GET", "/x}"},
      {"GET", "/x|"},       {"GET", "/x^"},
      {"GET", "/x`"},       {"GET", "/x\\"},
      {"CONNECT", "h:443"}, {"CONNECT", "/a"},
  };
  for (const Case& c : cases) {
    std::string request = c.method + " " + c.target + " HTTP/1.1\r\nHost: h\r\n\r\n";
    RequestHead line;
    ParseResult parsed = ParseWhole(request, &line);
    RequestHead head;
    head.method = c.method;
    head.target = c.target;
    ParseError error = ParseRequestTarget(&head);
    EXPECT_EQ(parsed.failed(), error != ParseError::kNone) << c.target;
    if (parsed.failed()) {
      EXPECT_EQ(parsed.error, ParseError::kBadTarget) << c.target;
      EXPECT_EQ(error, ParseError::kBadTarget) << c.target;
      continue;
    }
    EXPECT_EQ(head.target_form, line.target_form) << c.target;
    EXPECT_EQ(head.scheme, line.scheme) << c.target;
    EXPECT_EQ(head.authority, line.authority) << c.target;
    EXPECT_EQ(head.path_and_query, line.path_and_query) << c.target;
  }
  RequestHead empty;
  empty.method = "GET";
  EXPECT_EQ(ParseRequestTarget(&empty), ParseError::kBadTarget);
}

TEST(RequestParser, RejectsMalformedWholeAndByteByByte) {
  for (const RejectCase& c : RejectCases()) {
    RequestHead head;
    ParseResult whole = ParseWhole(c.request, &head);
    EXPECT_TRUE(whole.failed()) << c.name;
    EXPECT_EQ(whole.http_status, c.status) << c.name;
    EXPECT_EQ(whole.error, c.error) << c.name << ": " << ParseErrorName(whole.error);
    ParseResult incremental = ParseByteByByte(c.request, &head);
    EXPECT_EQ(incremental.status, whole.status) << c.name;
    EXPECT_EQ(incremental.http_status, whole.http_status) << c.name;
    EXPECT_EQ(incremental.error, whole.error) << c.name;
  }
}

TEST(RequestParser, AcceptsHtabAndObsTextInValues) {
  RequestHead head;
  ParseResult r = ParseWhole("GET / HTTP/1.1\r\nX:\ta\tb\xe9\r\nY:\r\n\r\n", &head);
  ASSERT_TRUE(r.complete()) << ParseErrorName(r.error);
  EXPECT_EQ(head.headers[0].value, "a\tb\xe9");
  EXPECT_EQ(head.headers[1].value, "");
}

TEST(RequestParser, HeadTooLargeIs431EvenBeforeItEnds) {
  std::string req = "GET / HTTP/1.1\r\n";
  while (req.size() < 70 * 1024) {
    req += "X-Filler: " + std::string(1000, 'a') + "\r\n";
  }
  RequestHead head;
  ParseResult partial = ParseWhole(req, &head);
  EXPECT_TRUE(partial.failed());
  EXPECT_EQ(partial.http_status, 431);
  EXPECT_EQ(partial.error, ParseError::kHeadTooLarge);

  HeadLimits small;
  small.max_head_bytes = 100;
  ParseResult limited =
      ParseWhole("GET / HTTP/1.1\r\nX: " + std::string(100, 'a') + "\r\n\r\n", &head, small);
  EXPECT_EQ(limited.http_status, 431);
  // A head that fits exactly is fine.
  std::string exact = "GET / HTTP/1.1\r\nX: a\r\n\r\n";
  small.max_head_bytes = exact.size();
  EXPECT_TRUE(ParseWhole(exact, &head, small).complete());
}

TEST(RequestParser, TooManyHeadersIs431) {
  std::string req = "GET / HTTP/1.1\r\n";
  for (size_t i = 0; i <= kMaxHeaders; ++i) {
    req += "X-" + std::to_string(i) + ": v\r\n";
  }
  req += "\r\n";
  RequestHead head;
  ParseResult r = ParseWhole(req, &head);
  EXPECT_EQ(r.http_status, 431);
  EXPECT_EQ(r.error, ParseError::kTooManyHeaders);
}

TEST(RequestParser, PartialTargetOverLimitIs414WithoutWaiting) {
  RequestHead head;
  std::string req = "GET /" + std::string(9000, 'a');
  ParseResult r = ParseWhole(req, &head);
  EXPECT_EQ(r.http_status, 414);
}

TEST(RequestParser, IncrementalMatchesWholeForValidRequests) {
  const std::string_view requests[] = {
      "GET / HTTP/1.1\r\nHost: h\r\n\r\n",
      "\r\nPOST /echo HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc",
      "OPTIONS * HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 2\r\n\r\n",
  };
  for (std::string_view req : requests) {
    RequestHead whole_head;
    RequestHead byte_head;
    ParseResult whole = ParseWhole(req, &whole_head);
    std::string kept;
    ParseResult incremental = ParseByteByByte(req.substr(0, whole.consumed), &byte_head, {}, &kept);
    ASSERT_TRUE(whole.complete()) << req;
    ASSERT_TRUE(incremental.complete()) << req;
    EXPECT_EQ(whole.consumed, incremental.consumed);
    EXPECT_EQ(whole_head.method, byte_head.method);
    EXPECT_EQ(whole_head.target, byte_head.target);
    ASSERT_EQ(whole_head.header_count, byte_head.header_count);
    for (size_t i = 0; i < whole_head.header_count; ++i) {
      EXPECT_EQ(whole_head.headers[i].name, byte_head.headers[i].name);
      EXPECT_EQ(whole_head.headers[i].value, byte_head.headers[i].value);
    }
  }
}

TEST(RequestParser, ShrunkBufferStartsOverInsteadOfReadingPastTheEnd) {
  RequestParser parser;
  RequestHead head;
  std::string buffer = "GET /long-target HTTP/1.1\r\nHost: h\r\n";
  EXPECT_TRUE(parser.Parse(buffer, &head).partial());
  buffer.resize(3);
  EXPECT_TRUE(parser.Parse(buffer, &head).partial());
  buffer = "GET / HTTP/1.1\r\nHost: h\r\n\r\n";
  ParseResult r = parser.Parse(buffer, &head);
  ASSERT_TRUE(r.complete());
  EXPECT_EQ(head.target, "/");
}

TEST(RequestParser, ResetAllowsNextMessage) {
  RequestParser parser;
  RequestHead head;
  std::string_view two = "GET /a HTTP/1.1\r\nHost: h\r\n\r\nGET /b HTTP/1.1\r\nHost: h\r\n\r\n";
  ParseResult first = parser.Parse(two, &head);
  ASSERT_TRUE(first.complete());
  parser.Reset();
  ParseResult second = parser.Parse(two.substr(first.consumed), &head);
  ASSERT_TRUE(second.complete());
  EXPECT_EQ(head.target, "/b");
}

TEST(ResponseParser, ParsesStatusLines) {
  struct Case {
    std::string_view response;
    int code;
    std::string_view reason;
    int minor;
  };
  const Case cases[] = {
      {"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 200, "OK", 1},
      {"HTTP/1.0 404 Not Found\r\n\r\n", 404, "Not Found", 0},
      {"HTTP/1.1 204 \r\n\r\n", 204, "", 1},
      {"HTTP/1.1 100\r\n\r\n", 100, "", 1},
  };
  for (const Case& c : cases) {
    ResponseParser parser;
    ResponseHead head;
    ParseResult r = parser.Parse(c.response, &head);
    ASSERT_TRUE(r.complete()) << c.response << ParseErrorName(r.error);
    EXPECT_EQ(head.status_code, c.code);
    EXPECT_EQ(head.reason, c.reason);
    EXPECT_EQ(head.version_minor, c.minor);
  }
}

TEST(ResponseParser, RejectsMalformedWith502) {
  const std::string_view bad[] = {
      "HTTP/1.1 20 OK\r\n\r\n",
      "HTTP/1.1 2000 OK\r\n\r\n",
      "HTTP/2 200 OK\r\n\r\n",
      "HTTP/1.1 099 X\r\n\r\n",
      "HTTP/1.1 200 OK\r\nX : y\r\n\r\n",
      "HTTP/1.1 200 OK\r\nX: y\r\n z\r\n\r\n",
      "HTTP/1.1 200 O\x01K\r\n\r\n",
      "HTTP/1.1 200 OK\nX: y\r\n\r\n",
  };
  for (std::string_view response : bad) {
    ResponseParser parser;
    ResponseHead head;
    ParseResult r = parser.Parse(response, &head);
    EXPECT_TRUE(r.failed()) << response;
    EXPECT_EQ(r.http_status, 502) << response;
  }
}

}  // namespace
}  // namespace kwd::http

namespace kwd::http {
namespace {

TEST(ClassifyFieldName, RecognisesNamesInAnyCaseAndNothingElse) {
  EXPECT_EQ(ClassifyFieldName("Host"), FieldId::kHost);
  EXPECT_EQ(ClassifyFieldName("hOST"), FieldId::kHost);
  EXPECT_EQ(ClassifyFieldName("TE"), FieldId::kTe);
  EXPECT_EQ(ClassifyFieldName("Keep-Alive"), FieldId::kKeepAlive);
  EXPECT_EQ(ClassifyFieldName("CONTENT-LENGTH"), FieldId::kContentLength);
  EXPECT_EQ(ClassifyFieldName("transfer-encoding"), FieldId::kTransferEncoding);
  EXPECT_EQ(ClassifyFieldName("X-Forwarded-Proto"), FieldId::kXForwardedProto);
  EXPECT_EQ(ClassifyFieldName("ssl-client-cert-chain-0"), FieldId::kProxyAssertedTls);
  EXPECT_EQ(ClassifyFieldName("SSL_Cipher-Suite"), FieldId::kProxyAssertedTls);
  EXPECT_EQ(ClassifyFieldName("SSL_CIPHER_SUITES"), FieldId::kOther);
  // Only letters match in both cases: '-' is not '\r' | 0x20, '_' is not '-'.
  EXPECT_EQ(ClassifyFieldName("keep\ralive"), FieldId::kOther);
  EXPECT_EQ(ClassifyFieldName("Keep_Alive"), FieldId::kOther);
  EXPECT_EQ(ClassifyFieldName("Content\rLength"), FieldId::kOther);
  EXPECT_EQ(ClassifyFieldName("h\x0fst"), FieldId::kOther);
  EXPECT_EQ(ClassifyFieldName("Hosts"), FieldId::kOther);
  EXPECT_EQ(ClassifyFieldName(""), FieldId::kOther);
  Header built{"Connection", "close"};
  EXPECT_EQ(built.id, FieldId::kUnclassified);
  EXPECT_EQ(built.Id(), FieldId::kConnection);
}

TEST(ClassifyFieldName, ForwardingFieldsAndTheirOtherSpellings) {
  EXPECT_EQ(ClassifyFieldName("Forwarded"), FieldId::kForwarded);
  EXPECT_EQ(ClassifyFieldName("X-Real-IP"), FieldId::kXRealIp);
  EXPECT_EQ(ClassifyFieldName("x-forwarded-port"), FieldId::kXForwardedPort);
  EXPECT_EQ(ClassifyFieldName("ClientProtocol"), FieldId::kClientProtocol);
  EXPECT_EQ(ClassifyFieldName("clientprotocol"), FieldId::kClientProtocol);
  EXPECT_EQ(ClassifyFieldName("X-SAP-WebDisp-AP"), FieldId::kSapWebdispAp);
  // What CGI gateways and frameworks folding '-' and '_' read as the same field.
  for (std::string_view alias :
       {"X_Forwarded_For", "x-forwarded_for", "XForwardedFor", "X_Forwarded_Proto",
        "X_FORWARDED_HOST", "X_Forwarded_Port", "X_Real_IP", "XRealIp", "X_Request_Id",
        "Client-Protocol", "client_protocol", "x_sap_webdisp_ap", "xsapwebdispap", "For_warded",
        "x--forwarded--for", "_forwarded_"}) {
    EXPECT_EQ(ClassifyFieldName(alias), FieldId::kForwardingAlias) << alias;
  }
  for (std::string_view other :
       {"X-Forwarded-Fort", "X-Forwarded", "Forwarded-By", "X-Real", "Content-Type",
        "Cache-Control", "X-Forwarded-For-Real", "ClientProtocols", "x-sap-webdisp-target-sid"}) {
    EXPECT_EQ(ClassifyFieldName(other), FieldId::kOther) << other;
  }
  // The cases the switch used to settle by length alone still do.
  EXPECT_EQ(ClassifyFieldName("Upgrade"), FieldId::kUpgrade);
  EXPECT_EQ(ClassifyFieldName("Keep-Alive"), FieldId::kKeepAlive);
  EXPECT_EQ(ClassifyFieldName("Content-Length"), FieldId::kContentLength);
}

TEST(IsValidAuthority, RegNameTakesSubDelims) {
  // llhttp's request vectors: a reg-name may hold sub-delims (RFC 3986 3.2.2).
  EXPECT_TRUE(IsValidAuthority("0.0.0.0=5000", false));
  EXPECT_TRUE(IsValidAuthority("0.0.0.0=5000:80", false));
  EXPECT_TRUE(IsValidAuthority("a!$&'()*+,;=b", false));
  EXPECT_FALSE(IsValidAuthority("a{b", false));
  EXPECT_FALSE(IsValidAuthority("a\"b", false));
  EXPECT_FALSE(IsValidAuthority("a b", false));
  EXPECT_FALSE(IsValidAuthority("a@b", false));  // no userinfo
  EXPECT_FALSE(IsValidAuthority("a/b", false));
  EXPECT_FALSE(IsValidAuthority("0.0.0.0=5000:x", false));
}

TEST(IsValidAuthority, PlainAndGeneralForms) {
  EXPECT_TRUE(IsValidAuthority("example.com", false));
  EXPECT_TRUE(IsValidAuthority("127.0.0.1:8080", false));
  EXPECT_TRUE(IsValidAuthority("h:0", true));
  EXPECT_TRUE(IsValidAuthority("h:65535", true));
  EXPECT_TRUE(IsValidAuthority("[::1]:443", true));
  EXPECT_TRUE(IsValidAuthority("[::1]", false));
  EXPECT_TRUE(IsValidAuthority("h%41st", false));
  EXPECT_FALSE(IsValidAuthority("", false));
  EXPECT_FALSE(IsValidAuthority("example.com", true));
  EXPECT_FALSE(IsValidAuthority(":80", false));
  EXPECT_FALSE(IsValidAuthority("h:", false));
  EXPECT_FALSE(IsValidAuthority("h:65536", false));
  EXPECT_FALSE(IsValidAuthority("h:8a", false));
  EXPECT_FALSE(IsValidAuthority("a:b:80", false));
  EXPECT_FALSE(IsValidAuthority("user@h", false));
  EXPECT_FALSE(IsValidAuthority("h%4", false));
  EXPECT_FALSE(IsValidAuthority("[::1", false));
}

}  // namespace
}  // namespace kwd::http
