#include "dataplane/admin/admin_server.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <future>
#include <mutex>
#include <vector>

#include "common/crypto.h"
#include "common/log.h"
#include "dataplane/admin/admin_page.h"
#include "dataplane/admin/explain_steps.h"
#include "dataplane/balancer/balancer.h"
#include "dataplane/health/health_checker.h"
#include "dataplane/routing/decision_json.h"
#include "dataplane/session/session_table.h"

namespace kwd::admin {
namespace {

using nlohmann::ordered_json;

__extension__ typedef unsigned __int128 Uint128;

constexpr const char kJson[] = "application/json";
constexpr const char kPrometheusText[] = "text/plain; version=0.0.4";
constexpr const char kPlainText[] = "text/plain; charset=utf-8";
constexpr const char kHtml[] = "text/html; charset=utf-8";

// Load counts of one group's servers, summed over the workers.
struct GroupLoad {
  std::vector<uint64_t> assigned;
  std::vector<uint64_t> outstanding;
};

struct WorkerLoad {
  std::vector<GroupLoad> groups;  // parallel to the table's groups
};

// Reads one worker's balancer counters for the groups of `table`, on the
// worker's thread. The worker may route with another table for a moment
// (a swap in flight): groups and servers are matched by key and name.
WorkerLoad ReadWorkerLoad(const routing::Router& router, const routing::RoutingTable& table) {
  WorkerLoad load;
  load.groups.resize(table.groups().size());
  const std::shared_ptr<const routing::RoutingTable>& worker_table = router.table();
  for (size_t g = 0; g < table.groups().size(); ++g) {
    const routing::GroupEntry& group = table.groups()[g];
    GroupLoad& out = load.groups[g];
    out.assigned.assign(group.servers.size(), 0);
    out.outstanding.assign(group.servers.size(), 0);
    if (worker_table == nullptr) {
      continue;
    }
    int worker_group = worker_table->FindGroup(group.key);
    if (worker_group < 0) {
      continue;
    }
    const balancer::Balancer* balancer = router.BalancerFor(static_cast<size_t>(worker_group));
    if (balancer == nullptr) {
      continue;
    }
    const routing::GroupEntry& theirs = worker_table->groups()[worker_group];
    for (size_t s = 0; s < group.servers.size(); ++s) {
      int index = theirs.FindServer(group.servers[s].name);
      if (index >= 0 && static_cast<size_t>(index) < balancer->size()) {
        out.assigned[s] = balancer->assigned(index);
        out.outstanding[s] = balancer->outstanding(index);
      }
    }
  }
  return load;
}

std::string_view KindName(v1::Kind kind) {
  return kind == v1::KIND_ABAP ? "abap" : kind == v1::KIND_JAVA ? "java" : "unspecified";
}

char FromHex(char c) {
  if (c >= '0' && c <= '9') {
    return static_cast<char>(c - '0');
  }
  if (c >= 'a' && c <= 'f') {
    return static_cast<char>(c - 'a' + 10);
  }
  if (c >= 'A' && c <= 'F') {
    return static_cast<char>(c - 'A' + 10);
  }
  return -1;
}

// Decodes a query component (form semantics: '+' is a space). False on a
// malformed escape.
bool DecodeQueryComponent(std::string_view in, std::string* out) {
  out->clear();
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c == '+') {
      out->push_back(' ');
    } else if (c == '%') {
      if (i + 2 >= in.size()) {
        return false;
      }
      char hi = FromHex(in[i + 1]);
      char lo = FromHex(in[i + 2]);
      if (hi < 0 || lo < 0) {
        return false;
      }
      out->push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else {
      out->push_back(c);
    }
  }
  return true;
}

std::string ListenUri(const net::Endpoint& endpoint) {
  std::string address = net::AddressString(endpoint);
  if (address.find(':') != std::string::npos) {
    address = "[" + address + "]";
  }
  return "http://" + address + ":" + std::to_string(endpoint.port());
}

// kwd_proxy_server_load_factor{group,server}: the load factor of
// /admin/api/state ((assigned + outstanding) / capacity), set at each scrape;
// servers and groups that left the snapshot are dropped.
void ExportLoadFactors(const ordered_json& state, MetricsRegistry& registry) {
  std::vector<std::string> groups;
  std::vector<std::string> servers;
  for (const auto& group : state["groups"]) {
    std::string key = group["key"].get<std::string>();
    groups.push_back(key);
    for (const auto& server : group["servers"]) {
      std::string name = server["name"].get<std::string>();
      registry
          .GetGauge("kwd_proxy_server_load_factor",
                    "(Sessions assigned + requests outstanding) / capacity, summed over workers.",
                    {{"group", key}, {"server", name}})
          .Set(server["load_factor"].get<double>());
      servers.push_back(std::move(name));
    }
  }
  std::sort(groups.begin(), groups.end());
  std::sort(servers.begin(), servers.end());
  registry.RetainLabelValues("kwd_proxy_server_load_factor", "group", groups);
  registry.RetainLabelValues("kwd_proxy_server_load_factor", "server", servers);
}

int64_t UnixNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// RFC 3339 UTC with milliseconds; null for 0 ("never").
ordered_json TimeJson(int64_t unix_ms) {
  if (unix_ms <= 0) {
    return ordered_json();
  }
  std::time_t seconds = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char text[40];
  size_t n = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(text + n, sizeof text - n, ".%03dZ", static_cast<int>(unix_ms % 1000));
  return ordered_json(text);
}

std::string_view ActionName(v1::PermissionAction action) {
  switch (action) {
    case v1::PERMISSION_ACTION_PERMIT:
      return "permit";
    case v1::PERMISSION_ACTION_DENY:
      return "deny";
    case v1::PERMISSION_ACTION_SECURE:
      return "secure";
    default:
      return "unspecified";
  }
}

// The rules of a virtual host in evaluation order: the longest prefix
// decides, so longer prefixes first (ties: as in the snapshot).
std::vector<size_t> RulesInEvaluationOrder(const routing::VirtualHostEntry& vhost) {
  std::vector<size_t> order(vhost.rules.size());
  for (size_t i = 0; i < order.size(); ++i) {
    order[i] = i;
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return vhost.rules[a].prefix.size() > vhost.rules[b].prefix.size();
  });
  return order;
}

