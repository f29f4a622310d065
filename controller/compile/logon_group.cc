// The LogonGroup processor: strategy, capacity, health check, session
// affinity and backend of one LogonGroup into a v1::Group. Its servers come
// from the backend's processor: static servers here, a Service's
// EndpointSlices (service_backend.cc) or a SapSystem's server list
// (sap_system.cc); upstreamTLS from upstream_tls.cc.

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "controller/compile/internal.h"

namespace kwd::compile::internal {
namespace {

constexpr std::string_view kDefaultAbapHealthPath = "/sap/public/icman/ping";
constexpr std::string_view kDefaultJavaHealthPath = "/index.html";

// "255.255.240.0": four decimal octets, ones then zeros, at least one one.
bool ParseContiguousIpv4Mask(std::string_view text, uint32_t* out) {
  uint32_t value = 0;
  for (int part = 0; part < 4; ++part) {
    size_t digits = 0;
    uint32_t octet = 0;
    while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9' && digits < 3) {
      octet = octet * 10 + static_cast<uint32_t>(text[digits] - '0');
      ++digits;
    }
    if (digits == 0 || octet > 255 || (digits > 1 && text[0] == '0')) {
      return false;
    }
    text.remove_prefix(digits);
    value = (value << 8) | octet;
    if (part < 3) {
      if (text.empty() || text[0] != '.') {
        return false;
      }
      text.remove_prefix(1);
    }
  }
  const uint32_t host_bits = ~value;
  if (!text.empty() || value == 0 || (host_bits & (host_bits + 1)) != 0) {
    return false;
  }
  *out = value;
  return true;
}

void CompileHealthCheck(const model::HealthCheckSpec& spec, v1::Kind kind, v1::HealthCheck* out,
                        Findings& findings) {
  std::string path(kind == v1::KIND_ABAP ? kDefaultAbapHealthPath : kDefaultJavaHealthPath);
  if (spec.path) {
    // It goes into the probe's request line as is.
    if (!IsOriginForm(*spec.path)) {
      findings.Reject(kReasonInvalidField,
                      "spec.healthCheck.path: must start with / and be an origin-form path "
                      "(RFC 3986 path and query characters), got " +
                          Quote(*spec.path));
    } else {
      path = *spec.path;
    }
  }
  out->set_path(path);
  out->set_interval_seconds(CheckedNumber(spec.interval_seconds, 25, 1, kUint32Max,
                                          "spec.healthCheck.intervalSeconds", findings));
  out->set_timeout_seconds(CheckedNumber(spec.timeout_seconds, 5, 1, kUint32Max,
                                         "spec.healthCheck.timeoutSeconds", findings));
  out->set_unhealthy_threshold(CheckedNumber(spec.unhealthy_threshold, 2, 1, kUint32Max,
                                             "spec.healthCheck.unhealthyThreshold", findings));
  out->set_healthy_threshold(CheckedNumber(spec.healthy_threshold, 1, 1, kUint32Max,
                                           "spec.healthCheck.healthyThreshold", findings));
}

void CompileSessionAffinity(const model::SessionAffinitySpec& spec, v1::SessionAffinity* out,
                            Findings& findings) {
  static const std::map<std::string, v1::SessionIdentifier, std::less<>> kIdentifiers = {
      {"sap-contextid", v1::SESSION_IDENTIFIER_SAP_CONTEXTID},
      {"saplb", v1::SESSION_IDENTIFIER_SAPLB},
      {"jsessionid", v1::SESSION_IDENTIFIER_JSESSIONID},
      {"sap-ext-sid", v1::SESSION_IDENTIFIER_SAP_EXT_SID},
  };
  std::set<v1::SessionIdentifier> enabled;
  if (spec.identifiers) {
    for (const auto& name : *spec.identifiers) {
      auto it = kIdentifiers.find(name);
      if (it == kIdentifiers.end()) {
        findings.Reject(kReasonInvalidField,
                        "spec.sessionAffinity.identifiers: " + Quote(name) +
                            " is not one of sap-contextid, saplb, jsessionid, sap-ext-sid");
      } else {
        enabled.insert(it->second);
      }
    }
  } else {
    for (const auto& [name, id] : kIdentifiers) {
      enabled.insert(id);
    }
  }
  for (auto id : enabled) {
    out->add_identifiers(id);
  }
  out->set_session_table_max_entries(
      CheckedNumber(spec.session_table.max_entries, 50000, 1, kUint32Max,
                    "spec.sessionAffinity.sessionTable.maxEntries", findings));
  out->set_session_table_idle_timeout_seconds(
      CheckedNumber(spec.session_table.idle_timeout_seconds, 3600, 1, kUint32Max,
                    "spec.sessionAffinity.sessionTable.idleTimeoutSeconds", findings));
  out->set_affinity_cookie_enabled(spec.affinity_cookie.enabled.value_or(true));
  std::string cookie = spec.affinity_cookie.name.value_or("kwd_affinity");
  if (!IsCookieName(cookie)) {
    findings.Reject(kReasonInvalidField, "spec.sessionAffinity.affinityCookie.name: " +
                                             Quote(cookie) + " is not a valid cookie name");
  }
  out->set_affinity_cookie_name(cookie);
  if (spec.client_ip) {
    v1::ClientIpAffinity* client_ip = out->mutable_client_ip();
    client_ip->set_enabled(true);
    const std::string mask = spec.client_ip->mask.value_or("255.255.240.0");
    uint32_t bits = 0;
    if (!ParseContiguousIpv4Mask(mask, &bits)) {
      findings.Reject(kReasonInvalidField, "spec.sessionAffinity.clientIP.mask: " + Quote(mask) +
                                               " is not a contiguous dotted IPv4 mask "
                                               "(e.g. 255.255.240.0)");
      bits = 0xFFFFF000;
    }
    client_ip->set_ipv4_mask(bits);
    client_ip->set_ipv6_prefix_length(64);
    client_ip->set_max_entries(CheckedNumber(spec.client_ip->max_entries, 50000, 1, kUint32Max,
                                             "spec.sessionAffinity.clientIP.maxEntries", findings));
    client_ip->set_idle_timeout_seconds(
        CheckedNumber(spec.client_ip->idle_timeout_seconds, 3600, 1, kUint32Max,
                      "spec.sessionAffinity.clientIP.idleTimeoutSeconds", findings));
  }
}

void CompileStaticServers(const std::vector<model::StaticServer>& servers,
                          std::uint32_t default_capacity, v1::Group* group, Findings& findings) {
  std::set<std::string> names;
  for (std::size_t i = 0; i < servers.size(); ++i) {
    const auto& in = servers[i];
    std::string field = "spec.backend.staticServers[" + std::to_string(i) + "]";
    if (in.name.empty()) {
      findings.Reject(kReasonInvalidField, field + ".name: must not be empty");
      continue;
    }
    if (!IsServerName(in.name)) {
      findings.Reject(kReasonInvalidField, field + ".name: " + Quote(in.name) +
                                               " is not a valid server name (" +
                                               std::string(kServerNameRule) + ")");
      continue;
    }
    if (!names.insert(in.name).second) {
      findings.Reject(kReasonDuplicateServer,
                      field + ".name: server name " + Quote(in.name) + " is used twice");
      continue;
    }
    if (in.address.empty()) {
      findings.Reject(kReasonInvalidField, field + ".address: must not be empty");
    } else if (!IsServerAddress(in.address)) {
      findings.Reject(kReasonInvalidField,
                      field + ".address: " + Quote(in.address) +
                          " is not an IP address or host name (letters, digits, . - _ :, "
                          "an IPv6 address without brackets)");
    }
    if (!in.port) {
      findings.Reject(kReasonInvalidField, field + ".port: missing (1 to 65535)");
    }
    auto* server = group->add_servers();
    server->set_name(in.name);
    server->set_address(in.address);
    server->set_port(CheckedNumber(in.port.value_or(1), 1, 1, 65535, field + ".port", findings));
    server->set_capacity(
        CheckedNumber(in.capacity, default_capacity, 1, kUint32Max, field + ".capacity", findings));
    server->set_state(in.drain.value_or(false) ? v1::SERVER_STATE_DRAINING
                                               : v1::SERVER_STATE_READY);
  }
}

}  // namespace

