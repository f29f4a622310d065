// A 1,000-proxy fleet (issue 25, target 4): one controller, 1,000 proxy
// streams, 10,000 endpoints. How long an endpoint change and a whole-snapshot
// change take to reach every proxy, what the controller spends on it (CPU,
// RSS), and whether a reconnect storm of 1,000 proxies holds up the updates
// of the others.
//
//   cmake --build build-bench --target fleet_bench && build-bench/fleet_bench
//
// The controller is this program re-run as a child (--controller): the
// controller's own pipeline (pipeline::Pipeline, 10 ms hold-off, 100 ms max
// delay, as `kwd-controller serve` has by default) publishing to its gRPC
// server (snapshot_server::SnapshotServer), the two parts `serve` wires
// together, without a watch source: the parent hands it each change on a
// pipe, as the source's watch thread would hand the pipeline a decoded
// object (the cluster of bench/controller_fixture.h: 1,000 LogonGroups with
// 10 endpoints each, one UrlMapping). No status writer runs (as with
// --source=dir): Programmed on every ACK is not part of this figure.
//
// The proxies are 1,000 streams in this process, each on a connection of
// its own (gRPC's callback API: no thread per stream). Each says hello as
// kwd-proxy does (node id, the version it runs, deltas accepted), reads
// every response, decodes its version_info and nonce (not the snapshot),
// and ACKs it. The clock runs from just before the change is written to the
// controller's pipe until each stream received the whole response of the
// new version; p50/p99/max are over every stream of every change.
//
// (a) endpoint change: one endpoint of one LogonGroup turns not ready (an
//     EndpointSlice upsert): an endpoint-only delta to every proxy.
// (b) whole-snapshot change: the UrlMapping gains a rule: the whole
//     snapshot (~0.5 MB) to every proxy.
// (c) reconnect storm: --steady more streams (default 100) stay connected
//     while the 1,000 drop their streams and connections at once and
//     reconnect at once, on new connections; an endpoint change is made as
//     they reconnect, and its latency to the steady streams is measured.
//     "resume": they say hello with the version they run (what kwd-proxy
//     does after a controller restart or a network blip); "fresh": with no
//     version (1,000 new proxies), so each gets the whole snapshot. The
//     steady streams run in a process of their own (--steady-streams), as
//     they would on machines of their own: in this process their responses
//     would be read behind the 1,000 storming streams' by the same gRPC
//     threads, a cost of the simulation, not of the controller
//     (--steady-apart 0 puts them here, as before).
//
// Both processes share this machine's cores: the 1,000 receivers' work
// (for a whole snapshot, 1,000 x 0.5 MB through loopback TCP and gRPC) is
// on the same CPUs as the controller's. Controller CPU per change is read
// from /proc/PID/stat (10 ms ticks), RSS from /proc/PID/status.
//
// Output: a table, then BENCH-ROW lines for scripts/run-benchmarks.sh.
// Flags: --proxies N (1000), --steady N (100), --changes N (10 of each
// kind), --storms N (3 of each kind), --steady-apart 0|1 (1),
// --initial-sends N (the controller's max_initial_sends; 0: no limit). Every
// wait is bounded: the program fails rather than hangs.

#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <malloc.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "bench/controller_fixture.h"
#include "bench/latency.h"
#include "bench/process_usage.h"
#include "common/log.h"
#include "controller/grpc/snapshot_server.h"
#include "kwd/v1/discovery.grpc.pb.h"

extern char** environ;

namespace kwd {
namespace {

using Clock = std::chrono::steady_clock;

double MillisSince(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double, std::milli>(end - start).count();
}

void RaiseFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

int Flag(int argc, char** argv, const char* name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string_view(argv[i]) == name) {
      return std::max(0, std::atoi(argv[i + 1]));
    }
  }
  return fallback;
}

// ------------------------------------------------------------ the controller

