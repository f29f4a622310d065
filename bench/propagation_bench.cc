// Snapshot propagation: the time from the controller publishing a changed
// snapshot until N proxies (in-process subscribers running the real gRPC
// client, which verifies the content hash, each validating with
// CheckSnapshot as the proxy does before its swap) have applied it. 10,000
// endpoints (100 groups x 100 servers); the change is one server's capacity,
// so it goes out as an endpoint-only delta unless deltas are off.
// Counters: p50/p99/max milliseconds over the iterations, snapshot bytes.
//
//   cmake --build build-bench --target propagation_bench && build-bench/propagation_bench
//
// Every subscriber runs in this process, so with N = 50 the figure is bound
// by this machine's cores. A whole snapshot costs each subscriber a parse of
// ~530 KB (~4.6 ms) and a full content hash (~1.5 ms); a delta costs it a
// few kilobytes and one group's hash, and the controller ~0.02 ms once
// (BM_ComputeEndpointDelta/digests:1).
//
// BM_PushToProxies is the controller's side alone: N streams in a child
// process (this program, re-run with --subscribers) that take the bytes of
// each whole snapshot and ACK it, as N proxies on their own machines would
// before their ~6 ms apply. The clock runs from just before Publish (the
// one serialization, ~0.5 ms, and the writes it starts inline) until the
// server holds every ACK (its Proxies(), checked on each change callback).
// A subscriber ACKs once gRPC handed it the whole message (every byte
// received) and it read version_info and nonce; it does not parse the
// snapshot. Both processes share this machine's cores, and on loopback the
// sender's send() also runs much of the receiving TCP work, so the CPU
// split below is not what separate machines would see. The first pushes on
// new connections are not measured (KWD_BENCH_WARMUP_PUSHES, default 5):
// they grow the receivers' heaps (thousands of page faults) and gRPC's
// flow-control windows once. Counters: p50/p99/max ms; the controller
// process's CPU per push; the subscriber process's CPU and page faults per
// push; how long the Publish call itself takes (publish_call_p50_ms).
//
//   build-bench/propagation_bench --benchmark_filter=BM_PushToProxies/proxies:50

#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <malloc.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include "bench/controller_fixture.h"
#include "bench/latency.h"
#include "bench/process_usage.h"
#include "common/log.h"
#include "common/snapshot_delta.h"
#include "common/snapshot_io.h"
#include "controller/grpc/snapshot_server.h"
#include "dataplane/routing/routing_table.h"
#include "dataplane/xds/snapshot_client.h"
#include "kwd/v1/discovery.grpc.pb.h"

extern char** environ;

