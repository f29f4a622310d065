#include "dataplane/session/session_ids.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/crypto.h"
#include "common/string_hash.h"

namespace kwd::session {
namespace {

constexpr std::string_view kContextIdName = "sap-contextid";
constexpr std::string_view kContextIdBracketShortName = "s";
constexpr std::string_view kJSessionIdCookie = "JSESSIONID";
constexpr std::string_view kJSessionIdParam = "jsessionid";
constexpr std::string_view kExtSidParam = "sap-ext-sid";
constexpr std::string_view kSaplbPrefix = "saplb_";
constexpr std::string_view kContextIdPrefix = "SID:ANON:";
const unsigned char kSaplbBytes[] = {'s', 'a', 'p', 'l', 'b', '_'};

bool IsCookieSpace(char c) {
  return c == ' ' || c == '\t';
}

std::string_view TrimSpaces(std::string_view s) {
  while (!s.empty() && IsCookieSpace(s.front())) {
    s.remove_prefix(1);
  }
  while (!s.empty() && IsCookieSpace(s.back())) {
    s.remove_suffix(1);
  }
  return s;
}

char AsciiLower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (AsciiLower(a[i]) != AsciiLower(b[i])) {
      return false;
    }
  }
  return true;
}

// Instance names end up in logs, metrics lookups and server comparisons:
// accept only visible ASCII so a decoded control byte never gets that far.
bool IsVisibleAscii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

// "(<instance>)<rest>" -> instance and rest; false when malformed or the
// instance is empty.
bool SplitParenthesizedInstance(std::string_view value, std::string_view* instance,
                                std::string_view* rest) {
  if (value.size() < 3 || value.front() != '(') {
    return false;
  }
  size_t close = value.find(')', 1);
  if (close == std::string_view::npos || close == 1) {
    return false;
  }
  std::string_view name = value.substr(1, close - 1);
  if (!IsVisibleAscii(name) || name.find('(') != std::string_view::npos) {
    return false;
  }
  *instance = name;
  *rest = value.substr(close + 1);
  return true;
}

// Bump allocator over SessionIds::scratch. Decoded values are only needed
// when a value holds escapes, so plain values stay views into the request.
class Scratch {
 public:
  explicit Scratch(SessionIds* ids) : ids_(ids) {}

  size_t Available() const { return ids_->scratch.size() - ids_->scratch_used; }
  char* Cursor() { return ids_->scratch.data() + ids_->scratch_used; }
  size_t Mark() const { return ids_->scratch_used; }
  void Release(size_t mark) { ids_->scratch_used = mark; }
  void Consume(size_t n) { ids_->scratch_used += n; }

  // Percent-decodes `in` when it needs it; false when it is malformed or does
  // not fit.
  bool Decode(std::string_view in, bool plus_is_space, std::string_view* out) {
    bool needs_decoding = in.find('%') != std::string_view::npos ||
                          (plus_is_space && in.find('+') != std::string_view::npos);
    if (!needs_decoding) {
      *out = in;
      return true;
    }
    int n = PercentDecode(in, Cursor(), Available(), plus_is_space);
    if (n < 0) {
      return false;
    }
    *out = std::string_view(Cursor(), static_cast<size_t>(n));
    Consume(static_cast<size_t>(n));
    return true;
  }

 private:
  SessionIds* ids_;
};

// ContextIdInstanceFromEncoded (below) without its fast path: decodes the
// whole value, then reads it.
std::string_view ContextIdInstanceFromEncodedGeneral(std::string_view encoded, bool plus_is_space,
                                                     Scratch* scratch) {
  size_t mark = scratch->Mark();
  std::string_view decoded;
  if (!scratch->Decode(encoded, plus_is_space, &decoded)) {
    scratch->Release(mark);
    return {};
  }
  std::string_view instance = ContextIdInstance(decoded);
  if (instance.empty()) {
    scratch->Release(mark);
  }
  return instance;
}

