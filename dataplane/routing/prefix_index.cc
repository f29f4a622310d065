#include "dataplane/routing/prefix_index.h"

#include <algorithm>
#include <bit>

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
  // "/", "<path>/" ("/sap" matches "/sap/"), shortest first; each is hashed
  // only when probed, longest first, so a typical lookup hashes once.
  const size_t size = lowercase_path.size();
  size_t ends[kMaxDepth];  // candidate lengths without the final "/"
  size_t count = 0;
  const size_t scan_end = std::min(size, max_length_);
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
  if (size >= 2 && lowercase_path.back() != '/' && size + 1 <= max_length_ && count < kMaxDepth) {
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
