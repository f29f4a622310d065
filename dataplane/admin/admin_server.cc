#include "dataplane/admin/admin_server.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <mutex>
#include <vector>

#include "common/log.h"
#include "dataplane/admin/admin_page.h"
#include "dataplane/balancer/balancer.h"
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

  AdminHttpResponse Respond(const AdminHttpRequest& request) {
    const std::string& path = request.path;
    const std::string& method = request.method;
    if (method != "GET" && method != "HEAD") {
      AdminHttpResponse response = JsonResponse(
          405, ordered_json{
                   {"error", "method not allowed"}, {"method", method}, {"allow", "GET, HEAD"}});
      response.headers.emplace_back("Allow", "GET, HEAD");
      return response;
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
      return proxy.ready() ? TextResponse(200, "ready\n", kPlainText)
                           : TextResponse(503, "not ready: no snapshot applied\n", kPlainText);
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

  AdminHttpResponse Explain(const std::string& query) {
    std::optional<std::string> url;
    std::optional<std::string> host;
    std::vector<std::string> headers;
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
        return JsonResponse(400,
                            ordered_json{{"error", "malformed percent-encoding in the query"}});
      }
      if (name == "url") {
        url = std::move(value);
      } else if (name == "host") {
        host = std::move(value);
      } else if (name == "header") {
        if (value.find(':') == std::string::npos || value.front() == ':') {
          return JsonResponse(
              400, ordered_json{{"error", "header wants 'Name: value'"}, {"header", value}});
        }
        headers.push_back(std::move(value));
      }
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
      clock_(std::make_shared<routing::SteadyClock>()),
      explain_router_(proxy->affinity_codec(), clock_) {
  explain_router_.set_read_only_sessions(true);
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
  Log(LogLevel::kInfo, "admin", "admin server listening", {{"uri", uri}});
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

ordered_json AdminServer::State() {
  std::shared_ptr<const routing::RoutingTable> table = proxy_->table();
  auto& workers = proxy_->workers();

  // Ask every worker for its counters; they answer between requests.
  std::vector<std::future<WorkerLoad>> answers;
  for (auto& worker : workers) {
    auto promise = std::make_shared<std::promise<WorkerLoad>>();
    answers.push_back(promise->get_future());
    if (table == nullptr) {
      promise->set_value(WorkerLoad{});
      continue;
    }
    proxy::Worker* raw = worker.get();
    raw->Post([raw, table, promise] { promise->set_value(ReadWorkerLoad(raw->router(), *table)); });
  }
  auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.worker_timeout_ms);
  size_t groups = table != nullptr ? table->groups().size() : 0;
  std::vector<GroupLoad> total(groups);
  for (size_t g = 0; g < groups; ++g) {
    total[g].assigned.assign(table->groups()[g].servers.size(), 0);
    total[g].outstanding.assign(table->groups()[g].servers.size(), 0);
  }
  int answered = 0;
  for (auto& answer : answers) {
    if (answer.wait_until(deadline) != std::future_status::ready) {
      continue;  // a stuck or stopped worker: report what the others said
    }
    WorkerLoad load = answer.get();
    ++answered;
    for (size_t g = 0; g < groups && g < load.groups.size(); ++g) {
      for (size_t s = 0; s < total[g].assigned.size(); ++s) {
        total[g].assigned[s] += load.groups[g].assigned[s];
        total[g].outstanding[s] += load.groups[g].outstanding[s];
      }
    }
  }

  ordered_json state;
  state["version"] = table != nullptr ? table->version() : "";
  state["ready"] = proxy_->ready();
  state["workers"] = workers.size();
  state["workers_answered"] = answered;
  state["groups"] = ordered_json::array();
  for (size_t g = 0; g < groups; ++g) {
    const routing::GroupEntry& group = table->groups()[g];
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
    int next = NextPreferredServer(group, total[g].assigned, total[g].outstanding);
    entry["next_preferred_server"] =
        next >= 0 ? ordered_json(group.servers[next].name) : ordered_json();
    entry["servers"] = ordered_json::array();
    for (size_t s = 0; s < group.servers.size(); ++s) {
      const routing::ServerEntry& server = group.servers[s];
      const balancer::ServerInput& input = group.inputs[s];
      ordered_json item;
      item["name"] = server.name;
      item["address"] = server.address;
      item["port"] = server.port;
      item["capacity"] = server.capacity;
      item["state"] = server.state == v1::SERVER_STATE_DRAINING ? "draining" : "ready";
      item["healthy"] = input.Healthy();
      int64_t rtt_us = input.RttUs();
      item["rtt_ms"] =
          rtt_us > 0 ? ordered_json(static_cast<double>(rtt_us) / 1000.0) : ordered_json();
      item["assigned"] = total[g].assigned[s];
      item["outstanding"] = total[g].outstanding[s];
      item["load_factor"] = static_cast<double>(total[g].assigned[s] + total[g].outstanding[s]) /
                            static_cast<double>(std::max<uint32_t>(server.capacity, 1));
      entry["servers"].push_back(std::move(item));
    }
    state["groups"].push_back(std::move(entry));
  }
  return state;
}

ordered_json AdminServer::Explain(std::string_view url, std::optional<std::string_view> host,
                                  std::span<const std::string> headers) {
  routing::ExplainRequest request = routing::MakeExplainRequest(url, headers, host);
  std::shared_ptr<const routing::RoutingTable> table = proxy_->table();
  std::lock_guard lock(explain_mu_);
  if (table != nullptr && explain_router_.table() != table) {
    explain_router_.Apply(table);
  }
  if (explain_router_.table() == nullptr) {
    return ordered_json{{"error", "no routing table"}};
  }
  routing::Decision decision = explain_router_.Route(request.View());
  ordered_json body = routing::DecisionJson(explain_router_, decision, request.https);
  // Answered at once: the admin router's outstanding count stays zero.
  explain_router_.Complete(decision);
  return body;
}

}  // namespace kwd::admin