ordered_json GroupName(const routing::RoutingTable& table, int index) {
  return index >= 0 ? ordered_json(table.groups()[index].key) : ordered_json();
}

ordered_json UrlMappingJson(const routing::RoutingTable& table) {
  ordered_json hosts = ordered_json::array();
  for (const routing::VirtualHostEntry& vhost : table.virtual_hosts()) {
    ordered_json entry;
    entry["host"] = vhost.host.empty() ? ordered_json() : ordered_json(vhost.host);
    entry["source"] = vhost.source.empty() ? ordered_json() : ordered_json(vhost.source);
    entry["default_root_handler"] = KindName(vhost.default_root_handler);
    entry["default_groups"] = {{"abap", GroupName(table, vhost.default_abap_group)},
                               {"java", GroupName(table, vhost.default_java_group)}};
    // TLS passthrough connections whose SNI picks this host.
    entry["passthrough_group"] = GroupName(table, vhost.passthrough_group);
    ordered_json rules = ordered_json::array();
    for (size_t i : RulesInEvaluationOrder(vhost)) {
      const routing::RuleEntry& rule = vhost.rules[i];
      rules.push_back({{"prefix", rule.prefix},
                       {"kind", KindName(rule.kind)},
                       {"group", GroupName(table, rule.group)}});
    }
    entry["rules"] = std::move(rules);
    ordered_json permissions = ordered_json::array();
    for (size_t i = 0; i < vhost.permissions.size(); ++i) {
      permissions.push_back({{"action", ActionName(vhost.permissions.action(i))},
                             {"pattern", vhost.permissions.pattern(i)}});
      if (vhost.permissions.action(i) == v1::PERMISSION_ACTION_SECURE) {
        // UrlMapping.spec.secureAction of the entry's mapping.
        permissions.back()["secure_action"] =
            vhost.permissions.redirect_to_https(i) ? "redirect" : "forbid";
      }
    }
    entry["permissions"] = std::move(permissions);
    hosts.push_back(std::move(entry));
  }
  return hosts;
}

