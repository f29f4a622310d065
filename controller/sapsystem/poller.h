#pragma once

// Polls each SapSystem's message server for its application server list
// (and, with spec.logonGroups, an application server for the SMLG logon
// groups) on the system's refresh interval, and feeds the result to the
// pipeline as a SapServerList object: one more compile input, like an
// EndpointSlice. The only part of SAP system discovery with I/O; parsing
// (server_list.h) and compiling are pure.
//
// A failed poll (transport error, timeout, non-200, a body that is not a
// server list, an empty list after a non-empty one, no instance left after
// checks) keeps the last good list and says why in Refreshed=False. A poll
// whose result equals the last one delivered delivers nothing, so a refresh
// that changes nothing compiles nothing.

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "controller/compile/compile.h"
#include "controller/model/model.h"
#include "controller/pipeline/pipeline.h"
#include "controller/sapsystem/server_list.h"
#include "controller/sapsystem/spec.h"

namespace kwd::sapsystem {

struct PollerOptions {
  // Per request (server list, group information): connect plus transfer.
  std::chrono::milliseconds timeout{10000};
  // Host names to addresses; default: getaddrinfo (A and AAAA, IPv4 first).
  Resolver resolve;
};

// getaddrinfo: the host's addresses, IPv4 first; empty when it does not resolve.
std::vector<std::string> ResolveHost(const std::string& host);

// One HTTP GET: the status and at most kMaxBodyBytes of body, or an error.
struct FetchResult {
  long status = 0;  // 0: no HTTP answer
  std::string body;
  std::string error;  // transport error, stable text (no timings): "Timeout was reached"
  bool timed_out = false;
  bool too_large = false;
};
FetchResult Fetch(const std::string& url, std::chrono::milliseconds timeout,
                  const std::string& ca_bundle);

// One poll of `config`, pure but for Fetch and `resolve`: the new list given
// the last good one. Exposed for tests and the benchmark.
struct PollOutcome {
  model::SapServerList list;  // what to deliver (the last good list on failure)
  bool failed = false;
  Skips skips;
};
PollOutcome PollOnce(const SapSystemConfig& config, const model::SapServerList& previous,
                     std::chrono::milliseconds timeout, const Resolver& resolve);

// Applies a fetched server list body to `previous` (no I/O but `resolve`):
// what PollOnce does after the fetch.
PollOutcome ApplyServerList(std::string_view body, const std::string& source,
                            const model::SapServerList& previous, const Resolver& resolve);

class SapSystemPoller {
 public:
  // Registers one pipeline source: the first compile waits for the first
  // poll of every SapSystem the other sources delivered.
  SapSystemPoller(pipeline::Pipeline& pipeline, PollerOptions options, MetricsRegistry* metrics);

  // The pipeline's SapSystemObserver: every SapSystem, current versions.
  void SetSystems(std::vector<model::SapSystem> systems);
  // The pipeline's StatusDecorator: a SapSystem's lastRefreshTime.
  void Decorate(compile::ObjectStatus* status) const;

  void Run(std::stop_token stop);

 private:
  struct System {
    model::SapSystem object;
    std::optional<SapSystemConfig> config;  // nullopt: rejected, not polled
    std::chrono::steady_clock::time_point next_due{};
    model::SapServerList list;  // last delivered
    bool delivered = false;
    std::string last_refresh_time;
  };
  using NamespacedName = model::ObjectSet::NamespacedName;

  void Publish(const NamespacedName& key, const PollOutcome& outcome);

  pipeline::Pipeline& pipeline_;
  const PollerOptions options_;
  MetricsRegistry* metrics_;
  const int source_;

  mutable std::mutex mu_;
  std::condition_variable_any wake_;
  std::map<NamespacedName, System> systems_;
  bool have_systems_ = false;  // SetSystems was called at least once
  bool synced_ = false;        // the first complete set was delivered
  std::uint64_t generation_ = 0;
};

}  // namespace kwd::sapsystem
