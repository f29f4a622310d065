#pragma once

// Latency figures the benchmarks report as counters.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstddef>
#include <vector>

namespace kwd::bench {

// The p-th percentile (0..1) of `values`, nearest rank; 0 when empty.
inline double Percentile(std::vector<double> values, double p) {
  if (values.empty()) {
    return 0;
  }
  std::sort(values.begin(), values.end());
  size_t index = static_cast<size_t>(p * static_cast<double>(values.size() - 1) + 0.5);
  return values[std::min(index, values.size() - 1)];
}

// Sets p50_ms, p99_ms and max_ms from per-iteration milliseconds.
inline void ReportLatencies(benchmark::State& state, const std::vector<double>& millis) {
  state.counters["p50_ms"] = Percentile(millis, 0.50);
  state.counters["p99_ms"] = Percentile(millis, 0.99);
  state.counters["max_ms"] = Percentile(millis, 1.0);
}

}  // namespace kwd::bench
