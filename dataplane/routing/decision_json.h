#pragma once

// The JSON object one routing decision explains itself as: what
// `kwd-proxy explain` prints per request and what the admin port's
// /admin/api/explain answers (docs/getting-started.md). Shared so both stay identical.

#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dataplane/routing/router.h"

namespace kwd::routing {

// A simulated request described the way `explain` takes it, owning its strings.
struct ExplainRequest {
  std::string method = "GET";
  std::string target;  // origin-form "/path?query"
  std::string host;
  bool https = false;
  std::vector<std::string> cookies;            // every Cookie header value
  std::vector<std::string_view> cookie_views;  // views into `cookies`

  // The routing::Request over this object's strings (valid while it lives
  // and is not moved).
  Request View() const;
};

// `url` is "http(s)://host/path?query" (the scheme sets https, the authority
// is the Host) or "/path?query". `headers` are "Name: value" strings: Cookie
// headers are collected, a Host header is used when the URL has no authority.
// `host_override` (explain's --host, the API's host=) wins over both.
ExplainRequest MakeExplainRequest(std::string_view url, std::span<const std::string> headers,
                                  std::optional<std::string_view> host_override);

// group, server, address, rule, kind, reason, status, lost, set_cookie, path,
// host, location (a secure redirect's), hsts (the Strict-Transport-Security
// of an https response): in this order, null where a field does not apply.
nlohmann::ordered_json DecisionJson(const Router& router, const Decision& decision, bool https);

}  // namespace kwd::routing
