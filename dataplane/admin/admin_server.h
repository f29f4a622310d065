#pragma once

// The proxy's admin port (INTERFACE.md "kwd-proxy"), served by cpprestsdk's
// http_listener on its own small thread pool, never on the traffic port or a
// worker thread:
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

#include "dataplane/net/socket.h"
#include "dataplane/proxy/proxy.h"
#include "dataplane/routing/clock.h"
#include "dataplane/routing/router.h"

namespace web::http::experimental::listener {
class http_listener;
}  // namespace web::http::experimental::listener

namespace kwd::admin {

struct AdminOptions {
  net::Endpoint listen;  // the proxy's --admin-listen
  // cpprest's process-wide pool; set before the first listener opens.
  size_t threads = 2;
  // How long /admin/api/state waits for the workers' balancer counters.
  int64_t worker_timeout_ms = 1000;
};

// Sizes cpprest's shared thread pool (its default is 40 threads). Effective
// once per process, before any cpprest use; later calls return false.
bool InitializeCpprestThreads(size_t threads);

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

  // The bodies of /admin/api/state and /admin/api/explain, also usable
  // without HTTP.
  nlohmann::ordered_json State();
  nlohmann::ordered_json Explain(std::string_view url, std::optional<std::string_view> host,
                                 std::span<const std::string> headers);

 private:
  class Handler;

  proxy::Proxy* proxy_;
  AdminOptions options_;
  std::unique_ptr<web::http::experimental::listener::http_listener> listener_;

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
