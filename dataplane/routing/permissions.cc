#include "dataplane/routing/permissions.h"

#include <bit>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/string_hash.h"
#include "dataplane/routing/path.h"

namespace kwd::routing {

namespace {

// Bytes every URL path is full of: poor first tests for a substring search.
bool IsCommonPathByte(char c) {
  return c == '/' || c == '.';
}

// The positions of `text` a substring search tests before it compares the
// whole text: its first byte that is not common in paths, and its last one
// that is neither common nor the same byte (else the first and last bytes).
void ChooseAnchors(std::string_view text, uint32_t* first, uint32_t* second) {
  *first = 0;
  *second = text.empty() ? 0 : static_cast<uint32_t>(text.size() - 1);
  size_t rare = 0;
  while (rare < text.size() && IsCommonPathByte(text[rare])) {
    ++rare;
  }
  if (rare == text.size()) {
    return;
  }
  *first = static_cast<uint32_t>(rare);
  *second = *first;
  for (size_t i = text.size(); i-- > rare + 1;) {
    if (!IsCommonPathByte(text[i]) && text[i] != text[rare]) {
      *second = static_cast<uint32_t>(i);
      return;
    }
  }
  for (size_t i = text.size(); i-- > rare + 1;) {
    if (!IsCommonPathByte(text[i])) {
      *second = static_cast<uint32_t>(i);
      return;
    }
  }
}

}  // namespace

PermissionTable::PermissionTable(
    const google::protobuf::RepeatedPtrField<v1::Permission>& permissions) {
  for (const v1::Permission& permission : permissions) {
    std::string_view pattern = permission.pattern();
    Entry entry{permission.action(), permission.pattern(), {}, false, false,
                permission.action() == v1::PERMISSION_ACTION_SECURE &&
                    permission.redirect_to_https()};
    if (!pattern.empty() && pattern.front() == '*') {
      entry.any_start = true;
      pattern.remove_prefix(1);
    }
    if (!pattern.empty() && pattern.back() == '*') {
      entry.any_end = true;
      pattern.remove_suffix(1);
    }
    entry.text.resize(pattern.size());
    AsciiLowerInto(pattern, entry.text.data());
    ChooseAnchors(entry.text, &entry.anchor_first, &entry.anchor_second);
    entries_.push_back(std::move(entry));
  }
}

namespace {

bool StartsWith(std::string_view path, std::string_view text) {
  return path.size() >= text.size() && BytesEqual(path.data(), text.data(), text.size());
}

bool EndsWith(std::string_view path, std::string_view text) {
  return path.size() >= text.size() &&
         BytesEqual(path.data() + path.size() - text.size(), text.data(), text.size());
}

#if defined(__SSE2__)
// The places of bytes `a` and `b` in p[0, n) as bit masks (bit i: p[i]),
// 16 <= n <= 64: 16 bytes a step, the last step ending at the path's end.
void ByteMasks(const char* p, size_t n, char a, char b, uint64_t* a_mask, uint64_t* b_mask) {
  const __m128i a16 = _mm_set1_epi8(a);
  const __m128i b16 = _mm_set1_epi8(b);
  uint64_t at_a = 0;
  uint64_t at_b = 0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
    at_a |= static_cast<uint64_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(x, a16))) << i;
    at_b |= static_cast<uint64_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(x, b16))) << i;
  }
  if (i < n) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + n - 16));
    at_a |= static_cast<uint64_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(x, a16))) << (n - 16);
    at_b |= static_cast<uint64_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(x, b16))) << (n - 16);
  }
  *a_mask = at_a;
  *b_mask = at_b;
}
#endif

// Whether `text` occurs in `path`. Patterns and paths are short: checking
// two bytes of a candidate (text[first] and text[second], see
// ChooseAnchors) before comparing the rest beats string_view::find, which
// calls memchr and memcmp for every candidate. With SSE2 the two checks run
// for every candidate of a path of up to 64 bytes at once (bit masks of the
// two bytes' places, shifted onto the candidates), 16 at a time beyond.
bool Contains(std::string_view path, std::string_view text, size_t first, size_t second) {
  const size_t n = path.size();
  const size_t m = text.size();
  if (m == 0) {
    return true;
  }
  if (m > n) {
    return false;
  }
  const char first_byte = text[first];
  const char second_byte = text[second];
  const char* p = path.data();
  size_t i = 0;
#if defined(__SSE2__)
  if (n >= 16 && n <= 64) {
    uint64_t at_first;
    uint64_t at_second;
    ByteMasks(p, n, first_byte, second_byte, &at_first, &at_second);
    // Candidate k (0 <= k <= n - m) has the bytes at k + first, k + second.
    uint64_t candidates = (at_first >> first) & (at_second >> second) &
                          (~uint64_t{0} >> (64 - (n - m + 1)));
    while (candidates != 0) {
      if (BytesEqual(p + std::countr_zero(candidates), text.data(), m)) {
        return true;
      }
      candidates &= candidates - 1;
    }
    return false;
  }
  // Candidates i..i+15 need bytes up to i + 15 + m - 1 < n.
  if (n >= m + 15) {
    const __m128i first16 = _mm_set1_epi8(first_byte);
    const __m128i second16 = _mm_set1_epi8(second_byte);
    for (; i + 15 + m <= n; i += 16) {
      const __m128i firsts = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i + first));
      const __m128i seconds = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i + second));
      auto mask = static_cast<unsigned>(_mm_movemask_epi8(
          _mm_and_si128(_mm_cmpeq_epi8(firsts, first16), _mm_cmpeq_epi8(seconds, second16))));
      while (mask != 0) {
        const size_t at = i + static_cast<size_t>(std::countr_zero(mask));
        if (BytesEqual(p + at, text.data(), m)) {
          return true;
        }
        mask &= mask - 1;
      }
    }
  }
#endif
  for (; i + m <= n; ++i) {
    if (p[i + first] == first_byte && p[i + second] == second_byte &&
        BytesEqual(p + i, text.data(), m)) {
      return true;
    }
  }
  return false;
}

}  // namespace

bool PermissionTable::Matches(const Entry& entry, std::string_view path) {
  std::string_view text = entry.text;
  if (entry.any_start && entry.any_end) {
    return Contains(path, text, entry.anchor_first, entry.anchor_second);
  }
  if (entry.any_start) {
    return EndsWith(path, text);
  }
  if (entry.any_end) {
    return StartsWith(path, text);
  }
  return path.size() == text.size() && BytesEqual(path.data(), text.data(), text.size());
}

v1::PermissionAction PermissionTable::Evaluate(std::string_view lowercase_path) const {
  for (const Entry& entry : entries_) {
    if (Matches(entry, lowercase_path)) {
      return entry.action;
    }
  }
  return v1::PERMISSION_ACTION_PERMIT;
}

int PermissionTable::Match(std::string_view lowercase_path) const {
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (Matches(entries_[i], lowercase_path)) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

}  // namespace kwd::routing
