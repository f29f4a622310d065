// The HTTP/1.1 codec (parser, framing, serialisers) against a frozen copy of
// it from before the speed work (tests/dataplane/http/reference): random
// heads, mostly well-formed and built from the field names the proxy acts on
// in varied case, some with bytes mutated, must parse, frame and serialise
// byte for byte the same. Heads whose ids are cleared (as built outside the
// parser) must give the same results too.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "dataplane/http/forward.h"
#include "dataplane/http/framing.h"
#include "dataplane/http/parser.h"
#include "tests/dataplane/http/reference/forward.h"
#include "tests/dataplane/http/reference/framing.h"
#include "tests/dataplane/http/reference/parser.h"

namespace kwd::http {
namespace {

namespace ref = kwd::http_ref;

const char* const kNames[] = {"Host",
                              "host",
                              "HOST",
                              "Content-Length",
                              "content-length",
                              "CONTENT-LENGTH",
                              "Transfer-Encoding",
                              "transfer-encoding",
                              "Connection",
                              "connection",
                              "CONNECTION",
                              "Keep-Alive",
                              "keep-alive",
                              "Proxy-Connection",
                              "TE",
                              "te",
                              "Te",
                              "Trailer",
                              "trailer",
                              "Upgrade",
                              "upgrade",
                              "Expect",
                              "expect",
                              "X-Forwarded-For",
                              "x-forwarded-for",
                              "X-Forwarded-Proto",
                              "X-Forwarded-Host",
                              "x-forwarded-host",
                              "X-Request-Id",
                              "x-request-id",
                              "SSL_CLIENT_CERT",
                              "ssl-client-cert-chain-1",
                              "Ssl_Client_Cert_Chain_9",
                              "SSL_CIPHER_SUITE",
                              "ssl-cipher-suite",
                              "Ssl-Cipher-Usekeysize",
                              "SSL_CIPHER_USEKEYSIZE",
                              "SSL_CLIENT_CERTX",
                              "SSL_CIPHER_SUITES",
                              "SSL_CIPHER_SUIT",
                              "ssl_client_cer",
                              "X-Secret",
                              "x-secret",
                              "Accept",
                              "User-Agent",
                              "Cookie",
                              "Contentlength",
                              "Content_Length",
                              "Hostx",
                              "Te2",
                              "Connectio",
                              "X-Forwarded-Fo",
                              "X-Forwarded-Hosts",
                              "A",
                              "Date",
                              "Server",
                              "Content-Type",
                              "X-Served-By",
                              "Transfer_Encoding",
                              "Keep_Alive",
                              "Upgrad",
                              "Trailers",
                              "SSL_CLIENT_CERT_AND_A_VERY_LONG_NAME_BEYOND_32_BYTES",
                              "Proxy-Connections",
                              "X-Request-Ids",
                              "Set-Cookie",
                              "set-cookie",
                              "SET-COOKIE",
                              "Location",
                              "Strict-Transport-Security",
                              "strict-transport-security",
                              "Access-Control-Allow-Origin",
                              "X-Forwarded-Proto-And-More",
                              "X.Dotted",
                              "x_under"};

const char* const kValues[] = {"",
                               "close",
                               "Close",
                               "keep-alive",
                               "Keep-Alive",
                               "Upgrade",
                               "close, Upgrade",
                               "keep-alive, X-Secret",
                               "X-Secret, te, trailer",
                               "Content-Length, Host",
                               "Transfer-Encoding",
                               "chunked",
                               "Chunked",
                               "gzip, chunked",
                               "chunked, gzip",
                               "chunked, chunked",
                               "identity",
                               "chunked;x=1",
                               " chunked ",
                               "5",
                               "5, 5",
                               "5,5",
                               "5,6",
                               "5,",
                               "0",
                               "007",
                               "abc",
                               "18446744073709551616",
                               "100-continue",
                               "websocket",
                               "WebSocket, h2c",
                               "1.2.3.4",
                               "1.2.3.4, 5.6.7.8",
                               " 10.0.0.1 ,, 10.0.0.2",
                               "https",
                               "http",
                               "http, https",
                               "example.com",
                               "example.com:8080",
                               "[::1]:80",
                               "bad host",
                               "  spaced  ",
                               "x-served-by",
                               "a\tb",
                               "tok, , tok2"};

const char* const kMethods[] = {"GET", "POST", "HEAD", "OPTIONS", "CONNECT", "PUT", "get"};
const char* const kTargets[] = {"/",
                                "/a/b?c=1&d=%20",
                                "http://h.example/x?y",
                                "HTTPS://h.example",
                                "http://h.example?q",
                                "*",
                                "h.example:443",
                                "/bad path",
                                "/%zz"};

std::string RandomToken(std::mt19937& rng, size_t max_len) {
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_!#";
  size_t n = 1 + rng() % max_len;
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s.push_back(kChars[rng() % (sizeof(kChars) - 1)]);
  }
  return s;
}

template <size_t N>
std::string Pick(std::mt19937& rng, const char* const (&list)[N]) {
  return list[rng() % N];
}

// A value of printable bytes, spaces and obs-text, from 17 bytes to 5 KiB
// (a 4 KiB cookie): the parsers check long values in steps of 16 and 64
// bytes, so the lengths around those matter.
std::string LongValue(std::mt19937& rng) {
  static const size_t kLengths[] = {17, 31, 47, 63, 64, 65, 79, 80, 81, 95, 127, 200, 4096, 5000};
  size_t n = kLengths[rng() % (sizeof(kLengths) / sizeof(kLengths[0]))];
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    unsigned r = rng() % 40;
    s.push_back(r == 0 ? ' ' : (r == 1 ? '\xc3' : static_cast<char>('!' + rng() % 94)));
  }
  return s;
}

