// Compile 10,000 endpoints in 1,000 groups: the controller benchmarks'
// cluster (bench/controller_fixture.h: 1,000 Services x 10 endpoints, one
// EndpointSlice each, Pods carrying instance-name and capacity annotations,
// one UrlMapping with 1,000 rules). Target: under 50 ms.

#include <benchmark/benchmark.h>

#include <string>

#include "bench/controller_fixture.h"
#include "common/snapshot_io.h"
#include "controller/compile/compile.h"

namespace {

using kwd::bench::kEndpointsPerGroup;
using kwd::bench::kGroups;

// The controller benchmarks' cluster (bench/controller_fixture.h) as one ObjectSet.
kwd::model::ObjectSet BuildObjects() {
  kwd::model::ObjectSet set;
  for (kwd::pipeline::ObservedObject& observed : kwd::bench::BuildObjects()) {
    set.Upsert(std::move(observed.object));
  }
  return set;
}

void BM_Compile10kEndpoints1kGroups(benchmark::State& state) {
  kwd::model::ObjectSet objects = BuildObjects();
  std::string version;
  for (auto _ : state) {
    kwd::compile::CompileResult result = kwd::compile::Compile(objects);
    benchmark::DoNotOptimize(result);
    version = result.snapshot.version();
  }
  state.SetItemsProcessed(state.iterations() * kGroups * kEndpointsPerGroup);
  // The content hash: a speed-up that changes it changed the output.
  state.SetLabel("version " + version.substr(0, 16));
}
BENCHMARK(BM_Compile10kEndpoints1kGroups)->Unit(benchmark::kMillisecond)->UseRealTime();

// What the pipeline does per watch event: one EndpointSlice changed (an
// endpoint flips ready), reported to the memo, then a compile that reuses
// the other 999 groups. The output is the full snapshot all the same.
void BM_CompileMemoOneSliceChanged(benchmark::State& state) {
  kwd::model::ObjectSet objects = BuildObjects();
  kwd::compile::CompileMemo memo;
  kwd::compile::Compile(objects, memo);
  // Two versions of a few groups' slices: all endpoints ready, or endpoint 3 not.
  std::vector<kwd::model::Object> flips[2];
  for (int g = 0; g < 16; ++g) {
    for (int ready = 0; ready < 2; ++ready) {
      flips[ready].push_back(kwd::bench::Decode(kwd::bench::Slice(g * 61, ready ? -1 : 3)).object);
    }
  }
  size_t step = 0;
  for (auto _ : state) {
    const kwd::model::Object& slice = flips[(step / 16) % 2][step % 16];
    memo.Changed(kwd::model::KeyOf(slice));
    objects.Upsert(slice);
    kwd::compile::CompileResult result = kwd::compile::Compile(objects, memo);
    benchmark::DoNotOptimize(result);
    ++step;
  }
  state.counters["groups_compiled_per_compile"] =
      static_cast<double>(memo.groups_compiled() - kGroups) / static_cast<double>(step);
}
BENCHMARK(BM_CompileMemoOneSliceChanged)->Unit(benchmark::kMillisecond)->UseRealTime();

// The share of the content hash (a deterministic serialization plus SHA-256)
// in the compile time above.
void BM_VersionOf10kEndpointSnapshot(benchmark::State& state) {
  kwd::compile::CompileResult result = kwd::compile::Compile(BuildObjects());
  for (auto _ : state) {
    benchmark::DoNotOptimize(kwd::ComputeSnapshotVersion(result.snapshot));
  }
}
BENCHMARK(BM_VersionOf10kEndpointSnapshot)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