// The first byte of s[from, size) that may not stand in an instance as it
// is ("%", ":", "+", a control byte, space, DEL or a non-ASCII byte);
// size when there is none.
size_t InstanceEnd(const char* s, size_t from, size_t size) {
  size_t i = from;
#if defined(__SSE2__)
  for (; i + 16 <= size; i += 16) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    // Signed: bytes >= 0x80 are negative, so "> 0x20 and < 0x7f" is one pair.
    const __m128i visible =
        _mm_and_si128(_mm_cmpgt_epi8(x, _mm_set1_epi8(0x20)), _mm_cmplt_epi8(x, _mm_set1_epi8(0x7f)));
    const __m128i special =
        _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('%')),
                                  _mm_cmpeq_epi8(x, _mm_set1_epi8(':'))),
                     _mm_cmpeq_epi8(x, _mm_set1_epi8('+')));
    const auto stop = static_cast<unsigned>(_mm_movemask_epi8(special)) |
                      (~static_cast<unsigned>(_mm_movemask_epi8(visible)) & 0xffff);
    if (stop != 0) {
      return i + static_cast<size_t>(std::countr_zero(stop));
    }
  }
#endif
  for (; i < size; ++i) {
    const char c = s[i];
    if (c <= 0x20 || c >= 0x7f || c == '%' || c == ':' || c == '+') {
      return i;
    }
  }
  return size;
}

// The 8 bytes of `text` as Read8 loads them.
constexpr uint64_t Word(const char (&text)[9]) {
  uint64_t word = 0;
  for (int i = 7; i >= 0; --i) {
    word = word << 8 | static_cast<unsigned char>(text[i]);
  }
  return word;
}

// The ASCII case bit of byte `i` of a word.
constexpr uint64_t CaseBit(int i) {
  return uint64_t{0x20} << (8 * i);
}

// "%3A" or "%3a" at s[i].
bool IsEncodedColon(std::string_view s, size_t i) {
  return s.size() - i >= 3 && s[i] == '%' && s[i + 1] == '3' && (s[i + 2] | 0x20) == 'a';
}

// URL-decodes a sap-contextid value and returns its instance; on failure the
// scratch space it used is given back. The usual values, "SID:ANON:<instance>:..."
// with the colons all raw or all "%3A" and no escape in the instance, are
// read without decoding them: the same result, the same view (into the
// value when it holds nothing to decode, else into the scratch) and the
// same scratch use as the general path, which decodes the whole value
// first and takes every other value.
std::string_view ContextIdInstanceFromEncoded(std::string_view encoded, bool plus_is_space,
                                              Scratch* scratch) {
  using string_hash_internal::Read8;
  const size_t size = encoded.size();
  const auto* bytes = reinterpret_cast<const unsigned char*>(encoded.data());
  size_t head;  // bytes of the encoded prefix
  bool decoded;  // the value holds an escape (or a "+" read as a space)
  // "SID:ANON:", or "SID%3aANON%3a" with either case of the "a"s: words
  // compared with the "a"s' case bit set.
  if (size >= 9 && Read8(bytes) == Word("SID:ANON") && bytes[8] == ':') {
    head = 9;
    decoded = false;
  } else if (size >= 13 && (Read8(bytes) | CaseBit(5)) == Word("SID%3aAN") &&
             (Read8(bytes + 5) | CaseBit(0) | CaseBit(7)) == Word("aANON%3a")) {
    head = 13;
    decoded = true;
  } else {
    return ContextIdInstanceFromEncodedGeneral(encoded, plus_is_space, scratch);
  }
  if (size > scratch->Available()) {
    return ContextIdInstanceFromEncodedGeneral(encoded, plus_is_space, scratch);
  }
  const size_t instance_end = InstanceEnd(encoded.data(), head, size);
  size_t rest;  // where what follows the instance's ":" starts
  if (instance_end < size && encoded[instance_end] == ':') {
    rest = instance_end + 1;
  } else if (IsEncodedColon(encoded, instance_end)) {
    rest = instance_end + 3;
    decoded = true;
  } else {
    return ContextIdInstanceFromEncodedGeneral(encoded, plus_is_space, scratch);
  }
  const size_t instance_size = instance_end - head;
  if (instance_size == 0 || rest == size) {
    return {};  // an empty instance, or nothing after its ":"
  }
  // The rest only has to decode: its escapes well formed.
  const char* const in = encoded.data();
  size_t rest_escapes = 0;
  for (size_t at = rest; at < size;) {
    const void* found = std::memchr(in + at, '%', size - at);
    if (found == nullptr) {
      break;
    }
    const size_t escape = static_cast<size_t>(static_cast<const char*>(found) - in);
    if (size - escape < 3 || HexDigitValue(in[escape + 1]) < 0 ||
        HexDigitValue(in[escape + 2]) < 0) {
      return {};
    }
    ++rest_escapes;
    at = escape + 3;
  }
  decoded = decoded || rest_escapes != 0 ||
            (plus_is_space && std::memchr(in + rest, '+', size - rest) != nullptr);
  if (!decoded) {
    // Nothing to decode: a view into the value, no scratch used.
    return encoded.substr(head, instance_size);
  }
  // The decoded value's head in the scratch, the rest only counted (it is
  // never read).
  char* const out = scratch->Cursor();
  std::memcpy(out, kContextIdPrefix.data(), kContextIdPrefix.size());
  std::memcpy(out + kContextIdPrefix.size(), in + head, instance_size);
  out[kContextIdPrefix.size() + instance_size] = ':';
  scratch->Consume(kContextIdPrefix.size() + instance_size + 1 + (size - rest) -
                   2 * rest_escapes);
  return std::string_view(out + kContextIdPrefix.size(), instance_size);
}

