#pragma once

// A small Prometheus registry. Metrics are declared once (at start-up or when
// a snapshot is applied, under the registry's mutex); the request path only
// increments the returned objects, which are relaxed atomics at stable
// addresses. Render() produces the text exposition format 0.0.4.

#include <atomic>
#include <bit>
#include <cstdint>
#include <deque>
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

class Counter {
 public:
  void Inc(uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

class Gauge {
 public:
  void Set(double v) { bits_.store(std::bit_cast<uint64_t>(v), std::memory_order_relaxed); }
  void Add(double delta);
  double Value() const { return std::bit_cast<double>(bits_.load(std::memory_order_relaxed)); }

 private:
  std::atomic<uint64_t> bits_{std::bit_cast<uint64_t>(0.0)};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double value);
  // Cumulative counts per bucket (last is +Inf), the count and the sum.
  std::vector<uint64_t> CumulativeCounts() const;
  uint64_t Count() const { return count_.load(std::memory_order_relaxed); }
  double Sum() const;
  const std::vector<double>& UpperBounds() const { return bounds_; }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // bounds_.size() + 1
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_nanos_{0};  // sum in 1e-9 units; values are seconds or bytes
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
  struct Child {
    Labels labels;
    std::shared_ptr<Counter> counter;
    std::shared_ptr<Gauge> gauge;
    std::shared_ptr<Histogram> histogram;
    std::function<double()> callback;
  };
  struct Family {
    std::string help;
    Type type;
    std::map<std::string, Child> children;  // keyed by rendered labels
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