std::string RandomFields(std::mt19937& rng) {
  std::string s;
  size_t count = rng() % 12;
  for (size_t i = 0; i < count; ++i) {
    std::string name = rng() % 5 == 0 ? RandomToken(rng, 20) : Pick(rng, kNames);
    unsigned kind = rng() % 12;
    std::string value =
        kind == 0 ? RandomToken(rng, 30) : (kind == 1 ? LongValue(rng) : Pick(rng, kValues));
    const char* const kColons[] = {": ", ": ", ": ", ":", ":  ", ":\t", ": \t"};
    s += name + kColons[rng() % 7] + value + (rng() % 8 == 0 ? " \r\n" : "\r\n");
  }
  return s;
}

// Some inputs get a byte replaced, inserted or removed: the parsers' errors
// must agree too.
void Mutate(std::mt19937& rng, std::string* s) {
  static const char kBytes[] = {'\r', '\n', ' ', '\t', ':', '\0', '\x7f', 'A', ',', '\x80'};
  if (s->empty() || rng() % 3 != 0) {
    return;
  }
  size_t at = rng() % s->size();
  switch (rng() % 3) {
    case 0:
      (*s)[at] = kBytes[rng() % sizeof(kBytes)];
      break;
    case 1:
      s->insert(s->begin() + static_cast<std::ptrdiff_t>(at), kBytes[rng() % sizeof(kBytes)]);
      break;
    default:
      s->erase(at, 1);
      break;
  }
}

std::vector<ref::Header> RefHeaders(const std::vector<Header>& h) {
  std::vector<ref::Header> out;
  for (const Header& x : h) {
    out.push_back({x.name, x.value});
  }
  return out;
}

void ExpectSameResult(const ParseResult& a, const ref::ParseResult& b, const std::string& in) {
  ASSERT_EQ(static_cast<int>(a.status), static_cast<int>(b.status)) << in;
  ASSERT_EQ(a.consumed, b.consumed) << in;
  ASSERT_EQ(a.http_status, b.http_status) << in;
  ASSERT_EQ(ParseErrorName(a.error), ref::ParseErrorName(b.error)) << in;
}

template <typename Head, typename RefHead>
void ExpectSameFields(const Head& a, const RefHead& b, const std::string& in) {
  ASSERT_EQ(a.header_count, b.header_count) << in;
  for (size_t i = 0; i < a.header_count; ++i) {
    ASSERT_EQ(a.headers[i].name, b.headers[i].name) << in;
    ASSERT_EQ(a.headers[i].value, b.headers[i].value) << in;
    ASSERT_EQ(a.headers[i].id, ClassifyFieldName(a.headers[i].name)) << in;
  }
}

