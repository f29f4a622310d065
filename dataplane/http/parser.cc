#include "dataplane/http/parser.h"

#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "dataplane/http/chars.h"

namespace kwd::http {

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

// `lower` is lower-case; a '_' in it matches '_' or '-' in `name`.
bool FoldedPrefixIs(std::string_view name, std::string_view lower) {
  if (name.size() < lower.size()) {
    return false;
  }
  for (size_t i = 0; i < lower.size(); ++i) {
    char c = name[i] == '-' ? '_' : chars::Lower(name[i]);
    if (c != lower[i]) {
      return false;
    }
  }
  return true;
}

bool IsProxyAssertedTlsName(std::string_view name) {
  return FoldedPrefixIs(name, "ssl_client_cert") ||
         (name.size() == 16 && FoldedPrefixIs(name, "ssl_cipher_suite")) ||
         (name.size() == 21 && FoldedPrefixIs(name, "ssl_cipher_usekeysize"));
}

// A lower-case field name known at compile time, compared with a name of
// the same length a machine word at a time: at the letters' positions both
// cases match (byte | 0x20), elsewhere only the exact byte.
template <size_t N>
struct LowerName {
  char s[N]{};
  constexpr LowerName(const char (&x)[N]) {  // NOLINT: implicit by design
    for (size_t i = 0; i < N; ++i) {
      s[i] = x[i];
    }
  }
};

template <typename T>
constexpr T NameBytes(const char* s, size_t at, bool case_mask) {
  T v = 0;
  for (size_t k = 0; k < sizeof(T); ++k) {
    unsigned char c = static_cast<unsigned char>(s[at + k]);
    unsigned char b = case_mask ? ((c >= 'a' && c <= 'z') ? 0x20 : 0) : c;
    v = static_cast<T>(v | (static_cast<T>(b) << (8 * k)));
  }
  return v;
}

template <LowerName L, typename T, size_t At>
inline bool NameChunkIs(const char* p) {
  constexpr T kWord = NameBytes<T>(L.s, At, false);
  constexpr T kCase = NameBytes<T>(L.s, At, true);
  T v;
  std::memcpy(&v, p + At, sizeof(T));
  return static_cast<T>(v | kCase) == kWord;
}

// `name` has the literal's length (the caller switched on it).
template <LowerName L>
inline bool NameIs(std::string_view name) {
  constexpr size_t n = sizeof(L.s) - 1;
  static_assert(n >= 2 && n <= 24);
  const char* p = name.data();
  if constexpr (n >= 16) {
    return NameChunkIs<L, uint64_t, 0>(p) && NameChunkIs<L, uint64_t, 8>(p) &&
           NameChunkIs<L, uint64_t, n - 8>(p);
  } else if constexpr (n >= 8) {
    return NameChunkIs<L, uint64_t, 0>(p) && NameChunkIs<L, uint64_t, n - 8>(p);
  } else if constexpr (n >= 4) {
    return NameChunkIs<L, uint32_t, 0>(p) && NameChunkIs<L, uint32_t, n - 4>(p);
  } else {
    return NameChunkIs<L, uint16_t, 0>(p) && NameChunkIs<L, uint16_t, n - 2>(p);
  }
}

// Forwarding fields folded: lower case, '-' and '_' left out.
constexpr std::string_view kFoldedForwardingNames[] = {
    "xforwardedfor", "xforwardedproto", "xforwardedhost", "xforwardedport", "xrealip",
    "xrequestid",    "forwarded",       "clientprotocol", "xsapwebdispap"};
constexpr size_t kMaxFoldedForwardingName = 15;

// Whether `name` spells a forwarding field other than as the proxy does
// (called after the exact spellings were classified).
bool IsForwardingAlias(std::string_view name) {
  if (name.size() < 7 || name.size() > 2 * kMaxFoldedForwardingName) {
    return false;
  }
  // The first three letters settle most names at once (Content-Type,
  // Cache-Control, X-CSRF-Token, X-Frame-Options, X-Served-By): "cli",
  // "for", "xfo", "xre" or "xsa".
  char letters[3] = {};
  size_t seen = 0;
  for (size_t i = 0; i < name.size() && seen < 3; ++i) {
    if (name[i] != '-' && name[i] != '_') {
      letters[seen++] = chars::Lower(name[i]);
    }
  }
  const bool candidate =
      (letters[0] == 'c' && letters[1] == 'l' && letters[2] == 'i') ||
      (letters[0] == 'f' && letters[1] == 'o' && letters[2] == 'r') ||
      (letters[0] == 'x' && ((letters[1] == 'f' && letters[2] == 'o') ||
                             (letters[1] == 'r' && letters[2] == 'e') ||
                             (letters[1] == 's' && letters[2] == 'a')));
  if (!candidate) {
    return false;
  }
  char folded[2 * kMaxFoldedForwardingName];
  size_t n = 0;
  for (char c : name) {
    if (c == '-' || c == '_') {
      continue;
    }
    if (n == kMaxFoldedForwardingName) {
      return false;
    }
    folded[n++] = chars::Lower(c);
  }
  std::string_view f(folded, n);
  for (std::string_view candidate : kFoldedForwardingNames) {
    if (f == candidate) {
      return true;
    }
  }
  return false;
}

// The names the proxy spells otherwise (SSL_CLIENT_CERT*, X_Forwarded_For):
// out of line, as few names get this far.
[[gnu::noinline]] FieldId ClassifyOtherSpelling(std::string_view name) {
  if ((name.front() | 0x20) == 's') {
    return IsProxyAssertedTlsName(name) ? FieldId::kProxyAssertedTls : FieldId::kOther;
  }
  return IsForwardingAlias(name) ? FieldId::kForwardingAlias : FieldId::kOther;
}

// A quick look at the first four bytes (the name has seven or more) for
// the common names IsForwardingAlias would refuse by their first letters
// (Content-Type, Cache-Control, X-Served-By, X-Frame-Options): false only
// when it would. Or-ing 0x20 makes a letter lower case and keeps '-';
// '_' becomes DEL. A name with a separator among its first three bytes
// other than the second goes to IsForwardingAlias as it is.
[[gnu::always_inline]] inline bool MayBeForwardingAlias(std::string_view name) {
  auto separator = [](char c) { return c == '-' || c == 0x7f; };
  const char a = static_cast<char>(name[0] | 0x20);
  char b = static_cast<char>(name[1] | 0x20);
  char c = static_cast<char>(name[2] | 0x20);
  if (separator(b)) {
    b = c;
    c = static_cast<char>(name[3] | 0x20);
  }
  if (separator(a) || separator(b) || separator(c)) {
    return true;
  }
  return (a == 'c' && b == 'l' && c == 'i') || (a == 'f' && b == 'o' && c == 'r') ||
         (a == 'x' && ((b == 'f' && c == 'o') || (b == 'r' && c == 'e') || (b == 's' && c == 'a')));
}

// ClassifyFieldName, inlined into the parsers' line loop.
[[gnu::always_inline]] inline FieldId ClassifyName(std::string_view name) {
  if (name.empty()) {
    return FieldId::kOther;
  }
  // One switch on the length and the first byte, then one comparison.
  const char first = static_cast<char>(name.front() | 0x20);
  switch (name.size()) {
    case 2:
      return NameIs<"te">(name) ? FieldId::kTe : FieldId::kOther;
    case 4:
      return NameIs<"host">(name) ? FieldId::kHost : FieldId::kOther;
    case 6:
      return NameIs<"expect">(name) ? FieldId::kExpect : FieldId::kOther;
    case 7:
      if (first == 't') {
        return NameIs<"trailer">(name) ? FieldId::kTrailer : FieldId::kOther;
      }
      if (first == 'u') {
        return NameIs<"upgrade">(name) ? FieldId::kUpgrade : FieldId::kOther;
      }
      break;
    case 9:
      if (first == 'f' && NameIs<"forwarded">(name)) {
        return FieldId::kForwarded;
      }
      if (first == 'x' && NameIs<"x-real-ip">(name)) {
        return FieldId::kXRealIp;
      }
      break;
    case 10:
      if (first == 'c') {
        return NameIs<"connection">(name) ? FieldId::kConnection : FieldId::kOther;
      }
      if (first == 'k') {
        return NameIs<"keep-alive">(name) ? FieldId::kKeepAlive : FieldId::kOther;
      }
      break;
    case 12:
      if (first == 'x' && NameIs<"x-request-id">(name)) {
        return FieldId::kXRequestId;
      }
      break;
    case 14:
      if (first == 'c') {
        if (NameIs<"content-length">(name)) {
          return FieldId::kContentLength;
        }
        if (NameIs<"clientprotocol">(name)) {
          return FieldId::kClientProtocol;
        }
      }
      break;
    case 15:
      if (first == 'x' && NameIs<"x-forwarded-for">(name)) {
        return FieldId::kXForwardedFor;
      }
      break;
    case 16:
      if (first == 'p') {
        return NameIs<"proxy-connection">(name) ? FieldId::kProxyConnection : FieldId::kOther;
      }
      if (first == 'x') {
        if (NameIs<"x-forwarded-host">(name)) {
          return FieldId::kXForwardedHost;
        }
        if (NameIs<"x-forwarded-port">(name)) {
          return FieldId::kXForwardedPort;
        }
        if (NameIs<"x-sap-webdisp-ap">(name)) {
          return FieldId::kSapWebdispAp;
        }
      }
      break;
    case 17:
      if (first == 't') {
        return NameIs<"transfer-encoding">(name) ? FieldId::kTransferEncoding : FieldId::kOther;
      }
      if (first == 'x' && NameIs<"x-forwarded-proto">(name)) {
        return FieldId::kXForwardedProto;
      }
      break;
    default:
      break;
  }
  if (first == 's' && name.size() >= 15) {
    return ClassifyOtherSpelling(name);
  }
  if ((first == 'x' || first == 'c' || first == 'f' || name.front() == '_' ||
       name.front() == '-') &&
      name.size() >= 7 && name.size() <= 2 * kMaxFoldedForwardingName &&
      MayBeForwardingAlias(name)) {
    return ClassifyOtherSpelling(name);
  }
  return FieldId::kOther;
}

}  // namespace

