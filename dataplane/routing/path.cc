#include "dataplane/routing/path.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/crypto.h"
#include "common/string_hash.h"

namespace kwd::routing {
namespace {

char LowerByte(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

bool IsUnreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}

// Text of a Base64 bracket segment as SAP writes it: standard or URL-safe
// alphabet without "/" (a "/" would make the bracket span segments, which no
// other reader of the URL does), "=" padding possibly written "%3D".
bool IsBracketText(std::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' ||
        c == '=' || c == '-' || c == '_') {
      continue;
    }
    if (c == '%' && i + 2 < text.size() && text[i + 1] == '3' &&
        (text[i + 2] == 'D' || text[i + 2] == 'd')) {
      i += 2;
      continue;
    }
    return false;
  }
  return true;
}

// Appends to the output, failing when the scratch is full.
class Writer {
 public:
  explicit Writer(std::span<char> scratch) : data_(scratch.data()), capacity_(scratch.size()) {}
  bool Put(char c) {
    if (size_ == capacity_) {
      return false;
    }
    data_[size_++] = c;
    return true;
  }
  bool Append(std::string_view text) {
    if (text.size() > capacity_ - size_) {
      return false;
    }
    std::memcpy(data_ + size_, text.data(), text.size());
    size_ += text.size();
    return true;
  }
  size_t size() const { return size_; }
  void Truncate(size_t size) { size_ = size; }
  const char* data() const { return data_; }
  char at(size_t i) const { return data_[i]; }

 private:
  char* data_;
  size_t capacity_;
  size_t size_ = 0;
};

constexpr char kHexDigits[] = "0123456789ABCDEF";

// "%2F" or "%5C", any case: a slash or backslash some backends decode
// before they split the path into segments.
bool IsEncodedSeparator(std::string_view s, size_t i) {
  if (s[i] != '%' || i + 2 >= s.size()) {
    return false;
  }
  const char high = s[i + 1];
  const char low = static_cast<char>(s[i + 2] | 0x20);
  return (high == '2' && low == 'f') || (high == '5' && low == 'c');
}

// "%3B", any case: a ";" that some backends decode before they drop
// ";params" (Jetty calls it an ambiguous path parameter).
bool IsEncodedSemicolon(std::string_view s, size_t i) {
  return s[i] == '%' && i + 2 < s.size() && s[i + 1] == '3' && (s[i + 2] | 0x20) == 'b';
}

// Whether a segment's ";params" start at segment[i]: ";", and with
// `decode_separators` also "%3B".
bool ParamsAt(std::string_view segment, size_t i, bool decode_separators) {
  return segment[i] == ';' || (decode_separators && IsEncodedSemicolon(segment, i));
}

// Length of the segment separator at s[i], 0 when there is none: "/", and
// with `decode_separators` also "\\", "%2F" and "%5C".
size_t SeparatorAt(std::string_view s, size_t i, bool decode_separators) {
  if (s[i] == '/') {
    return 1;
  }
  if (!decode_separators) {
    return 0;
  }
  if (s[i] == '\\') {
    return 1;
  }
  return IsEncodedSeparator(s, i) ? 3 : 0;
}

// Calls visit(segment) for every segment of `path` (which starts with a
// separator), the empty last one after a trailing separator included; stops
// early when visit returns false.
template <typename Visit>
bool ForEachSegment(std::string_view path, bool decode_separators, Visit visit) {
  size_t begin = SeparatorAt(path, 0, decode_separators);
  while (true) {
    size_t end = begin;
    size_t separator = 0;
    while (end < path.size() && (separator = SeparatorAt(path, end, decode_separators)) == 0) {
      ++end;
    }
    if (!visit(path.substr(begin, end - begin))) {
      return false;
    }
    if (end >= path.size()) {
      return true;
    }
    begin = end + separator;
  }
}

// A segment's name: what comes before its bracket or its ";params".
struct SegmentParts {
  std::string_view name;
  std::string_view bracket;  // text inside "(...)"
  bool has_bracket = false;
};

