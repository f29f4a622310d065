#include "tests/dataplane/http/reference/parser.h"

#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "tests/dataplane/http/reference/chars.h"

namespace kwd::http_ref {

std::string_view ParseErrorName(ParseError error) {
  switch (error) {
    case ParseError::kNone:
      return "none";
    case ParseError::kBadRequestLine:
      return "bad_request_line";
    case ParseError::kBadMethod:
      return "bad_method";
    case ParseError::kBadTarget:
      return "bad_target";
    case ParseError::kTargetTooLong:
      return "target_too_long";
    case ParseError::kBadVersion:
      return "bad_version";
    case ParseError::kUnsupportedVersion:
      return "unsupported_version";
    case ParseError::kBadStatusLine:
      return "bad_status_line";
    case ParseError::kBareCr:
      return "bare_cr";
    case ParseError::kBareLf:
      return "bare_lf";
    case ParseError::kControlChar:
      return "control_char";
    case ParseError::kObsFold:
      return "obs_fold";
    case ParseError::kSpaceBeforeColon:
      return "space_before_colon";
    case ParseError::kBadHeaderName:
      return "bad_header_name";
    case ParseError::kTooManyHeaders:
      return "too_many_headers";
    case ParseError::kHeadTooLarge:
      return "head_too_large";
    case ParseError::kContentLengthWithTransferEncoding:
      return "content_length_with_transfer_encoding";
    case ParseError::kBadContentLength:
      return "bad_content_length";
    case ParseError::kConflictingContentLength:
      return "conflicting_content_length";
    case ParseError::kBadTransferEncoding:
      return "bad_transfer_encoding";
    case ParseError::kUnsupportedTransferCoding:
      return "unsupported_transfer_coding";
    case ParseError::kTransferEncodingOnHttp10:
      return "transfer_encoding_on_http10";
    case ParseError::kBodyTooLarge:
      return "body_too_large";
    case ParseError::kMissingHost:
      return "missing_host";
    case ParseError::kDuplicateHost:
      return "duplicate_host";
    case ParseError::kBadHost:
      return "bad_host";
    case ParseError::kBadChunkSize:
      return "bad_chunk_size";
    case ParseError::kChunkLineTooLong:
      return "chunk_line_too_long";
    case ParseError::kBadChunkExtension:
      return "bad_chunk_extension";
    case ParseError::kMissingChunkCrlf:
      return "missing_chunk_crlf";
    case ParseError::kBadTrailer:
      return "bad_trailer";
    case ParseError::kTrailerTooLarge:
      return "trailer_too_large";
  }
  return "unknown";
}

bool IsTokenChar(char c) {
  return chars::IsToken(c);
}

bool IsToken(std::string_view s) {
  if (s.empty()) {
    return false;
  }
  for (char c : s) {
    if (!chars::IsToken(c)) {
      return false;
    }
  }
  return true;
}

namespace {

struct LineError {
  ParseError error = ParseError::kNone;
  int status = 0;
};

constexpr LineError kOk{};

bool IsHexDigit(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// unreserved / sub-delims / ":" / "@" / "/" / "?" with valid pct-encoding:
// what origin-form paths and queries may contain (RFC 3986 3.3, 3.4).
bool IsValidPathAndQuery(std::string_view s) {
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '%') {
      if (i + 2 >= s.size() || !IsHexDigit(s[i + 1]) || !IsHexDigit(s[i + 2])) {
        return false;
      }
      i += 2;
      continue;
    }
    if (!chars::IsPathChar(c)) {
      return false;
    }
  }
  return true;
}

bool IsValidPort(std::string_view port) {
  if (port.empty() || port.size() > 5) {
    return false;
  }
  unsigned value = 0;
  for (char c : port) {
    if (c < '0' || c > '9') {
      return false;
    }
    value = value * 10 + static_cast<unsigned>(c - '0');
  }
  return value <= 65535;
}

bool IsValidHost(std::string_view host) {
  if (host.empty()) {
    return false;
  }
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') {
      return false;
    }
    for (char c : host.substr(1, host.size() - 2)) {
      if (!IsHexDigit(c) && c != ':' && c != '.') {
        return false;
      }
    }
    return true;
  }
  for (size_t i = 0; i < host.size(); ++i) {
    char c = host[i];
    if (c == '%') {
      if (i + 2 >= host.size() || !IsHexDigit(host[i + 1]) || !IsHexDigit(host[i + 2])) {
        return false;
      }
      i += 2;
      continue;
    }
    // One deliberate change since the freeze (hardening round 3): a reg-name
    // takes RFC 3986's sub-delims too, as the codec does.
    if (!chars::IsHostChar(c) && std::string_view("!$&'()*+,;=").find(c) == std::string_view::npos) {
      return false;
    }
  }
  return true;
}

