#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace kwd::http {

// A set of an HTTP/2 client's stream ids (odd, 1 to 2^31-1) as at most
// kMaxRanges inclusive ranges, lowest first: ids a client opens in order and
// that end in order take one range, whatever their number. Beyond
// kMaxRanges the lowest range is forgotten, so a holder must be one for
// which forgetting an id is the safe side. Empty, it holds no storage;
// full, 512 bytes at most (a vector's growth). (Ids that alternate in and out still leave the last 100
// or so: as many streams as nghttp2 kept closed ones for the priority tree.)
class H2StreamIdSet {
 public:
  static constexpr size_t kMaxRanges = 50;

  // Adds the odd ids from `low` to `high` (both odd, low <= high; anything
  // else is ignored).
  void Add(int32_t low, int32_t high);
  void Add(int32_t id) { Add(id, id); }
  bool Contains(int32_t id) const;
  size_t ranges() const { return ranges_.size(); }
  // Gives back the storage beyond what the ranges take.
  void ShrinkToFit() { ranges_.shrink_to_fit(); }

 private:
  std::vector<std::pair<int32_t, int32_t>> ranges_;  // disjoint, not adjacent, ascending
};

}  // namespace kwd::http
