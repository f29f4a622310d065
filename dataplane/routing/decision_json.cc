#include "dataplane/routing/decision_json.h"

namespace kwd::routing {
namespace {

bool StartsWithIgnoreCase(std::string_view s, std::string_view lowercase_prefix) {
  if (s.size() < lowercase_prefix.size()) {
    return false;
  }
  for (size_t i = 0; i < lowercase_prefix.size(); ++i) {
    char c = s[i];
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
    if (c != lowercase_prefix[i]) {
      return false;
    }
  }
  return true;
}

bool EqualsIgnoreCase(std::string_view s, std::string_view lowercase) {
  return s.size() == lowercase.size() && StartsWithIgnoreCase(s, lowercase);
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

}  // namespace

Request ExplainRequest::View() const {
  Request request;
  request.method = method;
  request.target = target;
  request.host = host;
  request.https = https;
  request.cookie_headers = cookie_views;
  request.headers = this;
  request.remote_addr = "127.0.0.1";
  return request;
}

void ExplainRequest::Collect(std::vector<modification::HeaderView>* out) const {
  bool has_host = false;
  for (const auto& [name, value] : fields) {
    out->emplace_back(name, value);
    has_host = has_host || EqualsIgnoreCase(name, "host");
  }
  if (!has_host && !host.empty()) {
    out->emplace_back("Host", host);
  }
}

ExplainRequest MakeExplainRequest(std::string_view url, std::span<const std::string> headers,
                                  std::optional<std::string_view> host_override) {
  ExplainRequest request;
  request.target = std::string(url);
  for (std::string_view scheme : {"http://", "https://"}) {
    if (StartsWithIgnoreCase(url, scheme)) {
      request.https = scheme == "https://";
      std::string_view rest = url.substr(scheme.size());
      size_t path_start = rest.find_first_of("/?#");
      request.host = std::string(rest.substr(0, path_start));
      std::string_view path =
          path_start == std::string_view::npos ? std::string_view("/") : rest.substr(path_start);
      request.target = path.front() == '/' ? std::string(path) : "/" + std::string(path);
    }
  }
  for (const std::string& header : headers) {
    size_t colon = header.find(':');
    if (colon == std::string::npos) {
      continue;
    }
    std::string_view name = Trim(std::string_view(header).substr(0, colon));
    std::string_view value = Trim(std::string_view(header).substr(colon + 1));
    request.fields.emplace_back(name, value);
    if (EqualsIgnoreCase(name, "cookie")) {
      request.cookies.emplace_back(value);
    } else if (EqualsIgnoreCase(name, "host") && request.host.empty()) {
      request.host = std::string(value);
    }
  }
  if (host_override.has_value()) {
    request.host = std::string(*host_override);
  }
  request.cookie_views.assign(request.cookies.begin(), request.cookies.end());
  return request;
}

nlohmann::ordered_json DecisionJson(const Router& router, const Decision& decision, bool https) {
  using nlohmann::ordered_json;
  ordered_json line;
  line["group"] = decision.group != nullptr ? ordered_json(decision.group->key) : ordered_json();
  line["server"] =
      decision.server != nullptr ? ordered_json(decision.server->name) : ordered_json();
  line["address"] =
      decision.server != nullptr
          ? ordered_json(decision.server->address + ":" + std::to_string(decision.server->port))
          : ordered_json();
  line["rule"] = decision.rule.empty() ? ordered_json() : ordered_json(std::string(decision.rule));
  line["kind"] = decision.kind == v1::KIND_ABAP   ? ordered_json("abap")
                 : decision.kind == v1::KIND_JAVA ? ordered_json("java")
                                                  : ordered_json();
  line["reason"] = std::string(ReasonName(decision.reason));
  line["status"] = decision.status != 0 ? ordered_json(decision.status) : ordered_json();
  line["lost"] = decision.lost != Identifier::kNone
                     ? ordered_json(std::string(IdentifierName(decision.lost)))
                     : ordered_json();
  line["set_cookie"] = decision.set_affinity_cookie
                           ? ordered_json(router.AffinityCookieHeader(decision, https))
                           : ordered_json();
  line["path"] = decision.status == 400 ? ordered_json() : ordered_json(std::string(decision.path));
  line["host"] =
      decision.virtual_host != nullptr ? ordered_json(decision.virtual_host->host) : ordered_json();
  // A secure redirect's target; the Strict-Transport-Security an https
  // response to the request carries.
  line["location"] = decision.secure_redirect == SecureRedirect::kRedirected
                         ? ordered_json(std::string(decision.location))
                     : decision.reason == Reason::kRuleRedirect
                         ? ordered_json(router.modification_state().location)
                         : ordered_json();
  line["hsts"] = https && !decision.hsts.empty() ? ordered_json(std::string(decision.hsts))
                                                  : ordered_json();
  if (decision.modified) {
    const modification::State& state = router.modification_state();
    const std::vector<const ModificationEntry*>& sources = router.modification_trace_sources();
    ordered_json steps = ordered_json::array();
    for (size_t i = 0; i < state.trace.size(); ++i) {
      const modification::TraceStep& step = state.trace[i];
      ordered_json entry;
      const ModificationEntry* file = i < sources.size() ? sources[i] : nullptr;
      entry["source"] = file != nullptr ? ordered_json(file->source + " spec.modifications[" +
                                                       std::to_string(file->index) + "]")
                                        : ordered_json();
      entry["line"] = step.line;
      entry["command"] = step.command;
      entry["url"] = step.url;
      if (!step.headers.empty()) {
        ordered_json headers = ordered_json::array();
        for (const auto& [name, value] : step.headers) {
          headers.push_back(name + ": " + value);
        }
        entry["headers"] = std::move(headers);
      }
      steps.push_back(std::move(entry));
    }
    line["modifications"] = std::move(steps);
    line["url"] = decision.rewritten_target.empty()
                      ? ordered_json()
                      : ordered_json(std::string(decision.rewritten_target));
    line["system"] =
        decision.system.empty() ? ordered_json() : ordered_json(std::string(decision.system));
  }
  return line;
}

}  // namespace kwd::routing