// A TLS passthrough group's hosts (null: the any-host default) and
// counters (kwd_proxy_passthrough_*); null for a group no host names.
ordered_json PassthroughJson(const routing::RoutingTable& table, size_t group,
                             const health::GroupCheck& check, const proxy::TableMetrics* metrics) {
  if (!check.passthrough) {
    return ordered_json();
  }
  ordered_json hosts = ordered_json::array();
  for (const routing::VirtualHostEntry& vhost : table.virtual_hosts()) {
    if (vhost.passthrough_group == static_cast<int>(group)) {
      hosts.push_back(vhost.host.empty() ? ordered_json() : ordered_json(vhost.host));
    }
  }
  const proxy::GroupMetrics* counters =
      metrics != nullptr && group < metrics->groups.size() ? &metrics->groups[group] : nullptr;
  auto value = [](const Counter* counter) -> uint64_t {
    return counter != nullptr ? counter->Value() : 0;
  };
  return ordered_json{
      {"hosts", std::move(hosts)},
      {"connections", value(counters != nullptr ? counters->passthrough_connections : nullptr)},
      {"bytes_in", value(counters != nullptr ? counters->passthrough_bytes_in : nullptr)},
      {"bytes_out", value(counters != nullptr ? counters->passthrough_bytes_out : nullptr)},
      {"errors", value(counters != nullptr ? counters->passthrough_errors : nullptr)}};
}

constexpr std::array<const char*, proxy::kStatusClasses> kClassNames = {"none", "1xx", "2xx",
                                                                        "3xx",  "4xx", "5xx"};

}  // namespace

int NextPreferredServer(const routing::GroupEntry& group, std::span<const uint64_t> assigned,
                        std::span<const uint64_t> outstanding) {
  const std::vector<balancer::ServerInput>& servers = group.inputs;
  uint64_t rtt_sum = 0;
  uint64_t measured = 0;
  if (group.strategy == v1::STRATEGY_ADAPTIVE) {
    for (const balancer::ServerInput& server : servers) {
      if (int64_t rtt = server.RttUs(); rtt > 0) {
        rtt_sum += static_cast<uint64_t>(rtt);
        ++measured;
      }
    }
  }
  const uint64_t mean_rtt = measured > 0 ? std::max<uint64_t>(rtt_sum / measured, 1) : 0;
  int best = -1;
  Uint128 best_load = 0;
  Uint128 best_divisor = 1;
  for (size_t i = 0; i < servers.size() && i < assigned.size() && i < outstanding.size(); ++i) {
    const balancer::ServerInput& server = servers[i];
    if (!server.Usable()) {
      continue;
    }
    Uint128 load = Uint128{assigned[i]} + outstanding[i] + 1;
    Uint128 divisor = 1;
    if (measured > 0) {
      int64_t rtt = server.RttUs();
      load *= rtt > 0 ? static_cast<uint64_t>(rtt) : mean_rtt;  // cost = load * rtt
    } else {
      divisor = std::max<uint32_t>(server.capacity, 1);  // cost = load / capacity
    }
    if (best < 0 || load * best_divisor < best_load * divisor) {
      best = static_cast<int>(i);
      best_load = load;
      best_divisor = divisor;
    }
  }
  return best;
}

void SnapshotSourceStatus::SetSource(std::string kind, std::string target) {
  std::lock_guard lock(mu_);
  kind_ = std::move(kind);
  target_ = std::move(target);
}

void SnapshotSourceStatus::SetConnectedProbe(std::function<bool()> connected) {
  std::lock_guard lock(mu_);
  connected_ = std::move(connected);
}

void SnapshotSourceStatus::Applied(const std::string& version) {
  std::lock_guard lock(mu_);
  applied_version_ = version;
  applied_unix_ms_ = UnixNowMs();
  ++applied_;
}

void SnapshotSourceStatus::Rejected(const std::string& version, const std::string& error) {
  std::lock_guard lock(mu_);
  rejected_version_ = version;
  rejected_error_ = error;
  rejected_unix_ms_ = UnixNowMs();
  ++rejected_;
}

void SnapshotSourceStatus::Serving(const std::string& version, std::string origin) {
  std::lock_guard lock(mu_);
  serving_version_ = version;
  serving_origin_ = std::move(origin);
}

std::string SnapshotSourceStatus::ServingLine() const {
  std::lock_guard lock(mu_);
  if (serving_origin_.empty()) {
    return "";
  }
  return "version " + serving_version_ + ", source " + serving_origin_;
}

ordered_json SnapshotSourceStatus::Json() const {
  std::function<bool()> connected;
  ordered_json out;
  {
    std::lock_guard lock(mu_);
    connected = connected_;
    out["kind"] = kind_;
    out["target"] = target_;
    out["serving"] = serving_origin_.empty()
                         ? ordered_json()
                         : ordered_json{{"version", serving_version_}, {"source", serving_origin_}};
    out["applied"] = applied_;
    out["last_applied"] = applied_ == 0 ? ordered_json()
                                        : ordered_json{{"version", applied_version_},
                                                       {"at", TimeJson(applied_unix_ms_)}};
    out["rejected"] = rejected_;
    out["last_rejected"] = rejected_ == 0 ? ordered_json()
                                          : ordered_json{{"version", rejected_version_},
                                                         {"at", TimeJson(rejected_unix_ms_)},
                                                         {"error", rejected_error_}};
  }
  // Outside the lock: the probe takes the client's own.
  out["connected"] = connected ? ordered_json(connected()) : ordered_json();
  return out;
}

