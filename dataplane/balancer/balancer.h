#pragma once

// Balancing inside a LogonGroup (docs/internals.md, "Life of a request",
// step 3). One Balancer per group per worker: its counters are worker-local
// and never locked. What it reads about the servers (capacity, readiness,
// health, ping RTT) is shared and read-only; health and RTT are atomics the health checker writes.
//
// The strategies follow HAProxy's lb_ops shape: one file per algorithm, a
// factory keyed by the snapshot's Strategy.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "kwd/v1/snapshot.pb.h"

namespace kwd::balancer {

// Runtime state of one server, written by the health checker on its own
// thread and read by every worker. The routing layer keeps it per group key +
// server name so that it survives snapshot swaps.
struct ServerHealth {
  std::atomic<bool> healthy{true};
  std::atomic<int64_t> smoothed_rtt_us{0};  // 0: not measured yet
  // Drained on this proxy from its admin port (POST /admin/api/servers/drain):
  // like a draining server, it keeps its sticky traffic and takes no new
  // balanced traffic. Lives as long as the server stays in the snapshot.
  std::atomic<bool> local_drain{false};
  // What the admin page shows about health checks (Unix milliseconds, 0:
  // never). Written by the health checker (and the proxy's passive marking).
  std::atomic<int64_t> last_check_ms{0};
  std::atomic<int32_t> last_check_result{0};  // 1: passed, -1: failed, 0: never checked
  std::atomic<int64_t> last_change_ms{0};     // healthy last flipped

  // Sets `healthy`, noting the time of a change; returns whether it changed.
  bool SetHealthy(bool up, int64_t now_unix_ms) {
    if (healthy.exchange(up, std::memory_order_relaxed) == up) {
      return false;
    }
    last_change_ms.store(now_unix_ms, std::memory_order_relaxed);
    return true;
  }
};

// What a balancer reads about one server.
struct ServerInput {
  uint32_t capacity = 1;                 // >= 1
  bool ready = true;                     // SERVER_STATE_READY; draining servers get no new traffic
  const ServerHealth* health = nullptr;  // null: healthy, no RTT known

  bool Healthy() const {
    return health == nullptr || health->healthy.load(std::memory_order_relaxed);
  }
  bool LocallyDrained() const {
    return health != nullptr && health->local_drain.load(std::memory_order_relaxed);
  }
  // Takes new balanced traffic: ready (not draining, in the snapshot or
  // locally) and healthy. Sticky traffic only needs Healthy().
  bool Usable() const { return ready && Healthy() && !LocallyDrained(); }
  // Smoothed ping round-trip time in microseconds, 0 when unknown.
  int64_t RttUs() const {
    return health == nullptr ? 0 : health->smoothed_rtt_us.load(std::memory_order_relaxed);
  }
};

// Whether load_a / capacity_a < load_b / capacity_b, compared exactly
// without division. Loads below 2^32 (always, in practice) take 64-bit
// products; larger ones 128-bit products.
inline bool LoadPerCapacityLess(uint64_t load_a, uint32_t capacity_a, uint64_t load_b,
                                uint32_t capacity_b) {
  if (((load_a | load_b) >> 32) == 0) {
    return load_a * capacity_b < load_b * capacity_a;
  }
  __extension__ typedef unsigned __int128 Uint128;
  return Uint128{load_a} * capacity_b < Uint128{load_b} * capacity_a;
}

class Balancer {
 public:
  // `load_reset_interval_ms` <= 0 never resets `assigned`.
  Balancer(size_t server_count, int64_t load_reset_interval_ms);
  virtual ~Balancer() = default;
  Balancer(const Balancer&) = delete;
  Balancer& operator=(const Balancer&) = delete;

  virtual v1::Strategy strategy() const = 0;

  // Chooses a usable server, counts the request against it (assigned and
  // outstanding += 1) and returns its index; -1 when no server is usable.
  // Does not allocate while the server count stays the same.
  int Pick(std::span<const ServerInput> servers, int64_t now_ms);
  // A request routed by stickiness to `index`: counted as load, the rotation
  // of the strategy is unchanged.
  void CountSticky(size_t index, int64_t now_ms);
  // The response to a request counted against `index` arrived.
  void Complete(size_t index);

  // Carries the counters over to a new server list of the same group:
  // new_to_old[i] is the previous index of new server i, or -1 for a new one.
  virtual void Rebind(std::span<const int> new_to_old);

  // A new snapshot may change the group's interval; the next reset uses it.
  void set_load_reset_interval_ms(int64_t interval_ms) { load_reset_interval_ms_ = interval_ms; }

  size_t size() const { return assigned_.size(); }
  uint64_t assigned(size_t index) const { return assigned_[index]; }
  uint64_t outstanding(size_t index) const { return outstanding_[index]; }
  // Whether weighted_round_robin's tree holds one-word keys (see narrow_).
  bool narrow_tree() const { return narrow_; }

