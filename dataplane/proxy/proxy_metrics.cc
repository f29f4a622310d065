#include "dataplane/proxy/proxy_metrics.h"

#include <algorithm>

#include "dataplane/routing/router.h"

namespace kwd::proxy {

size_t StatusCodeIndex(int status) {
  if (status >= 500 && status <= 505) {
    return static_cast<size_t>(status - 500) + 5;
  }
  if (status >= 506 && status < 600) {
    return kStatusCodeLabelCount - 1;
  }
  return status >= 100 && status < 500 ? static_cast<size_t>(status / 100) : 0;
}

ProxyMetrics::ProxyMetrics()
    : connections_accepted(registry_.GetCounter("kwd_proxy_connections_accepted_total",
                                                "Client connections accepted.")),
      connections_rejected(registry_.GetCounter(
          "kwd_proxy_connections_rejected_total",
          "Client connections closed at once because the worker was at its limit.")),
      connections_active(
          registry_.GetGauge("kwd_proxy_connections_active", "Open client connections.")),
      bad_requests(registry_.GetCounter(
          "kwd_proxy_bad_requests_total",
          "Requests rejected as malformed (400, 413, 414, 431, 501, 505).")),
      timeouts_client(registry_.GetCounter(
          "kwd_proxy_client_timeouts_total",
          "Client connections closed for a header, body or idle timeout.")),
      timeouts_upstream(registry_.GetCounter(
          "kwd_proxy_upstream_timeouts_total",
          "Upstream connects or responses that timed out.")),
      retries(registry_.GetCounter(
          "kwd_proxy_retries_total",
          "Requests sent to another server after a connect failure.")),
      upstream_reused(registry_.GetCounter("kwd_proxy_upstream_reused_total",
                                           "Requests sent over a pooled keep-alive connection.")),
      upstream_connects(registry_.GetCounter("kwd_proxy_upstream_connects_total",
                                             "Upstream connections opened.")),
      snapshot_apply_seconds(registry_.GetHistogram(
          "kwd_proxy_snapshot_apply_seconds",
          "Time to validate a snapshot and build its routing table.")),
      snapshot_applies(registry_.GetCounter("kwd_proxy_snapshot_applies_total",
                                            "Snapshots applied.")),
      snapshot_rejects(registry_.GetCounter(
          "kwd_proxy_snapshot_rejects_total",
          "Snapshots rejected as invalid (the previous one keeps serving).")),
      sessions_learned(registry_.GetCounter(
          "kwd_proxy_sessions_learned_total",
          "JSESSIONID values learned from backend Set-Cookie headers.")),
      proxy_protocol_rejected(registry_.GetCounter(
          "kwd_proxy_proxy_protocol_rejected_total",
          "Connections closed on a --proxy-protocol listener for a missing, invalid or late "
          "PROXY header.")),
      tls_handshake_timeouts(registry_.GetCounter(
          "kwd_proxy_tls_handshake_errors_total",
          "TLS handshakes on --tls-listen that failed, by reason.", {{"reason", "timeout"}})),
      http1_connections(registry_.GetGauge("kwd_proxy_http_connections",
                                           "Open client connections by HTTP version.",
                                           {{"protocol", "HTTP/1.1"}})),
      http2_connections(registry_.GetGauge("kwd_proxy_http_connections",
                                           "Open client connections by HTTP version.",
                                           {{"protocol", "HTTP/2"}})),
      http2_streams(registry_.GetGauge("kwd_proxy_http2_streams",
                                       "Open HTTP/2 streams (requests in flight).")),
      http2_streams_total(registry_.GetCounter("kwd_proxy_http2_streams_total",
                                               "HTTP/2 streams begun by clients.")),
      buffer_bytes(registry_.GetGauge(
          "kwd_proxy_buffer_bytes",
          "Bytes of buffer storage connections hold now: client and upstream reads and "
          "writes, HTTP/1.1 and HTTP/2. Taken when bytes come, given back when the buffer "
          "is empty: idle keep-alive connections hold none. Blocks kept for reuse are not "
          "counted. Updated every 100 ms.")) {
  for (size_t i = 0; i < http2_errors.size(); ++i) {
    http2_errors[i] = &registry_.GetCounter(
        "kwd_proxy_http2_errors_total",
        "HTTP/2 protocol errors, refused and reset streams, GOAWAYs sent, ping timeouts, "
        "oversized header lists and floods, by reason.",
        {{"reason", kHttp2ErrorNames[i]}});
  }
  {
    using routing::SecureRedirect;
    constexpr std::pair<SecureRedirect, const char*> kOutcomes[] = {
        {SecureRedirect::kRedirected, "redirected"},
        {SecureRedirect::kNoHttpsPort, "no-https-port"},
        {SecureRedirect::kBadHost, "bad-host"}};
    for (const auto& [outcome, name] : kOutcomes) {
      secure_redirects[static_cast<size_t>(outcome)] = &registry_.GetCounter(
          "kwd_proxy_secure_redirects_total",
          "Plain-http requests for secure-only URLs of a mapping with secureAction: redirect: "
          "redirected to https, or answered 403 because the proxy has no https port "
          "(no-https-port) or the Host is no name a redirect may carry (bad-host).",
          {{"outcome", name}});
    }
  }
  RegisterStandardMetrics(registry_);
  for (size_t i = 0; i < kModificationOutcomeNames.size(); ++i) {
    modification_requests[i] = &registry_.GetCounter(
        "kwd_proxy_modification_requests_total",
        "Requests on which SAP modification rules fired, by outcome: forwarded (with the "
        "rules' changes), redirect, forbidden, gone, error (the rules failed: 500), "
        "unknown-system (a rule chose a SID no UrlMapping names: 503).",
        {{"outcome", std::string(kModificationOutcomeNames[i])}});
  }
  for (size_t i = 0; i < kErrorCodeCount; ++i) {
    ErrorInfo info = ErrorInfoFor(static_cast<ErrorCode>(i));
    local_responses[i] = &registry_.GetCounter(
        "kwd_proxy_local_responses_total",
        "Responses the proxy made itself (error pages), by SAP error code and status.",
        {{"error", std::string(info.sap_code)}, {"status", std::to_string(info.status)}});
  }
  constexpr const char* kRejectReasons[kPassthroughRejectCount] = {
      "no-route", "no-server", "bad-client-hello", "too-large", "timeout", "closed"};
  for (size_t i = 0; i < kPassthroughRejectCount; ++i) {
    passthrough_rejected[i] = &registry_.GetCounter(
        "kwd_proxy_passthrough_rejected_total",
        "TLS passthrough connections closed before reaching a server, by reason.",
        {{"reason", kRejectReasons[i]}});
  }
  using routing::Identifier;
  for (Identifier id : {Identifier::kSapContextId, Identifier::kSaplb, Identifier::kJSessionId,
                        Identifier::kSapExtSid, Identifier::kAffinityCookie}) {
    Labels labels{{"identifier", std::string(routing::IdentifierName(id))}};
    sticky_routed[static_cast<size_t>(id)] = &registry_.GetCounter(
        "kwd_proxy_sticky_routed_total", "Requests routed by a session identifier.", labels);
    sticky_lost[static_cast<size_t>(id)] = &registry_.GetCounter(
        "kwd_proxy_sticky_lost_total",
        "Requests whose session identifier named a server that is gone or unhealthy; "
        "balanced anew.",
        labels);
  }
}

// The latency buckets, then on to the default --response-timeout (60 s):
// SAP requests that take tens of seconds (reports, uploads) are told apart
// instead of all landing in +Inf above 10 s.
std::vector<double> RequestDurationBuckets() {
  std::vector<double> buckets = LatencyBuckets();
  for (double seconds : {20.0, 30.0, 60.0}) {
    if (buckets.empty() || seconds > buckets.back()) {
      buckets.push_back(seconds);
    }
  }
  return buckets;
}

GroupMetrics ProxyMetrics::MakeGroup(const std::string& group,
                                     const std::vector<std::string>& servers,
                                     TableMetrics* owner) {
  auto keep = [owner](auto ptr) {
    auto* raw = ptr.get();
    owner->owned.push_back(std::move(ptr));
    return raw;
  };
  GroupMetrics m;
  for (size_t i = 0; i < kStatusCodeLabelCount; ++i) {
    m.requests[i] = keep(registry_.CounterPtr(
        "kwd_proxy_requests_total",
        "Requests by group and status (class, exact for 5xx; none: no response).",
        {{"group", group}, {"code", kStatusCodeLabels[i]}}));
  }
  m.duration = keep(registry_.HistogramPtr(
      "kwd_proxy_request_duration_seconds",
      "Time from the request head to the end of the response.", {{"group", group}},
      RequestDurationBuckets()));
  m.passthrough_connections = keep(registry_.CounterPtr(
      "kwd_proxy_passthrough_connections_total", "TLS passthrough connections routed to a group.",
      {{"group", group}}));
  m.passthrough_bytes_in = keep(registry_.CounterPtr(
      "kwd_proxy_passthrough_bytes_total", "TLS passthrough bytes by direction.",
      {{"group", group}, {"direction", "in"}}));
  m.passthrough_bytes_out = keep(registry_.CounterPtr(
      "kwd_proxy_passthrough_bytes_total", "TLS passthrough bytes by direction.",
      {{"group", group}, {"direction", "out"}}));
  m.passthrough_errors = keep(registry_.CounterPtr(
      "kwd_proxy_passthrough_errors_total",
      "TLS passthrough connections that failed after routing (connect error or timeout).",
      {{"group", group}}));
  for (const auto& server : servers) {
    ServerMetrics s;
    s.requests = keep(registry_.CounterPtr("kwd_proxy_server_requests_total",
                                           "Requests forwarded to a server.",
                                           {{"group", group}, {"server", server}}));
    s.connect_errors = keep(registry_.CounterPtr("kwd_proxy_upstream_connect_errors_total",
                                                 "Failed upstream connects.",
                                                 {{"group", group}, {"server", server}}));
    m.servers.push_back(s);
  }
  return m;
}

std::shared_ptr<const TableMetrics> ProxyMetrics::ForTable(const routing::RoutingTable& table) {
  auto metrics = std::make_shared<TableMetrics>();
  std::vector<std::string> live_groups{"none"};
  std::vector<std::string> live_servers;
  for (const auto& group : table.groups()) {
    std::vector<std::string> names;
    for (const auto& server : group.servers) {
      names.push_back(server.name);
      live_servers.push_back(server.name);
    }
    metrics->groups.push_back(MakeGroup(group.key, names, metrics.get()));
    live_groups.push_back(group.key);
  }
  metrics->no_group = MakeGroup("none", {}, metrics.get());
  std::sort(live_groups.begin(), live_groups.end());
  for (const char* family :
       {"kwd_proxy_requests_total", "kwd_proxy_request_duration_seconds",
        "kwd_proxy_server_requests_total", "kwd_proxy_upstream_connect_errors_total",
        "kwd_proxy_passthrough_connections_total", "kwd_proxy_passthrough_bytes_total",
        "kwd_proxy_passthrough_errors_total", "kwd_proxy_upstream_tls_errors_total"}) {
    registry_.RetainLabelValues(family, "group", live_groups);
  }
  // Pods come and go: series of servers no group has any more are dropped.
  std::sort(live_servers.begin(), live_servers.end());
  for (const char* family :
       {"kwd_proxy_server_requests_total", "kwd_proxy_upstream_connect_errors_total"}) {
    registry_.RetainLabelValues(family, "server", live_servers);
  }
  return metrics;
}

}  // namespace kwd::proxy
