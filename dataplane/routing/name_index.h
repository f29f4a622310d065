#pragma once

// Name -> index lookups on the request path (servers of a group by SAP
// instance name, virtual hosts by host name): an open-addressing table of
// precomputed hashes over a power-of-two slot array. Built off the request
// path; Find never allocates, hashes the key once (kwd::HashString) and
// compares names only on a full hash match. std::unordered_map spent most of
// a lookup in std::hash and a modulo by a prime bucket count.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kwd::routing {

class NameIndex {
 public:
  // Adds `name` -> `value` unless `name` is present already (the first value
  // stays, as with std::unordered_map::emplace). Returns whether it was added.
  bool Insert(std::string_view name, int value);
  // The value for `name`, or -1.
  int Find(std::string_view name) const;

  bool empty() const { return names_.empty(); }
  size_t size() const { return names_.size(); }

 private:
  struct Slot {
    uint64_t hash = 0;
    int32_t entry = -1;  // index into names_/values_, -1: empty
  };

  int FindEntry(std::string_view name, uint64_t hash) const;
  void Place(uint64_t hash, int32_t entry);

  std::vector<std::string> names_;
  std::vector<int> values_;
  std::vector<uint64_t> hashes_;
  std::vector<Slot> slots_;
  uint64_t mask_ = 0;
};

}  // namespace kwd::routing