// Every worker's counters for the groups of one table, summed.
struct AdminServer::WorkerView {
  std::vector<GroupLoad> load;  // parallel to the table's groups
  std::vector<proxy::GroupTrafficView> traffic;
  double window_seconds = 0;
  std::vector<proxy::LocalAnswer> local_answers;  // every worker's, newest first
};

// Answers admin requests on the admin server's thread.
class AdminServer::Handler {
 public:
  explicit Handler(AdminServer* server) : server_(server) {}

  AdminHttpResponse operator()(const AdminHttpRequest& request) {
    try {
      return Respond(request);
    } catch (const std::exception& e) {
      return JsonResponse(500, ordered_json{{"error", "internal error"}, {"detail", e.what()}});
    }
  }

 private:
  static AdminHttpResponse TextResponse(int status, std::string body,
                                        const std::string& content_type) {
    AdminHttpResponse response;
    response.status = status;
    response.content_type = content_type;
    response.body = std::move(body);
    return response;
  }
  static AdminHttpResponse JsonResponse(int status, const ordered_json& body) {
    // Explained URLs are decoded from %XX and need not be UTF-8.
    return TextResponse(
        status, body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n", kJson);
  }
  static AdminHttpResponse MethodNotAllowed(const std::string& method, const char* allow) {
    AdminHttpResponse response = JsonResponse(
        405, ordered_json{{"error", "method not allowed"}, {"method", method}, {"allow", allow}});
    response.headers.emplace_back("Allow", allow);
    return response;
  }

  // Splits a query into decoded (name, value) pairs; false on a malformed escape.
  static bool ParseQuery(const std::string& query,
                         std::vector<std::pair<std::string, std::string>>* out) {
    size_t start = 0;
    while (start <= query.size()) {
      size_t end = query.find('&', start);
      if (end == std::string::npos) {
        end = query.size();
      }
      std::string_view pair = std::string_view(query).substr(start, end - start);
      start = end + 1;
      if (pair.empty()) {
        continue;
      }
      size_t eq = pair.find('=');
      std::string name;
      std::string value;
      if (!DecodeQueryComponent(pair.substr(0, eq), &name) ||
          !DecodeQueryComponent(eq == std::string_view::npos ? "" : pair.substr(eq + 1), &value)) {
        return false;
      }
      out->emplace_back(std::move(name), std::move(value));
    }
    return true;
  }

  AdminHttpResponse Respond(const AdminHttpRequest& request) {
    const std::string& path = request.path;
    const std::string& method = request.method;
    if (path == "/admin/api/servers/drain" || path == "/admin/api/servers/undrain") {
      if (method != "POST") {
        return MethodNotAllowed(method, "POST");
      }
      return Drain(request, path.ends_with("/drain"));
    }
    if (method != "GET" && method != "HEAD") {
      return MethodNotAllowed(method, "GET, HEAD");
    }
    proxy::Proxy& proxy = *server_->proxy_;
    if (path == "/metrics") {
      ExportLoadFactors(server_->State(), proxy.metrics().registry());
      return TextResponse(200, proxy.metrics().registry().Render(), kPrometheusText);
    }
    if (path == "/healthz") {
      return TextResponse(200, "ok\n", kPlainText);
    }
    if (path == "/readyz") {
      if (!proxy.ready()) {
        return TextResponse(503, "not ready: no snapshot applied\n", kPlainText);
      }
      // Which snapshot: a proxy serving its cache during a controller
      // outage says so ("ready: version 3f2a..., source cache").
      const std::string serving =
          server_->options_.source != nullptr ? server_->options_.source->ServingLine() : "";
      return TextResponse(200, serving.empty() ? "ready\n" : "ready: " + serving + "\n",
                          kPlainText);
    }
    if (path == "/admin" || path == "/admin/") {
      return TextResponse(200, std::string(kAdminPage), kHtml);
    }
    if (path == "/admin/api/state") {
      return JsonResponse(200, server_->State());
    }
    if (path == "/admin/api/explain") {
      return Explain(request.query);
    }
    return JsonResponse(404, ordered_json{{"error", "not found"}, {"path", path}});
  }

  AdminHttpResponse Drain(const AdminHttpRequest& request, bool drain) {
    const std::string& token = server_->options_.token;
    if (token.empty()) {
      return JsonResponse(403,
                          ordered_json{{"error", "actions are disabled: this proxy runs read-only"},
                                       {"hint", "start kwd-proxy with --admin-token-file FILE"}});
    }
    constexpr std::string_view kBearer = "Bearer ";
    std::string_view given = request.authorization;
    bool bearer = given.size() > kBearer.size() &&
                  std::equal(kBearer.begin(), kBearer.end(), given.begin(),
                             [](char a, char b) { return (a | 0x20) == (b | 0x20); });
    if (!bearer || !ConstantTimeEqual(given.substr(kBearer.size()), token)) {
      AdminHttpResponse response = JsonResponse(
          401, ordered_json{{"error", given.empty() ? "missing token" : "wrong token"},
                            {"hint", "send Authorization: Bearer <the --admin-token-file token>"}});
      response.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"kwd-proxy admin\"");
      Log(LogLevel::kWarn, "admin", "action refused: missing or wrong token",
          {{"path", request.path}});
      return response;
    }
    std::vector<std::pair<std::string, std::string>> params;
    if (!ParseQuery(request.query, &params)) {
      return JsonResponse(400, ordered_json{{"error", "malformed percent-encoding in the query"}});
    }
    std::optional<std::string> group;
    std::optional<std::string> server;
    for (auto& [name, value] : params) {
      if (name == "group") {
        group = std::move(value);
      } else if (name == "server") {
        server = std::move(value);
      }
    }
    if (!group.has_value() || !server.has_value()) {
      return JsonResponse(
          400, ordered_json{{"error", "missing group or server parameter"},
                            {"usage", std::string(request.path) + "?group=NS/NAME&server=NAME"}});
    }
    ordered_json body;
    int status = server_->SetLocalDrain(*group, *server, drain, &body);
    return JsonResponse(status, body);
  }