FieldId ClassifyFieldName(std::string_view name) {
  return ClassifyName(name);
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

bool IsSubDelim(char c) {
  return std::string_view("!$&'()*+,;=").find(c) != std::string_view::npos;
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
    // reg-name (RFC 3986 3.2.2): unreserved, pct-encoded and sub-delims
    // ("0.0.0.0=5000" is a name, if an odd one).
    if (!chars::IsHostChar(c) && !IsSubDelim(c)) {
      return false;
    }
  }
  return true;
}

LineError ParseVersion(std::string_view version, int* minor, ParseError bad) {
  // "HTTP/1.1" and "HTTP/1.0", nearly every message: one 8-byte compare.
  if (version.size() == 8) {
    uint64_t word;
    std::memcpy(&word, version.data(), 8);
    uint64_t http11;
    std::memcpy(&http11, "HTTP/1.1", 8);
    uint64_t http10;
    std::memcpy(&http10, "HTTP/1.0", 8);
    if (word == http11 || word == http10) {
      *minor = word == http11 ? 1 : 0;
      return kOk;
    }
  }
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
  // The method's tchars up to the first space in one loop (methods are short);
  // anything else goes to the checks that tell which error it is.
  size_t sp1 = 0;
  while (sp1 < line.size() && chars::IsToken(line[sp1])) {
    ++sp1;
  }
  if (sp1 == 0 || sp1 == line.size() || line[sp1] != ' ') {
    sp1 = line.find(' ');
    if (sp1 == std::string_view::npos) {
      return {ParseError::kBadRequestLine, 400};
    }
    if (!IsToken(line.substr(0, sp1))) {
      head->method = line.substr(0, sp1);
      return {ParseError::kBadMethod, 400};
    }
  }
  head->method = line.substr(0, sp1);
  std::string_view rest = line.substr(sp1 + 1);
  // A short target ("/", "/index.html"): a byte loop, no call to memchr.
  size_t sp2 = std::string_view::npos;
  if (rest.size() <= 32) {
    for (size_t i = 0; i < rest.size(); ++i) {
      if (rest[i] == ' ') {
        sp2 = i;
        break;
      }
    }
  } else {
    sp2 = rest.find(' ');
  }
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
// gets the table check. The last block overlaps the one before it instead of
// a byte loop over the rest (checking a byte twice changes nothing).
[[gnu::always_inline]] inline bool AllFieldValueChars(std::string_view value) {
  const char* p = value.data();
  size_t n = value.size();
#if defined(__SSE2__)
  if (n >= 16) {
    const __m128i space = _mm_set1_epi8(0x20);
    const __m128i del = _mm_set1_epi8(0x7f);
    auto block_ok = [&](size_t i) {
      __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
      // max_epu8(x, 0x20) == x: the byte is 0x20 or above (unsigned).
      int printable = _mm_movemask_epi8(_mm_cmpeq_epi8(_mm_max_epu8(x, space), x));
      int is_del = _mm_movemask_epi8(_mm_cmpeq_epi8(x, del));
      return (printable == 0xffff && is_del == 0) || !TableCheckNeeded(p + i, 16);
    };
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
      if (!block_ok(i)) {
        return false;
      }
    }
    return i == n || block_ok(n - 16);
  }
#endif
  if (n >= 8) {
    auto word_ok = [&](size_t i) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      return !MaybeControlByte(w) || !TableCheckNeeded(p + i, 8);
    };
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      if (!word_ok(i)) {
        return false;
      }
    }
    return i == n || word_ok(n - 8);
  }
  for (size_t i = 0; i < n; ++i) {
    if (!chars::IsFieldValueChar(p[i])) {
      return false;
    }
  }
  return true;
}

