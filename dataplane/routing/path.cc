#include "dataplane/routing/path.h"

#include <array>
#include <cstdint>
#include <cstring>

#include "common/crypto.h"

namespace kwd::routing {
namespace {

bool IsUnreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}

// Characters of a Base64 bracket segment as SAP writes it (standard or
// URL-safe alphabet, padding possibly percent-encoded).
bool IsBracketChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' ||
         c == '/' || c == '=' || c == '-' || c == '_' || c == '%';
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

// Writes one raw segment (no "/" inside) decoded as "/<segment>" and applies
// dot-segment rules. `ends_with_slash` is set when the output should keep a
// trailing "/" if this turns out to be the last segment.
bool WriteSegment(std::string_view segment, Writer* out, bool* ends_with_slash) {
  // Decode into the output first, then look at what was written: "%2e%2E" is ".." too.
  const size_t start = out->size();
  if (segment.empty()) {
    *ends_with_slash = true;
    return true;
  }
  if (!out->Put('/')) {
    return false;
  }
  for (size_t i = 0; i < segment.size(); ++i) {
    char c = segment[i];
    if (c != '%') {
      if (!out->Put(c)) {
        return false;
      }
      continue;
    }
    if (i + 2 >= segment.size()) {
      return false;
    }
    int high = HexDigitValue(segment[i + 1]);
    int low = HexDigitValue(segment[i + 2]);
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
  std::string_view written(out->data() + start + 1, out->size() - start - 1);
  if (written == ".") {
    out->Truncate(start);
    *ends_with_slash = true;
  } else if (written == "..") {
    if (start == 0) {
      return false;  // above the root
    }
    size_t parent = start;
    while (parent > 0 && out->at(parent - 1) != '/') {
      --parent;
    }
    out->Truncate(parent - 1);
    *ends_with_slash = true;
  } else {
    *ends_with_slash = false;
  }
  return true;
}

// What one byte of a request target means to the fast-path scan.
enum ByteClass : uint8_t {
  kPlain = 0,
  kInvalid,  // control characters, space, DEL: a 400
  kEnd,      // "?" or "#": the path ends
  kSlash,    // "/"
  kDot,      // "." (may start a dot segment)
  kParams,   // ";": path parameters up to the next "/"
  kRewrite,  // "%", "(": the general algorithm decides
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

bool NormalizeTarget(std::string_view target, std::span<char> scratch, NormalizedTarget* out) {
  // Almost every real path is already normal apart from, at most, ";name=value"
  // parameters: no escapes, brackets, empty or dot segments. One scan over the
  // bytes proves that and copies the path without its parameters. Anything
  // else goes to the general algorithm, which gives the same answer for these
  // (path_test compares the two exhaustively over short targets).
  const size_t size = target.size();
  if (size == 0 || target.front() != '/') {
    return NormalizeTargetGeneral(target, scratch, out);
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
    // Plain bytes, four at a time while they last.
    while (i + 4 <= size && (classes[bytes[i]] | classes[bytes[i + 1]] | classes[bytes[i + 2]] |
                             classes[bytes[i + 3]]) == kPlain) {
      i += 4;
    }
    while (i < size && classes[bytes[i]] == kPlain) {
      ++i;
    }
    if (i == size) {
      break;
    }
    // bytes[0] is "/", so there always is a previous byte.
    const bool after_slash = bytes[i - 1] == '/';
    const uint8_t byte_class = classes[bytes[i]];
    if (byte_class == kSlash) {
      if (after_slash) {
        return NormalizeTargetGeneral(target, scratch, out);  // empty segment
      }
      ++i;
      continue;
    }
    if (byte_class == kDot) {
      if (after_slash) {
        const uint8_t next = i + 1 < size ? classes[bytes[i + 1]] : uint8_t{kEnd};
        const uint8_t after_next = i + 2 < size ? classes[bytes[i + 2]] : uint8_t{kEnd};
        if (MayEndSegment(next) || (next == kDot && MayEndSegment(after_next))) {
          return NormalizeTargetGeneral(target, scratch, out);
        }
      }
      ++i;
      continue;
    }
    if (byte_class == kEnd) {
      path_end = i;
      break;
    }
    if (byte_class != kParams) {
      return NormalizeTargetGeneral(target, scratch, out);  // escapes, brackets, control bytes
    }
    // ";params" up to the next "/" are dropped. A segment that is nothing but
    // parameters ("/sap/;sap-ext-sid=x/ui") adds nothing either: its "/"
    // goes too, unless it is the last segment ("/sap/;x" is "/sap/").
    const size_t params_start = i;
    ++i;
    while (i < size && bytes[i] != '/') {
      const uint8_t param_class = classes[bytes[i]];
      if (param_class == kInvalid) {
        return NormalizeTargetGeneral(target, scratch, out);
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
      return NormalizeTargetGeneral(target, scratch, out);
    }
    std::memcpy(output + written, target.data() + copy_from, run);
    written += run;
    copy_from = i;
    if (last_segment) {
      path_end = i;
      break;
    }
  }
  const size_t run = path_end - copy_from;
  if (written + run > capacity) {
    return NormalizeTargetGeneral(target, scratch, out);
  }
  std::memcpy(output + written, target.data() + copy_from, run);
  written += run;
  *out = NormalizedTarget{};
  SplitTarget(target, path_end, out);
  out->path = std::string_view(output, written);
  return true;
}

bool NormalizeTargetGeneral(std::string_view target, std::span<char> scratch,
                            NormalizedTarget* out) {
  *out = NormalizedTarget{};
  // A plain loop: find_first_of calls memchr once per character.
  size_t end = 0;
  while (end < target.size() && target[end] != '?' && target[end] != '#') {
    ++end;
  }
  SplitTarget(target, end, out);
  std::string_view raw_path = out->raw_path;
  if (raw_path.empty() || raw_path.front() != '/') {
    return false;
  }
  for (char c : raw_path) {
    auto byte = static_cast<unsigned char>(c);
    if (byte <= 0x20 || byte == 0x7f) {
      return false;
    }
  }

  Writer writer(scratch);
  bool ends_with_slash = true;
  size_t i = 1;
  while (i <= raw_path.size()) {
    // One segment: name characters, an optional "(...)" bracket, then
    // optional ";params", up to the next "/".
    const size_t name_start = i;
    size_t name_end = i;
    while (name_end < raw_path.size() && raw_path[name_end] != '/' && raw_path[name_end] != ';' &&
           raw_path[name_end] != '(') {
      ++name_end;
    }
    size_t next = name_end;
    if (next < raw_path.size() && raw_path[next] == '(') {
      size_t close = raw_path.find(')', next + 1);
      bool is_bracket = close != std::string_view::npos &&
                        (close + 1 == raw_path.size() || raw_path[close + 1] == '/' ||
                         raw_path[close + 1] == ';');
      for (size_t k = next + 1; is_bracket && k < close; ++k) {
        is_bracket = IsBracketChar(raw_path[k]);
      }
      if (is_bracket) {
        if (out->bracket_segment.empty()) {
          out->bracket_segment = raw_path.substr(next + 1, close - next - 1);
        }
        next = close + 1;
      } else {
        // An ordinary "(" belongs to the name.
        while (name_end < raw_path.size() && raw_path[name_end] != '/' &&
               raw_path[name_end] != ';') {
          ++name_end;
        }
        next = name_end;
      }
    }
    while (next < raw_path.size() && raw_path[next] != '/') {
      ++next;  // path parameters
    }
    if (!WriteSegment(raw_path.substr(name_start, name_end - name_start), &writer,
                      &ends_with_slash)) {
      return false;
    }
    i = next + 1;
  }
  if ((ends_with_slash || writer.size() == 0) && !writer.Put('/')) {
    return false;
  }
  out->path = std::string_view(writer.data(), writer.size());
  return true;
}

namespace {

// Lowercases the ASCII letters among 8 bytes at once (SWAR): a byte is an
// uppercase letter when its top bit is clear and its low 7 bits lie in
// ['A', 'Z']; adding 0x3f / 0x25 to the low 7 bits carries into the top bit
// exactly when they are >= 'A' / > 'Z', and never into the next byte.
uint64_t LowerWord(uint64_t word) {
  constexpr uint64_t kLow7 = 0x7f7f7f7f7f7f7f7full;
  constexpr uint64_t kTop = 0x8080808080808080ull;
  const uint64_t low = word & kLow7;
  const uint64_t at_least_a = low + 0x3f3f3f3f3f3f3f3full;
  const uint64_t above_z = low + 0x2525252525252525ull;
  const uint64_t upper = (at_least_a ^ above_z) & ~word & kTop;
  return word | (upper >> 2);
}

char LowerByte(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

}  // namespace

void AsciiLowerInto(std::string_view in, char* out) {
  const size_t size = in.size();
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t word;
    std::memcpy(&word, in.data() + i, 8);
    word = LowerWord(word);
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