struct CookieFindings {
  std::string_view contextid;  // raw (still URL-encoded) value
  bool has_contextid = false;
  bool has_jsessionid = false;
  bool has_affinity = false;
};

bool SaplbGroupSeen(const SessionIds& ids, std::string_view group) {
  for (size_t i = 0; i < ids.saplb_count; ++i) {
    if (ids.saplb[i].group == group) {
      return true;
    }
  }
  return false;
}

// memchr's answer as an offset.
size_t SemicolonFrom(const char* p, size_t from, size_t size) {
  const void* found = std::memchr(p + from, ';', size - from);
  return found == nullptr ? size : static_cast<size_t>(static_cast<const char*>(found) - p);
}

// The first ";" of p[from, size), or size when there is none. Most pairs
// end within 64 bytes: those are found 16 bytes at a time (the last block
// overlaps what was already read, never reading past `size`; a byte loop
// where there is no SSE2); a longer pair (a 4 KiB logon ticket) goes to
// memchr, whose wider steps read it faster.
size_t NextSemicolon(const char* p, size_t from, size_t size) {
  size_t i = from;
#if defined(__SSE2__)
  if (size >= 16) {
    const __m128i semicolon = _mm_set1_epi8(';');
    for (int block = 0; block < 4; ++block) {
      if (size - i <= 16) {
        // The last 16 bytes of the header, less those before `i`.
        const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + size - 16));
        const auto mask =
            static_cast<unsigned>(_mm_movemask_epi8(_mm_cmpeq_epi8(x, semicolon))) >>
            (i - (size - 16));
        return mask != 0 ? i + static_cast<size_t>(std::countr_zero(mask)) : size;
      }
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
      const auto mask = static_cast<unsigned>(_mm_movemask_epi8(_mm_cmpeq_epi8(x, semicolon)));
      if (mask != 0) {
        return i + static_cast<size_t>(std::countr_zero(mask));
      }
      i += 16;
    }
    return SemicolonFrom(p, i, size);
  }
#endif
  for (const size_t stop = std::min(size, i + 64); i < stop; ++i) {
    if (p[i] == ';') {
      return i;
    }
  }
  return i == size ? size : SemicolonFrom(p, i, size);
}

// A pair's value: p[from, end) without the spaces around it and without one
// pair of enclosing double quotes (NextCookie's reading).
std::string_view CookieValue(const char* p, size_t from, size_t end) {
  std::string_view value = TrimSpaces(std::string_view(p + from, end - from));
  if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
    value = value.substr(1, value.size() - 2);
  }
  return value;
}

