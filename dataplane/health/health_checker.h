#pragma once

// Active health checks (SAP: "no HTTP 200 within the timeout -> removed from
// load balancing"). One thread of its own, never a worker: each round it
// reads the current RoutingTable and pings `GET <healthCheck.path>` on every
// server of every group whose interval is due, all in parallel over
// non-blocking sockets and one poll(), so a slow or silent server costs its
// timeout once, not once per server.
//
// After `unhealthyThreshold` consecutive failures a server's
// ServerHealth.healthy turns false, after `healthyThreshold` consecutive
// successes true again. The proxy also marks a server down itself when a
// connect fails (passive marking); the next successful check re-admits it.
// The round-trip time of successful pings feeds ServerHealth.smoothed_rtt_us
// (EWMA, alpha 0.3), which the adaptive balancer reads.
//
// The check speaks what the group's traffic speaks (GroupCheckFor):
// - re-encrypting groups (upstreamTLS reencrypt): over TLS with the group's
//   settings, the server verified as for requests;
// - TLS passthrough groups (named by a UrlMapping's passthroughGroup and by
//   no HTTP rule or default group): over TLS without verifying the server,
//   since kwd does not terminate these connections (the client verifies the
//   server; kwd only needs to know it answers). SNI and Host are the
//   UrlMapping's host when exactly one exact host names the group, else the
//   server's address (no SNI for an IP address);
// - every other group, including one used both for HTTP requests and for
//   passthrough: plain HTTP, the way its HTTP requests are sent (a server
//   that only speaks TLS could not answer those either). Such a mixed group
//   is logged once per snapshot; give passthrough its own group.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/metrics.h"
#include "dataplane/routing/routing_table.h"

namespace kwd::health {

// A server that went down or came back up.
struct Transition {
  std::string group;  // group key
  std::string server;
  bool up = false;
  std::string reason;  // "status 500", "timeout after 5000 ms", "2 consecutive successes", ...
};

struct HealthCheckerOptions {
  // When > 0, replace every group's intervalSeconds / timeoutSeconds: tests
  // run rounds in milliseconds instead of seconds.
  int64_t interval_override_ms = 0;
  int64_t timeout_override_ms = 0;
  // Checks in flight at once; more due servers wait for a free slot.
  size_t max_concurrent_checks = 256;
  // How often the table is re-read while nothing else wakes the thread
  // (TablesChanged wakes it at once).
  int64_t table_poll_ms = 200;
  // Called on the checker thread after each transition was applied and logged.
  std::function<void(const Transition&)> on_transition;
};

class HealthChecker {
 public:
  using TableSource = std::function<std::shared_ptr<const routing::RoutingTable>()>;

  // `tables` is called on the checker thread (e.g. [&proxy] { return
  // proxy.table(); }). Metrics go to `registry`: kwd_proxy_server_up,
  // kwd_proxy_health_checks_total, kwd_proxy_health_check_rtt_seconds.
  HealthChecker(TableSource tables, MetricsRegistry* registry, HealthCheckerOptions options = {});
  ~HealthChecker();
  HealthChecker(const HealthChecker&) = delete;
  HealthChecker& operator=(const HealthChecker&) = delete;

  bool Start(std::string* error);
  // Returns promptly (within one poll wake-up): in-flight checks are abandoned.
  void Stop();
  // A new table is there: the checker thread reads it now instead of at its
  // next table poll. Any thread; nothing when the checker is not running.
  void TablesChanged();

  uint64_t checks_succeeded() const { return successes_->Value(); }
  uint64_t checks_failed() const { return failures_->Value(); }

 private:
  class Loop;

  TableSource tables_;
  MetricsRegistry* registry_;
  HealthCheckerOptions options_;
  Counter* successes_;
  Counter* failures_;
  Histogram* rtt_;
  std::mutex wake_mu_;  // wake_fd_ against Start/Stop (TablesChanged is any thread's)
  int wake_fd_ = -1;
  std::atomic<bool> tables_changed_{false};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The defaults the controller fills in, for a table built from a hand-made
// snapshot whose health check fields are zero.
inline constexpr std::string_view kDefaultAbapHealthPath = "/sap/public/icman/ping";
inline constexpr std::string_view kDefaultJavaHealthPath = "/index.html";
inline constexpr int64_t kDefaultIntervalSeconds = 25;
inline constexpr int64_t kDefaultTimeoutSeconds = 5;
inline constexpr uint32_t kDefaultUnhealthyThreshold = 2;
inline constexpr uint32_t kDefaultHealthyThreshold = 1;

// How a group's servers are checked (see the top of this file).
enum class CheckTransport {
  kHttp,         // plain HTTP
  kTls,          // TLS, server not verified (passthrough groups)
  kTlsVerified,  // TLS with the group's UpstreamTls (re-encrypting groups)
};
std::string_view CheckTransportName(CheckTransport transport);  // "http", "tls", "tls-verified"

struct GroupCheck {
  CheckTransport transport = CheckTransport::kHttp;
  // kTls: the name sent as SNI and Host; "" for the server's address.
  std::string server_name;
  // Named by some virtual host's passthrough group / used by HTTP routing
  // (a rule or a default group).
  bool passthrough = false;
  bool http = false;
};

// The check of group `group_index` of `table`.
GroupCheck GroupCheckFor(const routing::RoutingTable& table, size_t group_index);
// The same for every group (parallel to table.groups()), in one pass.
std::vector<GroupCheck> GroupChecks(const routing::RoutingTable& table);

// The status code of an HTTP/1.x status line at the start of `response`
// ("HTTP/1.1 200 OK\r\n..."): 0 while the line is incomplete, -1 when it is
// not a status line.
int ParseStatusLine(std::string_view response);

}  // namespace kwd::health