// `clean_from`: the bytes of the line from this offset on are known to be
// field-value characters other than HTAB (the line-end scan checked them),
// so only the value's bytes before it need the check.
// Instantiated apart for kPartlyClean (long lines) so that the common
// short line pays nothing for it.
constexpr size_t kNothingClean = static_cast<size_t>(-1);
template <bool kPartlyClean>
LineError ParseHeaderLineSlow(std::string_view line, Header* headers, size_t* count,
                              int error_status, size_t clean_from);
template <bool kPartlyClean>
LineError StoreHeaderLine(std::string_view line, size_t colon, Header* headers, size_t* count,
                          int error_status, size_t clean_from);

template <bool kPartlyClean>
LineError ParseHeaderLine(std::string_view line, Header* headers, size_t* count, int error_status,
                          size_t clean_from) {
  // Fast path: one pass over the name up to the colon. Anything unusual
  // (obs-fold, no colon, a byte that is not a tchar) takes the checks below,
  // which decide which error it is.
#if defined(__SSE2__)
  // Most names are letters, digits and '-' with the colon in the first 16
  // bytes: one block test. The line is followed by CR LF in the buffer, so
  // 16 bytes can be read from its start when it is 14 bytes or longer.
  if (line.size() >= 14) {
    __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(line.data()));
    unsigned colon_mask =
        static_cast<unsigned>(_mm_movemask_epi8(_mm_cmpeq_epi8(x, _mm_set1_epi8(':'))));
    if (colon_mask != 0) {
      // Signed compares: bytes from 0x80 are negative and match nothing.
      __m128i lower = _mm_or_si128(x, _mm_set1_epi8(0x20));
      __m128i alpha = _mm_and_si128(_mm_cmpgt_epi8(lower, _mm_set1_epi8('a' - 1)),
                                    _mm_cmplt_epi8(lower, _mm_set1_epi8('z' + 1)));
      __m128i digit = _mm_and_si128(_mm_cmpgt_epi8(x, _mm_set1_epi8('0' - 1)),
                                    _mm_cmplt_epi8(x, _mm_set1_epi8('9' + 1)));
      __m128i dash = _mm_cmpeq_epi8(x, _mm_set1_epi8('-'));
      unsigned ok =
          static_cast<unsigned>(_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(alpha, digit), dash)));
      unsigned colon = static_cast<unsigned>(__builtin_ctz(colon_mask));
      unsigned name_bits = (1u << colon) - 1;
      if (colon != 0 && (ok & name_bits) == name_bits) {
        return StoreHeaderLine<kPartlyClean>(line, colon, headers, count, error_status, clean_from);
      }
    }
  }
