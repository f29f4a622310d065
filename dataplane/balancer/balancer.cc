#include "dataplane/balancer/balancer.h"

#include <algorithm>

#include "dataplane/balancer/adaptive.h"
#include "dataplane/balancer/simple_weighted_round_robin.h"
#include "dataplane/balancer/weighted_round_robin.h"

namespace kwd::balancer {

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
  // Runs over every server of the group for each balanced request. Usability
  // (readiness, a health atomic behind a pointer) is only checked for a
  // server that would become the best: the same choice as filtering first,
  // for a fraction of the loads and branches.
  const uint64_t* assigned = assigned_.data();
  const uint64_t* outstanding = outstanding_.data();
  const size_t count = servers.size();
  size_t i = 0;
  while (i < count && !servers[i].Usable()) {
    ++i;
  }
  if (i == count) {
    return -1;
  }
  size_t best = i;
  uint64_t best_load = assigned[i] + outstanding[i] + 1;
  uint32_t best_capacity = std::max<uint32_t>(servers[i].capacity, 1);
  for (++i; i < count; ++i) {
    // The counters count requests, so their sum fits 64 bits.
    const uint64_t load = assigned[i] + outstanding[i] + 1;
    const uint32_t capacity = std::max<uint32_t>(servers[i].capacity, 1);
    // Strictly less: ties go to the earlier server.
    if (LoadPerCapacityLess(load, capacity, best_load, best_capacity) && servers[i].Usable()) {
      best = i;
      best_load = load;
      best_capacity = capacity;
    }
  }
  return static_cast<int>(best);
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