GroupResult LogonGroupCompiler::Compile(const LogonGroup& lg) {
  Findings findings;
  const auto& spec = lg.spec;
  for (const std::string& error : lg.field_errors) {
    findings.Reject(kReasonInvalidField, error);
  }
  v1::Group group;
  group.set_key(GroupKey(lg.metadata.namespace_, lg.metadata.name));
  CheckObjectName(lg.metadata, findings);

  v1::Kind kind = v1::KIND_ABAP;
  if (spec.kind) {
    if (auto parsed = ParseKind(*spec.kind, /*accept_j2ee=*/false)) {
      kind = *parsed;
    } else {
      findings.Reject(kReasonInvalidKind,
                      "spec.kind: " + Quote(*spec.kind) + " is not one of abap, java");
    }
  }
  group.set_kind(kind);

  std::string strategy_name = spec.strategy.value_or("weighted_round_robin");
  if (strategy_name == "weighted_round_robin") {
    group.set_strategy(v1::STRATEGY_WEIGHTED_ROUND_ROBIN);
  } else if (strategy_name == "simple_weighted_round_robin") {
    group.set_strategy(v1::STRATEGY_SIMPLE_WEIGHTED_ROUND_ROBIN);
  } else if (strategy_name == "adaptive") {
    group.set_strategy(v1::STRATEGY_ADAPTIVE);
  } else {
    findings.Reject(kReasonInvalidStrategy,
                    "spec.strategy: " + Quote(strategy_name) +
                        " is not one of weighted_round_robin, simple_weighted_round_robin, "
                        "adaptive");
  }

  std::uint32_t default_capacity =
      CheckedNumber(spec.default_capacity, 1, 1, kUint32Max, "spec.defaultCapacity", findings);
  group.set_load_reset_interval_seconds(CheckedNumber(spec.load_reset_interval_seconds, 25, 1,
                                                      kUint32Max, "spec.loadResetIntervalSeconds",
                                                      findings));

  CompileHealthCheck(spec.health_check, kind, group.mutable_health_check(), findings);
  CompileSessionAffinity(spec.session_affinity, group.mutable_session_affinity(), findings);
  CompileUpstreamTls(spec.upstream_tls, spec.backend, group.mutable_upstream_tls(), findings);

  std::string resolved_summary;
  CompileBackend(lg, default_capacity, &group, findings, &resolved_summary);

  // Service backends come out sorted already; sorting protobuf messages
  // moves every one of them even then.
  auto by_name = [](const v1::Server& a, const v1::Server& b) { return a.name() < b.name(); };
  if (!std::is_sorted(group.servers().begin(), group.servers().end(), by_name)) {
    std::sort(group.mutable_servers()->begin(), group.mutable_servers()->end(), by_name);
  }

  int ready = 0;
  int draining = 0;
  for (const auto& server : group.servers()) {
    if (server.state() == v1::SERVER_STATE_READY) {
      ++ready;
    } else {
      ++draining;
    }
  }
  std::string accepted_summary = "strategy " + strategy_name + ", " +
                                 std::to_string(group.servers_size()) +
                                 (group.servers_size() == 1 ? " server" : " servers");
  if (draining > 0) {
    accepted_summary += " (" + std::to_string(draining) + " draining)";
  }

  GroupResult result;
  result.status.kind = std::string(model::kLogonGroupKind);
  result.status.namespace_ = lg.metadata.namespace_;
  result.status.name = lg.metadata.name;
  result.status.generation = lg.metadata.generation;
  result.status.conditions = findings.Conditions(accepted_summary, resolved_summary);
  if (!findings.rejected()) {
    result.status.ready_servers = ready;
    result.group = std::move(group);
  }
  return result;
}