#endif
  size_t name_end = 0;
  while (name_end < line.size() && chars::IsToken(line[name_end])) {
    ++name_end;
  }
  if (name_end == 0 || name_end == line.size() || line[name_end] != ':') {
    return ParseHeaderLineSlow<kPartlyClean>(line, headers, count, error_status, clean_from);
  }
  return StoreHeaderLine<kPartlyClean>(line, name_end, headers, count, error_status, clean_from);
}

template <bool kPartlyClean>
LineError ParseHeaderLineSlow(std::string_view line, Header* headers, size_t* count,
                              int error_status, size_t clean_from) {
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
  return StoreHeaderLine<kPartlyClean>(line, colon, headers, count, error_status, clean_from);
}

// `line[colon]` is the colon after a valid name.
template <bool kPartlyClean>
LineError StoreHeaderLine(std::string_view line, size_t colon, Header* headers, size_t* count,
                          int error_status, size_t clean_from) {
  std::string_view name = line.substr(0, colon);
  std::string_view value = line.substr(colon + 1);
  std::string_view unchecked = value;
  if constexpr (kPartlyClean) {
    unchecked =
        clean_from > colon + 1 ? value.substr(0, clean_from - (colon + 1)) : std::string_view();
  }
  if (!AllFieldValueChars(unchecked)) {
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
  // "name: value" with one space and nothing after the value: the line is
  // what a serialiser would write for the field.
  const bool canonical = value.data() == line.data() + colon + 2 && line[colon + 1] == ' ' &&
                         value.data() + value.size() == line.data() + line.size();
  headers[*count] = {name, value, ClassifyFieldName(name), canonical};
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

// The first CR or LF in [p, end), or nullptr.
const char* FindCrOrLf(const char* p, const char* end) {
#if defined(__SSE2__)
  const __m128i cr = _mm_set1_epi8('\r');
  const __m128i lf = _mm_set1_epi8('\n');
  for (; end - p >= 16; p += 16) {
    __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    int mask = _mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(x, cr), _mm_cmpeq_epi8(x, lf)));
    if (mask != 0) {
      return p + __builtin_ctz(static_cast<unsigned>(mask));
    }
  }
#endif
  for (; p < end; ++p) {
    if (*p == '\r' || *p == '\n') {
      return p;
    }
  }
  return nullptr;
}