// With `decode_separators`, "%3B" starts ";params" as ";" does.
SegmentParts SplitSegment(std::string_view segment, bool decode_separators) {
  size_t name_end = 0;
  while (name_end < segment.size() && !ParamsAt(segment, name_end, decode_separators) &&
         segment[name_end] != '(') {
    ++name_end;
  }
  if (name_end < segment.size() && segment[name_end] == '(') {
    const size_t close = segment.find(')', name_end + 1);
    if (close != std::string_view::npos &&
        (close + 1 == segment.size() || ParamsAt(segment, close + 1, decode_separators))) {
      std::string_view text = segment.substr(name_end + 1, close - name_end - 1);
      if (IsBracketText(text)) {
        return SegmentParts{segment.substr(0, name_end), text, true};
      }
    }
    // An ordinary "(" belongs to the name.
    while (name_end < segment.size() && !ParamsAt(segment, name_end, decode_separators)) {
      ++name_end;
    }
  }
  return SegmentParts{segment.substr(0, name_end), {}, false};
}

// 1 for ".", 2 for "..": a dot segment in RFC 3986's sense, where "%2E" is
// "." (6.2.2.2). 0 for anything else.
int DotSegment(std::string_view segment) {
  int dots = 0;
  for (size_t i = 0; i < segment.size(); ++i) {
    if (segment[i] == '.') {
      ++dots;
    } else if (segment[i] == '%' && i + 2 < segment.size() && segment[i + 1] == '2' &&
               (segment[i + 2] == 'E' || segment[i + 2] == 'e')) {
      ++dots;
      i += 2;
    } else {
      return 0;
    }
    if (dots > 2) {
      return 0;
    }
  }
  return dots;
}

// Whether a reader that drops brackets or ";params" first, or decodes every
// escape first, takes the segment with this name for "." or "..".
bool ReadsAsDotSegment(std::string_view name) {
  int dots = 0;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    if (c == '%' && i + 2 < name.size()) {
      const int high = HexDigitValue(name[i + 1]);
      const int low = HexDigitValue(name[i + 2]);
      if (high < 0 || low < 0) {
        return false;
      }
      c = static_cast<char>(high * 16 + low);
      i += 2;
    }
    if (c == ';') {
      break;
    }
    if (c != '.' || ++dots > 2) {
      return false;
    }
  }
  return dots > 0;
}

// Writes "/<name>" with escapes of unreserved characters decoded and the
// others in uppercase hex. False on a malformed escape or a full scratch.
bool WriteName(std::string_view name, Writer* out) {
  if (!out->Put('/')) {
    return false;
  }
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    if (c != '%') {
      if (!out->Put(c)) {
        return false;
      }
      continue;
    }
    if (i + 2 >= name.size()) {
      return false;
    }
    int high = HexDigitValue(name[i + 1]);
    int low = HexDigitValue(name[i + 2]);
    if (high < 0 || low < 0) {
      return false;
    }
    auto decoded = static_cast<unsigned char>(high * 16 + low);
    if (IsUnreserved(decoded)) {
      if (!out->Put(static_cast<char>(decoded))) {
        return false;
      }
    } else if (!out->Put('%') || !out->Put(kHexDigits[high]) || !out->Put(kHexDigits[low])) {
      return false;
    }
    i += 2;
  }
  return true;
}

bool Normalize(std::string_view target, std::span<char> scratch, bool decode_separators,
               NormalizedTarget* out);

// What one byte of a request target means to the fast-path scan.
enum ByteClass : uint8_t {
  kPlain = 0,
  kInvalid,  // control characters, space, DEL: a 400
  kEnd,      // "?" or "#": the path ends
  kSlash,    // "/"
  kDot,      // "." (may start a dot segment)
  kParams,   // ";": path parameters up to the next "/"
  kRewrite,  // "%", "(", "\\": the general algorithm decides
};