namespace kwd {
namespace {

constexpr int kGroups = 100;
constexpr int kServersPerGroup = 100;

std::shared_ptr<const compile::CompileResult> MakeResult(uint32_t changed_capacity) {
  auto result = std::make_shared<compile::CompileResult>();
  v1::Snapshot& snapshot = result->snapshot;
  char text[64];
  for (int g = 0; g < kGroups; ++g) {
    auto* group = snapshot.add_groups();
    std::snprintf(text, sizeof text, "erp/group%03d", g);
    group->set_key(text);
    group->set_kind(v1::KIND_ABAP);
    group->set_strategy(v1::STRATEGY_WEIGHTED_ROUND_ROBIN);
    group->set_load_reset_interval_seconds(25);
    for (int s = 0; s < kServersPerGroup; ++s) {
      auto* server = group->add_servers();
      std::snprintf(text, sizeof text, "erp%05d_ERP_00", g * kServersPerGroup + s);
      server->set_name(text);
      std::snprintf(text, sizeof text, "10.%d.%d.%d", g / 250, g % 250, s);
      server->set_address(text);
      server->set_port(8000);
      server->set_capacity(g == 0 && s == 0 ? changed_capacity : 3);
      server->set_state(v1::SERVER_STATE_READY);
      std::snprintf(text, sizeof text, "erp/pod-%05d", g * kServersPerGroup + s);
      server->set_pod(text);
    }
  }
  auto* host = snapshot.add_virtual_hosts();
  host->set_default_root_handler(v1::KIND_ABAP);
  host->set_default_abap_group("erp/group000");
  host->set_default_java_group("erp/group001");
  for (int g = 0; g < kGroups; ++g) {
    auto* rule = host->add_rules();
    std::snprintf(text, sizeof text, "/app%03d/", g);
    rule->set_prefix(text);
    rule->set_kind(v1::KIND_ABAP);
    std::snprintf(text, sizeof text, "erp/group%03d", g);
    rule->set_group(text);
  }
  // As the compile leaves it: digests kept, version built from them.
  result->digests = ComputeSnapshotDigests(snapshot);
  snapshot.set_version(result->digests.Version());
  return result;
}

// N started subscribers of the server on `port`, each validating as the
// proxy does before its swap; `on_applied` runs on their threads.
std::vector<std::unique_ptr<xds::SnapshotClient>> StartSubscribers(
    int port, int count, bool deltas, const std::function<void(const std::string&)>& on_applied) {
  std::vector<std::unique_ptr<xds::SnapshotClient>> clients;
  for (int i = 0; i < count; ++i) {
    xds::SnapshotClientOptions options;
    options.target = "127.0.0.1:" + std::to_string(port);
    options.node_id = "proxy-" + std::to_string(i);
    options.accept_deltas = deltas;
    options.on_applied = on_applied;
    clients.push_back(std::make_unique<xds::SnapshotClient>(
        options,
        [](const v1::Snapshot& snapshot, std::string* apply_error) {
          auto problems = CheckSnapshot(snapshot);
          if (!problems.empty()) {
            *apply_error = problems.front();
            return false;
          }
          return true;
        },
        nullptr));
    clients.back()->Start();
  }
  return clients;
}

// A snapshot server on a free loopback port, or null (the benchmark skipped).
std::unique_ptr<snapshot_server::SnapshotServer> StartServer(benchmark::State& state) {
  snapshot_server::SnapshotServerOptions options;
  options.listen = "127.0.0.1:0";
  auto server = std::make_unique<snapshot_server::SnapshotServer>(options, nullptr);
  std::string error;
  if (!server->Start(&error)) {
    state.SkipWithError(error.c_str());
    return nullptr;
  }
  return server;
}

void BM_Propagation(benchmark::State& state) {
  const int subscribers = static_cast<int>(state.range(0));
  const bool deltas = state.range(1) != 0;
  auto started = StartServer(state);
  if (!started) {
    return;
  }
  snapshot_server::SnapshotServer& server = *started;
  std::vector<std::shared_ptr<const compile::CompileResult>> results = {MakeResult(1),
                                                                        MakeResult(2)};
  if (auto problems = CheckSnapshot(results[0]->snapshot); !problems.empty()) {
    state.SkipWithError(problems.front().c_str());
    return;
  }

  std::mutex mu;
  std::condition_variable all_applied;
  std::string target;
  int applied = 0;
  auto clients =
      StartSubscribers(server.port(), subscribers, deltas, [&](const std::string& version) {
        std::lock_guard lock(mu);
        if (version == target && ++applied == subscribers) {
          all_applied.notify_all();
        }
      });

  auto publish_and_wait = [&](const std::shared_ptr<const compile::CompileResult>& result) {
    {
      std::lock_guard lock(mu);
      target = result->snapshot.version();
      applied = 0;
    }
    server.Publish(result);
    std::unique_lock lock(mu);
    return all_applied.wait_for(lock, std::chrono::seconds(60),
                                [&] { return applied == subscribers; });
  };
  // Warm up: every subscriber connected and on the first snapshot.
  if (!publish_and_wait(results[0])) {
    state.SkipWithError("subscribers did not get the first snapshot");
    return;
  }

  std::vector<double> millis;
  size_t next = 1;
  for (auto _ : state) {
    auto start = std::chrono::steady_clock::now();
    if (!publish_and_wait(results[next])) {
      state.SkipWithError("a change did not reach every subscriber within 60 s");
      break;
    }
    double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    state.SetIterationTime(elapsed);
    millis.push_back(elapsed * 1000);
    next = 1 - next;
  }
  for (auto& client : clients) {
    client->Stop();
  }
  if (millis.empty()) {
    return;
  }
  bench::ReportLatencies(state, millis);
  state.counters["snapshot_bytes"] = static_cast<double>(results[0]->snapshot.ByteSizeLong());
  state.counters["endpoints"] = kGroups * kServersPerGroup;
}

// One subscriber stream of the --subscribers child until it ends: reads
// each response as bytes and ACKs it with its version_info and nonce, read
// without parsing the snapshot.
void RunRawSubscriber(grpc::Channel& channel, int i) {
  grpc::ClientContext context;
  // Waits for the connection instead of failing at once when the first
  // attempt does (e.g. 50 connections racing the listen backlog).
  context.set_wait_for_ready(true);
  auto stream =
      grpc::internal::ClientReaderWriterFactory<v1::SnapshotRequest, grpc::ByteBuffer>::Create(
          &channel,
          grpc::internal::RpcMethod("/kwd.v1.SnapshotDiscovery/StreamSnapshots",
                                    grpc::internal::RpcMethod::BIDI_STREAMING),
          &context);
  v1::SnapshotRequest request;
  request.set_node_id("raw-" + std::to_string(i));
  if (!stream->Write(request)) {
    return;
  }
  grpc::ByteBuffer bytes;
  for (int responses = 0; responses < 1'000'000 && stream->Read(&bytes); ++responses) {
    // version_info (1) and nonce (2) come first; the rest is skipped.
    grpc::ProtoBufferReader reader(&bytes);
    google::protobuf::io::CodedInputStream input(&reader);
    input.SetTotalBytesLimit(INT_MAX);
    std::string version;
    std::string nonce;
    for (uint32_t tag = input.ReadTag(); tag != 0; tag = input.ReadTag()) {
      int field = google::protobuf::internal::WireFormatLite::GetTagFieldNumber(tag);
      if (field == 1) {
        google::protobuf::internal::WireFormatLite::ReadString(&input, &version);
      } else if (field == 2) {
        google::protobuf::internal::WireFormatLite::ReadString(&input, &nonce);
      } else if (!google::protobuf::internal::WireFormatLite::SkipField(&input, tag)) {
        break;
      }
    }
    request.set_version_info(version);
    request.set_response_nonce(nonce);
    if (!stream->Write(request)) {
      break;
    }
  }
}

// --subscribers mode (the child of BM_PushToProxies): `count` streams to the
// server on `port` (RunRawSubscriber), each on a connection of its own and
// opened again when it ends, as a proxy reconnects. Runs until stdin closes
// (the parent is done or gone).
int RunRawSubscribers(int port, int count) {
  // 50 receivers share this process, and each push brings 50 x 533 KB that
  // are freed once read. By default glibc hands that memory back to the
  // kernel after each push and the next push faults it in again: 1,100-1,700
  // page faults and ~25 ms of this process's CPU per push on this VM (38-47
  // ms instead of 17-20), on the same cores as the controller: a cost of the
  // benchmark's receivers that 50 proxies on their own machines, each
  // holding one copy, do not have. Keep freed memory instead.
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's maximum; no per-push mmap/munmap either
  std::vector<std::jthread> threads;
  for (int i = 0; i < count; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("kwd.bench.subscriber", i);  // a connection per subscriber, as N proxies have
    args.SetMaxReceiveMessageSize(-1);
    threads.emplace_back(
        [i, channel = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port),
                                                grpc::InsecureChannelCredentials(), args)] {
          for (int attempt = 0; attempt < 100; ++attempt) {
            RunRawSubscriber(*channel, i);
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
          }
        });
  }
  char byte;
  while (read(STDIN_FILENO, &byte, 1) > 0) {
  }
  std::_Exit(0);  // the streams end with the process
}