// The UrlMapping of the fixture with `extra` more rules (a change that is
// not endpoint-only).
pipeline::ObservedObject UrlMapping(int extra) {
  nlohmann::json rules = nlohmann::json::array();
  for (int g = 0; g < bench::kGroups; ++g) {
    rules.push_back({{"prefix", "/app" + std::to_string(g) + "/"},
                     {"kind", "abap"},
                     {"logonGroup", "g" + std::to_string(g)}});
  }
  for (int i = 0; i < extra; ++i) {
    rules.push_back(
        {{"prefix", "/extra" + std::to_string(i) + "/"}, {"kind", "abap"}, {"logonGroup", "g0"}});
  }
  return bench::Decode({{"apiVersion", "dispatch.kwd.io/v1alpha1"},
                        {"kind", "UrlMapping"},
                        {"metadata", {{"name", "erp"}, {"namespace", "erp"}}},
                        {"spec", {{"rules", rules}}}});
}

// --controller: the pipeline and the gRPC server. Prints "port N" once the
// first snapshot is published, then takes one command a line on stdin:
// "e K" (endpoint change number K), "w K" (whole-snapshot change: K extra
// rules). Ends when stdin closes.
int RunController(int initial_sends) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  RaiseFileLimit();
  MetricsRegistry metrics;
  snapshot_server::SnapshotServerOptions options;
  options.listen = "127.0.0.1:0";
  options.max_initial_sends = initial_sends;
  snapshot_server::SnapshotServer server(options, &metrics);
  std::string error;
  if (!server.Start(&error)) {
    std::fprintf(stderr, "fleet_bench --controller: %s\n", error.c_str());
    return 1;
  }
  pipeline::Pipeline pipeline(pipeline::PipelineOptions{}, server, &metrics);
  int source = pipeline.AddSource("bench");
  std::jthread pipeline_thread([&](std::stop_token stop) { pipeline.Run(stop); });
  pipeline.ReplaceAll(source, bench::BuildObjects());
  for (int i = 0; i < 600 && server.current_version().empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (server.current_version().empty()) {
    std::fprintf(stderr, "fleet_bench --controller: no snapshot after 60 s\n");
    return 1;
  }
  std::printf("port %d\n", server.port());
  std::fflush(stdout);
  char line[64];
  while (std::fgets(line, sizeof line, stdin) != nullptr) {
    char kind = 0;
    int k = 0;
    if (std::sscanf(line, "%c %d", &kind, &k) != 2) {
      continue;
    }
    if (kind == 'e') {
      // The watch thread decodes; the pipeline takes the decoded object.
      pipeline::ObservedObject slice =
          bench::Decode(bench::Slice((k * 37) % bench::kGroups, k % bench::kEndpointsPerGroup));
      pipeline.Upsert(std::move(slice));
    } else if (kind == 'w') {
      pipeline.Upsert(UrlMapping(k));
    } else if (kind == 'p') {
      // What one status resync costs in Kubernetes mode (serve resyncs on
      // every proxy change: connects, ACKs, NACKs): Programmed of every
      // object of the snapshot, over every connected proxy, as the
      // pipeline's extra conditions ask for it. Answers "programmed MS".
      auto result = pipeline.current();
      const Clock::time_point start = Clock::now();
      size_t conditions = 0;
      for (const compile::ObjectStatus& object :
           result ? result->statuses : std::vector<compile::ObjectStatus>{}) {
        benchmark::DoNotOptimize(server.ProgrammedFor(object));
        ++conditions;
      }
      std::printf("programmed %.1f %zu\n", MillisSince(start, Clock::now()), conditions);
      std::fflush(stdout);
    }
  }
  pipeline_thread.request_stop();
  pipeline_thread.join();
  server.Stop();
  std::_Exit(0);
}

// This program re-run with `args`, its stdin and stdout pipes.
struct ChildProcess {
  pid_t pid = -1;
  FILE* in = nullptr;   // its stdin
  FILE* out = nullptr;  // its stdout

