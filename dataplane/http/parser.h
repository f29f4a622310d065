#pragma once

// Strict, zero-copy, incremental HTTP/1.1 head parsers (RFC 9112), shaped like
// picohttpparser: the caller owns the connection buffer and the output struct;
// the output holds string_views into the buffer; a call returns complete (bytes
// consumed), partial (call again when more bytes arrived) or an error with the
// HTTP status to answer. Nothing here allocates or throws.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

namespace kwd::http {

inline constexpr size_t kMaxHeaders = 100;

// The field names the proxy itself acts on, recognised once per field (the
// parsers set Header::id), so that framing, hop-by-hop checks and
// serialisation compare a byte instead of strings.
enum class FieldId : uint8_t {
  kUnclassified,  // not looked at yet: Header::Id() classifies the name
  kOther,
  kHost,
  kContentLength,
  kTransferEncoding,
  kConnection,
  kKeepAlive,
  kProxyConnection,
  kTe,
  kTrailer,
  kUpgrade,
  kExpect,
  kXForwardedFor,
  kXForwardedProto,
  kXForwardedHost,
  kXRequestId,
  kXForwardedPort,
  kXRealIp,
  kForwarded,  // RFC 7239
  // SAP's forwarding fields (ABAP reads them to build absolute URLs):
  // "ClientProtocol" (http|https) and "x-sap-webdisp-ap" (the access points).
  kClientProtocol,
  kSapWebdispAp,
  // Another spelling of a forwarding field above (X_Forwarded_For,
  // XForwardedFor, Client-Protocol, X_Real_IP, ...): many servers (CGI
  // gateways, frameworks mapping '-' and '_' alike) read it as the field
  // itself, so only the proxy's own spelling may reach them.
  kForwardingAlias,
  // SSL_CLIENT_CERT*, SSL_CIPHER_SUITE, SSL_CIPHER_USEKEYSIZE in any case,
  // '_' or '-': only the proxy may assert them.
  kProxyAssertedTls,
};

// ASCII case-insensitive classification of a field name.
FieldId ClassifyFieldName(std::string_view name);

struct Header {
  std::string_view name;
  std::string_view value;
  // Set by the parsers; a Header built elsewhere (or whose name was changed)
  // keeps kUnclassified and Id() falls back to the name.
  FieldId id = FieldId::kUnclassified;
  // Set by the parsers when the received line is exactly name ": " value
  // CRLF, the bytes of the line following one another in the parsed buffer:
  // serialisers then copy runs of such lines whole. Clear it when changing
  // the name or the value.
  bool canonical = false;

  FieldId Id() const { return id != FieldId::kUnclassified ? id : ClassifyFieldName(name); }
};

// Why a message was rejected. The status to answer travels next to it.
enum class ParseError : uint8_t {
  kNone,
  // Start line.
  kBadRequestLine,
  kBadMethod,
  kBadTarget,
  kTargetTooLong,
  kBadVersion,
  kUnsupportedVersion,
  kBadStatusLine,
  // Header section.
  kBareCr,
  kBareLf,
  kControlChar,
  kObsFold,
  kSpaceBeforeColon,
  kBadHeaderName,
  kTooManyHeaders,
  kHeadTooLarge,
  // Framing (framing.h).
  kContentLengthWithTransferEncoding,
  kBadContentLength,
  kConflictingContentLength,
  kBadTransferEncoding,
  kUnsupportedTransferCoding,
  kTransferEncodingOnHttp10,
  kBodyTooLarge,
  kMissingHost,
  kDuplicateHost,
  kBadHost,
  // Chunked body (chunked.h).
  kBadChunkSize,
  kChunkLineTooLong,
  kBadChunkExtension,
  kMissingChunkCrlf,
  kBadTrailer,
  kTrailerTooLarge,
};

// Stable snake_case name for logs and metrics labels ("bad_chunk_size").
std::string_view ParseErrorName(ParseError error);

enum class ParseStatus : uint8_t { kComplete, kPartial, kError };

struct ParseResult {
  ParseStatus status = ParseStatus::kPartial;
  // kComplete: bytes of the head, including the empty line that ends it.
  size_t consumed = 0;
  // kError: the status to answer with (requests) or 502 (upstream responses).
  int http_status = 0;
  ParseError error = ParseError::kNone;

  bool complete() const { return status == ParseStatus::kComplete; }
  bool partial() const { return status == ParseStatus::kPartial; }
  bool failed() const { return status == ParseStatus::kError; }
};

struct HeadLimits {
  // Start line plus header fields; beyond it: 431 (requests).
  size_t max_head_bytes = 64 * 1024;
  // Longer request-targets get 414.
  size_t max_target_bytes = 8 * 1024;
};

enum class TargetForm : uint8_t { kOrigin, kAbsolute, kAuthority, kAsterisk };

struct RequestHead {
  std::string_view method;
  std::string_view target;
  TargetForm target_form = TargetForm::kOrigin;
  int version_minor = 1;
  // Absolute-form only: "http" or "https" as sent (any case).
  std::string_view scheme;
  // Absolute-form and authority-form: host[:port] from the target.
  std::string_view authority;
  // Origin-form: the target; absolute-form: what follows the authority
  // (may be empty or start with '?'); empty for the other forms.
  std::string_view path_and_query;
  std::array<Header, kMaxHeaders> headers;
  size_t header_count = 0;

