#pragma once

// The JSON object one routing decision explains itself as: what
// `kwd-proxy explain` prints per request and what the admin port's
// /admin/api/explain answers (docs/getting-started.md). Shared so both stay identical.

#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dataplane/routing/router.h"

namespace kwd::routing {

// A simulated request described the way `explain` takes it, owning its strings.
struct ExplainRequest final : RequestHeaderSource {
  std::string method = "GET";
  std::string target;  // origin-form "/path?query"
  std::string host;
  bool https = false;
  std::vector<std::string> cookies;            // every Cookie header value
  std::vector<std::string_view> cookie_views;  // views into `cookies`
  // Every header given, in order, for the modification rules.
  std::vector<std::pair<std::string, std::string>> fields;

  // The routing::Request over this object's strings (valid while it lives
  // and is not moved).
  Request View() const;
  // The fields (a Host field from `host` when none was given).
  void Collect(std::vector<modification::HeaderView>* out) const override;
  // 443 for https, else 80 (the usual public ports).
  std::string_view ServerPort() const override { return https ? "443" : "80"; }
  // No connection: empty, as for a request that came through a proxy.
  std::string_view ServerAddr() const override { return {}; }
  std::string_view RemotePort() const override { return {}; }
};

// `url` is "http(s)://host/path?query" (the scheme sets https, the authority
// is the Host) or "/path?query". `headers` are "Name: value" strings: Cookie
// headers are collected, a Host header is used when the URL has no authority.
// `host_override` (explain's --host, the API's host=) wins over both.
ExplainRequest MakeExplainRequest(std::string_view url, std::span<const std::string> headers,
                                  std::optional<std::string_view> host_override);

// group, server, address, rule, kind, reason, status, lost, set_cookie, path,
// host, location (a secure redirect's, or a modification rule's), hsts (the
// Strict-Transport-Security of an https response): in this order, null where
// a field does not apply. When modification rules changed or answered the
// request (Decision::modified) also "modifications": every rule that fired,
// in order, as {source, line, command, url, headers} (headers: the request's
// after the rule, when the rules changed any), then "url" (the target
// forwarded, when rewritten) and "system" (the SID a rule chose). The router
// must trace (Router::set_trace_modifications) for the steps.
nlohmann::ordered_json DecisionJson(const Router& router, const Decision& decision, bool https);

}  // namespace kwd::routing