// Whether the pair p[at, end), whose name starts at `at` (the spaces before
// it skipped), is named `name` (which holds no "=" and no ";", and neither
// starts nor ends with a space or a tab): `name`, spaces, "=". Its value into
// `value`. NextCookie reads the same pair so: its first "=" follows `name`
// and the spaces, and the name trimmed of spaces is `name`.
bool PairNamed(const char* p, size_t at, size_t end, std::string_view name,
               std::string_view* value) {
  if (end - at <= name.size() || !BytesEqual(p + at, name.data(), name.size())) {
    return false;
  }
  size_t i = at + name.size();
  while (i < end && IsCookieSpace(p[i])) {
    ++i;
  }
  if (i == end || p[i] != '=') {
    return false;
  }
  *value = CookieValue(p, i + 1, end);
  return true;
}

// Whether a configured affinity cookie name can be some pair's name at all:
// a name NextCookie gives holds no "=" (its first "=" ends it) or ";" and is
// trimmed of spaces. One that cannot is never found (as with ==); PairNamed
// alone would take "a=b" in "a=b=c" or "a " in "a =c". Asked only once a
// pair matched, so a request without the affinity cookie never pays it.
bool IsPossibleCookieName(std::string_view name) {
  using string_hash_internal::Read4;
  using string_hash_internal::Read8;
  const size_t n = name.size();
  if (n == 0 || IsCookieSpace(name.front()) || IsCookieSpace(name.back())) {
    return false;
  }
  // Whether a word holds an "=" or a ";" byte (SWAR: a byte of x is zero).
  const auto holds = [](uint64_t word) {
    constexpr uint64_t kOnes = 0x0101010101010101ull;
    constexpr uint64_t kTops = 0x8080808080808080ull;
    const uint64_t equals = word ^ (kOnes * '=');
    const uint64_t semicolons = word ^ (kOnes * ';');
    return (((equals - kOnes) & ~equals) | ((semicolons - kOnes) & ~semicolons)) & kTops;
  };
  const auto* bytes = reinterpret_cast<const unsigned char*>(name.data());
  if (n >= 8) {
    for (size_t i = 0; i + 8 < n; i += 8) {
      if (holds(Read8(bytes + i)) != 0) {
        return false;
      }
    }
    return holds(Read8(bytes + n - 8)) == 0;
  }
  if (n >= 4) {
    return holds(Read4(bytes) << 32 | Read4(bytes + n - 4)) == 0;
  }
  return std::none_of(name.begin(), name.end(), [](char c) { return c == '=' || c == ';'; });
}

void TakeSaplb(std::string_view group, std::string_view value, SessionIds* out,
               Scratch* scratch) {
  if (out->saplb_count >= SessionIds::kMaxSaplb || SaplbGroupSeen(*out, group)) {
    return;
  }
  // Java servers may send the value URL-encoded ("%28...%29").
  size_t mark = scratch->Mark();
  std::string_view decoded;
  std::string_view instance;
  std::string_view node;
  if (scratch->Decode(value, /*plus_is_space=*/false, &decoded) &&
      SplitParenthesizedInstance(decoded, &instance, &node)) {
    out->saplb[out->saplb_count++] = SaplbCookie{group, instance};
  } else {
    scratch->Release(mark);
  }
}