  bool Spawn(std::vector<std::string> args) {
    char self[4096] = {};
    if (readlink("/proc/self/exe", self, sizeof self - 1) <= 0) {
      return false;
    }
    int to_child[2];
    int from_child[2];
    if (pipe2(to_child, O_CLOEXEC) != 0 || pipe2(from_child, O_CLOEXEC) != 0) {
      return false;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, to_child[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, from_child[1], STDOUT_FILENO);
    std::vector<char*> argv = {self};
    for (std::string& arg : args) {
      argv.push_back(arg.data());
    }
    argv.push_back(nullptr);
    int spawned = posix_spawn(&pid, self, &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(to_child[0]);
    close(from_child[1]);
    if (spawned != 0) {
      pid = -1;
      close(to_child[1]);
      close(from_child[0]);
      return false;
    }
    in = fdopen(to_child[1], "w");
    out = fdopen(from_child[0], "r");
    return true;
  }
  ~ChildProcess() {
    if (pid > 0) {
      if (in != nullptr) {
        std::fclose(in);
      }
      for (int i = 0; i < 100 && waitpid(pid, nullptr, WNOHANG) == 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

// This program as --controller.
struct ControllerProcess : ChildProcess {
  int port = 0;

  bool Start(int initial_sends) {
    if (!Spawn({"--controller", "--initial-sends", std::to_string(initial_sends)})) {
      return false;
    }
    char line[64];
    // Bounded by the child: it exits after 60 s without a snapshot.
    return std::fgets(line, sizeof line, out) != nullptr &&
           std::sscanf(line, "port %d", &port) == 1;
  }
  // "p": how long Programmed of every object took in the child, in ms.
  double ProgrammedMillis(int* objects) {
    Command('p', 0);
    char line[64];
    double millis = -1;
    if (std::fgets(line, sizeof line, out) == nullptr ||
        std::sscanf(line, "programmed %lf %d", &millis, objects) != 2) {
      return -1;
    }
    return millis;
  }
  void Command(char kind, int k) {
    std::fprintf(in, "%c %d\n", kind, k);
    std::fflush(in);
  }
};

struct ProcessUsage {
  double cpu_ms = 0;   // user + system
  double rss_mib = 0;  // VmRSS
  double hwm_mib = 0;  // VmHWM: the peak
};

ProcessUsage ReadUsage(pid_t pid) {
  ProcessUsage usage;
  if (std::optional<bench::ProcessCpu> cpu = bench::ReadProcessCpu(pid)) {
    usage.cpu_ms = cpu->cpu_seconds * 1000.0;
  }
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/status", static_cast<int>(pid));
  if (FILE* file = std::fopen(path, "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, file) != nullptr) {
      unsigned long kib = 0;
      if (std::sscanf(line, "VmRSS: %lu kB", &kib) == 1) {
        usage.rss_mib = static_cast<double>(kib) / 1024.0;
      } else if (std::sscanf(line, "VmHWM: %lu kB", &kib) == 1) {
        usage.hwm_mib = static_cast<double>(kib) / 1024.0;
      }
    }
    std::fclose(file);
  }
  return usage;
}

// ------------------------------------------------------------ the proxies

// What every stream saw last; read by the main thread under mu.
struct Fleet {
  std::mutex mu;
  std::condition_variable changed;
  struct Slot {
    std::string version;         // of the last response received
    Clock::time_point received;  // when its last byte had arrived
    bool open = false;           // the stream is running
  };
  std::vector<Slot> slots;
  // The steady streams' process (--steady-streams): every change of a
  // slot is also written here, a line each, for the parent's slots.
  FILE* report = nullptr;
  int first_node = 0;  // node id "fleet-N" of slots[0]
};

// A Fleet::report line: "o INDEX 0|1" (the stream ended or runs), "v INDEX
// VERSION NANOSECONDS" (a response of VERSION arrived; steady_clock, which
// is CLOCK_MONOTONIC, the same in both processes).
void Report(Fleet& fleet, int index) {
  const Fleet::Slot& slot = fleet.slots[index];
  std::fprintf(fleet.report, "o %d %d\n", index, slot.open ? 1 : 0);
  if (!slot.version.empty()) {
    std::fprintf(fleet.report, "v %d %s %lld\n", index, slot.version.c_str(),
                 static_cast<long long>(slot.received.time_since_epoch().count()));
  }
}

// One proxy's stream: hello, then read a response, ACK it, read the next.
class Stream final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  Stream(Fleet& fleet, int index, grpc::GenericStub& stub, const std::string& running)
      : fleet_(fleet), index_(index) {
    {
      std::lock_guard lock(fleet_.mu);
      fleet_.slots[index_].open = true;
      if (fleet_.report != nullptr) {
        Report(fleet_, index_);
      }
    }
    v1::SnapshotRequest hello;
    hello.set_node_id("fleet-" + std::to_string(fleet.first_node + index));
    hello.set_version_info(running);
    hello.set_accepts_deltas(true);
    Serialize(hello);
    context_.set_wait_for_ready(true);
    stub.PrepareBidiStreamingCall(&context_, "/kwd.v1.SnapshotDiscovery/StreamSnapshots",
                                  grpc::StubOptions(), this);
    StartWrite(&request_bytes_);
    StartCall();
  }
  void Cancel() { context_.TryCancel(); }
  bool done() const { return done_.load(); }

  void OnWriteDone(bool ok) override {
    if (ok) {
      StartRead(&response_bytes_);
    }
  }
  void OnReadDone(bool ok) override {
    if (!ok) {
      return;  // OnDone follows
    }
    const Clock::time_point now = Clock::now();
    // version_info (1) and nonce (2) come first; the rest is skipped.
    grpc::ProtoBufferReader reader(&response_bytes_);
    google::protobuf::io::CodedInputStream input(&reader);
    input.SetTotalBytesLimit(INT_MAX);
    std::string version;
    std::string nonce;
    using google::protobuf::internal::WireFormatLite;
    for (uint32_t tag = input.ReadTag(); tag != 0; tag = input.ReadTag()) {
      int field = WireFormatLite::GetTagFieldNumber(tag);
      if (field == 1) {
        WireFormatLite::ReadString(&input, &version);
      } else if (field == 2) {
        WireFormatLite::ReadString(&input, &nonce);
      } else if (!WireFormatLite::SkipField(&input, tag)) {
        break;
      }
    }
    response_bytes_.Clear();
    {
      std::lock_guard lock(fleet_.mu);
      auto& slot = fleet_.slots[index_];
      if (slot.version != version) {
        slot.version = version;
        slot.received = now;
        fleet_.changed.notify_all();
        if (fleet_.report != nullptr) {
          Report(fleet_, index_);
        }
      }
    }
    v1::SnapshotRequest ack;
    ack.set_version_info(version);
    ack.set_response_nonce(nonce);
    Serialize(ack);
    StartWrite(&request_bytes_);
  }
  void OnDone(const grpc::Status&) override {
    {
      std::lock_guard lock(fleet_.mu);
      fleet_.slots[index_].open = false;
      fleet_.changed.notify_all();
      if (fleet_.report != nullptr) {
        Report(fleet_, index_);
      }
    }
    done_ = true;
  }

 private:
  void Serialize(const v1::SnapshotRequest& request) {
    bool own = false;
    request_bytes_.Clear();
    grpc::SerializationTraits<v1::SnapshotRequest>::Serialize(request, &request_bytes_, &own);
  }

  Fleet& fleet_;
  const int index_;
  grpc::ClientContext context_;
  grpc::ByteBuffer request_bytes_;
  grpc::ByteBuffer response_bytes_;
  std::atomic<bool> done_{false};
};

// A proxy: its own connection (channel) and its current stream.
struct Proxy {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<grpc::GenericStub> stub;
  std::unique_ptr<Stream> stream;
};

std::shared_ptr<grpc::Channel> NewChannel(int port, int index, int generation) {
  grpc::ChannelArguments args;
  // Distinct arguments: a connection per proxy (gRPC shares equal ones),
  // and a new one after a reconnect.
  args.SetInt("kwd.bench.proxy", index);
  args.SetInt("kwd.bench.generation", generation);
  args.SetMaxReceiveMessageSize(-1);
  return grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port),
                                   grpc::InsecureChannelCredentials(), args);
}

void Connect(Fleet& fleet, Proxy& proxy, int port, int index, int generation,
             const std::string& running) {
  proxy.channel = NewChannel(port, index, generation);
  proxy.stub = std::make_unique<grpc::GenericStub>(proxy.channel);
  proxy.stream = std::make_unique<Stream>(fleet, index, *proxy.stub, running);
}

// --steady-streams PORT FIRST COUNT: COUNT streams (node ids from FIRST on)
// in a process of their own, as the proxies that stay connected in a storm
// are on machines of their own: their responses are not read behind the
// 1,000 reconnecting streams' in one process's gRPC threads. Reports every
// change on stdout (Fleet::report); ends when stdin closes.
int RunSteadyStreams(int port, int first, int count) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  RaiseFileLimit();
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Fleet fleet;
  fleet.slots.resize(count);
  fleet.report = stdout;
  fleet.first_node = first;
  std::vector<Proxy> proxies(count);
  for (int i = 0; i < count; ++i) {
    Connect(fleet, proxies[i], port, i, 0, "");
  }
  char line[64];
  while (std::fgets(line, sizeof line, stdin) != nullptr) {
  }
  std::_Exit(0);  // not through the destructors of running streams
}

// The parent's side: a thread that copies the report lines of `child` into
// fleet.slots[first + INDEX].
void FollowSteadyStreams(Fleet& fleet, ChildProcess& child, int first) {
  std::thread([&fleet, out = child.out, first] {
    char line[256];
    while (std::fgets(line, sizeof line, out) != nullptr) {
      int index = 0;
      int open = 0;
      char version[128] = {};
      long long nanos = 0;
      std::lock_guard lock(fleet.mu);
      if (std::sscanf(line, "o %d %d", &index, &open) == 2) {
        fleet.slots.at(first + index).open = open != 0;
      } else if (std::sscanf(line, "v %d %127s %lld", &index, version, &nanos) == 3) {
        auto& slot = fleet.slots.at(first + index);
        slot.version = version;
        slot.received = Clock::time_point(Clock::duration(nanos));
      }
      fleet.changed.notify_all();
    }
  }).detach();
}

// Waits until every stream in [begin, end) has received a version other
// than `old` (and is open); their receive times minus `start`, in ms, are
// appended. False after `timeout`.
bool WaitForNewVersion(Fleet& fleet, int begin, int end, const std::string& old,
                       Clock::time_point start, std::chrono::seconds timeout,
                       std::vector<double>* millis, std::string* version) {
  std::unique_lock lock(fleet.mu);
  auto all = [&] {
    for (int i = begin; i < end; ++i) {
      if (fleet.slots[i].version == old || fleet.slots[i].version.empty()) {
        return false;
      }
    }
    return true;
  };
  if (!fleet.changed.wait_for(lock, timeout, all)) {
    return false;
  }
  *version = fleet.slots[begin].version;
  for (int i = begin; i < end; ++i) {
    if (fleet.slots[i].version != *version) {
      return false;  // two new versions: the measurement is off
    }
    millis->push_back(MillisSince(start, fleet.slots[i].received));
  }
  return true;
}

// Waits until every stream in [begin, end) is open and on `version`.
bool WaitForVersion(Fleet& fleet, int begin, int end, const std::string& version,
                    std::chrono::seconds timeout) {
  std::unique_lock lock(fleet.mu);
  return fleet.changed.wait_for(lock, timeout, [&] {
    for (int i = begin; i < end; ++i) {
      if (!fleet.slots[i].open || fleet.slots[i].version != version) {
        return false;
      }
    }
    return true;
  });
}

struct Figures {
  std::vector<double> millis;
  std::vector<double> cpu_ms;          // controller CPU per change
  std::vector<double> proxies_cpu_ms;  // this process's (the proxies') CPU per change
};

void PrintLatency(const char* what, const std::vector<double>& millis) {
  std::printf("%-58s p50 %8.1f  p99 %8.1f  max %8.1f ms  (%zu samples)\n", what,
              bench::Percentile(millis, 0.5), bench::Percentile(millis, 0.99),
              bench::Percentile(millis, 1.0), millis.size());
}

void Row(const std::string& figure, double value, const char* unit, const char* target) {
  std::printf("BENCH-ROW\t8 %s\t%.1f\t-\t-\t%s\t%s\n", figure.c_str(), value, unit, target);
}

int RunFleet(int argc, char** argv) {
  const int proxies = std::max(1, Flag(argc, argv, "--proxies", 1000));
  const int steady = Flag(argc, argv, "--steady", 100);
  const int changes = std::max(1, Flag(argc, argv, "--changes", 10));
  const int storms = Flag(argc, argv, "--storms", 3);
  const int total = proxies + steady;
  // 0: the steady streams in this process with the others (as before).
  const bool steady_apart = Flag(argc, argv, "--steady-apart", 1) != 0;
  RaiseFileLimit();
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress shows as it goes, also in a pipe
  // 1,000 receivers of 0.5 MB each per whole snapshot: keep freed memory
  // rather than give it back and fault it in again on the next push.
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  // Never hang: the whole run is bounded.
  alarm(1200);

  ControllerProcess controller;
  const Clock::time_point boot = Clock::now();
  if (!controller.Start(Flag(argc, argv, "--initial-sends",
                             snapshot_server::SnapshotServerOptions{}.max_initial_sends))) {
    std::fprintf(stderr, "fleet_bench: cannot start the controller process\n");
    return 1;
  }
  std::printf(
      "controller pid %d, port %d, first snapshot after %.0f ms; %d proxies + %d steady, "
      "%d endpoints, %d CPUs, load %s",
      controller.pid, controller.port, MillisSince(boot, Clock::now()), proxies, steady,
      bench::kGroups * bench::kEndpointsPerGroup, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)),
      [] {
        static char load[64] = "?\n";
        if (FILE* f = std::fopen("/proc/loadavg", "r")) {
          if (std::fgets(load, sizeof load, f) == nullptr) {
            load[0] = 0;
          }
          std::fclose(f);
        }
        return load;
      }());
  const ProcessUsage idle = ReadUsage(controller.pid);