  AdminHttpResponse Explain(const std::string& query) {
    std::vector<std::pair<std::string, std::string>> params;
    if (!ParseQuery(query, &params)) {
      return JsonResponse(400, ordered_json{{"error", "malformed percent-encoding in the query"}});
    }
    std::optional<std::string> url;
    std::optional<std::string> host;
    std::vector<std::string> headers;
    size_t input_bytes = 0;
    for (auto& [name, value] : params) {
      if (name == "url") {
        input_bytes += value.size();
        url = std::move(value);
      } else if (name == "host") {
        input_bytes += value.size();
        host = std::move(value);
      } else if (name == "header") {
        input_bytes += value.size();
        if (value.find(':') == std::string::npos || value.front() == ':') {
          return JsonResponse(
              400, ordered_json{{"error", "header wants 'Name: value'"}, {"header", value}});
        }
        headers.push_back(std::move(value));
      }
    }
    if (input_bytes > kMaxExplainInputBytes) {
      return JsonResponse(413, ordered_json{{"error", "explain input too large"},
                                            {"limit_bytes", kMaxExplainInputBytes},
                                            {"bytes", input_bytes}});
    }
    if (!url.has_value() || url->empty()) {
      return JsonResponse(
          400,
          ordered_json{{"error", "missing url parameter"},
                       {"usage", "/admin/api/explain?url=/path&host=HOST&header=Name:%20value"}});
    }
    return JsonResponse(
        200, server_->Explain(
                 *url, host.has_value() ? std::optional<std::string_view>(*host) : std::nullopt,
                 headers));
  }

  AdminServer* server_;
};

AdminServer::AdminServer(proxy::Proxy* proxy, AdminOptions options)
    : proxy_(proxy),
      options_(std::move(options)),
      started_unix_ms_(UnixNowMs()),
      started_(std::chrono::steady_clock::now()),
      clock_(std::make_shared<routing::SteadyClock>()),
      explain_router_(proxy->affinity_codec(), clock_) {
  explain_router_.set_read_only_sessions(true);
  explain_router_.set_trace_modifications(true);
}

AdminServer::~AdminServer() {
  Stop();
}

