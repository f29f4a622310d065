#pragma once

// A small Prometheus registry. Metrics are declared once (at start-up or when
// a snapshot is applied, under the registry's mutex); the request path only
// increments the returned objects, which live at stable addresses.
// Render() produces the text exposition format 0.0.4.
//
// Per-worker slots: a counter's (or histogram's) value is a sum of slots,
// one per worker thread plus one shared slot. A worker thread calls
// SetMetricsWorker(id) once at start; from then on its increments go to its
// own slot with a relaxed load and store (one writer per slot: no atomic
// read-modify-write, no cache line written by two workers). Other threads
// (controller, admin, health checks) add to the shared slot with an atomic
// add. The scrape sums the slots with relaxed loads.
//
// The slots of all metrics live in chunks of lanes: lane L of a chunk holds
// the slots of thread lane L (0: shared, 1 + worker id), kMetricLaneSlots
// apart, so one worker's slots are contiguous and no two workers share a
// cache line. A chunk is one anonymous mapping: lanes no thread writes stay
// unbacked, so the idle cost is 8 bytes per slot per lane in use.

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kwd {

using Labels = std::vector<std::pair<std::string, std::string>>;

// Worker lanes beyond this share the atomic lane.
inline constexpr size_t kMetricMaxWorkers = 64;
// Slots per lane in one chunk (32 KiB lanes).
inline constexpr size_t kMetricLaneSlots = 4096;

// Called once by a worker thread before it counts: its increments go to its
// own slots. Ids 0..kMetricMaxWorkers-1 get a lane of their own.
void SetMetricsWorker(int worker_id);

namespace metrics_internal {

using Slot = std::atomic<uint64_t>;

// The lane of this thread: 0 (shared, atomic adds) unless SetMetricsWorker.
extern constinit thread_local size_t current_lane;

inline void Add(Slot* lane0, uint64_t n) {
  size_t lane = current_lane;
  if (lane == 0) {
    lane0->fetch_add(n, std::memory_order_relaxed);
    return;
  }
  Slot& mine = lane0[lane * kMetricLaneSlots];
  mine.store(mine.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

// The sum over the lanes in use.
uint64_t Sum(const Slot* lane0);
// `count` consecutive zeroed slots (lane 0's; the other lanes follow at
// kMetricLaneSlots strides), count <= kMetricLaneSlots.
Slot* AllocateSlots(size_t count);
// Returns them (zeroed again before reuse). Nobody may still write them.
void FreeSlots(Slot* first, size_t count);

}  // namespace metrics_internal

class Counter {
 public:
  Counter() : slot_(metrics_internal::AllocateSlots(1)) {}
  ~Counter() { metrics_internal::FreeSlots(slot_, 1); }
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  void Inc(uint64_t n = 1) { metrics_internal::Add(slot_, n); }
  uint64_t Value() const { return metrics_internal::Sum(slot_); }

 private:
  metrics_internal::Slot* slot_;
};

// A gauge set from anywhere (Set) or moved by deltas (Add). Adds on worker
// threads go to the worker's slot (the value is the sum); Set writes the
// shared slot and so should not be mixed with Adds from workers.
class Gauge {
 public:
  Gauge() : slot_(metrics_internal::AllocateSlots(1)) {}
  ~Gauge() { metrics_internal::FreeSlots(slot_, 1); }
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  void Set(double v) { slot_->store(std::bit_cast<uint64_t>(v), std::memory_order_relaxed); }
  void Add(double delta);
  double Value() const;

 private:
  metrics_internal::Slot* slot_;  // double bits per lane
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  explicit Histogram(std::shared_ptr<const std::vector<double>> upper_bounds);  // sorted
  ~Histogram();
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  void Observe(double value);
  // Cumulative counts per bucket (last is +Inf), the count and the sum.
  std::vector<uint64_t> CumulativeCounts() const;
  uint64_t Count() const { return CumulativeCounts().back(); }
  double Sum() const;
  const std::vector<double>& UpperBounds() const { return *bounds_; }

 private:
  std::shared_ptr<const std::vector<double>> bounds_;
  // bounds_->size() + 1 bucket counts, then the sum in 1e-9 units (values are
  // seconds or bytes); the count is the sum of the buckets.
  metrics_internal::Slot* slots_;
};

// Default latency buckets in seconds (100 us .. 10 s).
std::vector<double> LatencyBuckets();

class MetricsRegistry {
 public:
  enum class Type { kCounter, kGauge, kHistogram };

  // Returns the child of family `name` with these label values, creating the
  // family (with help text and type) and the child on first use. The same name
  // must always come with the same type and label names.
  Counter& GetCounter(std::string_view name, std::string_view help, const Labels& labels = {});
  Gauge& GetGauge(std::string_view name, std::string_view help, const Labels& labels = {});
  Histogram& GetHistogram(std::string_view name, std::string_view help, const Labels& labels = {},
                          std::vector<double> upper_bounds = LatencyBuckets());

  // Shared ownership of a child: a holder keeps it alive after
  // RetainLabelValues drops it from the exposition.
  std::shared_ptr<Counter> CounterPtr(std::string_view name, std::string_view help,
                                      const Labels& labels = {});
  std::shared_ptr<Histogram> HistogramPtr(std::string_view name, std::string_view help,
                                          const Labels& labels = {},
                                          std::vector<double> upper_bounds = LatencyBuckets());

  // A gauge computed at scrape time (e.g. session-table size).
  void AddCallbackGauge(std::string_view name, std::string_view help, const Labels& labels,
                        std::function<double()> read);
  // A counter read at scrape time (e.g. process_cpu_seconds_total); `read`
  // must never go down.
  void AddCallbackCounter(std::string_view name, std::string_view help, const Labels& labels,
                          std::function<double()> read);

  // Removes children whose labels contain label `key` with a value not in
  // `keep` (sorted): for series of servers or groups that left the snapshot.
  void RetainLabelValues(std::string_view family, std::string_view key,
                         const std::vector<std::string>& keep);

  std::string Render() const;

 private:
  // One series: its labels are only its key, the rendered `{k="v",...}`.
  struct Child {
    std::shared_ptr<void> metric;  // Counter, Gauge or Histogram, by the family's type
    std::unique_ptr<std::function<double()>> callback;
  };
  struct Family {
    std::string help;
    Type type;
    std::shared_ptr<const std::vector<double>> bounds;  // histograms: the last bounds used
    std::map<std::string, Child, std::less<>> children;  // keyed by rendered labels
  };
  Child& ChildFor(std::string_view name, std::string_view help, Type type, const Labels& labels);

  mutable std::mutex mu_;
  std::map<std::string, Family, std::less<>> families_;
};

// Registers what every kwd binary exports besides its own metrics:
// kwd_build_info{version,revision} (value 1) and the standard process_*
// metrics of the Prometheus client libraries (process_cpu_seconds_total,
// process_resident_memory_bytes, process_virtual_memory_bytes,
// process_open_fds, process_max_fds, process_start_time_seconds), read from
// /proc at scrape time.
void RegisterStandardMetrics(MetricsRegistry& registry);

// A number as the exposition format writes it: the shortest text that reads
// back as the same double ("0.00025", "10", "+Inf").
std::string FormatMetricValue(double value);

// Escapes a label value for the exposition format.
std::string EscapeLabelValue(std::string_view value);

// The length of the UTF-8 sequence at the start of `text` (RFC 3629: no
// overlong forms, no surrogates, nothing above U+10FFFF), or 0.
size_t Utf8SequenceLength(std::string_view text);

}  // namespace kwd
