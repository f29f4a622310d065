#include "dataplane/balancer/weighted_round_robin.h"

namespace kwd::balancer {

int WeightedRoundRobin::Choose(std::span<const ServerInput> servers) {
  return ChooseLowestLoadPerCapacity(servers);
}

}  // namespace kwd::balancer