bool AdminServer::Start(std::string* error) {
  if (http_ != nullptr) {
    *error = "admin server already started";
    return false;
  }
  std::string uri = ListenUri(options_.listen);
  auto server = std::make_unique<AdminHttpServer>(options_.limits, Handler(this));
  std::string detail;
  if (!server->Start(net::AddressString(options_.listen), options_.listen.port(), &detail)) {
    *error = "cannot listen on " + uri + " (admin): " + detail;
    return false;
  }
  http_ = std::move(server);
  Log(LogLevel::kInfo, "admin", "admin server listening",
      {{"uri", uri}, {"actions", options_.token.empty() ? "disabled (read-only)" : "enabled"}});
  return true;
}

void AdminServer::Stop() {
  if (http_ == nullptr) {
    return;
  }
  http_->Stop();
  http_.reset();
}

uint16_t AdminServer::port() const {
  return http_ != nullptr ? http_->port() : 0;
}

AdminServer::WorkerView AdminServer::ReadWorkers(
    const std::shared_ptr<const routing::RoutingTable>& table, int* answered) {
  struct Answer {
    WorkerLoad load;
    proxy::TrafficView traffic;
  };
  auto& workers = proxy_->workers();
  // Ask every worker for its counters; they answer between requests.
  std::vector<std::future<Answer>> answers;
  for (auto& worker : workers) {
    auto promise = std::make_shared<std::promise<Answer>>();
    answers.push_back(promise->get_future());
    if (table == nullptr) {
      promise->set_value(Answer{});
      continue;
    }
    proxy::Worker* raw = worker.get();
    raw->Post([raw, table, promise] {
      promise->set_value(Answer{ReadWorkerLoad(raw->router(), *table),
                                raw->stats().Read(*table, raw->loop().now_ms())});
    });
  }
  auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.worker_timeout_ms);
  size_t groups = table != nullptr ? table->groups().size() : 0;
  WorkerView view;
  view.load.resize(groups);
  view.traffic.resize(groups);
  for (size_t g = 0; g < groups; ++g) {
    size_t servers = table->groups()[g].servers.size();
    view.load[g].assigned.assign(servers, 0);
    view.load[g].outstanding.assign(servers, 0);
    view.traffic[g].servers.resize(servers);
  }
  *answered = 0;
  for (auto& future : answers) {
    if (future.wait_until(deadline) != std::future_status::ready) {
      continue;  // a stuck or stopped worker: report what the others said
    }
    Answer answer = future.get();
    ++*answered;
    view.window_seconds = std::max(view.window_seconds, answer.traffic.window_seconds);
    for (size_t g = 0; g < groups && g < answer.load.groups.size(); ++g) {
      for (size_t s = 0; s < view.load[g].assigned.size(); ++s) {
        view.load[g].assigned[s] += answer.load.groups[g].assigned[s];
        view.load[g].outstanding[s] += answer.load.groups[g].outstanding[s];
      }
    }
    for (size_t g = 0; g < groups && g < answer.traffic.groups.size(); ++g) {
      const proxy::GroupTrafficView& theirs = answer.traffic.groups[g];
      proxy::GroupTrafficView& ours = view.traffic[g];
      ours.sticky_routed += theirs.sticky_routed;
      ours.sticky_lost += theirs.sticky_lost;
      for (size_t s = 0; s < ours.servers.size() && s < theirs.servers.size(); ++s) {
        for (size_t c = 0; c < proxy::kStatusClasses; ++c) {
          ours.servers[s].responses[c] += theirs.servers[s].responses[c];
        }
        ours.servers[s].window_requests += theirs.servers[s].window_requests;
        ours.servers[s].window_errors += theirs.servers[s].window_errors;
      }
    }
    view.local_answers.insert(view.local_answers.end(), answer.traffic.local_answers.begin(),
                              answer.traffic.local_answers.end());
  }
  std::stable_sort(view.local_answers.begin(), view.local_answers.end(),
                   [](const proxy::LocalAnswer& a, const proxy::LocalAnswer& b) {
                     return a.unix_ms > b.unix_ms;
                   });
  if (view.local_answers.size() > proxy::kLocalAnswerRing) {
    view.local_answers.resize(proxy::kLocalAnswerRing);
  }
  return view;
}