constexpr ptrdiff_t kFirstScanBytes = 64;

// The first CR or LF in [p, end), or nullptr. When one is found, *clean
// says whether every byte before it is a field-value character other than
// HTAB (no byte below 0x20, no DEL).
const char* FindLineEndChecking(const char* p, const char* end, bool* clean) {
  bool ok = true;
#if defined(__SSE2__)
  const __m128i space = _mm_set1_epi8(0x20);
  const __m128i del = _mm_set1_epi8(0x7f);
  const __m128i cr = _mm_set1_epi8('\r');
  const __m128i lf = _mm_set1_epi8('\n');
  // The bulk of a long value (4 KiB cookies) 64 bytes a step: one test that
  // none of them is below 0x20 or DEL. The first block with such a byte (the
  // line end at the latest) goes to the 16-byte loop below.
  for (; end - p >= 64; p += 64) {
    const auto* v = reinterpret_cast<const __m128i*>(p);
    const __m128i a = _mm_loadu_si128(v);
    const __m128i b = _mm_loadu_si128(v + 1);
    const __m128i c = _mm_loadu_si128(v + 2);
    const __m128i d = _mm_loadu_si128(v + 3);
    const __m128i low = _mm_min_epu8(_mm_min_epu8(a, b), _mm_min_epu8(c, d));
    const __m128i printable = _mm_cmpeq_epi8(_mm_max_epu8(low, space), low);
    const __m128i dels = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(a, del), _mm_cmpeq_epi8(b, del)),
                                      _mm_or_si128(_mm_cmpeq_epi8(c, del), _mm_cmpeq_epi8(d, del)));
    if (_mm_movemask_epi8(_mm_andnot_si128(dels, printable)) != 0xffff) {
      break;
    }
  }
  for (; end - p >= 16; p += 16) {
    __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    // max_epu8(x, 0x20) == x: the byte is 0x20 or above (unsigned).
    unsigned printable =
        static_cast<unsigned>(_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_max_epu8(x, space), x)));
    unsigned special =
        (~printable & 0xffffu) | static_cast<unsigned>(_mm_movemask_epi8(_mm_cmpeq_epi8(x, del)));
    if (special == 0) {
      continue;
    }
    unsigned eol = static_cast<unsigned>(
        _mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(x, cr), _mm_cmpeq_epi8(x, lf))));
    if (eol != 0) {
      unsigned at = static_cast<unsigned>(__builtin_ctz(eol));
      *clean = ok && (special & ((1u << at) - 1)) == 0;
      return p + at;
    }
    ok = false;
  }
#endif
  for (; p < end; ++p) {
    if (*p == '\r' || *p == '\n') {
      *clean = ok;
      return p;
    }
    if (*p == '\t' || !chars::IsFieldValueChar(*p)) {
      ok = false;
    }
  }
  return nullptr;
}

// Where TryFieldLines stopped.
enum class FastLine : uint8_t {
  kUndecided,  // anything unusual, or an incomplete line: the general path decides
  kEnd,        // the empty line that ends the head
};

#if defined(__SSE2__)
// The masks of 16 bytes of a line: bit i for byte i.
struct BlockMasks {
  unsigned colon;
  unsigned name;     // letter, digit or '-'
  unsigned special;  // below 0x20 (HTAB, CR, LF included) or DEL
};

// Bit i set when byte i of x is below 0x20 or DEL.
inline unsigned SpecialBits(__m128i x) {
  // max_epu8(x, 0x20) == x: the byte is 0x20 or above (unsigned).
  const __m128i printable = _mm_cmpeq_epi8(_mm_max_epu8(x, _mm_set1_epi8(0x20)), x);
  const __m128i del = _mm_cmpeq_epi8(x, _mm_set1_epi8(0x7f));
  return ~static_cast<unsigned>(_mm_movemask_epi8(_mm_andnot_si128(del, printable))) & 0xffffu;
}