// This program in --subscribers mode, its stdin a pipe: closing the pipe ends it.
struct SubscriberProcess {
  pid_t pid = -1;
  int stdin_fd = -1;

  bool Start(int port, int count) {
    // The path, not /proc/self/exe itself: under valgrind that is valgrind.
    char self[4096] = {};
    if (readlink("/proc/self/exe", self, sizeof self - 1) <= 0) {
      return false;
    }
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      return false;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[0], STDIN_FILENO);
    posix_spawn_file_actions_addclose(&actions, fds[1]);
    std::string port_text = std::to_string(port);
    std::string count_text = std::to_string(count);
    char flag[] = "--subscribers";
    char* argv[] = {self, flag, port_text.data(), count_text.data(), nullptr};
    int spawned = posix_spawn(&pid, self, &actions, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    close(fds[0]);
    if (spawned != 0) {
      close(fds[1]);
      pid = -1;
      return false;
    }
    stdin_fd = fds[1];
    return true;
  }
  ~SubscriberProcess() {
    if (pid > 0) {
      close(stdin_fd);
      waitpid(pid, nullptr, 0);
    }
  }
};

// Pushes before the measured ones (BM_PushToProxies): KWD_BENCH_WARMUP_PUSHES,
// default 5.
int WarmUpPushes() {
  const char* text = std::getenv("KWD_BENCH_WARMUP_PUSHES");
  return text != nullptr ? std::clamp(std::atoi(text), 0, 100) : 5;
}

double ProcessCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// Publish of a whole snapshot (not endpoint-only: the subscribers take no
// deltas) until the server holds every subscriber's ACK of it.
void BM_PushToProxies(benchmark::State& state) {
  const int subscribers = static_cast<int>(state.range(0));
  auto started = StartServer(state);
  if (!started) {
    return;
  }
  snapshot_server::SnapshotServer& server = *started;
  std::vector<std::shared_ptr<const compile::CompileResult>> results = {MakeResult(1),
                                                                        MakeResult(2)};
  std::mutex mu;
  std::condition_variable changed;
  uint64_t changes = 0;  // callbacks so far: a change while checking is not missed
  server.SetOnProxiesChanged([&] {
    std::lock_guard lock(mu);
    ++changes;
    changed.notify_all();
  });
  auto all_acked = [&](const std::string& version) {
    auto proxies = server.Proxies();
    return static_cast<int>(proxies.size()) == subscribers &&
           std::all_of(proxies.begin(), proxies.end(), [&](const auto& proxy) {
             return !proxy.awaiting_reply && proxy.versions.acked_version == version;
           });
  };
  std::vector<double> publish_millis;  // Publish itself: the work done inline, under its lock
  auto publish_and_wait = [&](const std::shared_ptr<const compile::CompileResult>& result) {
    auto start = std::chrono::steady_clock::now();
    server.Publish(result);
    publish_millis.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() * 1000);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    std::unique_lock lock(mu);
    for (;;) {
      const uint64_t seen = changes;
      lock.unlock();
      bool done = all_acked(result->snapshot.version());
      lock.lock();
      if (done) {
        return true;
      }
      if (!changed.wait_until(lock, deadline, [&] { return changes != seen; })) {
        return false;
      }
    }
  };
  SubscriberProcess child;
  if (!child.Start(server.port(), subscribers)) {
    state.SkipWithError("cannot start the subscriber process");
    return;
  }
  // Says how far the streams got when they do not all ACK in time.
  auto fail = [&](const char* what) {
    auto proxies = server.Proxies();
    std::string message =
        std::string(what) + ": " + std::to_string(proxies.size()) + " of " +
        std::to_string(subscribers) + " subscribers connected, " +
        std::to_string(std::count_if(
            proxies.begin(), proxies.end(),
            [](const snapshot_server::ProxyStatus& proxy) { return proxy.awaiting_reply; })) +
        " awaiting a reply";
    state.SkipWithError(message.c_str());
  };
  if (!publish_and_wait(results[0])) {
    fail("subscribers did not ACK the first snapshot within 60 s");
    return;
  }
  // Unmeasured: while the pushes are the first ones on the connections, the
  // receivers' heaps grow to what 50 snapshots in flight need (thousands of
  // first-touch page faults per push in this shared process) and TCP and
  // gRPC size their windows. A running controller's proxies are past that.
  size_t next = 1;
  const int warmups = WarmUpPushes();
  for (int i = 0; i < warmups; ++i) {
    if (!publish_and_wait(results[next])) {
      fail("a warm-up snapshot was not ACKed by every subscriber within 60 s");
      return;
    }
    next = 1 - next;
  }
  publish_millis.clear();
  std::vector<double> millis;
  const double cpu_start = ProcessCpuSeconds();
  const std::optional<bench::ProcessCpu> child_start = bench::ReadProcessCpu(child.pid);
  for (auto _ : state) {
    auto start = std::chrono::steady_clock::now();
    if (!publish_and_wait(results[next])) {
      fail("a snapshot was not ACKed by every subscriber within 60 s");
      break;
    }
    double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    state.SetIterationTime(elapsed);
    millis.push_back(elapsed * 1000);
    next = 1 - next;
  }
  const double cpu = ProcessCpuSeconds() - cpu_start;
  const std::optional<bench::ProcessCpu> child_end = bench::ReadProcessCpu(child.pid);
  server.SetOnProxiesChanged(nullptr);
  if (millis.empty()) {
    return;
  }
  bench::ReportLatencies(state, millis);
  state.counters["controller_cpu_ms_per_push"] = cpu * 1000 / static_cast<double>(millis.size());
  if (child_start && child_end) {
    // The receivers' side, on this machine's cores too (10 ms ticks).
    const auto pushes = static_cast<double>(millis.size());
    state.counters["subscribers_cpu_ms_per_push"] =
        (child_end->cpu_seconds - child_start->cpu_seconds) * 1000 / pushes;
    state.counters["subscribers_page_faults_per_push"] =
        (child_end->minor_faults - child_start->minor_faults) / pushes;
  }
  state.counters["publish_call_p50_ms"] = bench::Percentile(publish_millis, 0.5);
  state.counters["snapshot_bytes"] = static_cast<double>(results[0]->snapshot.ByteSizeLong());
  state.counters["endpoints"] = kGroups * kServersPerGroup;
}
// 5 s: ~200 pushes at 50 proxies, so that the p99 is not simply the one
// slowest push (with ~40, as 2 s gave before the warm-up, it was).
BENCHMARK(BM_PushToProxies)
    ->ArgName("proxies")
    ->Arg(1)
    ->Arg(10)
    ->Arg(50)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(5.0);

