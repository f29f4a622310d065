#include "controller/admin/state.h"

#include <nlohmann/json.hpp>

#include "controller/pipeline/status.h"

namespace kwd::controller_admin {
namespace {

using nlohmann::ordered_json;

ordered_json TimeJson(std::chrono::system_clock::time_point time) {
  return time.time_since_epoch().count() == 0 ? ordered_json()
                                              : ordered_json(pipeline::FormatTime(time));
}

ordered_json ConditionJson(const compile::Condition& condition) {
  return {{"type", condition.type},
          {"status", condition.status},
          {"reason", condition.reason},
          {"message", condition.message}};
}

ordered_json ProxyJson(const snapshot_server::ProxyVersions& versions, std::string_view replica,
                       const std::string& current) {
  ordered_json out;
  out["node_id"] = versions.node_id;
  out["replica"] = replica;
  out["peer"] = ordered_json();
  out["connected_since"] = ordered_json();
  out["acked_version"] =
      versions.acked_version.empty() ? ordered_json() : ordered_json(versions.acked_version);
  out["current"] = !current.empty() && versions.acked_version == current;
  out["last_nack"] =
      versions.nacked_version.empty()
          ? ordered_json()
          : ordered_json{{"version", versions.nacked_version}, {"error", versions.nack_message}};
  // Left a snapshot unanswered past --proxy-ack-timeout: not counted for Programmed.
  out["unresponsive"] = versions.unresponsive;
  return out;
}

}  // namespace

std::string StateJson(const LatestSnapshot& latest, const snapshot_server::SnapshotServer& server,
                      const pipeline::Pipeline& pipeline) {
  ordered_json state;
  std::shared_ptr<const compile::CompileResult> published = latest.Get();
  std::string current;
  if (published != nullptr) {
    current = published->snapshot.version();
    state["snapshot"] = {{"version", current},
                         {"published_at", TimeJson(latest.published_at())},
                         {"groups", published->snapshot.groups_size()},
                         {"virtual_hosts", published->snapshot.virtual_hosts_size()}};
  } else {
    state["snapshot"] = ordered_json();
  }
  state["ready"] = pipeline.ready();

  ordered_json proxies = ordered_json::array();
  for (const snapshot_server::ProxyStatus& proxy : server.Proxies()) {
    ordered_json item = ProxyJson(proxy.versions, "this", current);
    item["peer"] = proxy.peer;
    item["connected_since"] = TimeJson(proxy.connected_at);
    proxies.push_back(std::move(item));
  }
  for (const snapshot_server::ProxyVersions& versions : server.RemoteProxies()) {
    proxies.push_back(ProxyJson(versions, "other", current));
  }
  state["proxies"] = std::move(proxies);

  // The latest compile, published or not (a rejected edit that leaves the
  // snapshot unchanged still shows its problem here).
  ordered_json objects = ordered_json::array();
  ordered_json problems = ordered_json::array();
  if (std::shared_ptr<const compile::CompileResult> compiled = pipeline.current()) {
    for (const compile::ObjectStatus& object : compiled->statuses) {
      ordered_json item;
      item["kind"] = object.kind;
      item["namespace"] = object.namespace_;
      item["name"] = object.name;
      item["generation"] = object.generation;
      item["ready_servers"] =
          object.kind == "LogonGroup" ? ordered_json(object.ready_servers) : ordered_json();
      item["serving_last_good"] = object.serving_last_good;
      ordered_json conditions = ordered_json::array();
      for (const compile::Condition& condition : object.conditions) {
        conditions.push_back(ConditionJson(condition));
        if (condition.status != "True") {
          problems.push_back({{"kind", object.kind},
                              {"namespace", object.namespace_},
                              {"name", object.name},
                              {"type", condition.type},
                              {"reason", condition.reason},
                              {"message", condition.message}});
        }
      }
      conditions.push_back(ConditionJson(server.ProgrammedFor(object)));
      item["conditions"] = std::move(conditions);
      objects.push_back(std::move(item));
    }
  }
  state["objects"] = std::move(objects);
  state["compile_problems"] = std::move(problems);
  return state.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace kwd::controller_admin