// The parse of bytes arriving one at a time goes the general, line-search
// way for every field; a whole head takes the one-pass field path
// (TryFieldLine) for most: both must store the same fields, down to the id
// and whether a line is copied whole when serialised (Header::canonical).
template <typename Parser, typename Head>
void ExpectSameByteByByte(const std::string& in, const ParseResult& whole, const Head& head) {
  Parser parser;
  Head byte_head;
  std::string grown;
  ParseResult r;
  for (char c : in) {
    grown.push_back(c);
    r = parser.Parse(grown, &byte_head);
    if (!r.partial()) {
      break;
    }
  }
  ASSERT_EQ(static_cast<int>(r.status), static_cast<int>(whole.status)) << in;
  ASSERT_EQ(r.consumed, whole.consumed) << in;
  ASSERT_EQ(r.http_status, whole.http_status) << in;
  ASSERT_EQ(r.error, whole.error) << in;
  if (!r.complete()) {
    return;
  }
  ASSERT_EQ(byte_head.header_count, head.header_count) << in;
  for (size_t i = 0; i < head.header_count; ++i) {
    const Header& a = head.headers[i];
    const Header& b = byte_head.headers[i];
    ASSERT_EQ(a.name, b.name) << in;
    ASSERT_EQ(a.value, b.value) << in;
    ASSERT_EQ(a.id, b.id) << in;
    ASSERT_EQ(a.canonical, b.canonical) << i << ": " << in;
  }
}

void CheckRequest(const std::string& in, std::mt19937& rng) {
  // Parse whole and, for the new parser, split in two (append-only growth).
  RequestParser parser;
  RequestHead head;
  ParseResult r = parser.Parse(in, &head);
  ref::RequestParser ref_parser;
  ref::RequestHead ref_head;
  ref::ParseResult rr = ref_parser.Parse(in, &ref_head);
  ExpectSameResult(r, rr, in);
  if (rng() % 4 == 0) {
    ASSERT_NO_FATAL_FAILURE((ExpectSameByteByByte<RequestParser, RequestHead>(in, r, head)));
  }
  {
    size_t split = in.empty() ? 0 : rng() % in.size();
    std::string grown(in.substr(0, split));
    grown.reserve(in.size());
    RequestParser p2;
    RequestHead h2;
    ParseResult r2 = p2.Parse(grown, &h2);
    if (r2.partial()) {
      grown.append(in.substr(split));
      r2 = p2.Parse(grown, &h2);
    }
    ref::RequestParser rp2;
    ref::RequestHead rh2;
    std::string grown_ref(in.substr(0, split));
    grown_ref.reserve(in.size());
    ref::ParseResult rr2 = rp2.Parse(grown_ref, &rh2);
    if (rr2.partial()) {
      grown_ref.append(in.substr(split));
      rr2 = rp2.Parse(grown_ref, &rh2);
    }
    ExpectSameResult(r2, rr2, in);
  }
  if (!r.complete()) {
    return;
  }
  ASSERT_EQ(head.method, ref_head.method);
  ASSERT_EQ(head.target, ref_head.target);
  ASSERT_EQ(static_cast<int>(head.target_form), static_cast<int>(ref_head.target_form));
  ASSERT_EQ(head.version_minor, ref_head.version_minor);
  ASSERT_EQ(head.authority, ref_head.authority);
  ASSERT_EQ(head.path_and_query, ref_head.path_and_query);
  ExpectSameFields(head, ref_head, in);

  RequestHead unclassified = head;
  for (size_t i = 0; i < unclassified.header_count; ++i) {
    unclassified.headers[i].id = FieldId::kUnclassified;
  }
  FramingLimits limits;
  limits.max_body_bytes = 1000;
  ref::FramingLimits ref_limits;
  ref_limits.max_body_bytes = 1000;
  for (const RequestHead* h : {&head, &unclassified}) {
    RequestInfo info;
    FramingResult f = AnalyzeRequest(*h, limits, &info);
    ref::RequestInfo ref_info;
    ref::FramingResult rf = ref::AnalyzeRequest(ref_head, ref_limits, &ref_info);
    ASSERT_EQ(ParseErrorName(f.error), ref::ParseErrorName(rf.error)) << in;
    ASSERT_EQ(f.http_status, rf.http_status) << in;
    if (!f.ok()) {
      continue;
    }
    ASSERT_EQ(static_cast<int>(info.body), static_cast<int>(ref_info.body)) << in;
    ASSERT_EQ(info.content_length, ref_info.content_length) << in;
    ASSERT_EQ(info.keep_alive, ref_info.keep_alive) << in;
    ASSERT_EQ(info.expect_continue, ref_info.expect_continue) << in;
    ASSERT_EQ(info.upgrade_websocket, ref_info.upgrade_websocket) << in;
    ASSERT_EQ(info.upgrade, ref_info.upgrade) << in;
    ASSERT_EQ(info.host, ref_info.host) << in;

    for (int variant = 0; variant < 4; ++variant) {
      std::vector<Header> extra;
      if (variant & 1) {
        extra = {{"SSL_CIPHER_SUITE", "TLS_AES_128_GCM_SHA256"}, {"X-Extra", "1"}};
      }
      std::vector<ref::Header> ref_extra = RefHeaders(extra);
      ForwardRequestOptions o;
      ref::ForwardRequestOptions ro;
      o.client_ip = ro.client_ip = (variant & 2) ? "" : "192.0.2.7";
      o.keep_forwarded_for = ro.keep_forwarded_for = (variant & 2) != 0;
      o.proto = ro.proto = variant == 3 ? "https" : "http";
      o.reframe_body = ro.reframe_body = (variant & 1) != 0;
      o.tunnel_upgrade = ro.tunnel_upgrade = variant == 2;
      o.target = ro.target = variant == 1 ? "/routed" : "";
      o.request_id = ro.request_id = (variant & 1) ? "" : "0123456789abcdef";
      o.extra_headers = extra;
      ro.extra_headers = ref_extra;
      std::string out = "stale bytes";
      std::string ref_out;
      SerializeRequestHead(*h, info, o, out);
      ref::SerializeRequestHead(ref_head, ref_info, ro, ref_out);
      ASSERT_EQ(out, ref_out) << in;
      ASSERT_EQ(IsHopByHop("X-Secret", h->fields()), ref::IsHopByHop("X-Secret", ref_head.fields()))
          << in;
    }
  }
}