constexpr std::array<uint8_t, 256> MakeByteClasses() {
  std::array<uint8_t, 256> classes{};
  for (int c = 0; c <= 0x20; ++c) {
    classes[c] = kInvalid;
  }
  classes[0x7f] = kInvalid;
  classes['?'] = kEnd;
  classes['#'] = kEnd;
  classes['/'] = kSlash;
  classes['.'] = kDot;
  classes[';'] = kParams;
  classes['%'] = kRewrite;
  classes['('] = kRewrite;
  classes['\\'] = kRewrite;
  return classes;
}
constexpr std::array<uint8_t, 256> kByteClasses = MakeByteClasses();

// Splits `target` into raw path and query, as both algorithms need.
void SplitTarget(std::string_view target, size_t path_end, NormalizedTarget* out) {
  out->raw_path = target.substr(0, path_end);
  if (path_end < target.size() && target[path_end] == '?') {
    std::string_view rest = target.substr(path_end + 1);
    out->query = rest.substr(0, rest.find('#'));
  }
}

// Whether the byte class after a segment's dot(s) can end the segment, making
// it "." or "..": then the general algorithm resolves it.
bool MayEndSegment(uint8_t byte_class) {
  return byte_class != kPlain && byte_class != kDot;
}

}  // namespace

namespace {

// Whether byte i of a target (i >= 1) stops the fast-path scan: any byte
// that is not plain, except a "/" or "." that does not follow a "/" (those
// only matter at the start of a segment).
bool StopsScan(const unsigned char* bytes, size_t i) {
  const uint8_t byte_class = kByteClasses[bytes[i]];
  if (byte_class == kPlain) {
    return false;
  }
  return (byte_class != kSlash && byte_class != kDot) || bytes[i - 1] == '/';
}

#if defined(__SSE2__)
// StopsScan for the 16 bytes at bytes[i, i + 16) as a bit mask (bit k for
// byte i + k); reads bytes[i - 1] too.
int StopMask(const unsigned char* bytes, size_t i) {
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + i));
  const __m128i before = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + i - 1));
  // Control characters and space (<= 0x20), DEL, "?", "#", ";", "%", "(", "\\".
  __m128i stop = _mm_cmpeq_epi8(_mm_max_epu8(x, _mm_set1_epi8(0x20)), _mm_set1_epi8(0x20));
  const auto is = [&x](char c) { return _mm_cmpeq_epi8(x, _mm_set1_epi8(c)); };
  stop = _mm_or_si128(stop, _mm_or_si128(is('\x7f'), is('?')));
  stop = _mm_or_si128(stop, _mm_or_si128(is('#'), is(';')));
  stop = _mm_or_si128(stop, _mm_or_si128(is('%'), is('(')));
  stop = _mm_or_si128(stop, is('\\'));
  // "/" or "." right after a "/": an empty segment, maybe a dot segment.
  const __m128i segment_start =
      _mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('/')), _mm_cmpeq_epi8(x, _mm_set1_epi8('.')));
  stop =
      _mm_or_si128(stop, _mm_and_si128(segment_start, _mm_cmpeq_epi8(before, _mm_set1_epi8('/'))));
  return _mm_movemask_epi8(stop);
}

// The bytes that end or refuse a ";params" run, as a bit mask over
// bytes[i, i + 16): "/", and controls, space, DEL, "?", "#", "%", "(", "\\".
int ParamsStopMask(const unsigned char* bytes, size_t i) {
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + i));
  const auto is = [&x](char c) { return _mm_cmpeq_epi8(x, _mm_set1_epi8(c)); };
  __m128i stop = _mm_cmpeq_epi8(_mm_max_epu8(x, _mm_set1_epi8(0x20)), _mm_set1_epi8(0x20));
  stop = _mm_or_si128(stop, _mm_or_si128(is('\x7f'), is('?')));
  stop = _mm_or_si128(stop, _mm_or_si128(is('#'), is('/')));
  stop = _mm_or_si128(stop, _mm_or_si128(is('%'), is('(')));
  stop = _mm_or_si128(stop, is('\\'));
  return _mm_movemask_epi8(stop);
}

