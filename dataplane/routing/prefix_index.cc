#include "dataplane/routing/prefix_index.h"

#include <bit>
#include <cstring>

namespace kwd::routing {
namespace {

constexpr uint64_t kFnvOffset = 1469598103934665603ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

uint64_t Mix(uint64_t hash, char c) {
  return (hash ^ static_cast<unsigned char>(c)) * kFnvPrime;
}

uint64_t Hash(std::string_view s) {
  uint64_t hash = kFnvOffset;
  for (char c : s) {
    hash = Mix(hash, c);
  }
  return hash;
}

// Deeper prefixes than this are not looked up; rules are far shallower.
constexpr size_t kMaxDepth = 128;

}  // namespace

PrefixIndex::PrefixIndex(std::vector<std::string> lowercase_prefixes)
    : prefixes_(std::move(lowercase_prefixes)) {
  size_t capacity = std::bit_ceil(std::max<size_t>(4, prefixes_.size() * 2));
  slots_.assign(capacity, Slot{});
  mask_ = capacity - 1;
  for (size_t i = 0; i < prefixes_.size(); ++i) {
    const std::string& prefix = prefixes_[i];
    max_length_ = std::max(max_length_, prefix.size());
    uint64_t hash = Hash(prefix);
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
    if (prefix.size() == length &&
        std::memcmp(prefix.data(), lowercase_path.data(), length - 1) == 0) {
      return slot.index;
    }
  }
}

int PrefixIndex::LongestMatch(std::string_view lowercase_path) const {
  if (prefixes_.empty() || lowercase_path.empty() || lowercase_path.front() != '/') {
    return -1;
  }
  // Hashes of the candidates "<segments>/", shortest first.
  uint64_t hashes[kMaxDepth];
  size_t lengths[kMaxDepth];
  size_t count = 0;
  uint64_t hash = Mix(kFnvOffset, '/');
  for (size_t i = 1; i < lowercase_path.size() && count < kMaxDepth; ++i) {
    if (i + 1 > max_length_) {
      break;
    }
    char c = lowercase_path[i];
    hash = Mix(hash, c);
    if (c == '/') {
      hashes[count] = hash;
      lengths[count] = i + 1;
      ++count;
    } else if (i + 1 == lowercase_path.size() && i + 2 <= max_length_ && count < kMaxDepth) {
      // The path's last segment without a trailing "/": "/sap" matches "/sap/".
      hashes[count] = Mix(hash, '/');
      lengths[count] = i + 2;
      ++count;
    }
  }
  for (size_t k = count; k > 0; --k) {
    int found = Find(hashes[k - 1], lowercase_path, lengths[k - 1]);
    if (found >= 0) {
      return found;
    }
  }
  return -1;
}

}  // namespace kwd::routing
