#include "controller/grpc/replica_reports.h"

#include <algorithm>

#include "common/log.h"
#include "controller/kube/leader_elector.h"

namespace kwd::snapshot_server {
namespace {

using nlohmann::json;

constexpr std::string_view kComponent = "replica-reports";
constexpr std::string_view kLeasePrefix = "kwd-controller-proxies-";

}  // namespace

ReplicaReports::ReplicaReports(kube::KubeApi& api, SnapshotServer& server,
                               ReplicaReportsOptions options,
                               std::shared_ptr<const kube::Clock> clock)
    : api_(api),
      server_(server),
      options_(std::move(options)),
      lease_name_(LeaseName(options_.identity)),
      clock_(clock ? std::move(clock) : std::make_shared<kube::RealClock>()) {}

std::string ReplicaReports::LeaseName(std::string_view identity) {
  std::string label;
  for (char c : identity) {
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    label.push_back(ok ? c : '-');
  }
  label.resize(std::min<size_t>(label.size(), 63));
  while (!label.empty() && label.back() == '-') {
    label.pop_back();
  }
  if (label.empty()) {
    label = "unnamed";
  }
  return std::string(kLeasePrefix) + label;
}

std::string ReplicaReports::EncodeProxies(const std::vector<ProxyVersions>& proxies) {
  json list = json::array();
  for (const ProxyVersions& proxy : proxies) {
    list.push_back({{"node", proxy.node_id},
                    {"acked", proxy.acked_version},
                    {"nacked", proxy.nacked_version},
                    {"message", proxy.nack_message},
                    {"unresponsive", proxy.unresponsive}});
  }
  return list.dump();
}

std::optional<std::vector<ProxyVersions>> ReplicaReports::DecodeProxies(std::string_view text) {
  json list = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!list.is_array()) {
    return std::nullopt;
  }
  std::vector<ProxyVersions> proxies;
  for (const json& item : list) {
    if (!item.is_object()) {
      return std::nullopt;
    }
    ProxyVersions proxy;
    for (auto [field, out] : {std::pair{"node", &proxy.node_id},
                              std::pair{"acked", &proxy.acked_version},
                              std::pair{"nacked", &proxy.nacked_version},
                              std::pair{"message", &proxy.nack_message}}) {
      auto it = item.find(field);
      if (it == item.end() || !it->is_string()) {
        return std::nullopt;
      }
      *out = it->get<std::string>();
    }
    // Another replica bounded them already; the Lease is not proof of that.
    proxy.node_id = PrintableText(proxy.node_id, kMaxNodeIdBytes);
    proxy.nack_message = PrintableText(proxy.nack_message, kMaxNackMessageBytes);
    // Absent in reports of older replicas.
    if (auto it = item.find("unresponsive"); it != item.end()) {
      if (!it->is_boolean()) {
        return std::nullopt;
      }
      proxy.unresponsive = it->get<bool>();
    }
    proxies.push_back(std::move(proxy));
  }
  return proxies;
}

void ReplicaReports::WriteOwn() {
  json lease = {
      {"apiVersion", "coordination.k8s.io/v1"},
      {"kind", "Lease"},
      {"metadata",
       {{"name", lease_name_},
        {"namespace", options_.lease_namespace},
        {"labels", {{std::string(kProxyReportLabel), "true"}}},
        {"annotations",
         {{std::string(kProxiesAnnotation), EncodeProxies(server_.LocalProxies())}}}}},
      {"spec",
       {{"holderIdentity", options_.identity},
        {"leaseDurationSeconds",
         std::max<int64_t>(1, (options_.expiry.count() + 999) / 1000)},
        {"renewTime", kube::FormatMicroTime(clock_->WallNow())}}}};
  kube::ApiResult result;
  if (!own_resource_version_.empty()) {
    lease["metadata"]["resourceVersion"] = own_resource_version_;
    result = api_.UpdateLease(options_.lease_namespace, lease_name_, lease);
  } else {
    result = api_.CreateLease(options_.lease_namespace, lease);
    if (result.status.http_code == 409) {  // AlreadyExists: left by an earlier run of this pod
      kube::ApiResult current = api_.GetLease(options_.lease_namespace, lease_name_);
      if (current.status.ok()) {
        lease["metadata"]["resourceVersion"] =
            current.body["metadata"].value("resourceVersion", "");
        result = api_.UpdateLease(options_.lease_namespace, lease_name_, lease);
      }
    }
  }
  if (result.status.ok()) {
    own_resource_version_ = result.body["metadata"].value("resourceVersion", "");
    return;
  }
  // Conflict or NotFound (someone changed or deleted it): start over next round.
  own_resource_version_.clear();
  Log(LogLevel::kWarn, std::string(kComponent), "could not write this replica's proxy report",
      {{"lease", options_.lease_namespace + "/" + lease_name_},
       {"error", result.status.ToString()}});
}