  Fleet fleet;
  fleet.slots.resize(total);
  std::vector<Proxy> fleet_proxies(total);
  ChildProcess steady_process;
  const Clock::time_point connect_start = Clock::now();
  for (int i = 0; i < proxies; ++i) {
    Connect(fleet, fleet_proxies[i], controller.port, i, 0, "");
  }
  if (steady_apart && steady > 0) {
    if (!steady_process.Spawn({"--steady-streams", std::to_string(controller.port),
                               std::to_string(proxies), std::to_string(steady)})) {
      std::fprintf(stderr, "fleet_bench: cannot start the steady streams' process\n");
      std::_Exit(1);
    }
    FollowSteadyStreams(fleet, steady_process, proxies);
  } else {
    for (int i = proxies; i < total; ++i) {
      Connect(fleet, fleet_proxies[i], controller.port, i, 0, "");
    }
  }
  std::string current;
  {
    std::vector<double> millis;
    if (!WaitForNewVersion(fleet, 0, total, "", connect_start, std::chrono::seconds(120), &millis,
                           &current)) {
      std::fprintf(stderr,
                   "fleet_bench: the %d streams did not all get the first snapshot in 120 s\n",
                   total);
      std::_Exit(1);  // not through the destructors of running streams
    }
    std::printf("%d streams connected and on the first snapshot after %.0f ms\n", total,
                bench::Percentile(millis, 1.0));
  }
  const ProcessUsage connected = ReadUsage(controller.pid);
  // This process's CPU and the steady streams' process's.
  auto proxies_cpu_ms = [&] {
    return ReadUsage(getpid()).cpu_ms +
           (steady_process.pid > 0 ? ReadUsage(steady_process.pid).cpu_ms : 0);
  };