// 16 bytes from buffer offset `at`; when fewer are left, the buffer's last 16
// (it holds at least 16), shifted so that bit 0 is still byte `at` and the
// bits past the buffer's end are clear.
inline __m128i LoadBlock(const char* base, size_t size, size_t at, unsigned* shift) {
  if (size - at >= 16) {
    *shift = 0;
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + at));
  }
  *shift = static_cast<unsigned>(16 - (size - at));
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + size - 16));
}
#endif

// The common header lines in one pass over their bytes each: a name of
// letters, digits and '-' with the colon in its first 16 bytes, a value
// without control bytes (no HTAB either) and CR LF. Stores each as the
// general path (ParseHeaderLine, StoreHeaderLine) would: the same name,
// value, id and canonical flag. Goes on from *line_start until the empty
// line (kEnd, *line_start past it) or a line it leaves to the general path
// (kUndecided, *line_start at that line, nothing of it stored): anything
// else, a line not complete in the buffer, a full header table or a head
// past the limit.
template <typename Head>
FastLine TryFieldLines(std::string_view buffer, size_t* line_start_io, const HeadLimits& limits,
                       Head* head) {
#if defined(__SSE2__)
  const char* const base = buffer.data();
  const size_t size = buffer.size();
  size_t line_start = *line_start_io;
  size_t count = head->header_count;
  FastLine result = FastLine::kUndecided;
  // The empty line that ends the head, at line_start.
  auto at_end = [&] {
    return size - line_start >= 2 && base[line_start] == '\r' && base[line_start + 1] == '\n' &&
           line_start + 2 <= limits.max_head_bytes;
  };
  while (true) {
    if (size < 16 || size - line_start < 4) {
      if (at_end()) {
        line_start += 2;
        result = FastLine::kEnd;
      }
      break;
    }
    unsigned shift;
    const __m128i x = LoadBlock(base, size, line_start, &shift);
    const unsigned colon_bits =
        static_cast<unsigned>(_mm_movemask_epi8(_mm_cmpeq_epi8(x, _mm_set1_epi8(':')))) >> shift;
    // Letters, digits and '-': each range moved to the bottom of the signed
    // bytes, so that one compare tells it (a letter is one with 0x20 set).
    const __m128i alpha = _mm_cmpgt_epi8(
        _mm_set1_epi8(static_cast<char>(-128 + 26)),
        _mm_add_epi8(_mm_or_si128(x, _mm_set1_epi8(0x20)), _mm_set1_epi8(0x80 - 'a')));
    const __m128i digit = _mm_cmpgt_epi8(_mm_set1_epi8(static_cast<char>(-128 + 10)),
                                         _mm_add_epi8(x, _mm_set1_epi8(0x80 - '0')));
    const __m128i dash = _mm_cmpeq_epi8(x, _mm_set1_epi8('-'));
    const unsigned name_ok =
        static_cast<unsigned>(_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(alpha, digit), dash))) >>
        shift;
    const unsigned colon = colon_bits == 0 ? 0 : static_cast<unsigned>(__builtin_ctz(colon_bits));
    const unsigned name_bits = (1u << colon) - 1;
    if (colon == 0 || (name_ok & name_bits) != name_bits) {
      // A long name, no colon yet, or no field line at all: perhaps the
      // empty line that ends the head.
      if (at_end()) {
        line_start += 2;
        result = FastLine::kEnd;
      }
      break;
    }
    // The first control byte after the colon must be the CR of the line's end.
    unsigned special = (SpecialBits(x) >> shift) & ~((2u << colon) - 1);
    size_t block = line_start;
    // A few more 16-byte blocks, then the 64-byte steps for a long value.
    for (int more = 0; special == 0; ++more) {
      block += 16;
      if (shift != 0 || block >= size) {
        break;  // the line does not end in the buffer
      }
      if (more == 4) {
        bool clean = false;
        const char* end = FindLineEndChecking(base + block, base + size, &clean);
        if (end == nullptr || !clean) {
          break;
        }
        special = 1;
        block = static_cast<size_t>(end - base);
        break;
      }
      special = SpecialBits(LoadBlock(base, size, block, &shift)) >> shift;
    }
    if (special == 0) {
      break;
    }
    const size_t cr = block + static_cast<unsigned>(__builtin_ctz(special));
    if (base[cr] != '\r' || cr + 1 >= size || base[cr + 1] != '\n' ||
        cr + 2 > limits.max_head_bytes || count == kMaxHeaders) {
      break;
    }
    const char* line = base + line_start;
    const char* value = line + colon + 1;
    const char* value_end = base + cr;
    // No HTAB in the line: only spaces to trim.
    while (value < value_end && *value == ' ') {
      ++value;
    }
    while (value_end > value && value_end[-1] == ' ') {
      --value_end;
    }
    const std::string_view name(line, colon);
    // Member by member: no temporary Header to copy.
    Header& h = head->headers[count++];
    h.name = name;
    h.value = std::string_view(value, static_cast<size_t>(value_end - value));
    h.id = ClassifyName(name);
    // "name: value" with one space and nothing after the value.
    h.canonical = value == line + colon + 2 && value_end == base + cr;
    line_start = cr + 2;
  }
  head->header_count = count;
  *line_start_io = line_start;
  return result;
