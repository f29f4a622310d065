#pragma once

// Message framing (RFC 9112 6, RFC 9110 8.6): how long the body is and what
// the connection does next, decided from a parsed head. Everything that could
// let two parsers disagree about where a request ends (request smuggling) is
// rejected here rather than repaired.

#include <cstdint>
#include <string_view>

#include "tests/dataplane/http/reference/parser.h"

namespace kwd::http_ref {

enum class BodyKind : uint8_t {
  kNone,
  kContentLength,
  kChunked,
  kUntilClose,  // responses without a length: the body ends with the connection
  kTunnel,      // 101 Switching Protocols, 2xx to CONNECT: bytes flow both ways
};

struct FramingLimits {
  // SAP icm/HTTP/max_request_size_KB default 102400: larger bodies get 413.
  uint64_t max_body_bytes = 102400ull * 1024;
};

struct RequestInfo {
  BodyKind body = BodyKind::kNone;
  uint64_t content_length = 0;
  bool keep_alive = true;
  bool expect_continue = false;
  // "Upgrade: websocket" with "Connection: upgrade" on a GET.
  bool upgrade_websocket = false;
  std::string_view upgrade;  // the Upgrade field as sent, if any
  // Where the request is addressed: the target's authority (absolute- and
  // authority-form, which override Host per RFC 9112 3.2.2) or the Host field.
  std::string_view host;
};

struct ResponseInfo {
  BodyKind body = BodyKind::kNone;
  uint64_t content_length = 0;
  bool keep_alive = true;
  // 1xx other than 101: another response head follows on the connection.
  bool interim = false;
  // Transfer codings other than chunked ("gzip, chunked", "gzip"): the body
  // is framed as chunked or by the close, and the codings stay on it.
  bool transfer_coded = false;
};

struct FramingResult {
  ParseError error = ParseError::kNone;
  int http_status = 0;
  bool ok() const { return error == ParseError::kNone; }
};

// Request rules:
//  - Content-Length with Transfer-Encoding: 400.
//  - Content-Length must be 1*DIGIT without overflow; several values (fields
//    or "5, 5" lists) must be identical: else 400. Above the limit: 413.
//  - Transfer-Encoding on HTTP/1.0: 400. The final coding must be "chunked"
//    and appear once: else 400 ("chunked, identity", "xchunked", "identity").
//    Codings before chunked ("gzip, chunked") are valid HTTP that this proxy
//    does not implement: 501.
//  - HTTP/1.1 needs exactly one Host field, HTTP/1.0 at most one; it must be a
//    valid host[:port] (or empty): else 400.
FramingResult AnalyzeRequest(const RequestHead& head, const FramingLimits& limits,
                             RequestInfo* info);

// Response rules, given the request method the response answers (errors are
// 502: the upstream broke the protocol). 1xx, 204, 304 and responses to HEAD
// have no body; 101 and 2xx to CONNECT tunnel; chunked (final coding) is
// decoded; another final coding or no length at all reads until close.
// Content-Length fields and lists ("5, 5") with one value are accepted (the
// forwarded head carries one field), differing values are rejected.
// Content-Length with Transfer-Encoding is rejected rather than resolved, so
// that a desynchronised upstream connection is never reused.
FramingResult AnalyzeResponse(const ResponseHead& head, std::string_view request_method,
                              ResponseInfo* info);

// Whether the comma-separated field value list contains the token
// (ASCII case-insensitive), e.g. HasToken("keep-alive, Upgrade", "upgrade").
bool HasToken(std::string_view list, std::string_view token);

}  // namespace kwd::http_ref