// The Cookie headers' pairs in one pass, with the results NextCookie's
// pairs give (the first pair of each name wins; saplb_* as below). Each
// pair's ";" is searched for once; only a pair whose name starts with the
// first byte of a name looked for (the affinity cookie's, "s" or "J") is
// read further, and its "=" is searched for only when it is "saplb_<group>".
// Every other pair (sap-usercontext, a 4 KiB MYSAPSSO2 logon ticket) costs
// the search for its ";" alone.
void ReadCookies(const RequestParts& request, std::string_view affinity_cookie_name,
                 SessionIds* out, CookieFindings* found, Scratch* scratch) {
  using string_hash_internal::Read4;
  using string_hash_internal::Read8;
  // Checked apart from the others: a deployment may name the affinity
  // cookie like one of the SAP cookies, and it must still be found.
  const bool want_affinity = !affinity_cookie_name.empty();
  const char affinity_first = want_affinity ? affinity_cookie_name.front() : '\0';
  for (std::string_view header : request.cookie_headers) {
    const char* const p = header.data();
    const size_t size = header.size();
    for (size_t pair = 0; pair < size;) {
      const size_t end = NextSemicolon(p, pair, size);
      size_t at = pair;
      while (at < end && IsCookieSpace(p[at])) {
        ++at;
      }
      pair = end + 1;
      if (at == end) {
        continue;
      }
      const char first = p[at];
      std::string_view value;
      if (want_affinity && first == affinity_first && !found->has_affinity &&
          PairNamed(p, at, end, affinity_cookie_name, &value) &&
          IsPossibleCookieName(affinity_cookie_name)) {
        found->has_affinity = true;
        out->affinity_cookie = value;
      }
      const auto* bytes = reinterpret_cast<const unsigned char*>(p + at);
      const size_t room = end - at;  // the name, spaces, "=" and value
      if (first == 's') {
        if (room > kContextIdName.size() && Read8(bytes) == Word("sap-cont") &&
            Read8(bytes + 5) == Word("ontextid")) {
          if (!found->has_contextid && PairNamed(p, at, end, kContextIdName, &value)) {
            found->has_contextid = true;
            found->contextid = value;
          }
        } else if (room > kSaplbPrefix.size() + 1 && Read4(bytes) == Read4(kSaplbBytes) &&
                   Read4(bytes + 2) == Read4(kSaplbBytes + 2)) {
          // "saplb_<group>": the name ends at the pair's first "=".
          const void* sign = std::memchr(p + at, '=', room);
          if (sign == nullptr) {
            continue;
          }
          const auto eq = static_cast<size_t>(static_cast<const char*>(sign) - p);
          std::string_view name = TrimSpaces(std::string_view(p + at, eq - at));
          if (name.size() > kSaplbPrefix.size()) {
            TakeSaplb(name.substr(kSaplbPrefix.size()), CookieValue(p, eq + 1, end), out,
                      scratch);
          }
        }
      } else if (first == 'J') {
        if (!found->has_jsessionid && PairNamed(p, at, end, kJSessionIdCookie, &value)) {
          found->has_jsessionid = true;
          out->jsessionid = value;
        }
      }
    }
  }
}

// First value of `key` (case-insensitive; it holds no "=" or "&") in an
// "a=b&c=d" string. A pair is `key` exactly when its "=" comes right after
// key.size() bytes that equal it (which then hold no "&" or "=" either): one
// byte and a compare per pair, and a search for the next "&" only.
bool FindFormValue(std::string_view form, std::string_view key, std::string_view* value) {
  const size_t k = key.size();
  while (!form.empty()) {
    if (form.size() > k && form[k] == '=' && EqualsIgnoreCase(form.substr(0, k), key)) {
      const std::string_view rest = form.substr(k + 1);
      *value = rest.substr(0, rest.find('&'));
      return true;
    }
    const size_t amp = form.find('&');
    form = amp == std::string_view::npos ? std::string_view() : form.substr(amp + 1);
  }
  return false;
}

struct PathParams {
  std::string_view contextid;
  std::string_view jsessionid;
  std::string_view ext_sid;
  bool has_contextid = false;
  bool has_jsessionid = false;
  bool has_ext_sid = false;
};

// Whether `name` equals `lowercase_key` ASCII case-insensitively: a word at
// a time (the parameter names are 10-13 bytes).
bool EqualsLowercaseKey(std::string_view name, std::string_view lowercase_key) {
  using string_hash_internal::Read8;
  const size_t size = name.size();
  if (size != lowercase_key.size()) {
    return false;
  }
  const auto* p = reinterpret_cast<const unsigned char*>(name.data());
  const auto* k = reinterpret_cast<const unsigned char*>(lowercase_key.data());
  if (size >= 8) {
    for (size_t i = 0; i + 8 <= size; i += 8) {
      if (AsciiLowerWord(Read8(p + i)) != Read8(k + i)) {
        return false;
      }
    }
    return AsciiLowerWord(Read8(p + size - 8)) == Read8(k + size - 8);
  }
  for (size_t i = 0; i < size; ++i) {
    if (AsciiLower(name[i]) != lowercase_key[i]) {
      return false;
    }
  }
  return true;
}