  std::span<const Header> fields() const { return {headers.data(), header_count}; }
  // First field with this name (ASCII case-insensitive), or nullptr.
  const Header* Find(std::string_view name) const;
  const Header* Find(FieldId id) const;
};

struct ResponseHead {
  int version_minor = 1;
  int status_code = 0;
  std::string_view reason;
  std::array<Header, kMaxHeaders> headers;
  size_t header_count = 0;

  std::span<const Header> fields() const { return {headers.data(), header_count}; }
  const Header* Find(std::string_view name) const;
  const Header* Find(FieldId id) const;
};

namespace detail {
// How far a head parse got, so that a call after more bytes arrived only looks
// at the new bytes: complete lines are validated once, and the search for the
// next line feed resumes where the last one stopped.
struct ScanState {
  const char* base = nullptr;
  size_t line_start = 0;
  size_t search_from = 0;
  bool start_line_done = false;
  bool skipped_empty_line = false;
};
}  // namespace detail

// Parses one request head. Feed it the bytes of the message received so far,
// starting with the message's first byte; between calls the caller may only
// append (the buffer may move: the parser then revalidates from the start).
// After kComplete or kError, call Reset() before the next message.
class RequestParser {
 public:
  explicit RequestParser(HeadLimits limits = {}) : limits_(limits) {}
  ParseResult Parse(std::string_view buffer, RequestHead* head);
  void Reset() { state_ = {}; }

 private:
  HeadLimits limits_;
  detail::ScanState state_;
};

// Checks head->target as a request line's request-target (RFC 9112 3.2;
// CONNECT takes authority form, OPTIONS also "*") and sets target_form,
// scheme, authority and path_and_query from it. kBadTarget (a 400) when it
// is none of the forms or holds a byte RFC 3986 does not allow there (a
// fragment, 0x80-0xFF, '"', '<', '>', '{', '}', '|', '^', '`', '\\', a
// malformed escape, userinfo or an empty authority). HTTP/2's :path goes
// through it too, so both protocols refuse the same targets.
ParseError ParseRequestTarget(RequestHead* head);

// Parses one upstream response head; errors carry status 502.
class ResponseParser {
 public:
  explicit ResponseParser(HeadLimits limits = {}) : limits_(limits) {}
  ParseResult Parse(std::string_view buffer, ResponseHead* head);
  void Reset() { state_ = {}; }

 private:
  HeadLimits limits_;
  detail::ScanState state_;
};

// Shared character rules (RFC 9110 5.6.2, 5.5; RFC 3986).
bool IsTokenChar(char c);
bool IsToken(std::string_view s);
// ASCII case-insensitive equality. Inline: it runs for every header field
// against every name the proxy looks for, so most calls end at the size check.
inline bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    unsigned char x = static_cast<unsigned char>(a[i]);
    unsigned char y = static_cast<unsigned char>(b[i]);
    if (x != y) {
      unsigned char lx = x | 0x20;
      if (lx != (y | 0x20) || lx < 'a' || lx > 'z') {
        return false;
      }
    }
  }
  return true;
}
// Without leading and trailing spaces and tabs (OWS, RFC 9110 5.6.3).
inline std::string_view TrimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) {
    s.remove_suffix(1);
  }
  return s;
}
// Host[:port] as in a Host header or an authority-form target: reg-name,
// IPv4 or [IP-literal]; no userinfo; port 0-65535 when present.
bool IsValidAuthority(std::string_view authority, bool require_port);
// The first ',' in `s`, or npos: eight bytes a step (a list of a word or
// two, Connection's "keep-alive": no call to memchr); the last step may
// overlap the one before, whose bytes held no comma.
inline size_t FindComma(std::string_view s) {
  constexpr uint64_t kOnes = 0x0101010101010101ull;
  const size_t n = s.size();
  if (n < 8) {
    for (size_t i = 0; i < n; ++i) {
      if (s[i] == ',') {
        return i;
      }
    }
    return std::string_view::npos;
  }
  // The lowest flagged byte of (w - 1s) & ~w & 0x80s is the first zero
  // byte of w: exact, whatever the bytes above it.
  auto first = [&](size_t at) -> size_t {
    uint64_t w;
    std::memcpy(&w, s.data() + at, 8);
    w ^= kOnes * ',';
    const uint64_t zero = (w - kOnes) & ~w & (kOnes * 0x80);
    return zero == 0 ? std::string_view::npos
                     : at + static_cast<size_t>(__builtin_ctzll(zero)) / 8;
  };
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    if (size_t at = first(i); at != std::string_view::npos) {
      return at;
    }
  }
  return i == n ? std::string_view::npos : first(n - 8);
}

// Calls fn(token) for each non-empty element of a comma-separated list,
// with optional whitespace trimmed. Returns false when fn returns false.
template <typename Fn>
bool ForEachListElement(std::string_view list, Fn&& fn) {
  while (!list.empty()) {
    size_t comma = list.find(',');
    std::string_view element = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    while (!element.empty() && (element.front() == ' ' || element.front() == '\t')) {
      element.remove_prefix(1);
    }
    while (!element.empty() && (element.back() == ' ' || element.back() == '\t')) {
      element.remove_suffix(1);
    }
    if (!element.empty() && !fn(element)) {
      return false;
    }
  }
  return true;
}

}  // namespace kwd::http