__m128i Lower16(__m128i x) {
  // Signed compares: bytes >= 0x80 are negative, never in ['A', 'Z'].
  const __m128i upper = _mm_and_si128(_mm_cmpgt_epi8(x, _mm_set1_epi8('A' - 1)),
                                      _mm_cmplt_epi8(x, _mm_set1_epi8('Z' + 1)));
  return _mm_or_si128(x, _mm_and_si128(upper, _mm_set1_epi8(0x20)));
}
#endif

// Copies `size` bytes from `in` to `out` and, when `lower` is not null, their
// ASCII-lowercase form to `lower`.
void CopyRun(const char* in, size_t size, char* out, char* lower) {
  if (lower == nullptr) {
    std::memcpy(out, in, size);
    return;
  }
#if defined(__SSE2__)
  if (size >= 16) {
    size_t i = 0;
    for (; i + 16 <= size; i += 16) {
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), x);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(lower + i), Lower16(x));
    }
    if (i < size) {
      // The last 16 bytes again, overlapping what is written already.
      i = size - 16;
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), x);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(lower + i), Lower16(x));
    }
    return;
  }
#else
  if (size >= 16) {
    std::memcpy(out, in, size);
    AsciiLowerInto(std::string_view(in, size), lower);
    return;
  }
#endif
  if (size >= 8) {
    // Two words, overlapping when size < 16.
    const uint64_t head = string_hash_internal::Read8(reinterpret_cast<const unsigned char*>(in));
    const uint64_t tail =
        string_hash_internal::Read8(reinterpret_cast<const unsigned char*>(in + size - 8));
    std::memcpy(out, &head, 8);
    std::memcpy(out + size - 8, &tail, 8);
    const uint64_t lower_head = AsciiLowerWord(head);
    const uint64_t lower_tail = AsciiLowerWord(tail);
    std::memcpy(lower, &lower_head, 8);
    std::memcpy(lower + size - 8, &lower_tail, 8);
    return;
  }
  for (size_t i = 0; i < size; ++i) {
    out[i] = in[i];
    lower[i] = LowerByte(in[i]);
  }
}

