#include "dataplane/routing/name_index.h"

#include <bit>

#include "common/string_hash.h"

namespace kwd::routing {

int NameIndex::FindEntry(std::string_view name, uint64_t hash) const {
  if (slots_.empty()) {
    return -1;
  }
  for (uint64_t position = hash & mask_;; position = (position + 1) & mask_) {
    const Slot& slot = slots_[position];
    if (slot.entry < 0) {
      return -1;
    }
    if (slot.hash == hash) {
      const std::string& candidate = names_[slot.entry];
      if (candidate.size() == name.size() &&
          BytesEqual(candidate.data(), name.data(), name.size())) {
        return slot.entry;
      }
    }
  }
}

void NameIndex::Place(uint64_t hash, int32_t entry) {
  uint64_t position = hash & mask_;
  while (slots_[position].entry >= 0) {
    position = (position + 1) & mask_;
  }
  slots_[position] = Slot{hash, entry};
}

bool NameIndex::Insert(std::string_view name, int value) {
  const uint64_t hash = HashString(name);
  if (FindEntry(name, hash) >= 0) {
    return false;
  }
  names_.emplace_back(name);
  values_.push_back(value);
  hashes_.push_back(hash);
  // At most half full, so that probes stay short and always end.
  if (names_.size() * 2 > slots_.size()) {
    const size_t capacity = std::bit_ceil(std::max<size_t>(8, names_.size() * 4));
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    for (size_t i = 0; i < names_.size(); ++i) {
      Place(hashes_[i], static_cast<int32_t>(i));
    }
  } else {
    Place(hash, static_cast<int32_t>(names_.size() - 1));
  }
  return true;
}

int NameIndex::Find(std::string_view name) const {
  const int entry = FindEntry(name, HashString(name));
  return entry < 0 ? -1 : values_[entry];
}

}  // namespace kwd::routing
