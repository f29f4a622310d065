#pragma once

// Longest path-segment prefix lookup without allocation: the prefixes live in
// an open-addressing table keyed by their hash; a lookup finds the segment
// boundaries of the path and probes candidates from the longest down,
// hashing each (kwd::HashString, a word at a time) only when it is probed.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kwd::routing {

class PrefixIndex {
 public:
  // `lowercase_prefixes` each start and end with "/" and are unique.
  explicit PrefixIndex(std::vector<std::string> lowercase_prefixes = {});

  // Index (into the constructor's list) of the longest prefix P such that
  // `lowercase_path` starts with P, or equals P without its final "/"; -1 when
  // none matches. "/sap/" matches "/sap", "/sap/" and "/sap/bc", never "/sapx".
  int LongestMatch(std::string_view lowercase_path) const;

  size_t size() const { return prefixes_.size(); }

 private:
  struct Slot {
    uint64_t hash = 0;
    int32_t index = -1;  // -1: empty
  };

  int Find(uint64_t hash, std::string_view lowercase_path, size_t length) const;

  std::vector<std::string> prefixes_;
  std::vector<Slot> slots_;
  uint64_t mask_ = 0;
  size_t max_length_ = 0;
};

}  // namespace kwd::routing
