#include "dataplane/balancer/adaptive.h"

namespace kwd::balancer {
namespace {

__extension__ typedef unsigned __int128 Uint128;

}  // namespace

int Adaptive::Choose(std::span<const ServerInput> servers) {
  // Mean RTT of the measured servers stands in for the unmeasured ones, so a
  // new server is neither starved nor flooded.
  uint64_t rtt_sum = 0;
  uint64_t measured = 0;
  for (const ServerInput& server : servers) {
    int64_t rtt = server.RttUs();
    if (rtt > 0) {
      rtt_sum += static_cast<uint64_t>(rtt);
      ++measured;
    }
  }
  if (measured == 0) {
    return ChooseLowestLoadPerCapacity(servers);
  }
  const uint64_t mean_rtt = rtt_sum / measured > 0 ? rtt_sum / measured : 1;
  int best = -1;
  Uint128 best_cost = 0;
  for (size_t i = 0; i < servers.size(); ++i) {
    const ServerInput& server = servers[i];
    if (!server.Usable()) {
      continue;
    }
    int64_t rtt = server.RttUs();
    uint64_t weight = rtt > 0 ? static_cast<uint64_t>(rtt) : mean_rtt;
    Uint128 cost = (Uint128{assigned_[i]} + outstanding_[i] + 1) * weight;
    if (best < 0 || cost < best_cost) {
      best = static_cast<int>(i);
      best_cost = cost;
    }
  }
  return best;
}

}  // namespace kwd::balancer