void ReplicaReports::ReadOthers() {
  kube::ListResult list = api_.List(kube::LeasesPath(options_.lease_namespace),
                                    std::string(kProxyReportLabel) + "=true");
  const bool fresh = list.status.ok();
  if (!fresh) {
    // Keep what was read before; it expires on its own.
    Log(LogLevel::kWarn, std::string(kComponent), "could not list the replicas' proxy reports",
        {{"error", list.status.ToString()}});
  } else {
    const auto now = clock_->Now();
    std::map<std::string, Seen> seen;
    for (const json& item : list.items) {
      const json& metadata = item.value("metadata", json::object());
      std::string name = metadata.value("name", "");
      if (name == lease_name_ || name.rfind(kLeasePrefix, 0) != 0) {
        continue;
      }
      Seen entry;
      entry.resource_version = metadata.value("resourceVersion", "");
      auto before = others_.find(name);
      entry.changed_at = before != others_.end() &&
                                 before->second.resource_version == entry.resource_version
                             ? before->second.changed_at
                             : now;
      std::string text =
          metadata.value("annotations", json::object()).value(std::string(kProxiesAnnotation), "");
      if (auto proxies = DecodeProxies(text)) {
        entry.proxies = std::move(*proxies);
      } else {
        Log(LogLevel::kWarn, std::string(kComponent), "ignoring an unreadable proxy report",
            {{"lease", options_.lease_namespace + "/" + name}});
      }
      seen.emplace(std::move(name), std::move(entry));
    }
    others_ = std::move(seen);
  }
  const auto now = clock_->Now();
  std::vector<ProxyVersions> remote;
  for (auto it = others_.begin(); it != others_.end();) {
    const auto age = now - it->second.changed_at;
    if (fresh && age > 4 * options_.expiry) {
      // Left by a replica that died long ago (a new pod has a new name):
      // removed so they do not pile up; a live replica would recreate it.
      // Only on a view listed just now. Kept (and not counted) when the
      // delete fails, so that it does not look new at the next list.
      kube::ApiResult deleted =
          api_.Delete(kube::LeasesPath(options_.lease_namespace) + "/" + it->first);
      if (deleted.status.ok() || deleted.status.IsNotFound()) {
        Log(LogLevel::kInfo, std::string(kComponent), "deleted a stale proxy report",
            {{"lease", options_.lease_namespace + "/" + it->first}});
        it = others_.erase(it);
        continue;
      }
      Log(LogLevel::kWarn, std::string(kComponent), "could not delete a stale proxy report",
          {{"lease", options_.lease_namespace + "/" + it->first},
           {"error", deleted.status.ToString()}});
    }
    if (age <= options_.expiry) {  // else its replica stopped renewing: gone
      remote.insert(remote.end(), it->second.proxies.begin(), it->second.proxies.end());
    }
    ++it;
  }
  server_.SetRemoteProxies(std::move(remote));
}

void ReplicaReports::Sync() {
  WriteOwn();
  ReadOthers();
}

void ReplicaReports::Withdraw() {
  kube::ApiResult result = api_.Delete(kube::LeasesPath(options_.lease_namespace) + "/" + lease_name_);
  if (!result.status.ok() && !result.status.IsNotFound()) {
    Log(LogLevel::kWarn, std::string(kComponent), "could not delete this replica's proxy report",
        {{"lease", options_.lease_namespace + "/" + lease_name_},
         {"error", result.status.ToString()}});
  }
  own_resource_version_.clear();
}

void ReplicaReports::Run(std::stop_token stop) {
  kube::RealSleeper sleeper;
  do {
    Sync();
  } while (sleeper.SleepFor(options_.period, stop));
  Withdraw();
}

}  // namespace kwd::snapshot_server
