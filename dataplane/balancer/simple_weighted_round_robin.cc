#include "dataplane/balancer/simple_weighted_round_robin.h"

namespace kwd::balancer {

int SimpleWeightedRoundRobin::Choose(std::span<const ServerInput> servers) {
  const size_t count = servers.size();
  if (count == 0) {
    return -1;
  }
  if (position_ < count && given_ > 0 && servers[position_].Usable() &&
      given_ < servers[position_].capacity) {
    ++given_;
    return static_cast<int>(position_);
  }
  // Start a new run: the current server itself when it has not begun yet
  // (given_ == 0), else the next usable one, wrapping around.
  size_t first_step = given_ == 0 ? 0 : 1;
  for (size_t step = first_step; step <= count; ++step) {
    size_t index = (position_ + step) % count;
    if (servers[index].Usable()) {
      position_ = index;
      given_ = 1;
      return static_cast<int>(index);
    }
  }
  return -1;
}

void SimpleWeightedRoundRobin::Rebind(std::span<const int> new_to_old) {
  size_t new_position = 0;
  bool found = false;
  for (size_t i = 0; i < new_to_old.size(); ++i) {
    if (new_to_old[i] >= 0 && static_cast<size_t>(new_to_old[i]) == position_) {
      new_position = i;
      found = true;
      break;
    }
  }
  position_ = new_position;
  if (!found) {
    given_ = 0;
  }
  Balancer::Rebind(new_to_old);
}

}  // namespace kwd::balancer