LineError ParseVersion(std::string_view version, int* minor, ParseError bad) {
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || version[6] != '.' ||
      version[5] < '0' || version[5] > '9' || version[7] < '0' || version[7] > '9') {
    return {bad, 400};
  }
  if (version[5] != '1' || (version[7] != '0' && version[7] != '1')) {
    return {ParseError::kUnsupportedVersion, 505};
  }
  *minor = version[7] - '0';
  return kOk;
}

LineError ParseTarget(RequestHead* head) {
  std::string_view target = head->target;
  head->scheme = {};
  head->authority = {};
  head->path_and_query = {};
  bool is_connect = head->method == "CONNECT";
  if (target == "*") {
    if (head->method != "OPTIONS") {
      return {ParseError::kBadTarget, 400};
    }
    head->target_form = TargetForm::kAsterisk;
    return kOk;
  }
  if (is_connect) {
    if (!IsValidAuthority(target, /*require_port=*/true)) {
      return {ParseError::kBadTarget, 400};
    }
    head->target_form = TargetForm::kAuthority;
    head->authority = target;
    return kOk;
  }
  if (target.front() == '/') {
    if (!IsValidPathAndQuery(target)) {
      return {ParseError::kBadTarget, 400};
    }
    head->target_form = TargetForm::kOrigin;
    head->path_and_query = target;
    return kOk;
  }
  // Absolute-form: a reverse proxy only accepts http(s) URIs.
  size_t scheme_end = target.find("://");
  if (scheme_end == std::string_view::npos) {
    return {ParseError::kBadTarget, 400};
  }
  std::string_view scheme = target.substr(0, scheme_end);
  if (!EqualsIgnoreCase(scheme, "http") && !EqualsIgnoreCase(scheme, "https")) {
    return {ParseError::kBadTarget, 400};
  }
  std::string_view rest = target.substr(scheme_end + 3);
  size_t authority_end = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, authority_end);
  std::string_view path =
      authority_end == std::string_view::npos ? std::string_view() : rest.substr(authority_end);
  if (!IsValidAuthority(authority, /*require_port=*/false) || !IsValidPathAndQuery(path)) {
    return {ParseError::kBadTarget, 400};
  }
  head->target_form = TargetForm::kAbsolute;
  head->scheme = scheme;
  head->authority = authority;
  head->path_and_query = path;
  return kOk;
}

LineError ParseRequestLine(std::string_view line, const HeadLimits& limits, RequestHead* head) {
  size_t sp1 = line.find(' ');
  if (sp1 == std::string_view::npos) {
    return {ParseError::kBadRequestLine, 400};
  }
  head->method = line.substr(0, sp1);
  if (!IsToken(head->method)) {
    return {ParseError::kBadMethod, 400};
  }
  std::string_view rest = line.substr(sp1 + 1);
  size_t sp2 = rest.find(' ');
  if (sp2 == std::string_view::npos) {
    return {rest.size() > limits.max_target_bytes ? ParseError::kTargetTooLong
                                                  : ParseError::kBadRequestLine,
            rest.size() > limits.max_target_bytes ? 414 : 400};
  }
  head->target = rest.substr(0, sp2);
  if (head->target.size() > limits.max_target_bytes) {
    return {ParseError::kTargetTooLong, 414};
  }
  if (head->target.empty()) {
    return {ParseError::kBadRequestLine, 400};
  }
  if (LineError e =
          ParseVersion(rest.substr(sp2 + 1), &head->version_minor, ParseError::kBadVersion);
      e.error != ParseError::kNone) {
    return e;
  }
  return ParseTarget(head);
}

LineError ParseStatusLine(std::string_view line, ResponseHead* head) {
  if (line.size() < 12 || line[8] != ' ') {
    return {ParseError::kBadStatusLine, 502};
  }
  if (LineError e =
          ParseVersion(line.substr(0, 8), &head->version_minor, ParseError::kBadStatusLine);
      e.error != ParseError::kNone) {
    return {e.error, 502};
  }
  int code = 0;
  for (size_t i = 9; i < 12; ++i) {
    if (line[i] < '0' || line[i] > '9') {
      return {ParseError::kBadStatusLine, 502};
    }
    code = code * 10 + (line[i] - '0');
  }
  if (code < 100) {
    return {ParseError::kBadStatusLine, 502};
  }
  head->status_code = code;
  // "HTTP/1.1 200" without the space before an empty reason is common enough
  // from upstreams to accept; anything else after the code needs the space.
  if (line.size() == 12) {
    head->reason = {};
    return kOk;
  }
  if (line[12] != ' ') {
    return {ParseError::kBadStatusLine, 502};
  }
  head->reason = line.substr(13);
  for (char c : head->reason) {
    if (!chars::IsFieldValueChar(c)) {
      return {ParseError::kControlChar, 502};
    }
  }
  return kOk;
}

