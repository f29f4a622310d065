#include "dataplane/balancer/balancer.h"

#include <algorithm>

#include "dataplane/balancer/adaptive.h"
#include "dataplane/balancer/simple_weighted_round_robin.h"
#include "dataplane/balancer/weighted_round_robin.h"

namespace kwd::balancer {
namespace {

// Load counters times capacities can exceed 64 bits only in theory; 128-bit
// products keep the comparison exact without a branch.
__extension__ typedef unsigned __int128 Uint128;

}  // namespace

Balancer::Balancer(size_t server_count, int64_t load_reset_interval_ms)
    : load_reset_interval_ms_(load_reset_interval_ms) {
  Resize(server_count);
}

void Balancer::Resize(size_t server_count) {
  assigned_.assign(server_count, 0);
  outstanding_.assign(server_count, 0);
}

void Balancer::MaybeResetAssigned(int64_t now_ms) {
  if (load_reset_interval_ms_ <= 0) {
    return;
  }
  if (!reset_scheduled_) {
    reset_scheduled_ = true;
    next_reset_ms_ = now_ms + load_reset_interval_ms_;
    return;
  }
  if (now_ms >= next_reset_ms_) {
    std::fill(assigned_.begin(), assigned_.end(), 0);
    next_reset_ms_ = now_ms + load_reset_interval_ms_;
  }
}

int Balancer::Pick(std::span<const ServerInput> servers, int64_t now_ms) {
  if (servers.size() != assigned_.size()) {
    // Only when a caller changes the server list without Rebind.
    Resize(servers.size());
  }
  MaybeResetAssigned(now_ms);
  int chosen = Choose(servers);
  if (chosen >= 0) {
    ++assigned_[chosen];
    ++outstanding_[chosen];
  }
  return chosen;
}

void Balancer::CountSticky(size_t index, int64_t now_ms) {
  if (index >= assigned_.size()) {
    return;
  }
  MaybeResetAssigned(now_ms);
  ++assigned_[index];
  ++outstanding_[index];
}

void Balancer::Complete(size_t index) {
  if (index < outstanding_.size() && outstanding_[index] > 0) {
    --outstanding_[index];
  }
}

void Balancer::Rebind(std::span<const int> new_to_old) {
  std::vector<uint64_t> assigned(new_to_old.size(), 0);
  std::vector<uint64_t> outstanding(new_to_old.size(), 0);
  for (size_t i = 0; i < new_to_old.size(); ++i) {
    int old = new_to_old[i];
    if (old >= 0 && static_cast<size_t>(old) < assigned_.size()) {
      assigned[i] = assigned_[old];
      outstanding[i] = outstanding_[old];
    }
  }
  assigned_ = std::move(assigned);
  outstanding_ = std::move(outstanding);
}

int Balancer::ChooseLowestLoadPerCapacity(std::span<const ServerInput> servers) const {
  int best = -1;
  uint64_t best_load = 0;
  uint64_t best_capacity = 1;
  const uint64_t* assigned = assigned_.data();
  const uint64_t* outstanding = outstanding_.data();
  for (size_t i = 0; i < servers.size(); ++i) {
    const ServerInput& server = servers[i];
    if (!server.Usable()) {
      continue;
    }
    // The counters count requests, so their sum fits 64 bits; each product
    // is then one 64x64->128-bit multiplication (a general 128x128 one costs
    // several times more in this loop over every server).
    const uint64_t load = assigned[i] + outstanding[i] + 1;
    const uint64_t capacity = std::max<uint32_t>(server.capacity, 1);
    // load / capacity < best_load / best_capacity, without division.
    if (best < 0 || Uint128{load} * best_capacity < Uint128{best_load} * capacity) {
      best = static_cast<int>(i);
      best_load = load;
      best_capacity = capacity;
    }
  }
  return best;
}

std::unique_ptr<Balancer> MakeBalancer(v1::Strategy strategy, size_t server_count,
                                       int64_t load_reset_interval_ms) {
  switch (strategy) {
    case v1::STRATEGY_SIMPLE_WEIGHTED_ROUND_ROBIN:
      return std::make_unique<SimpleWeightedRoundRobin>(server_count, load_reset_interval_ms);
    case v1::STRATEGY_ADAPTIVE:
      return std::make_unique<Adaptive>(server_count, load_reset_interval_ms);
    default:
      return std::make_unique<WeightedRoundRobin>(server_count, load_reset_interval_ms);
  }
}

std::string_view StrategyName(v1::Strategy strategy) {
  switch (strategy) {
    case v1::STRATEGY_SIMPLE_WEIGHTED_ROUND_ROBIN:
      return "simple_weighted_round_robin";
    case v1::STRATEGY_ADAPTIVE:
      return "adaptive";
    default:
      return "weighted_round_robin";
  }
}

}  // namespace kwd::balancer