void CheckResponse(const std::string& in, const char* method, std::mt19937& rng) {
  ResponseParser parser;
  ResponseHead head;
  ParseResult r = parser.Parse(in, &head);
  ref::ResponseParser ref_parser;
  ref::ResponseHead ref_head;
  ref::ParseResult rr = ref_parser.Parse(in, &ref_head);
  ExpectSameResult(r, rr, in);
  if (rng() % 4 == 0) {
    ASSERT_NO_FATAL_FAILURE((ExpectSameByteByByte<ResponseParser, ResponseHead>(in, r, head)));
  }
  {
    // A head split across two reads, the second appended to a buffer that
    // may move.
    size_t split = in.empty() ? 0 : rng() % in.size();
    std::string grown(in.substr(0, split));
    ResponseParser p2;
    ResponseHead h2;
    ParseResult r2 = p2.Parse(grown, &h2);
    if (r2.partial()) {
      grown.append(in.substr(split));
      grown.shrink_to_fit();
      r2 = p2.Parse(grown, &h2);
    }
    ExpectSameResult(r2, rr, in);
  }
  if (!r.complete()) {
    return;
  }
  ASSERT_EQ(head.status_code, ref_head.status_code);
  ASSERT_EQ(head.reason, ref_head.reason);
  ExpectSameFields(head, ref_head, in);
  ResponseHead unclassified = head;
  for (size_t i = 0; i < unclassified.header_count; ++i) {
    unclassified.headers[i].id = FieldId::kUnclassified;
  }
  for (const ResponseHead* h : {&head, &unclassified}) {
    ResponseInfo info;
    FramingResult f = AnalyzeResponse(*h, method, &info);
    ref::ResponseInfo ref_info;
    ref::FramingResult rf = ref::AnalyzeResponse(ref_head, method, &ref_info);
    ASSERT_EQ(ParseErrorName(f.error), ref::ParseErrorName(rf.error)) << in;
    ASSERT_EQ(f.http_status, rf.http_status) << in;
    if (!f.ok()) {
      continue;
    }
    ASSERT_EQ(static_cast<int>(info.body), static_cast<int>(ref_info.body)) << in;
    ASSERT_EQ(info.content_length, ref_info.content_length) << in;
    ASSERT_EQ(info.keep_alive, ref_info.keep_alive) << in;
    ASSERT_EQ(info.interim, ref_info.interim) << in;
    ASSERT_EQ(info.transfer_coded, ref_info.transfer_coded) << in;
    for (int variant = 0; variant < 4; ++variant) {
      std::vector<Header> extra;
      if (variant & 1) {
        extra = {{"X-Request-Id", "abc"}, {"Set-Cookie", "kwd_affinity=1"}};
      }
      std::vector<ref::Header> ref_extra = RefHeaders(extra);
      ForwardResponseOptions o;
      ref::ForwardResponseOptions ro;
      o.reframe_body = ro.reframe_body = (variant & 1) != 0;
      o.tunnel_upgrade = ro.tunnel_upgrade = variant == 2;
      o.connection = ro.connection = variant == 0 ? "" : (variant == 1 ? "close" : "keep-alive");
      o.extra_headers = extra;
      ro.extra_headers = ref_extra;
      std::string out = "stale";
      std::string ref_out;
      SerializeResponseHead(*h, o, out);
      ref::SerializeResponseHead(ref_head, ro, ref_out);
      ASSERT_EQ(out, ref_out) << in;
    }
  }
}