// Some byte of the eight in `w` may be one a field value cannot hold: below
// 0x20 (HTAB included, so it gets the exact check) or DEL. Exact for "none".
inline bool MaybeControlByte(uint64_t w) {
  constexpr uint64_t kOnes = 0x0101010101010101ull;
  constexpr uint64_t kHigh = 0x8080808080808080ull;
  uint64_t below_space = (w - kOnes * 0x20) & ~w & kHigh;
  uint64_t del = w ^ (kOnes * 0x7f);
  del = (del - kOnes) & ~del & kHigh;
  return (below_space | del) != 0;
}

// The 16 bytes at `p` hold one a field value cannot hold, or HTAB (which
// then gets the exact check).
bool TableCheckNeeded(const char* p, size_t count) {
  for (size_t j = 0; j < count; ++j) {
    if (!chars::IsFieldValueChar(p[j])) {
      return true;
    }
  }
  return false;
}

// Field values are checked 16 (SSE2) or eight bytes at a time: 4 KiB
// cookies are common in SAP traffic. A block that may hold a control byte
// gets the table check.
bool AllFieldValueChars(std::string_view value) {
  const char* p = value.data();
  size_t n = value.size();
  size_t i = 0;
#if defined(__SSE2__)
  const __m128i space = _mm_set1_epi8(0x20);
  const __m128i del = _mm_set1_epi8(0x7f);
  for (; i + 16 <= n; i += 16) {
    __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
    // max_epu8(x, 0x20) == x: the byte is 0x20 or above (unsigned).
    int printable = _mm_movemask_epi8(_mm_cmpeq_epi8(_mm_max_epu8(x, space), x));
    int is_del = _mm_movemask_epi8(_mm_cmpeq_epi8(x, del));
    if ((printable != 0xffff || is_del != 0) && TableCheckNeeded(p + i, 16)) {
      return false;
    }
  }
#endif
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    if (MaybeControlByte(w)) {
      for (size_t j = i; j < i + 8; ++j) {
        if (!chars::IsFieldValueChar(p[j])) {
          return false;
        }
      }
    }
  }
  for (; i < n; ++i) {
    if (!chars::IsFieldValueChar(p[i])) {
      return false;
    }
  }
  return true;
}

LineError ParseHeaderLine(std::string_view line, Header* headers, size_t* count, int error_status) {
  char first = line.front();
  if (first == ' ' || first == '\t') {
    return {ParseError::kObsFold, error_status};
  }
  size_t colon = line.find(':');
  if (colon == std::string_view::npos || colon == 0) {
    return {ParseError::kBadHeaderName, error_status};
  }
  std::string_view name = line.substr(0, colon);
  for (char c : name) {
    if (!chars::IsToken(c)) {
      return {(c == ' ' || c == '\t') ? ParseError::kSpaceBeforeColon : ParseError::kBadHeaderName,
              error_status};
    }
  }
  std::string_view value = line.substr(colon + 1);
  if (!AllFieldValueChars(value)) {
    return {ParseError::kControlChar, error_status};
  }
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) {
    value.remove_prefix(1);
  }
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) {
    value.remove_suffix(1);
  }
  if (*count == kMaxHeaders) {
    return {ParseError::kTooManyHeaders, error_status == 400 ? 431 : error_status};
  }
  headers[*count] = {name, value};
  ++*count;
  return kOk;
}

ParseResult Fail(LineError e) {
  ParseResult r;
  r.status = ParseStatus::kError;
  r.error = e.error;
  r.http_status = e.status;
  return r;
}

// A partial request line whose target already exceeds the limit gets 414
// without waiting for the rest; a method longer than any sane one gets 400.
// Also run on every complete request line, so both paths agree.
constexpr size_t kMaxMethodBytes = 64;

LineError CheckPartialRequestLine(std::string_view partial, const HeadLimits& limits) {
  // Cheap exits first: this runs on every call while the line is incomplete.
  if (partial.size() <= kMaxMethodBytes) {
    return kOk;
  }
  size_t sp1 = partial.substr(0, kMaxMethodBytes + 1).find(' ');
  if (sp1 == std::string_view::npos) {
    if (partial.size() > kMaxMethodBytes) {
      return {ParseError::kBadMethod, 400};
    }
    return kOk;
  }
  std::string_view rest = partial.substr(sp1 + 1);
  if (rest.size() <= limits.max_target_bytes) {
    return kOk;
  }
  size_t sp2 = rest.find(' ');
  if (rest.substr(0, sp2).size() > limits.max_target_bytes) {
    return {ParseError::kTargetTooLong, 414};
  }
  return kOk;
}

