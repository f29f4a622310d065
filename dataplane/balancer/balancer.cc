#include "dataplane/balancer/balancer.h"

#include <algorithm>
#include <bit>
#include <numeric>

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

namespace {

__extension__ typedef unsigned __int128 Uint128;

constexpr uint64_t kPaddingLoad = 0xffffffff;
constexpr uint64_t kPaddingMeta = uint64_t{0x7fffffff} << 32 | 1;
// The narrow form's padding: ready, every other bit set.
constexpr uint64_t kNarrowPadding = ~uint64_t{0} >> 1;

// Wins (below) when one server is ready and the other is not, or a load
// reaches 2^32 (128-bit products).
[[gnu::noinline]] bool WinsRarely(uint64_t a_load, uint64_t a_meta, uint64_t b_load,
                                  uint64_t b_meta) {
  if (((a_meta ^ b_meta) >> 63) != 0) {
    return a_meta < b_meta;  // the ready one
  }
  const auto a_capacity = static_cast<uint32_t>(a_meta);
  const auto b_capacity = static_cast<uint32_t>(b_meta);
  if (LoadPerCapacityLess(a_load, a_capacity, b_load, b_capacity)) {
    return true;
  }
  if (LoadPerCapacityLess(b_load, b_capacity, a_load, a_capacity)) {
    return false;
  }
  return a_meta < b_meta;
}

// Whether the server with key (a_load, a_meta) wins over (b_load, b_meta)
// (Balancer::tree_load_, tree_meta_): ready first, then the lower load per
// capacity (exact), then the earlier server.
inline bool Wins(uint64_t a_load, uint64_t a_meta, uint64_t b_load, uint64_t b_meta) {
  if ((((a_meta ^ b_meta) >> 63) | ((a_load | b_load) >> 32)) != 0) {
    return WinsRarely(a_load, a_meta, b_load, b_meta);
  }
  // Both ready (or both not), loads below 2^32: one pair of 64-bit products
  // (see LoadPerCapacityLess), equal ones decided by the ranks (which
  // differ, and lead `meta`), compared as one 128-bit pair.
  const uint64_t scaled_a = a_load * static_cast<uint32_t>(b_meta);
  const uint64_t scaled_b = b_load * static_cast<uint32_t>(a_meta);
  return (Uint128{scaled_a} << 64 | a_meta) < (Uint128{scaled_b} << 64 | b_meta);
}

}  // namespace

void Balancer::BuildTree(std::span<const ServerInput> servers) {
  const size_t count = servers.size();
  tree_servers_ = servers.data();
  tree_leaves_ = std::bit_ceil(std::max<size_t>(count, 1));
  // The padding leaves: "ready", so that comparing one with a ready server
  // takes Wins' common case, with the largest load below 2^32, capacity 1
  // and the last rank, so that they lose to every ready server whose load
  // is below 2^32. One that wins anyway (every server is not ready, or the
  // ready ones carry 2^32 requests) has an index beyond the servers: the
  // choice is then made by a scan.
  tree_load_.assign(2 * tree_leaves_, kPaddingLoad);
  tree_meta_.assign(2 * tree_leaves_, kPaddingMeta);
  dirty_.assign(count, 0);  // MarkChanged then never allocates
  dirty_count_ = 0;
  dirty_flag_.assign(count, 0);
  // The narrow form: the capacities' lcm, when it fits 64 bits (0 else).
  uint64_t lcm = 1;
  for (size_t i = 0; i < count && lcm != 0; ++i) {
    const uint32_t capacity = std::max<uint32_t>(servers[i].capacity, 1);
    if (__builtin_mul_overflow(lcm, capacity / std::gcd(lcm, uint64_t{capacity}), &lcm)) {
      lcm = 0;
    }
  }
  // The index field holds every leaf's index and one more value (all ones,
  // the padding's), so a ready server's key stays below kNarrowPadding.
  narrow_rank_bits_ = static_cast<uint32_t>(std::bit_width(tree_leaves_));
  const uint64_t max_product = (uint64_t{1} << (63 - narrow_rank_bits_)) - 1;
  tree_key_.assign(2 * tree_leaves_, kNarrowPadding);
  narrow_leaf_.assign(count, 0);
  narrow_multiplier_.assign(count, 0);
  narrow_max_load_.assign(count, 0);
  for (size_t i = 0; i < count; ++i) {
    const uint32_t capacity = std::max<uint32_t>(servers[i].capacity, 1);
    const uint64_t rank = static_cast<uint32_t>(i) | (servers[i].ready ? 0 : kNotReady);
    tree_meta_[tree_leaves_ + i] = rank << 32 | capacity;
    narrow_leaf_[i] = (servers[i].ready ? 0 : uint64_t{1} << 63) | i;
    if (lcm != 0) {
      narrow_multiplier_[i] = lcm / capacity;
      narrow_max_load_[i] = max_product / narrow_multiplier_[i];
    }
  }
  tree_all_dirty_ = true;
  tree_valid_ = true;
  RefreshTree();
}

void Balancer::MarkChanged(size_t index) {
  if (tree_valid_ && !tree_all_dirty_ && dirty_flag_[index] == 0) {
    dirty_flag_[index] = 1;
    dirty_[dirty_count_++] = static_cast<uint32_t>(index);
  }
}

