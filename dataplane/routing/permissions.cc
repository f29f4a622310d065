#include "dataplane/routing/permissions.h"

#include <bit>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/string_hash.h"
#include "dataplane/routing/path.h"

namespace kwd::routing {

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

// Whether `text` occurs in `path`. Patterns and paths are short: checking
// the first and last byte of a candidate before comparing the rest beats
// string_view::find, which calls memchr and memcmp for every candidate. With
// SSE2 the two checks run for 16 candidates at once ("*/secret/*" on a
// 30-byte path: two blocks instead of 23 byte steps).
bool Contains(std::string_view path, std::string_view text) {
  const size_t n = path.size();
  const size_t m = text.size();
  if (m == 0) {
    return true;
  }
  if (m > n) {
    return false;
  }
  const char first = text.front();
  const char last = text.back();
  const char* p = path.data();
  size_t i = 0;
#if defined(__SSE2__)
  // Candidates i..i+15 need bytes up to i + 15 + m - 1 < n.
  if (n >= m + 15) {
    const __m128i first16 = _mm_set1_epi8(first);
    const __m128i last16 = _mm_set1_epi8(last);
    for (; i + 15 + m <= n; i += 16) {
      const __m128i heads = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
      const __m128i tails = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i + m - 1));
      auto mask = static_cast<unsigned>(_mm_movemask_epi8(
          _mm_and_si128(_mm_cmpeq_epi8(heads, first16), _mm_cmpeq_epi8(tails, last16))));
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
    if (p[i] == first && p[i + m - 1] == last && BytesEqual(p + i, text.data(), m)) {
      return true;
    }
  }
  return false;
}

}  // namespace

bool PermissionTable::Matches(const Entry& entry, std::string_view path) {
  std::string_view text = entry.text;
  if (entry.any_start && entry.any_end) {
    return Contains(path, text);
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