// The first "/", ";" or "?" of `path` at or after `from`; path.size() when
// there is none.
size_t ParamEnd(std::string_view path, size_t from) {
  const char* p = path.data();
  const size_t size = path.size();
  size_t i = from;
#if defined(__SSE2__)
  for (; i + 16 <= size; i += 16) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
    const __m128i ends = _mm_or_si128(
        _mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('/')), _mm_cmpeq_epi8(x, _mm_set1_epi8(';'))),
        _mm_cmpeq_epi8(x, _mm_set1_epi8('?')));
    if (const auto mask = static_cast<unsigned>(_mm_movemask_epi8(ends)); mask != 0) {
      return i + static_cast<size_t>(std::countr_zero(mask));
    }
  }
#endif
  for (; i < size; ++i) {
    const char c = p[i];
    if (c == '/' || c == ';' || c == '?') {
      return i;
    }
  }
  return size;
}

// ";name=value" path parameters; each ends at the next "/", ";" or "?".
void ReadPathParams(std::string_view path, PathParams* params) {
  size_t pos = path.find(';');
  while (pos != std::string_view::npos) {
    size_t start = pos + 1;
    size_t end = ParamEnd(path, start);
    if (end == path.size()) {
      end = std::string_view::npos;
    }
    std::string_view param = path.substr(start, end == std::string_view::npos ? end : end - start);
    size_t eq = param.find('=');
    if (eq != std::string_view::npos) {
      std::string_view name = param.substr(0, eq);
      std::string_view value = param.substr(eq + 1);
      if (EqualsLowercaseKey(name, kContextIdName) && !params->has_contextid) {
        params->has_contextid = true;
        params->contextid = value;
      } else if (EqualsLowercaseKey(name, kJSessionIdParam) && !params->has_jsessionid) {
        params->has_jsessionid = true;
        params->jsessionid = value;
      } else if (EqualsLowercaseKey(name, kExtSidParam) && !params->has_ext_sid) {
        params->has_ext_sid = true;
        params->ext_sid = value;
      }
    }
    if (end == std::string_view::npos || path[end] == '?') {
      break;
    }
    pos = path[end] == ';' ? end : path.find(';', end);
  }
}

std::string_view ContextIdFromBracket(std::string_view bracket, Scratch* scratch) {
  if (bracket.empty()) {
    return {};
  }
  size_t mark = scratch->Mark();
  int decoded_len = Base64Decode(bracket, scratch->Cursor(), scratch->Available());
  if (decoded_len <= 0) {
    return {};
  }
  std::string_view form(scratch->Cursor(), static_cast<size_t>(decoded_len));
  scratch->Consume(static_cast<size_t>(decoded_len));
  std::string_view value;
  std::string_view instance;
  if (FindFormValue(form, kContextIdBracketShortName, &value) ||
      FindFormValue(form, kContextIdName, &value)) {
    instance = ContextIdInstanceFromEncoded(value, /*plus_is_space=*/true, scratch);
  }
  if (instance.empty()) {
    scratch->Release(mark);
  }
  return instance;
}

// The first ";" of `header` (its size when there is none) and the first "="
// before it (npos when there is none), as header.find(';') and then
// find('=') in the pair give them: the first 16 bytes in one SSE2 step (a
// name, its "=" and often the whole pair), memchr beyond (a 4 KiB logon
// ticket takes memchr's wider steps).
void FindPairEnds(std::string_view header, size_t* semicolon, size_t* eq) {
  const char* p = header.data();
  const size_t size = header.size();
  size_t from = 0;  // where the search goes on for what is not found yet
  size_t equals = std::string_view::npos;
#if defined(__SSE2__)
  if (size >= 16) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const auto semicolons =
        static_cast<unsigned>(_mm_movemask_epi8(_mm_cmpeq_epi8(x, _mm_set1_epi8(';'))));
    auto equal_signs =
        static_cast<unsigned>(_mm_movemask_epi8(_mm_cmpeq_epi8(x, _mm_set1_epi8('='))));
    if (semicolons != 0) {
      const auto at = static_cast<size_t>(std::countr_zero(semicolons));
      equal_signs &= (1u << at) - 1;
      *semicolon = at;
      *eq = equal_signs != 0 ? static_cast<size_t>(std::countr_zero(equal_signs))
                             : std::string_view::npos;
      return;
    }
    if (equal_signs != 0) {
      equals = static_cast<size_t>(std::countr_zero(equal_signs));
    }
    from = 16;
  }