ordered_json AdminServer::State() {
  std::shared_ptr<const proxy::TableMetrics> metrics;
  std::shared_ptr<const routing::RoutingTable> table = proxy_->table(&metrics);
  int answered = 0;
  WorkerView workers = ReadWorkers(table, &answered);
  const size_t groups = table != nullptr ? table->groups().size() : 0;
  std::vector<health::GroupCheck> checks =
      table != nullptr ? health::GroupChecks(*table) : std::vector<health::GroupCheck>();
  const double window = workers.window_seconds;

  ordered_json state;
  state["version"] = table != nullptr ? table->version() : "";
  state["ready"] = proxy_->ready();
  state["node_id"] = options_.node_id;
  state["started_at"] = TimeJson(started_unix_ms_);
  state["uptime_seconds"] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  state["workers"] = proxy_->workers().size();
  state["workers_answered"] = answered;
  state["snapshot_source"] = options_.source != nullptr ? options_.source->Json() : ordered_json();
  state["actions_enabled"] = !options_.token.empty();
  // Open client connections by HTTP version, and HTTP/2 streams in flight.
  proxy::ProxyMetrics& metrics_now = proxy_->metrics();
  state["connections"] = {{"http1", metrics_now.http1_connections.Value()},
                          {"http2", metrics_now.http2_connections.Value()},
                          {"http2_streams", metrics_now.http2_streams.Value()}};
  state["rate_window_seconds"] = window;
  state["groups"] = ordered_json::array();
  for (size_t g = 0; g < groups; ++g) {
    const routing::GroupEntry& group = table->groups()[g];
    const GroupLoad& load = workers.load[g];
    const proxy::GroupTrafficView& traffic = workers.traffic[g];
    ordered_json entry;
    entry["key"] = group.key;
    entry["kind"] = KindName(group.kind);
    entry["strategy"] = balancer::StrategyName(group.strategy);
    session::SessionTableStats sessions =
        group.sessions != nullptr ? group.sessions->Stats() : session::SessionTableStats{};
    entry["session_table_entries"] = sessions.entries;
    // Of those, created by clients (sap-ext-sid); and client ids not recorded
    // because backend sessions filled the table.
    entry["session_table_client_entries"] = sessions.client_entries;
    entry["session_table_refused"] = sessions.refused;
    entry["sticky_routed"] = traffic.sticky_routed;
    entry["sticky_lost"] = traffic.sticky_lost;
    int next = NextPreferredServer(group, load.assigned, load.outstanding);
    entry["next_preferred_server"] =
        next >= 0 ? ordered_json(group.servers[next].name) : ordered_json();
    const health::GroupCheck& check = checks[g];
    entry["health_check"] = {
        {"path", group.health_check.path()},
        {"protocol", health::CheckTransportName(check.transport)},
        {"server_name",
         check.server_name.empty() ? ordered_json() : ordered_json(check.server_name)}};
    entry["passthrough"] = PassthroughJson(*table, g, check, metrics.get());
    entry["servers"] = ordered_json::array();
    for (size_t s = 0; s < group.servers.size(); ++s) {
      const routing::ServerEntry& server = group.servers[s];
      const balancer::ServerInput& input = group.inputs[s];
      const proxy::ServerTrafficView& counts = traffic.servers[s];
      const bool local_drain = input.LocallyDrained();
      ordered_json item;
      item["name"] = server.name;
      item["address"] = server.address;
      item["port"] = server.port;
      item["capacity"] = server.capacity;
      item["state"] =
          server.state == v1::SERVER_STATE_DRAINING || local_drain ? "draining" : "ready";
      item["snapshot_state"] = server.state == v1::SERVER_STATE_DRAINING ? "draining" : "ready";
      item["local_drain"] = local_drain;
      item["healthy"] = input.Healthy();
      const balancer::ServerHealth* health = server.health.get();
      int32_t result =
          health != nullptr ? health->last_check_result.load(std::memory_order_relaxed) : 0;
      item["last_check"] =
          TimeJson(health != nullptr ? health->last_check_ms.load(std::memory_order_relaxed) : 0);
      item["last_check_result"] = result > 0   ? ordered_json("passed")
                                  : result < 0 ? ordered_json("failed")
                                               : ordered_json();
      item["last_state_change"] =
          TimeJson(health != nullptr ? health->last_change_ms.load(std::memory_order_relaxed) : 0);
      int64_t rtt_us = input.RttUs();
      item["rtt_ms"] =
          rtt_us > 0 ? ordered_json(static_cast<double>(rtt_us) / 1000.0) : ordered_json();
      item["assigned"] = load.assigned[s];
      item["outstanding"] = load.outstanding[s];
      item["load_factor"] = static_cast<double>(load.assigned[s] + load.outstanding[s]) /
                            static_cast<double>(std::max<uint32_t>(server.capacity, 1));
      uint64_t requests = 0;
      ordered_json responses = ordered_json::object();
      for (size_t c = 1; c < proxy::kStatusClasses; ++c) {
        responses[kClassNames[c]] = counts.responses[c];
        requests += counts.responses[c];
      }
      responses["none"] = counts.responses[0];
      requests += counts.responses[0];
      item["requests"] = requests;
      item["responses"] = std::move(responses);
      item["errors"] = counts.responses[0] + counts.responses[5];
      item["requests_per_second"] =
          window > 0 ? static_cast<double>(counts.window_requests) / window : 0.0;
      item["errors_per_second"] =
          window > 0 ? static_cast<double>(counts.window_errors) / window : 0.0;
      entry["servers"].push_back(std::move(item));
    }
    state["groups"].push_back(std::move(entry));
  }
  state["url_mapping"] = table != nullptr ? UrlMappingJson(*table) : ordered_json::array();
  ordered_json errors = ordered_json::array();
  for (const proxy::LocalAnswer& answer : workers.local_answers) {
    errors.push_back(
        {{"at", TimeJson(answer.unix_ms)},
         {"status", answer.status},
         {"code", std::string(answer.sap_code)},
         {"reason", std::string(answer.reason)},
         {"group", answer.group_size == 0
                       ? ordered_json()
                       : ordered_json(std::string(answer.group.data(), answer.group_size))},
         {"detail", std::string(answer.detail.data(), answer.detail_size)}});
  }
  state["recent_errors"] = std::move(errors);
  return state;
}