TEST(CodecDifferential, RequestsMatchTheReference) {
  std::mt19937 rng(20261201);
  for (int i = 0; i < 20000; ++i) {
    std::string in = Pick(rng, kMethods) + " " + Pick(rng, kTargets) +
                     (rng() % 6 == 0 ? " HTTP/1.0\r\n" : " HTTP/1.1\r\n") + RandomFields(rng) +
                     "\r\n" + (rng() % 4 == 0 ? "body" : "");
    if (rng() % 10 == 0) {
      in = "\r\n" + in;
    }
    Mutate(rng, &in);
    ASSERT_NO_FATAL_FAILURE(CheckRequest(in, rng));
    if (HasFatalFailure()) {
      return;
    }
  }
}

TEST(CodecDifferential, ResponsesMatchTheReference) {
  std::mt19937 rng(7);
  const char* const kStatus[] = {"HTTP/1.1 200 OK",       "HTTP/1.1 204 No Content",
                                 "HTTP/1.0 200 OK",       "HTTP/1.1 101 Switching Protocols",
                                 "HTTP/1.1 100 Continue", "HTTP/1.1 304 Not Modified",
                                 "HTTP/1.1 404",          "HTTP/1.1 502 Bad\tGateway",
                                 "HTTP/2.0 200 OK"};
  const char* const kRequestMethods[] = {"GET", "HEAD", "CONNECT", "POST"};
  for (int i = 0; i < 20000; ++i) {
    std::string in = Pick(rng, kStatus) + "\r\n" + RandomFields(rng) + "\r\n" +
                     (rng() % 3 == 0 ? "0123456789abcdef0123456789abcdef" : "");
    Mutate(rng, &in);
    ASSERT_NO_FATAL_FAILURE(CheckResponse(in, kRequestMethods[rng() % 4], rng));
  }
}

// Host values and authority-form targets, 0 to 70 bytes: the checks go 16
// bytes a step from 8 bytes on (two overlapping halves below 16), so every
// length and every place of a colon or an odd byte must give the reference's
// answer.
TEST(CodecDifferential, AuthoritiesMatchTheReference) {
  std::mt19937 rng(25);
  static const char kBytes[] = "abcXYZ019-._~:[]%!$&'()*+,;=@/ \x80\x7f";
  for (int i = 0; i < 200000; ++i) {
    const size_t n = rng() % 71;
    std::string a;
    const unsigned odd = rng() % 4;  // how often a byte other than a host character
    for (size_t k = 0; k < n; ++k) {
      a.push_back(rng() % 8 < odd ? kBytes[rng() % (sizeof(kBytes) - 1)]
                                  : "abcdefghijklmnopqrstuvwxyz0123456789.-"[rng() % 38]);
    }
    if (n > 0 && rng() % 2 == 0) {
      // A port where a server would put one.
      a.replace(rng() % n, std::string::npos, ":" + std::to_string(rng() % 70000));
    }
    for (bool require_port : {false, true}) {
      ASSERT_EQ(IsValidAuthority(a, require_port), ref::IsValidAuthority(a, require_port))
          << a << " require_port=" << require_port;
    }
  }
}

}  // namespace
}  // namespace kwd::http