// The line-oriented scan shared by both parsers. StartLine(line) parses the
// first line; headers go to head->headers.
template <typename Head, typename StartLine, typename PartialStartLine>
ParseResult Scan(detail::ScanState& s, std::string_view buffer, const HeadLimits& limits,
                 int error_status, Head* head, StartLine start_line,
                 PartialStartLine partial_start_line) {
  // A moved buffer invalidates the views written so far; a shrunk one breaks
  // the append-only contract. Either way, start over from the first byte.
  if (buffer.data() != s.base || buffer.size() < s.search_from) {
    s = {};
    s.base = buffer.data();
  }
  if (s.line_start == 0 && !s.start_line_done) {
    head->header_count = 0;
  }
  const int too_large_status = error_status == 400 ? 431 : error_status;
  while (true) {
    const char* found = nullptr;
    if (s.search_from < buffer.size()) {
      found = static_cast<const char*>(
          std::memchr(buffer.data() + s.search_from, '\n', buffer.size() - s.search_from));
    }
    if (found == nullptr) {
      s.search_from = buffer.size();
      std::string_view partial = buffer.substr(s.line_start);
      if (!s.start_line_done) {
        if (LineError e = partial_start_line(partial); e.error != ParseError::kNone) {
          return Fail(e);
        }
      }
      if (buffer.size() > limits.max_head_bytes) {
        return Fail({ParseError::kHeadTooLarge, too_large_status});
      }
      return {};
    }
    size_t lf = static_cast<size_t>(found - buffer.data());
    std::string_view line = buffer.substr(s.line_start, lf - s.line_start);
    // The same checks, in the same order, as on a partial line above, so that
    // any split of the input yields the same error as the whole.
    if (!s.start_line_done) {
      if (LineError e = partial_start_line(line); e.error != ParseError::kNone) {
        return Fail(e);
      }
    }
    if (lf + 1 > limits.max_head_bytes) {
      return Fail({ParseError::kHeadTooLarge, too_large_status});
    }
    if (line.empty() || line.back() != '\r') {
      return Fail({ParseError::kBareLf, error_status});
    }
    line.remove_suffix(1);
    if (std::memchr(line.data(), '\r', line.size()) != nullptr) {
      return Fail({ParseError::kBareCr, error_status});
    }
    if (!s.start_line_done) {
      if (line.empty() && !s.skipped_empty_line && s.line_start == 0) {
        // RFC 9112 2.2: tolerate one empty line before the start line.
        s.skipped_empty_line = true;
      } else {
        if (LineError e = start_line(line); e.error != ParseError::kNone) {
          return Fail(e);
        }
        s.start_line_done = true;
      }
    } else if (line.empty()) {
      ParseResult r;
      r.status = ParseStatus::kComplete;
      r.consumed = lf + 1;
      return r;
    } else if (LineError e =
                   ParseHeaderLine(line, head->headers.data(), &head->header_count, error_status);
               e.error != ParseError::kNone) {
      return Fail(e);
    }
    s.line_start = s.search_from = lf + 1;
  }
}

template <typename Head>
const Header* FindHeader(const Head& head, std::string_view name) {
  for (size_t i = 0; i < head.header_count; ++i) {
    if (EqualsIgnoreCase(head.headers[i].name, name)) {
      return &head.headers[i];
    }
  }
  return nullptr;
}

}  // namespace

bool IsValidAuthority(std::string_view authority, bool require_port) {
  std::string_view host = authority;
  std::string_view port;
  bool has_port = false;
  size_t colon = authority.rfind(':');
  if (colon != std::string_view::npos &&
      (authority.front() != '[' || authority.find(']') < colon)) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
    has_port = true;
  }
  if (has_port && !IsValidPort(port)) {
    return false;
  }
  if (require_port && !has_port) {
    return false;
  }
  return IsValidHost(host);
}

const Header* RequestHead::Find(std::string_view name) const {
  return FindHeader(*this, name);
}
const Header* ResponseHead::Find(std::string_view name) const {
  return FindHeader(*this, name);
}

ParseResult RequestParser::Parse(std::string_view buffer, RequestHead* head) {
  return Scan(
      state_, buffer, limits_, 400, head,
      [&](std::string_view line) { return ParseRequestLine(line, limits_, head); },
      [&](std::string_view partial) { return CheckPartialRequestLine(partial, limits_); });
}

ParseResult ResponseParser::Parse(std::string_view buffer, ResponseHead* head) {
  return Scan(
      state_, buffer, limits_, 502, head,
      [&](std::string_view line) { return ParseStatusLine(line, head); },
      [](std::string_view) { return kOk; });
}

}  // namespace kwd::http_ref
