#pragma once

// The proxy's admin port (docs/operations.md, "Admin port"), served by the bounded AdminHttpServer
// (common/admin_http.h) on its own thread, never on the traffic port or a worker thread:
//   /metrics             the proxy registry (text format 0.0.4)
//   /healthz             200 while the process runs
//   /readyz              200 once a snapshot is applied, else 503
//   /admin, /admin/      a self-contained HTML page over the JSON API
//   /admin/api/state     header, groups (health-check protocol, TLS
//                        passthrough hosts and counters), servers (load,
//                        health, traffic, drain), URL mapping (with each
//                        host's passthrough group), permissions, recent errors
//   /admin/api/explain   ?url=...&host=...&header=... : one routing decision
//                        and every step that made it
//   POST /admin/api/servers/drain|undrain?group=NS/NAME&server=NAME
//                        with Authorization: Bearer <token> (--admin-token-file)
//
// Reading per-worker state (balancer counters, per-server traffic, the
// proxy's own error answers) posts a closure to each worker (Worker::Post)
// and waits for the answers with a deadline, so the request path never takes
// a lock for the admin port.
//
// A local drain sets the server's shared ServerHealth.local_drain, which
// every worker's balancer reads: the server keeps its sticky traffic and
// takes no new balanced traffic until undrained, or until it leaves the
// snapshot (the health registry then forgets its state).
//
// Explaining runs on a dedicated admin Router: it shares the proxy's routing
// table (so its session tables, health atomics) and affinity codec, but has
// its own balancer counters, so explaining never moves live balancing. Like
// a real request it reads the session tables, but read-only: nothing is
// recorded (a first sap-ext-sid), refreshed, expired or erased there.

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "common/admin_http.h"
#include "dataplane/net/socket.h"
#include "dataplane/proxy/proxy.h"
#include "dataplane/routing/clock.h"
#include "dataplane/routing/router.h"

namespace kwd::admin {

// Where snapshots come from and how the last ones fared: the admin page's
// controller connection and last ACK/NACK. Thread-safe; written by whoever
// applies snapshots (the gRPC client thread, SIGHUP), read by the admin port.
class SnapshotSourceStatus {
 public:
  // "controller" with the controller's HOST:PORT, or "file" with the path.
  void SetSource(std::string kind, std::string target);
  // How to tell whether the controller stream is up (null: no stream).
  void SetConnectedProbe(std::function<bool()> connected);
  void Applied(const std::string& version);
  void Rejected(const std::string& version, const std::string& error);
  // What is served now and where it came from: "controller", "cache" (the
  // --snapshot-cache file while the controller does not answer) or "file".
  void Serving(const std::string& version, std::string origin);
  nlohmann::ordered_json Json() const;
  // "version V, source S" once something is served, else "".
  std::string ServingLine() const;

 private:
  mutable std::mutex mu_;
  std::string kind_ = "none";
  std::string target_;
  std::function<bool()> connected_;
  std::string applied_version_;
  int64_t applied_unix_ms_ = 0;
  uint64_t applied_ = 0;
  std::string rejected_version_;
  std::string rejected_error_;
  int64_t rejected_unix_ms_ = 0;
  uint64_t rejected_ = 0;
  std::string serving_version_;
  std::string serving_origin_;
};

struct AdminOptions {
  net::Endpoint listen;  // the proxy's --admin-listen
  // Head, body, connection and time bounds of the admin port.
  AdminHttpLimits limits;
  // How long /admin/api/state waits for the workers' balancer counters.
  int64_t worker_timeout_ms = 1000;
  // The bearer token actions need (--admin-token-file); empty: read-only,
  // every action is refused with 403.
  std::string token;
  // Shown in the page's header; null: not shown.
  std::shared_ptr<const SnapshotSourceStatus> source;
  std::string node_id;
};

// The longest explain input (url, host and headers together) taken; more is
// refused with 413. The proxy itself takes no longer request line than this.
inline constexpr size_t kMaxExplainInputBytes = 8192;

class AdminServer {
 public:
  AdminServer(proxy::Proxy* proxy, AdminOptions options);
  ~AdminServer();
  AdminServer(const AdminServer&) = delete;
  AdminServer& operator=(const AdminServer&) = delete;

  // Opens the listener; false with `error` set when the address cannot be
  // bound (in use, not local, ...).
  bool Start(std::string* error);
  // Closes the listener; pending requests are answered or dropped.
  void Stop();
  // The bound port (the listen port, or the one picked for port 0).
  uint16_t port() const;

  // The bodies of /admin/api/state and /admin/api/explain, also usable
  // without HTTP.
  nlohmann::ordered_json State();
  nlohmann::ordered_json Explain(std::string_view url, std::optional<std::string_view> host,
                                 std::span<const std::string> headers);

  // Drains (`drain`) or undrains a server on this proxy. Returns the HTTP
  // status (200, 404) and sets `body` to the answer (the server's new state,
  // or the error).
  int SetLocalDrain(std::string_view group, std::string_view server, bool drain,
                    nlohmann::ordered_json* body);

 private:
  class Handler;
  struct WorkerView;
  // Every worker's counters for the groups of `table`, summed; `answered`
  // counts the workers that answered within the deadline.
  WorkerView ReadWorkers(const std::shared_ptr<const routing::RoutingTable>& table, int* answered);

  proxy::Proxy* proxy_;
  AdminOptions options_;
  std::unique_ptr<AdminHttpServer> http_;

  const int64_t started_unix_ms_;
  const std::chrono::steady_clock::time_point started_;
  std::mutex explain_mu_;  // the admin router serves one explain at a time
  std::shared_ptr<const routing::Clock> clock_;
  routing::Router explain_router_;
};

// What the weighted_round_robin rule (adaptive: its RTT-weighted rule) picks
// next in `group` given the load counts summed over the workers; -1 when no
// server is usable. The simple_weighted_round_robin block position is
// worker-local and not summed: it is shown with the weighted rule too.
int NextPreferredServer(const routing::GroupEntry& group, std::span<const uint64_t> assigned,
                        std::span<const uint64_t> outstanding);

}  // namespace kwd::admin