// The controller's side of an endpoint change: finding the delta, once per
// version, with the compile's digests (digests:1, what the controller does)
// or comparing every part (digests:0).
void BM_ComputeEndpointDelta(benchmark::State& state) {
  auto from = MakeResult(1);
  auto to = MakeResult(2);
  const bool digests = state.range(0) == 1;
  size_t groups = 0;
  for (auto _ : state) {
    auto delta =
        digests ? ComputeEndpointDelta(from->snapshot, to->snapshot, &from->digests, &to->digests)
                : ComputeEndpointDelta(from->snapshot, to->snapshot);
    groups = delta ? static_cast<size_t>(delta->groups_size()) : 0;
    benchmark::DoNotOptimize(delta);
  }
  state.counters["changed_groups"] = static_cast<double>(groups);
}
BENCHMARK(BM_ComputeEndpointDelta)
    ->ArgName("digests")
    ->Arg(1)
    ->Arg(0)
    ->Unit(benchmark::kMillisecond);

// End to end: from a watch event entering the controller's pipeline (an
// EndpointSlice whose endpoint flips ready, as in controller_bench: 1,000
// groups, 10,000 endpoints) until N proxies have applied the new snapshot.
// That is the default 10 ms coalescing hold-off, the compile, the delta,
// gRPC, and each subscriber's hash check and CheckSnapshot.
void BM_WatchEventToProxies(benchmark::State& state) {
  const int subscribers = static_cast<int>(state.range(0));
  auto started = StartServer(state);
  if (!started) {
    return;
  }
  snapshot_server::SnapshotServer& server = *started;
  MetricsRegistry metrics;
  pipeline::Pipeline pipeline(pipeline::PipelineOptions{std::chrono::milliseconds(10),
                                                        std::chrono::milliseconds(100), nullptr, ""},
                              server, &metrics);
  int source = pipeline.AddSource("bench");
  std::jthread pipeline_thread([&](std::stop_token stop) { pipeline.Run(stop); });

  std::mutex mu;
  std::condition_variable changed;
  int64_t applied = 0;  // applies over all subscribers
  auto clients =
      StartSubscribers(server.port(), subscribers, /*deltas=*/true, [&](const std::string&) {
        std::lock_guard lock(mu);
        ++applied;
        changed.notify_all();
      });
  auto wait_for = [&](int64_t count) {
    std::unique_lock lock(mu);
    return changed.wait_for(lock, std::chrono::seconds(60), [&] { return applied >= count; });
  };
  pipeline.ReplaceAll(source, bench::BuildObjects());
  if (!wait_for(subscribers)) {
    state.SkipWithError("subscribers did not get the first snapshot");
    return;
  }

  std::vector<double> millis;
  int event = 0;
  for (auto _ : state) {
    int64_t target = 0;
    {
      std::lock_guard lock(mu);
      target = applied + subscribers;
    }
    int group = (event * 37) % bench::kGroups;
    // Decoding is the reflector thread's work; the clock starts at enqueue.
    pipeline::ObservedObject slice =
        bench::Decode(bench::Slice(group, event % bench::kEndpointsPerGroup));
    auto start = std::chrono::steady_clock::now();
    pipeline.Upsert(std::move(slice));
    if (!wait_for(target)) {
      state.SkipWithError("a change did not reach every subscriber within 60 s");
      break;
    }
    double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    state.SetIterationTime(elapsed);
    millis.push_back(elapsed * 1000);
    ++event;
  }
  for (auto& client : clients) {
    client->Stop();
  }
  pipeline_thread.request_stop();
  pipeline_thread.join();
  if (millis.empty()) {
    return;
  }
  bench::ReportLatencies(state, millis);
  state.counters["endpoints"] = bench::kGroups * bench::kEndpointsPerGroup;
}
BENCHMARK(BM_WatchEventToProxies)
    ->ArgName("proxies")
    ->Arg(1)
    ->Arg(10)
    ->Arg(50)
    ->Iterations(100)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// What a real proxy does with each applied version (whole or patched by a
