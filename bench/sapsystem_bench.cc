// SAP system discovery: parse and apply a 500-instance server list (the
// captured kernel-793 shape per instance, CRLF), then compile the change
// through the incremental compile: what one refresh of a large system costs
// the controller. An unchanged list is only parsed and compared: it
// compiles nothing.

#include <benchmark/benchmark.h>

#include <string>

#include "common/snapshot_io.h"
#include "controller/pipeline/store.h"
#include "controller/sapsystem/poller.h"

namespace {

constexpr int kInstances = 500;

// 500 instances; `bump` changes one capacity so that two bodies alternate.
std::string Body(int bump) {
  std::string body = "version 1.2\r\n";
  for (int i = 0; i < kInstances; ++i) {
    std::string host = "sapapp" + std::to_string(i);
    std::string lb = std::to_string(i == 7 ? 5 + bump : 5);
    body += host + "_PRD_" + std::to_string(i % 100) + "\r\n";
    body += "DIAG\t" + host + "\t3200\tLB=" + lb + "\r\n";
    body += "DIAGS\t" + host + "\t3200\tp:CN=PRD, OU=I0000000000, OU=SAP Web AS, O=SAP Trust "
            "Community, C=DE\r\n";
    body += "RFC\t" + host + "\t3300\t\r\n";
    body += "HTTP\t" + host + "\t8000\t\r\nHTTPS\t" + host + "\t44300\t\r\n";
    body += "HTTP\t" + host + "\t8000\tVHOST=0\r\nHTTPS\t" + host + "\t44300\tVHOST=0\r\n\r\n";
  }
  return body;
}

std::vector<std::string> Resolve(const std::string& host) {
  // sapappN -> 10.1.(N/250).(N%250+1)
  int n = std::stoi(host.substr(6));
  return {"10.1." + std::to_string(n / 250) + "." + std::to_string(n % 250 + 1)};
}

kwd::model::Object Decode(const std::string& json) {
  return *kwd::model::DecodeObject(nlohmann::json::parse(json)).object;
}

void Setup(kwd::pipeline::ObjectStore* store) {
  store->Upsert({Decode(R"({"apiVersion":"dispatch.kwd.io/v1alpha1","kind":"SapSystem",
    "metadata":{"name":"prd","namespace":"erp"},
    "spec":{"sid":"PRD","messageServer":{"host":"prd-ms","httpPort":8101}}})"),
                 nullptr});
  for (std::string name : {"diag", "public", "webgui"}) {
    std::string group = name == "diag" ? "" : R"(,"logonGroup":"PUBLIC")";
    store->Upsert({Decode(R"({"apiVersion":"dispatch.kwd.io/v1alpha1","kind":"LogonGroup",
      "metadata":{"name":")" + name + R"(","namespace":"erp"},
      "spec":{"kind":"abap","backend":{"sapSystem":{"name":"prd")" + group + "}}}}"),
                   nullptr});
  }
}

kwd::model::SapServerList Empty() {
  kwd::model::SapServerList list;
  list.metadata.namespace_ = "erp";
  list.metadata.name = "prd";
  return list;
}

void BM_ParseServerList500(benchmark::State& state) {
  std::string body = Body(0);
  for (auto _ : state) {
    auto parsed = kwd::sapsystem::ParseServerList(body);
    benchmark::DoNotOptimize(parsed);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(body.size()));
  state.SetItemsProcessed(state.iterations() * kInstances);
}
BENCHMARK(BM_ParseServerList500)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Parse, resolve (a table), build the list, store it and compile the change
// into a snapshot (500 servers in the !DIAG group).
void BM_ParseAndApply500(benchmark::State& state) {
  kwd::pipeline::ObjectStore store;
  Setup(&store);
  const std::string bodies[2] = {Body(0), Body(1)};
  kwd::model::SapServerList last = Empty();
  store.Compile();
  int step = 0;
  std::string version;
  for (auto _ : state) {
    kwd::sapsystem::PollOutcome outcome =
        kwd::sapsystem::ApplyServerList(bodies[step++ % 2], "bench", last, Resolve, {});
    last = outcome.list;
    if (!store.Upsert({std::move(outcome.list), nullptr})) {
      state.SkipWithError("the list did not change");
      break;
    }
    kwd::compile::CompileResult result = store.Compile();
    version = result.snapshot.version();
    benchmark::DoNotOptimize(result);
  }
  state.SetItemsProcessed(state.iterations() * kInstances);
  state.SetLabel("version " + version.substr(0, 16));
}
BENCHMARK(BM_ParseAndApply500)->Unit(benchmark::kMillisecond)->UseRealTime();

// A refresh whose list equals the last: parsed and compared, nothing compiled.
void BM_UnchangedRefresh500(benchmark::State& state) {
  kwd::pipeline::ObjectStore store;
  Setup(&store);
  const std::string body = Body(0);
  kwd::model::SapServerList last =
      kwd::sapsystem::ApplyServerList(body, "bench", Empty(), Resolve, {}).list;
  store.Upsert({last, nullptr});
  store.Compile();
  for (auto _ : state) {
    kwd::sapsystem::PollOutcome outcome =
        kwd::sapsystem::ApplyServerList(body, "bench", last, Resolve, {});
    if (outcome.list != last || store.Upsert({std::move(outcome.list), nullptr})) {
      state.SkipWithError("an unchanged list changed something");
      break;
    }
  }
  state.SetItemsProcessed(state.iterations() * kInstances);
}
BENCHMARK(BM_UnchangedRefresh500)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
