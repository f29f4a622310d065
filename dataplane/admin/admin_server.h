#pragma once

// The proxy's admin port (INTERFACE.md "kwd-proxy"), served by the bounded
// AdminHttpServer (common/admin_http.h) on its own thread, never on the
// traffic port or a worker thread:
//   /metrics             the proxy registry (text format 0.0.4)
//   /healthz             200 while the process runs
//   /readyz              200 once a snapshot is applied, else 503
//   /admin               a self-contained HTML page over the JSON API
//   /admin/api/state     groups, servers, load, health, next preferred server
//   /admin/api/explain   ?url=...&host=...&header=... : one routing decision
//
// Reading per-worker balancer state posts a closure to each worker
// (Worker::Post) and waits for the answers with a deadline, so the request
// path never takes a lock for the admin port.
//
// Explaining runs on a dedicated admin Router: it shares the proxy's routing
// table (so its session tables, health atomics) and affinity codec, but has
// its own balancer counters, so explaining never moves live balancing. Like
// a real request it reads the session tables, but read-only: nothing is
// recorded (a first sap-ext-sid), refreshed, expired or erased there.

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

struct AdminOptions {
  net::Endpoint listen;  // the proxy's --admin-listen
  // Head, body, connection and time bounds of the admin port.
  AdminHttpLimits limits;
  // How long /admin/api/state waits for the workers' balancer counters.
  int64_t worker_timeout_ms = 1000;
};

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

 private:
  class Handler;

  proxy::Proxy* proxy_;
  AdminOptions options_;
  std::unique_ptr<AdminHttpServer> http_;

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