#else
  (void)buffer;
  (void)line_start_io;
  (void)limits;
  (void)head;
  return FastLine::kUndecided;
#endif
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
    // Most header lines: one pass (TryFieldLines); the rest, the start line
    // and an incomplete line go the general way below.
    if (s.start_line_done && s.search_from == s.line_start) {
      size_t next = s.line_start;
      const FastLine fast = TryFieldLines(buffer, &next, limits, head);
      if (fast == FastLine::kEnd) {
        ParseResult r;
        r.status = ParseStatus::kComplete;
        r.consumed = next;
        return r;
      }
      s.line_start = s.search_from = next;
    }
    // Fast path for a line not started in an earlier call: the first CR or
    // LF from its start is a CR followed by LF, so the line ends there and
    // holds no bare CR. Anything else takes the general search below.
    if (s.search_from == s.line_start && s.line_start < buffer.size()) {
      // The first 64 bytes as before; a longer line's rest (4 KiB cookies)
      // is searched and checked for control bytes in the same pass, so its
      // value is not read twice.
      const char* line_begin = buffer.data() + s.line_start;
      const char* buffer_end = buffer.data() + buffer.size();
      const char* first_end =
          buffer_end - line_begin > kFirstScanBytes ? line_begin + kFirstScanBytes : buffer_end;
      size_t clean_from = kNothingClean;
      const char* cr = FindCrOrLf(line_begin, first_end);
      if (cr == nullptr && first_end != buffer_end) {
        bool clean = false;
        cr = FindLineEndChecking(first_end, buffer_end, &clean);
        if (clean) {
          clean_from = kFirstScanBytes;
        }
      }
      if (cr != nullptr && *cr == '\r' && cr + 1 < buffer.data() + buffer.size() && cr[1] == '\n') {
        size_t lf = static_cast<size_t>(cr + 1 - buffer.data());
        std::string_view line = buffer.substr(s.line_start, lf - s.line_start);
        if (!s.start_line_done) {
          if (LineError e = partial_start_line(line); e.error != ParseError::kNone) {
            return Fail(e);
          }
        }
        if (lf + 1 > limits.max_head_bytes) {
          return Fail({ParseError::kHeadTooLarge, too_large_status});
        }
        line.remove_suffix(1);
        if (!s.start_line_done) {
          if (line.empty() && !s.skipped_empty_line && s.line_start == 0) {
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
                       clean_from == kNothingClean
                           ? ParseHeaderLine<false>(line, head->headers.data(), &head->header_count,
                                                    error_status, clean_from)
                           : ParseHeaderLine<true>(line, head->headers.data(), &head->header_count,
                                                   error_status, clean_from);
                   e.error != ParseError::kNone) {
          return Fail(e);
        }
        s.line_start = s.search_from = lf + 1;
        continue;
      }
    }
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
    } else if (LineError e = ParseHeaderLine<false>(line, head->headers.data(), &head->header_count,
                                                    error_status, kNothingClean);
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

template <typename Head>
const Header* FindHeader(const Head& head, FieldId id) {
  for (size_t i = 0; i < head.header_count; ++i) {
    if (head.headers[i].Id() == id) {
      return &head.headers[i];
    }
  }
  return nullptr;
}

}  // namespace

namespace {

#if defined(__SSE2__)
// Bit i of *host for byte i of the 16 at x: a host character (letter,
// digit, '-', '.', '_', '~'); of *colon: ':'.
inline void HostBits(__m128i x, unsigned* host, unsigned* colon) {
  // Letters and digits: each range moved to the bottom of the signed bytes.
  const __m128i alpha = _mm_cmpgt_epi8(
      _mm_set1_epi8(static_cast<char>(-128 + 26)),
      _mm_add_epi8(_mm_or_si128(x, _mm_set1_epi8(0x20)), _mm_set1_epi8(0x80 - 'a')));
  const __m128i digit = _mm_cmpgt_epi8(_mm_set1_epi8(static_cast<char>(-128 + 10)),
                                       _mm_add_epi8(x, _mm_set1_epi8(0x80 - '0')));
  const __m128i marks = _mm_or_si128(
      _mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('-')), _mm_cmpeq_epi8(x, _mm_set1_epi8('.'))),
      _mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('_')), _mm_cmpeq_epi8(x, _mm_set1_epi8('~'))));
  *host = static_cast<unsigned>(_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(alpha, digit), marks)));
  *colon = static_cast<unsigned>(_mm_movemask_epi8(_mm_cmpeq_epi8(x, _mm_set1_epi8(':'))));
}
#endif

