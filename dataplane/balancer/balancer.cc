#include "dataplane/balancer/balancer.h"

#include <algorithm>
#include <bit>

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
  tree_valid_ = false;
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
    tree_all_dirty_ = true;
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
    MarkChanged(static_cast<size_t>(chosen));
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
  MarkChanged(index);
}

void Balancer::Complete(size_t index) {
  if (index < outstanding_.size() && outstanding_[index] > 0) {
    --outstanding_[index];
    MarkChanged(index);
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
  tree_valid_ = false;
}

int Balancer::ScanLowestLoadPerCapacity(std::span<const ServerInput> servers) const {
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

bool Balancer::Better(uint32_t a, uint32_t b) const {
  const TreeKey& x = tree_key_[a];
  const TreeKey& y = tree_key_[b];
  if (x.ready != y.ready) {
    return x.ready != 0;
  }
  if (((x.load | y.load) >> 32) == 0) {
    // The usual case, one pair of 64-bit products (see LoadPerCapacityLess).
    const uint64_t scaled_a = x.load * y.capacity;
    const uint64_t scaled_b = y.load * x.capacity;
    return scaled_a != scaled_b ? scaled_a < scaled_b : a < b;
  }
  if (LoadPerCapacityLess(x.load, x.capacity, y.load, y.capacity)) {
    return true;
  }
  if (LoadPerCapacityLess(y.load, y.capacity, x.load, x.capacity)) {
    return false;
  }
  return a < b;
}

void Balancer::BuildTree(std::span<const ServerInput> servers) {
  const size_t count = servers.size();
  tree_servers_ = servers.data();
  tree_leaves_ = std::bit_ceil(std::max<size_t>(count, 1));
  tree_.assign(2 * tree_leaves_, 0);
  tree_key_.assign(tree_leaves_, TreeKey{~uint64_t{0}, 1, 0});
  dirty_.clear();
  dirty_.reserve(count);  // MarkChanged then never allocates
  dirty_flag_.assign(count, 0);
  for (size_t i = 0; i < tree_leaves_; ++i) {
    tree_[tree_leaves_ + i] = static_cast<uint32_t>(i);
  }
  for (size_t i = 0; i < count; ++i) {
    tree_key_[i].capacity = std::max<uint32_t>(servers[i].capacity, 1);
    tree_key_[i].ready = servers[i].ready ? 1 : 0;
  }
  tree_all_dirty_ = true;
  tree_valid_ = true;
  RefreshTree();
}

void Balancer::MarkChanged(size_t index) {
  if (tree_valid_ && !tree_all_dirty_ && dirty_flag_[index] == 0) {
    dirty_flag_[index] = 1;
    dirty_.push_back(static_cast<uint32_t>(index));
  }
}

void Balancer::RefreshTree() {
  auto better_of = [this](uint32_t a, uint32_t b) { return Better(b, a) ? b : a; };
  const size_t depth = static_cast<size_t>(std::bit_width(tree_leaves_));
  if (tree_all_dirty_ || dirty_.size() * depth >= tree_leaves_) {
    for (size_t i = 0; i < assigned_.size(); ++i) {
      tree_key_[i].load = assigned_[i] + outstanding_[i] + 1;
    }
    for (size_t node = tree_leaves_ - 1; node >= 1; --node) {
      tree_[node] = better_of(tree_[2 * node], tree_[2 * node + 1]);
    }
  } else {
    for (uint32_t index : dirty_) {
      tree_key_[index].load = assigned_[index] + outstanding_[index] + 1;
    }
    for (uint32_t index : dirty_) {
      for (size_t node = (tree_leaves_ + index) / 2; node >= 1; node /= 2) {
        tree_[node] = better_of(tree_[2 * node], tree_[2 * node + 1]);
      }
    }
  }
  for (uint32_t index : dirty_) {
    dirty_flag_[index] = 0;
  }
  dirty_.clear();
  tree_all_dirty_ = false;
}

int Balancer::ChooseLowestLoadPerCapacity(std::span<const ServerInput> servers) {
  if (!tree_valid_ || servers.data() != tree_servers_ || servers.size() != assigned_.size()) {
    BuildTree(servers);
  } else if (tree_all_dirty_ || !dirty_.empty()) {
    RefreshTree();
  }
  const uint32_t top = tree_[1];
  if (top < servers.size() && tree_key_[top].ready != 0 && servers[top].Usable()) {
    return static_cast<int>(top);
  }
  // Every ready server is down, or the best one is unhealthy: scan.
  return ScanLowestLoadPerCapacity(servers);
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