 protected:
  // Returns the index to use, or -1. Counting is done by Pick.
  virtual int Choose(std::span<const ServerInput> servers) = 0;

  // The weighted_round_robin rule, shared with adaptive's fallback: lowest
  // (assigned + outstanding + 1) / capacity, ties to the earlier server.
  // The servers' capacity and readiness must not change in place between
  // calls with the same span (a RoutingTable's never do); health may.
  int ChooseLowestLoadPerCapacity(std::span<const ServerInput> servers);

  std::vector<uint64_t> assigned_;
  std::vector<uint64_t> outstanding_;

 private:
  void Resize(size_t server_count);
  void MaybeResetAssigned(int64_t now_ms);

  // The rule by a linear scan over every server.
  int ScanLowestLoadPerCapacity(std::span<const ServerInput> servers) const;
  // A tournament tree over the servers keeps the lowest load per capacity
  // among the ready ones (health ignored) at its root: when that server is
  // healthy it is the answer, found in O(1) after O(log n) updates per
  // counter change, instead of a scan of the group per balanced request.
  // Counter changes only mark leaves; the next choice replays them (or
  // rebuilds the inner nodes when that is cheaper).
  void BuildTree(std::span<const ServerInput> servers);
  void RefreshTree();
  // Recomputes every node from the counters, in the narrow form when every
  // load allows it.
  void RebuildNodes();
  // Replays the counters of server `index` from its leaf to the root.
  void ReplayLeaf(uint32_t index);
  void ReplayWideLeaf(uint32_t index);
  void MarkChanged(size_t index);

  int64_t load_reset_interval_ms_;
  bool reset_scheduled_ = false;
  int64_t next_reset_ms_ = 0;

  bool tree_valid_ = false;      // built for tree_servers_, counters applied up to dirty_
  bool tree_all_dirty_ = false;  // every counter may have changed (load reset)
  const ServerInput* tree_servers_ = nullptr;
  size_t tree_leaves_ = 0;
  // Every node holds the key of the server that wins its subtree, so a
  // replay compares the rising winner with one sibling per level, read
  // from one place. `meta` is the capacity (low half) and the rank (high
  // half): the server's index with bit 31 set when it is not ready, so
  // ready servers come first and ties go to the earlier one. Leaves past
  // the last server hold a key that loses to every ready server (see
  // BuildTree), so every node holds a leaf; a rank whose index is >= the
  // server count at the root (a padding leaf, a server that is not ready)
  // makes the choice a scan.
  // Node n's key is (tree_load_[n], tree_meta_[n]), in two arrays so that
  // a replay keeps the rising key in two registers.
  static constexpr uint32_t kNotReady = uint32_t{1} << 31;
  std::vector<uint64_t> tree_load_;  // assigned + outstanding + 1
  std::vector<uint64_t> tree_meta_;  // rank << 32 | capacity (>= 1)
  // The narrow form of the same tree, used while it is exact (the usual
  // case): a node's key in one word, compared as one unsigned integer,
  //   not ready << 63 | load * (lcm / capacity) << narrow_rank_bits_ | index,
  // where lcm is the least common multiple of the group's capacities, so
  // load * (lcm / capacity) orders the servers exactly as load / capacity.
  // Exact while every server's load is at most its narrow_max_load_ (0 for
  // all when the capacities' lcm does not fit 64 bits); a load beyond makes
  // the tree wide (the two arrays above) until a full rebuild (a load reset)
  // finds every load within again.
  // Padding leaves hold kNarrowPadding: above every ready server's key,
  // with an index field past every server.
  bool narrow_ = false;
  uint32_t narrow_rank_bits_ = 0;
  std::vector<uint64_t> tree_key_;
  std::vector<uint64_t> narrow_leaf_;        // per server: not ready << 63 | index
  std::vector<uint64_t> narrow_multiplier_;  // per server: lcm / capacity
  std::vector<uint64_t> narrow_max_load_;    // per server
  // Servers whose counters changed since the last choice: dirty_[0,
  // dirty_count_), each once (dirty_flag_).
  std::vector<uint32_t> dirty_;
  size_t dirty_count_ = 0;
  std::vector<uint8_t> dirty_flag_;
};

// The balancer for `strategy` (STRATEGY_UNSPECIFIED: weighted_round_robin).
std::unique_ptr<Balancer> MakeBalancer(v1::Strategy strategy, size_t server_count,
                                       int64_t load_reset_interval_ms);

// "weighted_round_robin", "simple_weighted_round_robin", "adaptive".
std::string_view StrategyName(v1::Strategy strategy);

}  // namespace kwd::balancer