// The fast path for paths that are already normal apart from, at most,
// ";name=value" parameters: no escapes, brackets, empty or dot segments. One
// scan over the bytes proves that and copies the path without its parameters
// (and, when `lower` is not null, its lowercase form to `lower`, which holds
// as many bytes as `scratch`). False, leaving `out` alone, when the general
// algorithm must decide; it gives the same answer for the paths accepted
// here (path_test compares the two exhaustively over short targets and on
// random long ones).
bool NormalizeFast(std::string_view target, std::span<char> scratch, char* lower,
                   NormalizedTarget* out) {
  const size_t size = target.size();
  if (size == 0 || target.front() != '/') {
    return false;
  }
  const auto* bytes = reinterpret_cast<const unsigned char*>(target.data());
  const uint8_t* classes = kByteClasses.data();
  char* const output = scratch.data();
  const size_t capacity = scratch.size();
  size_t written = 0;
  size_t copy_from = 0;  // raw bytes from here on are not in the output yet
  size_t i = 1;
  size_t path_end = size;
  while (true) {
    // Up to the next byte that may matter, 16 at a time while they last.
#if defined(__SSE2__)
    bool found = false;
    while (i + 16 <= size) {
      const int mask = StopMask(bytes, i);
      if (mask != 0) {
        i += static_cast<size_t>(std::countr_zero(static_cast<unsigned>(mask)));
        found = true;
        break;
      }
      i += 16;
    }
    if (!found)
#endif
    {
      while (i < size && !StopsScan(bytes, i)) {
        ++i;
      }
      if (i == size) {
        break;
      }
    }
    const uint8_t byte_class = classes[bytes[i]];
    // StopsScan: a "/" or "." here follows a "/".
    if (byte_class == kSlash) {
      return false;  // empty segment
    }
    if (byte_class == kDot) {
      const uint8_t next = i + 1 < size ? classes[bytes[i + 1]] : uint8_t{kEnd};
      const uint8_t after_next = i + 2 < size ? classes[bytes[i + 2]] : uint8_t{kEnd};
      if (MayEndSegment(next) || (next == kDot && MayEndSegment(after_next))) {
        return false;
      }
      ++i;
      continue;
    }
    if (byte_class == kEnd) {
      path_end = i;
      break;
    }
    if (byte_class != kParams) {
      return false;  // escapes, brackets, control bytes
    }
    // ";params" up to the next "/" are dropped. A segment that is nothing but
    // parameters ("/sap/;sap-ext-sid=x/ui") adds nothing either: its "/"
    // goes too, unless it is the last segment ("/sap/;x" is "/sap/").
    const bool after_slash = bytes[i - 1] == '/';
    const size_t params_start = i;
    ++i;
#if defined(__SSE2__)
    while (i + 16 <= size) {
      const int mask = ParamsStopMask(bytes, i);
      if (mask != 0) {
        i += static_cast<size_t>(std::countr_zero(static_cast<unsigned>(mask)));
        break;
      }
      i += 16;
    }
#endif
    while (i < size && bytes[i] != '/') {
      const uint8_t param_class = classes[bytes[i]];
      if (param_class == kInvalid || param_class == kRewrite) {
        return false;  // escapes ("%2F", "%00") and "\\" count in parameters too
      }
      if (param_class == kEnd) {
        break;
      }
      ++i;
    }
    const bool last_segment = i == size || bytes[i] != '/';
    const size_t run_end = after_slash && !last_segment ? params_start - 1 : params_start;
    const size_t run = run_end - copy_from;
    if (written + run > capacity) {
      return false;
    }
    CopyRun(target.data() + copy_from, run, output + written,
            lower == nullptr ? nullptr : lower + written);
    written += run;
    copy_from = i;
    if (last_segment) {
      path_end = i;
      break;
    }
  }
  const size_t run = path_end - copy_from;
  if (written + run > capacity) {
    return false;
  }
  CopyRun(target.data() + copy_from, run, output + written,
          lower == nullptr ? nullptr : lower + written);
  written += run;
  // Field by field: a whole-struct reset compiles to a "rep stos".
  out->query = {};
  out->bracket_segment = {};
  out->encoded_separator = false;
  out->no_params = copy_from == 0;  // no ";params" run was dropped
  SplitTarget(target, path_end, out);
  out->path = std::string_view(output, written);
  out->forward_path = out->raw_path;
  return true;
}

}  // namespace

bool NormalizeTarget(std::string_view target, std::span<char> scratch, NormalizedTarget* out) {
  return NormalizeFast(target, scratch, nullptr, out) ||
         NormalizeTargetGeneral(target, scratch, out);
}

bool NormalizeTargetLower(std::string_view target, std::span<char> scratch, std::span<char> lower,
                          NormalizedTarget* out, std::string_view* lower_out) {
  // The fast path's output fits both (a longer path fails below too).
  if (!NormalizeFast(target, scratch.first(std::min(scratch.size(), lower.size())), lower.data(),
                     out)) {
    if (!NormalizeTargetGeneral(target, scratch, out) || out->path.size() > lower.size()) {
      return false;
    }
    AsciiLowerInto(out->path, lower.data());
  }
  *lower_out = std::string_view(lower.data(), out->path.size());
  return true;
}

bool NormalizeTargetGeneral(std::string_view target, std::span<char> scratch,
                            NormalizedTarget* out) {
  return Normalize(target, scratch, /*decode_separators=*/false, out);
}

bool NormalizeTargetSeparatorsDecoded(std::string_view target, std::span<char> scratch,
                                      NormalizedTarget* out) {
  return Normalize(target, scratch, /*decode_separators=*/true, out);
}