#endif
  const void* found = std::memchr(p + from, ';', size - from);
  const size_t end =
      found == nullptr ? size : static_cast<size_t>(static_cast<const char*>(found) - p);
  if (equals == std::string_view::npos && end > from) {
    const void* sign = std::memchr(p + from, '=', end - from);
    if (sign != nullptr) {
      equals = static_cast<size_t>(static_cast<const char*>(sign) - p);
    }
  }
  *semicolon = end;
  *eq = equals;
}

}  // namespace

std::string_view ContextIdInstance(std::string_view decoded_value) {
  if (!decoded_value.starts_with(kContextIdPrefix)) {
    return {};
  }
  std::string_view rest = decoded_value.substr(kContextIdPrefix.size());
  size_t colon = rest.find(':');
  if (colon == 0 || colon == std::string_view::npos || colon + 1 == rest.size()) {
    return {};
  }
  std::string_view instance = rest.substr(0, colon);
  if (!IsVisibleAscii(instance)) {
    return {};
  }
  return instance;
}

bool NextCookie(std::string_view* header, std::string_view* name, std::string_view* value) {
  while (!header->empty()) {
    size_t semicolon;
    size_t eq;
    FindPairEnds(*header, &semicolon, &eq);
    std::string_view pair = header->substr(0, semicolon);
    *header = semicolon == header->size() ? std::string_view() : header->substr(semicolon + 1);
    if (eq == std::string_view::npos) {
      continue;  // RFC 6265 5.2: a pair without "=" is ignored
    }
    std::string_view pair_name = TrimSpaces(pair.substr(0, eq));
    if (pair_name.empty()) {
      continue;
    }
    std::string_view pair_value = TrimSpaces(pair.substr(eq + 1));
    if (pair_value.size() >= 2 && pair_value.front() == '"' && pair_value.back() == '"') {
      pair_value = pair_value.substr(1, pair_value.size() - 2);
    }
    *name = pair_name;
    *value = pair_value;
    return true;
  }
  return false;
}

int PercentDecode(std::string_view in, char* out, size_t capacity, bool plus_is_space) {
  capacity = std::min(capacity, static_cast<size_t>(std::numeric_limits<int>::max()));
  if (in.empty()) {
    return 0;
  }
  if (!plus_is_space) {
    // Runs between escapes are copied whole (sap-contextid cookies are ~50
    // bytes with three escapes).
    size_t n = 0;
    size_t i = 0;
#if defined(__SSE2__)
    // 16 bytes at a time while the output has room for all 16: the block is
    // stored whole and the output advances to its first "%" only (the bytes
    // stored past it are overwritten or lie beyond the result).
    while (in.size() - i >= 16 && capacity - n >= 16) {
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in.data() + i));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + n), x);
      const auto escapes =
          static_cast<unsigned>(_mm_movemask_epi8(_mm_cmpeq_epi8(x, _mm_set1_epi8('%'))));
      if (escapes == 0) {
        i += 16;
        n += 16;
        continue;
      }
      const auto run = static_cast<size_t>(std::countr_zero(escapes));
      i += run;
      n += run;
      if (in.size() - i < 3) {
        return -1;
      }
      // n < capacity: the room for 16 bytes holds this one.
      const int hi = HexDigitValue(in[i + 1]);
      const int lo = HexDigitValue(in[i + 2]);
      if (hi < 0 || lo < 0) {
        return -1;
      }
      out[n++] = static_cast<char>((hi << 4) | lo);
      i += 3;
    }
