#include "dataplane/http/h2_stream_ids.h"

#include <algorithm>

namespace kwd::http {

void H2StreamIdSet::Add(int32_t low, int32_t high) {
  if (low <= 0 || low % 2 == 0 || high % 2 == 0 || high < low) {
    return;
  }
  if (!ranges_.empty() && int64_t{ranges_.back().second} + 2 == low) {
    ranges_.back().second = high;  // the usual case: the next id in order
    return;
  }
  // Ranges of odd ids touch when one's high is 2 below the other's low: the
  // first range that ends at low - 2 or later is the first that can join.
  // (In 64 bits: high + 2 may be over INT32_MAX.)
  const int64_t lo = low;
  const int64_t hi = high;
  auto first = std::lower_bound(ranges_.begin(), ranges_.end(), lo,
                                [](const auto& r, int64_t v) { return int64_t{r.second} + 2 < v; });
  auto last = first;  // one past the ranges that overlap or touch [low, high]
  while (last != ranges_.end() && last->first <= hi + 2) {
    ++last;
  }
  if (first == last) {
    ranges_.insert(first, {low, high});
    if (ranges_.size() > kMaxRanges) {
      ranges_.erase(ranges_.begin());
    }
    return;
  }
  first->first = std::min(first->first, low);
  first->second = std::max((last - 1)->second, high);
  ranges_.erase(first + 1, last);
}

bool H2StreamIdSet::Contains(int32_t id) const {
  if (ranges_.empty() || id > ranges_.back().second) {
    return false;  // the usual case: a new id
  }
  auto it = std::lower_bound(ranges_.begin(), ranges_.end(), id,
                             [](const auto& r, int32_t v) { return r.second < v; });
  return it != ranges_.end() && it->first <= id && id % 2 != 0;
}

}  // namespace kwd::http
