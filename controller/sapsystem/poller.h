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
#include <functional>
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
  // Addresses refused as instance addresses unless listed one by one
  // (address_policy.h): the controller's and its proxies'; default:
  // OwnAddresses. Called once per poll.
  std::function<std::vector<IpAddress>()> own_addresses;
  // SapSystems polled at the same time; a slow message server holds up
  // only its own system (and one of these slots).
  int max_concurrent_polls = 4;
};

// The addresses of this host's interfaces (getifaddrs), loopback included:
// in a pod, the pod's own addresses.
std::vector<IpAddress> OwnAddresses();

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
// `pinned_address`, when set, is the only address the URL's host is
// connected to (curl's --resolve): the address the policy checked, while
// HTTPS still verifies the certificate against the host name.
FetchResult Fetch(const std::string& url, std::chrono::milliseconds timeout,
                  const std::string& ca_bundle, const std::string& pinned_address = {});

// One poll of `config`, pure but for Fetch and `resolve`: the new list given
// the last good one. Exposed for tests and the benchmark.
struct PollOutcome {
  model::SapServerList list;  // what to deliver (the last good list on failure)
  bool failed = false;
  Skips skips;
};
// Instance addresses are checked against config.allowed_networks and
// `own_addresses` (address_policy.h). The group and URL-map feeds are
// fetched only from instances whose address passed, at that address; when
// the message server is reached over HTTPS they are fetched over HTTPS too
// (the instance's HTTPS port, its host name verified with config.ca_bundle),
// never over plain HTTP.
PollOutcome PollOnce(const SapSystemConfig& config, const model::SapServerList& previous,
                     std::chrono::milliseconds timeout, const Resolver& resolve,
                     const std::vector<IpAddress>& own_addresses = {});

// Applies a fetched server list body to `previous` (no I/O but `resolve`):
// what PollOnce does after the fetch.
PollOutcome ApplyServerList(std::string_view body, const std::string& source,
                            const model::SapServerList& previous, const Resolver& resolve,
                            const AddressPolicy& policy);

class SapSystemPoller {
 public:
  // Registers one pipeline source: the first compile waits for the first
  // poll of every SapSystem the other sources delivered.
  SapSystemPoller(pipeline::Pipeline& pipeline, PollerOptions options, MetricsRegistry* metrics);

  // The pipeline's SapSystemObserver: every SapSystem, current versions.
  void SetSystems(std::vector<model::SapSystem> systems);
  // The pipeline's StatusDecorator: a SapSystem's lastRefreshTime.
  void Decorate(compile::ObjectStatus* status) const;

  // Polls until `stop`, up to options.max_concurrent_polls systems at once.
  void Run(std::stop_token stop);

 private:
  struct System {
    model::SapSystem object;
    std::optional<SapSystemConfig> config;  // nullopt: rejected, not polled
    std::chrono::steady_clock::time_point next_due{};
    model::SapServerList list;  // last delivered
    bool delivered = false;
    bool in_flight = false;  // a worker polls it now
    std::size_t refused_logged = 0;  // refused instances last logged
    std::string last_refresh_time;
  };
  using NamespacedName = model::ObjectSet::NamespacedName;

  void Publish(const NamespacedName& key, const PollOutcome& outcome);
  // One of Run's workers.
  void Work(std::stop_token stop);

  pipeline::Pipeline& pipeline_;
  const PollerOptions options_;
  MetricsRegistry* metrics_;
  const int source_;

  // Held while handing lists to the pipeline (taken before mu_), so that
  // the first Replace and later Upserts and Deletes reach it in order.
  std::mutex deliver_mu_;
  mutable std::mutex mu_;
  std::condition_variable_any wake_;
  std::map<NamespacedName, System> systems_;
  bool have_systems_ = false;  // SetSystems was called at least once
  bool synced_ = false;        // the first complete set was delivered
  std::uint64_t generation_ = 0;
};

}  // namespace kwd::sapsystem
