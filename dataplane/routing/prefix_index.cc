#include "dataplane/routing/prefix_index.h"

#include <algorithm>
#include <bit>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/string_hash.h"

namespace kwd::routing {
namespace {

// Deeper prefixes than this are not looked up; rules are far shallower.
constexpr size_t kMaxDepth = 128;

// A prefix "<text>/" is keyed by the hash of <text>: a candidate taken from a
// path is then always a contiguous piece of it, even "/sap" for "/sap/".
uint64_t KeyHash(std::string_view without_final_slash) {
  return HashString(without_final_slash);
}

}  // namespace

PrefixIndex::PrefixIndex(std::vector<std::string> lowercase_prefixes)
    : prefixes_(std::move(lowercase_prefixes)) {
  size_t capacity = std::bit_ceil(std::max<size_t>(4, prefixes_.size() * 2));
  slots_.assign(capacity, Slot{});
  mask_ = capacity - 1;
  for (size_t i = 0; i < prefixes_.size(); ++i) {
    const std::string& prefix = prefixes_[i];
    if (prefix.size() < 2 || prefix.front() != '/' || prefix.back() != '/') {
      continue;  // outside the contract: such a prefix can never match
    }
    max_length_ = std::max(max_length_, prefix.size());
    uint64_t hash = KeyHash(std::string_view(prefix).substr(0, prefix.size() - 1));
    uint64_t position = hash & mask_;
    while (slots_[position].index >= 0) {
      position = (position + 1) & mask_;
    }
    slots_[position] = Slot{hash, static_cast<int32_t>(i)};
  }
}

int PrefixIndex::Find(uint64_t hash, std::string_view lowercase_path, size_t length) const {
  for (uint64_t position = hash & mask_;; position = (position + 1) & mask_) {
    const Slot& slot = slots_[position];
    if (slot.index < 0) {
      return -1;
    }
    if (slot.hash != hash) {
      continue;
    }
    const std::string& prefix = prefixes_[slot.index];
    // The candidate is lowercase_path[0, length - 1) followed by "/".
    if (prefix.size() == length && BytesEqual(prefix.data(), lowercase_path.data(), length - 1)) {
      return slot.index;
    }
  }
}

int PrefixIndex::LongestMatch(std::string_view lowercase_path) const {
  if (max_length_ == 0 || lowercase_path.empty() || lowercase_path.front() != '/') {
    return -1;
  }
  // Candidates "<path up to a '/'>/" and, when the path does not end with
  // "/", "<path>/" ("/sap" matches "/sap/"); each is hashed only when
  // probed, longest first, so a typical lookup hashes once.
  const size_t size = lowercase_path.size();
  const size_t scan_end = std::min(size, max_length_);
  const bool whole_path = size >= 2 && lowercase_path.back() != '/' && size + 1 <= max_length_;
#if defined(__SSE2__)
  if (size >= 16 && scan_end <= kMaxDepth) {
    // The "/" of [0, scan_end) as bit masks, 16 bytes a block (the last
    // block is read ending at the path's end, and shifted into place).
    constexpr size_t kBlocks = kMaxDepth / 16;
    uint32_t masks[kBlocks];
    const __m128i slash = _mm_set1_epi8('/');
    const char* p = lowercase_path.data();
    size_t blocks = 0;
    for (size_t at = 0; at < scan_end; at += 16) {
      uint32_t mask;
      if (at + 16 <= size) {
        mask = static_cast<uint32_t>(_mm_movemask_epi8(
            _mm_cmpeq_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + at)), slash)));
      } else {
        mask = static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(
                   _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + size - 16)), slash))) >>
               (at - (size - 16));
      }
      if (scan_end - at < 16) {
        mask &= (uint32_t{1} << (scan_end - at)) - 1;
      }
      masks[blocks++] = mask;
    }
    masks[0] &= ~uint32_t{1};  // the leading "/" is no candidate
    if (whole_path) {
      if (int found = Find(KeyHash(lowercase_path), lowercase_path, size + 1); found >= 0) {
        return found;
      }
    }
    for (size_t block = blocks; block > 0; --block) {
      for (uint32_t mask = masks[block - 1]; mask != 0;) {
        const int bit = 31 - std::countl_zero(mask);
        mask &= ~(uint32_t{1} << bit);
        const size_t end = (block - 1) * 16 + static_cast<size_t>(bit);
        if (int found = Find(KeyHash(lowercase_path.substr(0, end)), lowercase_path, end + 1);
            found >= 0) {
          return found;
        }
      }
    }
    return -1;
  }
#endif
  size_t ends[kMaxDepth];  // candidate lengths without the final "/"
  size_t count = 0;
  if (scan_end <= kMaxDepth) {
    // Cannot fill `ends`. Eight bytes at a time: the exact zero-byte test
    // (no false positives, unlike (x - 1) & ~x) of the word XOR "////////"
    // flags each "/", then the rest branch-free.
    static_assert(std::endian::native == std::endian::little, "byte k of a word is bits 8k..8k+7");
    constexpr uint64_t kLow7 = 0x7f7f7f7f7f7f7f7full;
    constexpr uint64_t kSlashes = 0x2f2f2f2f2f2f2f2full;
    const auto* p = reinterpret_cast<const unsigned char*>(lowercase_path.data());
    size_t i = 1;
    for (; i + 8 <= scan_end; i += 8) {
      const uint64_t x = string_hash_internal::Read8(p + i) ^ kSlashes;
      uint64_t slashes = ~(((x & kLow7) + kLow7) | x | kLow7);
      while (slashes != 0) {
        ends[count++] = i + static_cast<size_t>(std::countr_zero(slashes)) / 8;
        slashes &= slashes - 1;
      }
    }
    for (; i < scan_end; ++i) {
      ends[count] = i;
      count += lowercase_path[i] == '/' ? 1 : 0;
    }
  } else {
    for (size_t i = 1; i < scan_end && count < kMaxDepth; ++i) {
      if (lowercase_path[i] == '/') {
        ends[count++] = i;
      }
    }
  }
  if (whole_path && count < kMaxDepth) {
    ends[count++] = size;
  }
  for (size_t k = count; k > 0; --k) {
    const size_t end = ends[k - 1];
    int found = Find(KeyHash(lowercase_path.substr(0, end)), lowercase_path, end + 1);
    if (found >= 0) {
      return found;
    }
  }
  return -1;
}

}  // namespace kwd::routing
