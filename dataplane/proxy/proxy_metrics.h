#pragma once

// The proxy's metrics, declared once. Per-group and per-server children are
// resolved when a routing table is applied (TableMetrics, parallel to the
// table's groups and servers), so the request path only increments.

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "dataplane/routing/routing_table.h"

namespace kwd::proxy {

struct ServerMetrics {
  Counter* requests = nullptr;
  Counter* connect_errors = nullptr;
};

struct GroupMetrics {
  // Indexed by status class: 0 = no response, 1..5 = 1xx..5xx.
  std::array<Counter*, 6> requests{};
  Histogram* duration = nullptr;
  std::vector<ServerMetrics> servers;  // parallel to GroupEntry::servers
};

// Holds its children, so a worker still finishing requests on an old table
// can count them after the registry stopped exporting removed groups.
struct TableMetrics {
  std::vector<GroupMetrics> groups;  // parallel to RoutingTable::groups()
  GroupMetrics no_group;             // requests that matched no group
  std::vector<std::shared_ptr<void>> owned;
};

class ProxyMetrics {
  // Declared first: the references below are initialised from it.
  MetricsRegistry registry_;

 public:
  ProxyMetrics();

  MetricsRegistry& registry() { return registry_; }
  std::shared_ptr<const TableMetrics> ForTable(const routing::RoutingTable& table);

  Counter& connections_accepted;
  Counter& connections_rejected;
  Gauge& connections_active;
  Counter& bad_requests;
  Counter& timeouts_client;
  Counter& timeouts_upstream;
  Counter& retries;
  Counter& upstream_reused;
  Counter& upstream_connects;
  Histogram& snapshot_apply_seconds;
  Counter& snapshot_applies;
  Counter& snapshot_rejects;
  // Indexed by routing::Identifier (kNone unused).
  std::array<Counter*, 6> sticky_routed{};
  std::array<Counter*, 6> sticky_lost{};
  Counter& sessions_learned;
  // kwd_proxy_tls_handshake_errors_total{reason="timeout"}; the TLS library
  // counts the other reasons under the same name.
  Counter& tls_handshake_timeouts;

 private:
  GroupMetrics MakeGroup(const std::string& group, const std::vector<std::string>& servers,
                         TableMetrics* owner);
};

}  // namespace kwd::proxy