  // One change at a time: the command, then every stream on the new version.
  int next_endpoint = 0;
  int next_extra = 1;
  auto measure = [&](char kind, int count, Figures* figures) {
    for (int c = 0; c < count; ++c) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the ACKs are in
      const ProcessUsage before = ReadUsage(controller.pid);
      const double proxies_before = proxies_cpu_ms();
      const Clock::time_point start = Clock::now();
      controller.Command(kind, kind == 'e' ? next_endpoint++ : next_extra++);
      std::string version;
      if (!WaitForNewVersion(fleet, 0, total, current, start, std::chrono::seconds(60),
                             &figures->millis, &version)) {
        std::fprintf(stderr, "fleet_bench: change %c did not reach every stream in 60 s\n", kind);
        return false;
      }
      current = version;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the ACKs' handling too
      figures->cpu_ms.push_back(ReadUsage(controller.pid).cpu_ms - before.cpu_ms);
      figures->proxies_cpu_ms.push_back(proxies_cpu_ms() - proxies_before);
    }
    return true;
  };
  Figures endpoint;
  Figures whole;
  // One of each first, unmeasured: the first pushes grow buffers and windows.
  Figures warmup;
  if (!measure('e', 1, &warmup) || !measure('w', 1, &warmup) || !measure('e', changes, &endpoint) ||
      !measure('w', changes, &whole)) {
    std::_Exit(1);  // not through the destructors of running streams
  }
  const ProcessUsage after_changes = ReadUsage(controller.pid);
  std::vector<double> programmed_millis;
  int programmed_objects = 0;
  for (int i = 0; i < 3; ++i) {
    programmed_millis.push_back(controller.ProgrammedMillis(&programmed_objects));
  }
  auto mean = [](const std::vector<double>& values) {
    double sum = 0;
    for (double v : values) {
      sum += v;
    }
    return values.empty() ? 0 : sum / static_cast<double>(values.size());
  };

  // Reconnect storms: [0, proxies) drop and reconnect; [proxies, total) stay.
  struct Storm {
    const char* name;
    bool resume;
    std::vector<double> steady_millis;  // the change, to the steady streams
    std::vector<double> storm_millis;   // until all storming streams are back and current
    std::vector<double> cpu_ms;
    std::vector<double> proxies_cpu_ms;
  };
  std::vector<Storm> storm_kinds = {{"resume", true, {}, {}, {}, {}},
                                    {"fresh", false, {}, {}, {}, {}}};
  int generation = 1;
  for (Storm& storm : storm_kinds) {
    for (int s = 0; s < (steady > 0 ? storms : 0); ++s) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      const ProcessUsage before = ReadUsage(controller.pid);
      const double proxies_before = proxies_cpu_ms();
      for (int i = 0; i < proxies; ++i) {
        fleet_proxies[i].stream->Cancel();
      }
      {
        std::unique_lock lock(fleet.mu);
        if (!fleet.changed.wait_for(lock, std::chrono::seconds(30), [&] {
              for (int i = 0; i < proxies; ++i) {
                if (fleet.slots[i].open) {
                  return false;
                }
              }
              return true;
            })) {
          std::fprintf(stderr, "fleet_bench: cancelled streams did not end in 30 s\n");
          std::_Exit(1);  // not through the destructors of running streams
        }
      }
      for (int i = 0; i < proxies; ++i) {
        while (!fleet_proxies[i].stream->done()) {
          std::this_thread::yield();  // OnDone returned: the reactor can go
        }
        fleet_proxies[i] = Proxy{};  // the connection closes
      }
      const Clock::time_point storm_start = Clock::now();
      for (int i = 0; i < proxies; ++i) {
        Connect(fleet, fleet_proxies[i], controller.port, i, generation,
                storm.resume ? current : "");
      }
      ++generation;
      // The change goes out while the 1,000 are connecting and saying hello.
      const Clock::time_point start = Clock::now();
      controller.Command('e', next_endpoint++);
      std::string version;
      if (!WaitForNewVersion(fleet, proxies, total, current, start, std::chrono::seconds(60),
                             &storm.steady_millis, &version)) {
        std::fprintf(stderr, "fleet_bench: the change did not reach the steady streams in 60 s\n");
        std::_Exit(1);  // not through the destructors of running streams
      }
      current = version;
      if (!WaitForVersion(fleet, 0, proxies, current, std::chrono::seconds(120))) {
        std::fprintf(stderr, "fleet_bench: the storming streams did not all come back in 120 s\n");
        std::_Exit(1);  // not through the destructors of running streams
      }
      {
        std::lock_guard lock(fleet.mu);
        Clock::time_point last = storm_start;
        for (int i = 0; i < proxies; ++i) {
          last = std::max(last, fleet.slots[i].received);
        }
        storm.storm_millis.push_back(MillisSince(storm_start, last));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      storm.cpu_ms.push_back(ReadUsage(controller.pid).cpu_ms - before.cpu_ms);
      storm.proxies_cpu_ms.push_back(proxies_cpu_ms() - proxies_before);
    }
  }
  const ProcessUsage end = ReadUsage(controller.pid);

  std::printf(
      "\n%d proxies, %d endpoints, %d changes of each kind (p50/p99/max over every "
      "stream of every change)\n",
      total, bench::kGroups * bench::kEndpointsPerGroup, changes);
  PrintLatency("(a) endpoint change -> every proxy", endpoint.millis);
  PrintLatency("(b) whole-snapshot change -> every proxy", whole.millis);
  for (const Storm& storm : storm_kinds) {
    if (storm.steady_millis.empty()) {
      continue;
    }
    std::string what = "(c) storm (" + std::string(storm.name) + ", " + std::to_string(proxies) +
                       "): endpoint change -> " + std::to_string(steady) + " steady";
    PrintLatency(what.c_str(), storm.steady_millis);
    what = "(c) storm (" + std::string(storm.name) + "): all " + std::to_string(proxies) +
           " back and current";
    PrintLatency(what.c_str(), storm.storm_millis);
  }
  std::printf(
      "CPU per change (10 ms ticks): controller: endpoint %.1f ms, whole snapshot %.1f ms; "
      "the %d proxies (the bench's processes): endpoint %.1f ms, whole snapshot %.1f ms\n",
      mean(endpoint.cpu_ms), mean(whole.cpu_ms), total, mean(endpoint.proxies_cpu_ms),
      mean(whole.proxies_cpu_ms));
  for (const Storm& storm : storm_kinds) {
    if (!storm.cpu_ms.empty()) {
      std::printf("CPU per reconnect storm (%s): controller %.0f ms, proxies %.0f ms\n", storm.name,
                  mean(storm.cpu_ms), mean(storm.proxies_cpu_ms));
    }
  }
  std::printf(
      "Kubernetes mode (not in the figures above): one status resync, Programmed of each of "
      "the %d objects over the %d proxies, takes the pipeline thread %.1f ms (median of 3)\n",
      programmed_objects, total, bench::Percentile(programmed_millis, 0.5));
  std::printf(
      "controller RSS: %.1f MiB before the proxies, %.1f MiB with them, %.1f MiB after "
      "the changes, %.1f MiB at the end, %.1f MiB peak\n",
      idle.rss_mib, connected.rss_mib, after_changes.rss_mib, end.rss_mib, end.hwm_mib);

  const std::string fleet_name = "fleet " + std::to_string(total) + " proxies";
  Row(fleet_name + ", endpoint change, p99", bench::Percentile(endpoint.millis, 0.99), "ms",
      "<1000ms");
  Row(fleet_name + ", endpoint change, p50", bench::Percentile(endpoint.millis, 0.5), "ms", "-");
  Row(fleet_name + ", whole-snapshot change, p99", bench::Percentile(whole.millis, 0.99), "ms",
      "<3000ms");
  Row(fleet_name + ", whole-snapshot change, p50", bench::Percentile(whole.millis, 0.5), "ms", "-");
  for (const Storm& storm : storm_kinds) {
    if (storm.steady_millis.empty()) {
      continue;
    }
    Row("fleet storm (" + std::string(storm.name) + ", " + std::to_string(proxies) +
            " reconnect): change to " + std::to_string(steady) + " steady, p99",
        bench::Percentile(storm.steady_millis, 0.99), "ms", "<1000ms");
    Row("fleet storm (" + std::string(storm.name) + "): all back and current, max",
        bench::Percentile(storm.storm_millis, 1.0), "ms", "-");
  }
  Row("fleet controller CPU per endpoint change", mean(endpoint.cpu_ms), "ms", "-");
  Row("fleet controller CPU per whole-snapshot push", mean(whole.cpu_ms), "ms", "-");
  Row("fleet controller status resync (Kubernetes mode), Programmed of every object",
      bench::Percentile(programmed_millis, 0.5), "ms", "-");
  Row("fleet controller RSS with " + std::to_string(total) + " proxies", connected.rss_mib, "MiB",
      "-");
  Row("fleet controller RSS peak", end.hwm_mib, "MiB", "-");
  std::fflush(stdout);
  // The streams end with the process (no orderly close of 1,100 channels).
  std::_Exit(0);
}

}  // namespace
}  // namespace kwd

int main(int argc, char** argv) {
  kwd::SetLogLevel(std::getenv("KWD_BENCH_INFO") != nullptr ? kwd::LogLevel::kInfo
                                                            : kwd::LogLevel::kWarn);
  if (argc >= 5 && std::string_view(argv[1]) == "--steady-streams") {
    return kwd::RunSteadyStreams(std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]));
  }
  if (argc >= 2 && std::string_view(argv[1]) == "--controller") {
    return kwd::RunController(kwd::Flag(argc, argv, "--initial-sends", 0));
  }
  return kwd::RunFleet(argc, argv);
}
