#pragma once

// The proxy's metrics, declared once. Per-group and per-server children are
// resolved when a routing table is applied (TableMetrics, parallel to the
// table's groups and servers), so the request path only increments.

#include <array>
#include <chrono>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/metrics.h"
#include "dataplane/proxy/error_page.h"
#include "dataplane/routing/routing_table.h"

namespace kwd::proxy {

// Monotonic microseconds, for request durations (the event loop's clock is in
// milliseconds: fast requests would all take 0).
inline int64_t MonotonicUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct ServerMetrics {
  Counter* requests = nullptr;
  Counter* connect_errors = nullptr;
};

// The `code` label of kwd_proxy_requests_total: "none" (no response),
// "1xx".."4xx" by class, and 5xx exact ("500".."505"; other 5xx as "5xx"),
// so 502, 503 and 504 can be told apart.
inline constexpr const char* kStatusCodeLabels[] = {"none", "1xx", "2xx", "3xx", "4xx", "500",
                                                    "501",  "502", "503", "504", "505", "5xx"};
inline constexpr size_t kStatusCodeLabelCount = std::size(kStatusCodeLabels);
// The index in kStatusCodeLabels for an HTTP status (0: none).
size_t StatusCodeIndex(int status);

struct GroupMetrics {
  // Indexed by StatusCodeIndex.
  std::array<Counter*, kStatusCodeLabelCount> requests{};
  Histogram* duration = nullptr;
  std::vector<ServerMetrics> servers;  // parallel to GroupEntry::servers
  // TLS passthrough: connections routed to the group, bytes each way, and
  // connections that failed after routing (connect failure or timeout).
  Counter* passthrough_connections = nullptr;
  Counter* passthrough_bytes_in = nullptr;   // client -> server
  Counter* passthrough_bytes_out = nullptr;  // server -> client
  Counter* passthrough_errors = nullptr;
};

// Why a passthrough (or PROXY protocol) connection was closed before it was
// routed; the index into ProxyMetrics::passthrough_rejected.
enum class PassthroughReject : uint8_t {
  kNoRoute,          // no group for the server name and no default
  kNoServer,         // the group has no usable server
  kBadClientHello,   // not a TLS ClientHello
  kTooLarge,         // ClientHello above the limit
  kTimeout,          // no complete ClientHello in time
  kClosed,           // the client closed before its ClientHello was complete
};
inline constexpr size_t kPassthroughRejectCount = 6;

// Holds its children, so a worker still finishing requests on an old table
// can count them after the registry stopped exporting removed groups.
struct TableMetrics {
  std::vector<GroupMetrics> groups;  // parallel to RoutingTable::groups()
  GroupMetrics no_group;             // requests that matched no group
  std::vector<std::shared_ptr<void>> owned;
};

// kwd_proxy_http2_errors_total{reason}: the index into
// ProxyMetrics::http2_errors.
enum class Http2Error : uint8_t {
  kProtocol,        // the client broke the protocol (connection or stream error)
  kRefusedStream,   // a stream over --h2-max-concurrent-streams was refused
  kClientReset,     // the client reset a stream (RST_STREAM)
  kStreamReset,     // the proxy reset a stream (upstream failed mid-response)
  kGoawaySent,      // GOAWAY sent (drain, idle, errors)
  kPingTimeout,     // no PING ACK in time: closed
  kHeaderTooLarge,  // a header list over --max-header-size (431 or reset)
  kFlood,           // a flood or header block beyond the limits: closed
  // A stream that ended (reset by either side, or with its connection)
  // before its request reached a server: not in the access log or
  // kwd_proxy_requests_total, summarised per connection in the process log.
  kResetBeforeForward,
};
inline constexpr const char* kHttp2ErrorNames[] = {
    "protocol_error", "refused_stream",   "client_reset", "stream_reset",        "goaway_sent",
    "ping_timeout",   "header_too_large", "flood",        "reset_before_forward"};

// kwd_proxy_request_duration_seconds' upper bounds: LatencyBuckets() and
// 20, 30 and 60 s (the default --response-timeout).
std::vector<double> RequestDurationBuckets();

// kwd_proxy_modification_requests_total{outcome}: forwarded with the
// rules' changes, or answered by a rule (redirect, forbidden, gone), the
// rules failed (error) or named a SAP system the host does not have.
inline constexpr std::array<std::string_view, 6> kModificationOutcomeNames = {
    "forwarded", "redirect", "forbidden", "gone", "error", "unknown-system"};

class ProxyMetrics {
  // Declared first: the references below are initialised from it.
  MetricsRegistry registry_;

 public:
  // Also registers kwd_build_info and the process_* metrics.
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
  // Requests on which modification rules fired, by what came of them
  // (kModificationOutcomeNames).
  std::array<Counter*, 6> modification_requests{};
  // Responses the proxy made itself (error pages), by ErrorCode.
  std::array<Counter*, kErrorCodeCount> local_responses{};
  std::array<Counter*, kPassthroughRejectCount> passthrough_rejected{};
  Counter& proxy_protocol_rejected;
  // kwd_proxy_tls_handshake_errors_total{reason="timeout"}; the TLS library
  // counts the other reasons under the same name.
  Counter& tls_handshake_timeouts;
  // Open client connections by the HTTP version they speak (TLS passthrough
  // is not counted here), HTTP/2 streams open and begun, and HTTP/2 errors
  // by Http2Error.
  Gauge& http1_connections;
  Gauge& http2_connections;
  Gauge& http2_streams;
  Counter& http2_streams_total;
  // Bytes of buffer storage the workers' connections hold now (buffer.h).
  Gauge& buffer_bytes;
  std::array<Counter*, std::size(kHttp2ErrorNames)> http2_errors{};
  // Secure-only URLs over plain http whose mapping asks for a redirect to
  // https, by outcome; indexed by routing::SecureRedirect (kNone unused).
  std::array<Counter*, 4> secure_redirects{};

 private:
  GroupMetrics MakeGroup(const std::string& group, const std::vector<std::string>& servers,
                         TableMetrics* owner);
};

}  // namespace kwd::proxy