void LogonGroupCompiler::CompileBackend(const LogonGroup& lg, std::uint32_t default_capacity,
                                        v1::Group* group, Findings& findings,
                                        std::string* resolved_summary) {
  const auto& backend = lg.spec.backend;
  bool has_service = backend && backend->service.has_value();
  bool has_static = backend && backend->static_servers.has_value();
  bool has_sap = backend && backend->sap_system.has_value();
  int count = int{has_service} + int{has_static} + int{has_sap};
  if (count != 1) {
    std::string message =
        std::string("spec.backend: exactly one of service, staticServers or sapSystem ") +
        "must be set, got " +
        (count == 0   ? "neither"
         : count == 2 ? "both"
                      : "all three");
    findings.Reject(kReasonInvalidBackend, message);
    findings.Unresolved(kReasonInvalidBackend, message);
    return;
  }
  if (has_sap) {
    CompileSapSystemBackend(inputs_, lg, *backend->sap_system, group->kind(), default_capacity,
                            group, findings, resolved_summary);
    return;
  }
  if (has_static) {
    CompileStaticServers(*backend->static_servers, default_capacity, group, findings);
    *resolved_summary = "static servers";
    return;
  }
  CompileServiceBackend(inputs_, lg, *backend->service, default_capacity, group, findings,
                        resolved_summary);
}

GroupResult CompileGroup(LogonGroupCompiler& compiler, const LogonGroup& lg,
                         const LastGood* last_good) {
  GroupResult result = compiler.Compile(lg);
  if (result.group || last_good == nullptr) {
    return result;
  }
  auto it = last_good->logon_groups.find({lg.metadata.namespace_, lg.metadata.name});
  if (it == last_good->logon_groups.end() || it->second == lg) {
    return result;
  }
  GroupResult previous = compiler.Compile(it->second);
  if (previous.group) {
    result.group = std::move(previous.group);
    result.status.ready_servers = previous.status.ready_servers;
    MarkServingLastGood(it->second.metadata.generation, &result.status);
  }
  return result;
}

}  // namespace kwd::compile::internal