inline void Balancer::ReplayLeaf(uint32_t index) {
  if (!narrow_) {
    ReplayWideLeaf(index);
    return;
  }
  const uint64_t load = assigned_[index] + outstanding_[index] + 1;
  if (load > narrow_max_load_[index]) {
    RebuildNodes();  // wide until a rebuild finds every load within again
    return;
  }
  // The leaf's new key rises to the root, meeting one sibling a level: the
  // lower key wins, without a branch.
  uint64_t* const tree = tree_key_.data();
  size_t node = tree_leaves_ + index;
  uint64_t key = narrow_leaf_[index] | (load * narrow_multiplier_[index]) << narrow_rank_bits_;
  tree[node] = key;
  for (; node > 1; node /= 2) {
    key = std::min(key, tree[node ^ 1]);
    tree[node / 2] = key;
  }
}

void Balancer::ReplayWideLeaf(uint32_t index) {
  // As ReplayLeaf; the rising key stays in two registers.
  uint64_t* const tree_load = tree_load_.data();
  uint64_t* const tree_meta = tree_meta_.data();
  size_t node = tree_leaves_ + index;
  uint64_t load = assigned_[index] + outstanding_[index] + 1;
  uint64_t meta = tree_meta[node];
  tree_load[node] = load;
  for (; node > 1; node /= 2) {
    const uint64_t sibling_load = tree_load[node ^ 1];
    const uint64_t sibling_meta = tree_meta[node ^ 1];
    const bool sibling_wins = Wins(sibling_load, sibling_meta, load, meta);
    load = sibling_wins ? sibling_load : load;
    meta = sibling_wins ? sibling_meta : meta;
    tree_load[node / 2] = load;
    tree_meta[node / 2] = meta;
  }
}

void Balancer::RebuildNodes() {
  const size_t leaves = tree_leaves_;
  const size_t count = assigned_.size();
  narrow_ = true;
  for (size_t i = 0; i < count && narrow_; ++i) {
    narrow_ = assigned_[i] + outstanding_[i] + 1 <= narrow_max_load_[i];
  }
  if (narrow_) {
    uint64_t* const tree = tree_key_.data();
    for (size_t i = 0; i < count; ++i) {
      const uint64_t load = assigned_[i] + outstanding_[i] + 1;
      tree[leaves + i] = narrow_leaf_[i] | (load * narrow_multiplier_[i]) << narrow_rank_bits_;
    }
    for (size_t node = leaves - 1; node >= 1; --node) {
      tree[node] = std::min(tree[2 * node], tree[2 * node + 1]);
    }
    return;
  }
  uint64_t* const tree_load = tree_load_.data();
  uint64_t* const tree_meta = tree_meta_.data();
  for (size_t i = 0; i < count; ++i) {
    tree_load[leaves + i] = assigned_[i] + outstanding_[i] + 1;
  }
  for (size_t node = leaves - 1; node >= 1; --node) {
    const size_t left = 2 * node;
    const size_t right = 2 * node + 1;
    const size_t winner =
        Wins(tree_load[right], tree_meta[right], tree_load[left], tree_meta[left]) ? right : left;
    tree_load[node] = tree_load[winner];
    tree_meta[node] = tree_meta[winner];
  }
}

void Balancer::RefreshTree() {
  const size_t leaves = tree_leaves_;
  const size_t depth = static_cast<size_t>(std::bit_width(leaves));
  if (tree_all_dirty_ || dirty_count_ * depth >= leaves) {
    RebuildNodes();
  } else {
    for (size_t k = 0; k < dirty_count_; ++k) {
      ReplayLeaf(dirty_[k]);
    }
  }
  for (size_t k = 0; k < dirty_count_; ++k) {
    dirty_flag_[dirty_[k]] = 0;
  }
  dirty_count_ = 0;
  tree_all_dirty_ = false;
}

int Balancer::ChooseLowestLoadPerCapacity(std::span<const ServerInput> servers) {
  if (servers.size() >= kNotReady) {
    return ScanLowestLoadPerCapacity(servers);  // more servers than a rank can name
  }
  if (!tree_valid_ || servers.data() != tree_servers_ || servers.size() != assigned_.size()) {
    BuildTree(servers);
  } else if (dirty_count_ == 1 && !tree_all_dirty_) {
    // The usual case: one server's counters changed since the last choice
    // (a replay is never costlier than a rebuild, which RefreshTree weighs).
    const uint32_t index = dirty_[0];
    ReplayLeaf(index);
    dirty_flag_[index] = 0;
    dirty_count_ = 0;
  } else if (tree_all_dirty_ || dirty_count_ != 0) {
    RefreshTree();
  }
  // A not-ready rank is >= kNotReady, beyond any server count; in the
  // narrow form a server that is not ready keeps its index (and is not
  // Usable), a padding leaf's index is beyond the servers.
  const auto top =
      narrow_ ? static_cast<uint32_t>(tree_key_[1] & ((uint64_t{1} << narrow_rank_bits_) - 1))
              : static_cast<uint32_t>(tree_meta_[1] >> 32);
  if (top < servers.size() && servers[top].Usable()) {
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