// delta) after the checks: build the RoutingTable its workers switch to.
// Session tables and health survive (registries); the second and later
// builds, as here, find them in place.
void BM_ProxyBuildsRoutingTable(benchmark::State& state) {
  auto result = MakeResult(1);
  session::SessionRegistry sessions;
  routing::ServerHealthRegistry health;
  std::string error;
  for (auto _ : state) {
    auto table = routing::RoutingTable::Build(result->snapshot, {&sessions, &health}, &error);
    if (table == nullptr) {
      state.SkipWithError(error.c_str());
      break;
    }
    benchmark::DoNotOptimize(table);
  }
  state.counters["endpoints"] = kGroups * kServersPerGroup;
}
BENCHMARK(BM_ProxyBuildsRoutingTable)->Unit(benchmark::kMillisecond);

// Each subscriber's check before its swap.
void BM_CheckSnapshot(benchmark::State& state) {
  auto result = MakeResult(1);
  for (auto _ : state) {
    benchmark::DoNotOptimize(CheckSnapshot(result->snapshot));
  }
}
BENCHMARK(BM_CheckSnapshot)->Unit(benchmark::kMillisecond);

// Args: subscribers, and whether they take endpoint-only deltas (1) or
// whole snapshots only (0; what every change that is not endpoint-only costs).
BENCHMARK(BM_Propagation)
    ->ArgNames({"proxies", "deltas"})
    ->ArgsProduct({{1, 10, 50}, {1, 0}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);

}  // namespace
}  // namespace kwd

int main(int argc, char** argv) {
  if (argc == 4 && std::string_view(argv[1]) == "--subscribers") {
    return kwd::RunRawSubscribers(std::atoi(argv[2]), std::atoi(argv[3]));
  }
  // Each subscriber logs every apply at info: thousands of lines otherwise.
  // KWD_BENCH_INFO=1 shows the pipeline's and subscribers' per-change log lines.
  kwd::SetLogLevel(std::getenv("KWD_BENCH_INFO") != nullptr ? kwd::LogLevel::kInfo
                                                            : kwd::LogLevel::kWarn);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
    return 1;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