// The fast path's question for an authority of 8 to 64 bytes, 16 bytes a
// step (the last step overlapping the one before): are all its bytes host
// characters but at most one colon? Then *colon_at is that colon's offset
// (npos: none). False: some other byte, or a second colon.
bool PlainAuthority(std::string_view authority, size_t* colon_at) {
#if defined(__SSE2__)
  const size_t n = authority.size();
  const char* p = authority.data();
  uint64_t other = 0;   // bit i: byte i is neither a host character nor ':'
  uint64_t colons = 0;  // bit i: byte i is ':'
  unsigned host;
  unsigned colon;
  if (n < 16) {
    // Two overlapping 8-byte halves: bytes 0-7 and n-8 to n-1.
    const __m128i x = _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)),
                                         _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + n - 8)));
    HostBits(x, &host, &colon);
    other = (~(host | colon) & 0xffu) | static_cast<uint64_t>((~(host | colon) >> 8) & 0xffu) << (n - 8);
    colons = (colon & 0xffu) | static_cast<uint64_t>((colon >> 8) & 0xffu) << (n - 8);
  } else {
    for (size_t at = 0;; at += 16) {
      const size_t from = at + 16 <= n ? at : n - 16;
      HostBits(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + from)), &host, &colon);
      other |= static_cast<uint64_t>(~(host | colon) & 0xffffu) << from;
      colons |= static_cast<uint64_t>(colon) << from;
      if (from + 16 >= n) {
        break;
      }
    }
  }
  if (other != 0 || (colons & (colons - 1)) != 0) {
    return false;
  }
  *colon_at = colons == 0 ? std::string_view::npos : static_cast<size_t>(__builtin_ctzll(colons));
  return true;
#else
  (void)authority;
  (void)colon_at;
  return false;
#endif
}

}  // namespace

bool IsValidAuthority(std::string_view authority, bool require_port) {
  if (authority.size() >= 8 && authority.size() <= 64) {
    size_t colon = 0;
    if (PlainAuthority(authority, &colon)) {
      // What the loop below finds for such an authority.
      if (colon == std::string_view::npos) {
        return !require_port;
      }
      return colon > 0 && IsValidPort(authority.substr(colon + 1));
    }
  }
  // Fast path, one pass: a reg-name or IPv4 address of plain host
  // characters with at most one colon (the port's). Anything else ('%',
  // '[', a second colon) takes the general checks below.
  size_t first_colon = std::string_view::npos;
  size_t i = 0;
  // Four host characters a step up to the first other byte (the colon).
  const auto* bytes = reinterpret_cast<const unsigned char*>(authority.data());
  while (i + 4 <= authority.size() &&
         (chars::kTable[bytes[i]] & chars::kTable[bytes[i + 1]] & chars::kTable[bytes[i + 2]] &
          chars::kTable[bytes[i + 3]] & chars::kHost) != 0) {
    i += 4;
  }
  for (; i < authority.size(); ++i) {
    char c = authority[i];
    if (chars::IsHostChar(c)) {
      continue;
    }
    if (c != ':' || first_colon != std::string_view::npos) {
      break;
    }
    first_colon = i;
  }
  if (i == authority.size()) {
    if (first_colon == std::string_view::npos) {
      return !require_port && !authority.empty();
    }
    return first_colon > 0 && IsValidPort(authority.substr(first_colon + 1));
  }
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

ParseError ParseRequestTarget(RequestHead* head) {
  return head->target.empty() ? ParseError::kBadTarget : ParseTarget(head).error;
}

const Header* RequestHead::Find(std::string_view name) const {
  return FindHeader(*this, name);
}
const Header* ResponseHead::Find(std::string_view name) const {
  return FindHeader(*this, name);
}
const Header* RequestHead::Find(FieldId id) const {
  return FindHeader(*this, id);
}
const Header* ResponseHead::Find(FieldId id) const {
  return FindHeader(*this, id);
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

}  // namespace kwd::http
