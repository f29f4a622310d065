// Controller event-to-snapshot latency: 10,000 endpoints over 1,000 Services
// and LogonGroups (one EndpointSlice and ten annotated Pods each) in the
// pipeline's store; each iteration changes one EndpointSlice (an endpoint
// flips ready) and waits for the new snapshot to be published. Reports
// p50/p99 of that latency and the process's peak RSS (getrusage ru_maxrss).
// Targets: p99 under 50 ms, RSS under 200 MiB. The argument is the
// coalescing hold-off in milliseconds (the default is 10).

#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "bench/controller_fixture.h"
#include "bench/latency.h"
#include "controller/pipeline/pipeline.h"

namespace {

using kwd::bench::BuildObjects;
using kwd::bench::Decode;
using kwd::bench::kEndpointsPerGroup;
using kwd::bench::kGroups;
using kwd::bench::Percentile;
using kwd::bench::Slice;
using Clock = std::chrono::steady_clock;

class TimedSink final : public kwd::pipeline::SnapshotSink {
 public:
  void Publish(std::shared_ptr<const kwd::compile::CompileResult> result) override {
    std::lock_guard lock(mu_);
    ++published_;
    last_ = Clock::now();
    wake_.notify_all();
  }
  // Waits for publication number `count`; returns when it happened.
  Clock::time_point WaitFor(uint64_t count) {
    std::unique_lock lock(mu_);
    wake_.wait(lock, [&] { return published_ >= count; });
    return last_;
  }
  uint64_t published() {
    std::lock_guard lock(mu_);
    return published_;
  }

 private:
  std::mutex mu_;
  std::condition_variable wake_;
  uint64_t published_ = 0;
  Clock::time_point last_{};
};

void BM_WatchEventToSnapshot10kEndpoints(benchmark::State& state) {
  TimedSink sink;
  kwd::MetricsRegistry metrics;
  kwd::pipeline::Pipeline pipeline(
      kwd::pipeline::PipelineOptions{std::chrono::milliseconds(state.range(0)),
                                     std::chrono::milliseconds(100), nullptr, ""},
      sink, &metrics);
  int source = pipeline.AddSource("bench");
  std::jthread thread([&](std::stop_token stop) { pipeline.Run(stop); });
  pipeline.ReplaceAll(source, BuildObjects());
  sink.WaitFor(1);

  std::vector<double> latencies_ms;
  int event = 0;
  for (auto _ : state) {
    uint64_t next = sink.published() + 1;
    int group = (event * 37) % kGroups;
    // Decoding is the reflector thread's work; the clock starts at enqueue.
    kwd::pipeline::ObservedObject changed = Decode(Slice(group, event % kEndpointsPerGroup));
    auto start = Clock::now();
    pipeline.Upsert(std::move(changed));
    Clock::time_point published = sink.WaitFor(next);
    double seconds = std::chrono::duration<double>(published - start).count();
    state.SetIterationTime(seconds);
    latencies_ms.push_back(seconds * 1000.0);
    ++event;
  }
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  state.counters["p50_ms"] = Percentile(latencies_ms, 0.50);
  state.counters["p99_ms"] = Percentile(latencies_ms, 0.99);
  state.counters["max_rss_MiB"] = static_cast<double>(usage.ru_maxrss) / 1024.0;
}
BENCHMARK(BM_WatchEventToSnapshot10kEndpoints)
    ->Arg(10)
    ->Arg(0)
    ->Iterations(200)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