int AdminServer::SetLocalDrain(std::string_view group_key, std::string_view server_name, bool drain,
                               ordered_json* body) {
  std::shared_ptr<const routing::RoutingTable> table = proxy_->table();
  int group_index = table != nullptr ? table->FindGroup(group_key) : -1;
  if (group_index < 0) {
    *body = {{"error", "unknown group"}, {"group", group_key}};
    return 404;
  }
  const routing::GroupEntry& group = table->groups()[group_index];
  int server_index = group.FindServer(server_name);
  if (server_index < 0) {
    *body = {{"error", "unknown server"}, {"group", group_key}, {"server", server_name}};
    return 404;
  }
  const routing::ServerEntry& server = group.servers[server_index];
  bool was = false;
  if (server.health != nullptr) {
    was = server.health->local_drain.exchange(drain, std::memory_order_relaxed);
  }
  if (was != drain) {
    Log(LogLevel::kInfo, "admin", drain ? "server drained locally" : "server undrained locally",
        {{"group", group.key}, {"server", server.name}});
  }
  const bool snapshot_draining = server.state == v1::SERVER_STATE_DRAINING;
  *body = {{"group", group.key},
           {"server", server.name},
           {"state", snapshot_draining || drain ? "draining" : "ready"},
           {"snapshot_state", snapshot_draining ? "draining" : "ready"},
           {"local_drain", drain},
           {"changed", was != drain}};
  return 200;
}

ordered_json AdminServer::Explain(std::string_view url, std::optional<std::string_view> host,
                                  std::span<const std::string> headers) {
  routing::ExplainRequest request = routing::MakeExplainRequest(url, headers, host);
  std::shared_ptr<const routing::RoutingTable> table = proxy_->table();
  // The live load, for the balancing step (read before taking the lock).
  int answered = 0;
  WorkerView workers = ReadWorkers(table, &answered);
  std::lock_guard lock(explain_mu_);
  if (table != nullptr && explain_router_.table() != table) {
    explain_router_.Apply(table);
  }
  if (explain_router_.table() == nullptr) {
    return ordered_json{{"error", "no routing table"}};
  }
  explain_router_.set_https_port(proxy_->options().public_https_port);
  routing::Decision decision = explain_router_.Route(request.View());
  ordered_json body = routing::DecisionJson(explain_router_, decision, request.https);
  ExplainContext context;
  context.codec = proxy_->affinity_codec().get();
  context.now_ms = clock_->NowMs();
  if (decision.group_index >= 0 &&
      static_cast<size_t>(decision.group_index) < workers.load.size()) {
    context.assigned = workers.load[decision.group_index].assigned;
    context.outstanding = workers.load[decision.group_index].outstanding;
  }
  body["steps"] = ExplainSteps(explain_router_, decision, request, context);
  // Answered at once: the admin router's outstanding count stays zero.
  explain_router_.Complete(decision);
  return body;
}

}  // namespace kwd::admin
