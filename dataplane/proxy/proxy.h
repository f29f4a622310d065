#pragma once

// The serving proxy: N workers, the snapshot they route with, and what the
// admin port and the health checker read. Applying a snapshot validates it
// completely and builds the RoutingTable off the request path, then hands the
// same immutable table to every worker; a worker switches between requests.

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dataplane/proxy/options.h"
#include "dataplane/proxy/proxy_metrics.h"
#include "dataplane/proxy/worker.h"
#include "dataplane/routing/routing_table.h"
#include "dataplane/routing/server_health_registry.h"
#include "dataplane/session/affinity_cookie.h"
#include "dataplane/session/session_table.h"
#include "kwd/v1/snapshot.pb.h"

namespace kwd::proxy {

class Proxy {
 public:
  explicit Proxy(ProxyOptions options);
  ~Proxy();

  // Opens the listeners and starts the workers (with an empty table until a
  // snapshot is applied: every request gets 503).
  bool Start(std::string* error);
  // Validates `snapshot` and swaps it in on every worker. On failure the
  // previous snapshot keeps serving and `error` says why (a NACK's detail).
  bool ApplySnapshot(const v1::Snapshot& snapshot, std::string* error);
  // Called after each applied snapshot, under the lock that swaps the table
  // (so once this returns with null, it is not running and will not run):
  // the health checker's wake-up. Null: nothing. The hook must not call back
  // into this Proxy: its lock is held.
  void SetOnTableApplied(std::function<void()> hook) {
    std::lock_guard lock(mu_);
    on_table_applied_ = std::move(hook);
  }
  // Stops accepting, lets in-flight requests finish (up to grace_ms), returns
  // when every worker stopped.
  void Shutdown(int64_t grace_ms);

  bool ready() const;
  std::string version() const;
  std::shared_ptr<const routing::RoutingTable> table() const;
  // The table and its metrics children (TableMetrics::groups parallel to its
  // groups), read together: for the admin port's per-group counters.
  std::shared_ptr<const routing::RoutingTable> table(
      std::shared_ptr<const TableMetrics>* metrics) const;
  const net::Endpoint& bound() const { return bound_; }
  const net::Endpoint& passthrough_bound() const { return passthrough_bound_; }
  // --tls-listen's bound address (len 0 without TLS).
  const net::Endpoint& tls_bound() const { return tls_bound_; }
  tls::ServerTls* server_tls() { return server_tls_.get(); }
  ProxyMetrics& metrics() { return metrics_; }
  routing::ServerHealthRegistry& health() { return health_; }
  session::SessionRegistry& sessions() { return sessions_; }
  std::shared_ptr<const session::AffinityCookieCodec> affinity_codec() const { return codec_; }
  // A new affinity-cookie key for every worker; the previous one is still
  // accepted for `grace` (AffinityCookieCodec::Rotate).
  void RotateAffinityKey(std::string_view key, std::chrono::milliseconds grace) {
    codec_->Rotate(key, grace);
  }
  std::vector<std::unique_ptr<Worker>>& workers() { return workers_; }
  const ProxyOptions& options() const { return options_; }

 private:
  ProxyOptions options_;
  ProxyMetrics metrics_;
  routing::ServerHealthRegistry health_;
  session::SessionRegistry sessions_;
  // Modification rule files compiled by the last table, kept for the next
  // (an endpoint change rebuilds the table; the rules rarely change).
  routing::ModificationPrograms programs_;
  std::shared_ptr<session::AffinityCookieCodec> codec_;
  std::shared_ptr<const routing::Clock> clock_;
  std::unique_ptr<tls::ServerTls> server_tls_;  // outlives the workers (declared first)
  std::vector<std::unique_ptr<Worker>> workers_;
  net::Endpoint bound_;
  net::Endpoint passthrough_bound_;
  net::Endpoint tls_bound_;
  int access_log_fd_ = -1;
  bool owns_access_log_fd_ = false;

  mutable std::mutex mu_;  // guards the fields below; never taken per request
  std::shared_ptr<const routing::RoutingTable> table_;
  std::shared_ptr<const TableMetrics> table_metrics_;
  bool ready_ = false;
  std::function<void()> on_table_applied_;
  Gauge* version_info_ = nullptr;
  // The last snapshot's certificates, for a ServerTls made after it (Start).
  google::protobuf::RepeatedPtrField<v1::Certificate> certificates_;
  std::atomic<bool> certificates_ignored_logged_{false};
};

}  // namespace kwd::proxy