namespace {

bool Normalize(std::string_view target, std::span<char> scratch, bool decode_separators,
               NormalizedTarget* out) {
  *out = NormalizedTarget{};
  // A plain loop: find_first_of calls memchr once per character.
  size_t end = 0;
  while (end < target.size() && target[end] != '?' && target[end] != '#') {
    ++end;
  }
  SplitTarget(target, end, out);
  const std::string_view raw_path = out->raw_path;
  if (raw_path.empty() || raw_path.front() != '/') {
    return false;
  }
  for (size_t i = 0; i < raw_path.size(); ++i) {
    auto byte = static_cast<unsigned char>(raw_path[i]);
    if (byte <= 0x20 || byte == 0x7f) {
      return false;
    }
    if (byte == '\\' || IsEncodedSeparator(raw_path, i) || IsEncodedSemicolon(raw_path, i)) {
      out->encoded_separator = true;
    }
    // Encoded control characters ("%00" ends a C string in some backends).
    if (byte == '%' && i + 2 < raw_path.size() &&
        (raw_path[i + 1] == '0' || raw_path[i + 1] == '1' ||
         (raw_path[i + 1] == '7' && (raw_path[i + 2] | 0x20) == 'f'))) {
      return false;
    }
  }

  // Which segments are dot segments, and none that only some readers take
  // for one.
  bool has_dot_segments = false;
  bool ambiguous = false;
  ForEachSegment(raw_path, decode_separators, [&](std::string_view segment) {
    if (DotSegment(segment) != 0) {
      has_dot_segments = true;
    } else if (ReadsAsDotSegment(SplitSegment(segment, decode_separators).name)) {
      ambiguous = true;
      return false;
    }
    return true;
  });
  if (ambiguous) {
    return false;
  }

  // RFC 3986 5.2.4 over the raw segments, into the scratch: this is what the
  // proxy forwards.
  Writer writer(scratch);
  std::string_view resolved = raw_path;
  if (has_dot_segments) {
    bool last_was_dot = false;
    const bool ok = ForEachSegment(raw_path, decode_separators, [&](std::string_view segment) {
      const int dots = DotSegment(segment);
      last_was_dot = dots != 0;
      if (dots == 1) {
        return true;
      }
      if (dots == 2) {
        if (writer.size() == 0) {
          return false;  // above the root
        }
        size_t parent = writer.size() - 1;
        while (writer.at(parent) != '/') {
          --parent;
        }
        writer.Truncate(parent);
        return true;
      }
      return writer.Put('/') && writer.Append(segment);
    });
    if (!ok || ((last_was_dot || writer.size() == 0) && !writer.Put('/'))) {
      return false;
    }
    resolved = std::string_view(writer.data(), writer.size());
  }
  out->forward_path = resolved;

  // The path to match: names only, empty segments dropped, escapes of
  // unreserved characters decoded.
  const size_t path_start = writer.size();
  bool ends_with_slash = true;
  const bool ok = ForEachSegment(resolved, decode_separators, [&](std::string_view segment) {
    const SegmentParts parts = SplitSegment(segment, decode_separators);
    if (parts.has_bracket && out->bracket_segment.empty()) {
      out->bracket_segment = parts.bracket;
    }
    ends_with_slash = parts.name.empty();
    return parts.name.empty() || WriteName(parts.name, &writer);
  });
  if (!ok || ((ends_with_slash || writer.size() == path_start) && !writer.Put('/'))) {
    return false;
  }
  out->path = std::string_view(writer.data() + path_start, writer.size() - path_start);
  return true;
}

}  // namespace

void AsciiLowerInto(std::string_view in, char* out) {
  const size_t size = in.size();
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t word;
    std::memcpy(&word, in.data() + i, 8);
    word = AsciiLowerWord(word);
    std::memcpy(out + i, &word, 8);
  }
  for (; i < size; ++i) {
    out[i] = LowerByte(in[i]);
  }
}

bool IsRootPath(std::string_view path) {
  // A byte loop: the second "/" of a non-root path comes early, and memchr's
  // call costs more than the few bytes before it.
  if (path.empty()) {
    return false;
  }
  for (size_t i = 1; i < path.size(); ++i) {
    if (path[i] == '/') {
      return false;
    }
  }
  return true;
}

}  // namespace kwd::routing