#endif
    while (i < in.size()) {
      const void* found = std::memchr(in.data() + i, '%', in.size() - i);
      const size_t escape = found == nullptr
                                ? in.size()
                                : static_cast<size_t>(static_cast<const char*>(found) - in.data());
      const size_t run = escape - i;
      if (run > capacity - n) {
        return -1;
      }
      std::memcpy(out + n, in.data() + i, run);
      n += run;
      if (escape == in.size()) {
        break;
      }
      if (in.size() - escape < 3) {
        return -1;
      }
      const int hi = HexDigitValue(in[escape + 1]);
      const int lo = HexDigitValue(in[escape + 2]);
      if (hi < 0 || lo < 0 || n >= capacity) {
        return -1;
      }
      out[n++] = static_cast<char>((hi << 4) | lo);
      i = escape + 3;
    }
    return static_cast<int>(n);
  }
  size_t n = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c == '%') {
      if (in.size() - i < 3) {
        return -1;
      }
      int hi = HexDigitValue(in[i + 1]);
      int lo = HexDigitValue(in[i + 2]);
      if (hi < 0 || lo < 0) {
        return -1;
      }
      c = static_cast<char>((hi << 4) | lo);
      i += 2;
    } else if (c == '+' && plus_is_space) {
      c = ' ';
    }
    if (n >= capacity) {
      return -1;
    }
    out[n++] = c;
  }
  return static_cast<int>(n);
}

void ExtractSessionIds(const RequestParts& request, std::string_view affinity_cookie_name,
                       SessionIds* out) {
  out->contextid_instance = {};
  out->saplb_count = 0;
  out->jsessionid = {};
  out->jsessionid_instance = {};
  out->ext_sid = {};
  out->affinity_cookie = {};
  out->scratch_used = 0;
  Scratch scratch(out);

  const bool no_params =
      request.path_without_params || request.path.find(';') == std::string_view::npos;
  if (request.cookie_headers.empty() && request.bracket_segment.empty() && no_params) {
    // The first request of a session: only the query can name one.
    std::string_view query_value;
    if (FindFormValue(request.query, kContextIdName, &query_value)) {
      out->contextid_instance =
          ContextIdInstanceFromEncoded(query_value, /*plus_is_space=*/true, &scratch);
    }
    return;
  }

  CookieFindings cookies;
  ReadCookies(request, affinity_cookie_name, out, &cookies, &scratch);
  PathParams params;
  if (!no_params) {
    ReadPathParams(request.path, &params);
  }

  // sap-contextid, first source that yields an instance wins.
  if (cookies.has_contextid) {
    // Cookie values are not form-encoded: "+" is a literal plus.
    out->contextid_instance =
        ContextIdInstanceFromEncoded(cookies.contextid, /*plus_is_space=*/false, &scratch);
  }
  std::string_view query_value;
  if (out->contextid_instance.empty() &&
      FindFormValue(request.query, kContextIdName, &query_value)) {
    out->contextid_instance =
        ContextIdInstanceFromEncoded(query_value, /*plus_is_space=*/true, &scratch);
  }
  if (out->contextid_instance.empty() && params.has_contextid) {
    out->contextid_instance =
        ContextIdInstanceFromEncoded(params.contextid, /*plus_is_space=*/false, &scratch);
  }
  if (out->contextid_instance.empty()) {
    out->contextid_instance = ContextIdFromBracket(request.bracket_segment, &scratch);
  }

  // JSESSIONID: the cookie first, then the path parameter. The raw value is
  // the session-table key, exactly as the backend sent it.
  if (!cookies.has_jsessionid && params.has_jsessionid) {
    out->jsessionid = params.jsessionid;
  }
  std::string_view instance;
  std::string_view rest;
  if (SplitParenthesizedInstance(out->jsessionid, &instance, &rest) && rest.ends_with("End")) {
    out->jsessionid_instance = instance;
  }

  if (params.has_ext_sid) {
    std::string_view decoded;
    size_t mark = scratch.Mark();
    if (scratch.Decode(params.ext_sid, /*plus_is_space=*/false, &decoded) && !decoded.empty()) {
      out->ext_sid = decoded;
    } else {
      scratch.Release(mark);
    }
  }
}

}  // namespace kwd::session
