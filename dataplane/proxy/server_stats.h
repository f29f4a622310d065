#pragma once

// What the admin page shows about traffic that the metrics registry does not
// keep per server: responses by status class with a one-minute window, sticky
// routing per group, and the last errors the proxy answered itself. One
// WorkerStats per worker, written only on its thread (plain integers, no
// atomics, no contention between workers) and read by posting to the worker
// (admin::AdminServer sums the workers). Nothing here allocates per request:
// the arrays are sized when a table is applied.

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "dataplane/routing/router.h"
#include "dataplane/routing/routing_table.h"

namespace kwd::proxy {

// Status classes: 0 = no response (the exchange failed), 1..5 = 1xx..5xx.
inline constexpr size_t kStatusClasses = 6;
// The rate window: kRateBuckets buckets of kRateBucketMs.
inline constexpr size_t kRateBuckets = 12;
inline constexpr int64_t kRateBucketMs = 5000;
// Local answers each worker remembers.
inline constexpr size_t kLocalAnswerRing = 32;

struct ServerTraffic {
  std::array<uint64_t, kStatusClasses> responses{};  // by status class, since start
  // The rate window: requests and errors (5xx or no response) per bucket.
  std::array<int64_t, kRateBuckets> bucket_epoch{};
  std::array<uint32_t, kRateBuckets> bucket_requests{};
  std::array<uint32_t, kRateBuckets> bucket_errors{};
};

struct GroupTraffic {
  uint64_t sticky_routed = 0;  // requests a session identifier routed
  uint64_t sticky_lost = 0;    // identifiers naming a gone or unhealthy server
  std::vector<ServerTraffic> servers;
};

// A response the proxy made itself (403, 503, 502, 504, ...). Fixed-size:
// recording one copies a few bytes and allocates nothing. Holds no request
// data: no URL, no session identifier, only the group and a fixed detail.
struct LocalAnswer {
  int64_t unix_ms = 0;
  int status = 0;
  std::string_view sap_code;  // static text ("EDISPATCHERR", ...)
  std::string_view reason;    // static text (routing::ReasonName, "bad-request")
  std::array<char, 96> detail{};
  uint8_t detail_size = 0;
  std::array<char, 160> group{};
  uint8_t group_size = 0;
};

// One worker's counts, as read for the admin page.
struct ServerTrafficView {
  std::array<uint64_t, kStatusClasses> responses{};
  uint64_t window_requests = 0;
  uint64_t window_errors = 0;
};
struct GroupTrafficView {
  uint64_t sticky_routed = 0;
  uint64_t sticky_lost = 0;
  std::vector<ServerTrafficView> servers;  // parallel to the asked table's group
};
struct TrafficView {
  std::vector<GroupTrafficView> groups;    // parallel to the asked table's groups
  double window_seconds = 0;               // what the window counts cover
  std::vector<LocalAnswer> local_answers;  // oldest first
};

class WorkerStats {
 public:
  // Worker thread, with the table the router now routes with: counts carry
  // over by group key and server name.
  void Apply(std::shared_ptr<const routing::RoutingTable> table, int64_t now_ms);

  // A transaction ended with `status` (0: no response) after `decision`
  // (null: the request was not routed).
  void CountResponse(const routing::Decision* decision, int status, int64_t now_ms);
  // The proxy answered `status` itself.
  void RecordLocalAnswer(const routing::Decision* decision, int status, std::string_view sap_code,
                         std::string_view reason, std::string_view detail, int64_t unix_ms);

  // The counts for the groups and servers of `table` (matched by key and
  // name; zero where this worker has none). Worker thread.
  TrafficView Read(const routing::RoutingTable& table, int64_t now_ms) const;

 private:
  // The counters for the decision's group and server, or null.
  GroupTraffic* GroupFor(const routing::Decision& decision, int* server);

  std::shared_ptr<const routing::RoutingTable> table_;
  std::vector<GroupTraffic> groups_;  // parallel to table_->groups()
  int64_t started_ms_ = -1;
  std::array<LocalAnswer, kLocalAnswerRing> answers_{};
  size_t answers_recorded_ = 0;
};

}  // namespace kwd::proxy
