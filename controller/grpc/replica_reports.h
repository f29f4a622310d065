#pragma once

// With several controller replicas each proxy streams from one of them, but
// only the leader writes status. So that the leader's Programmed condition
// counts every proxy, each replica publishes what its proxies run and reject
// in a Lease of its own ("kwd-controller-proxies-<identity>", labelled
// dispatch.kwd.io/proxy-report=true, the proxies as JSON in the annotation
// dispatch.kwd.io/proxies), renewed every period, and hands the other
// replicas' reports to its SnapshotServer (SetRemoteProxies).
//
// A report whose resourceVersion has not moved for `expiry` belongs to a
// replica that is gone and is dropped: judged on this replica's clock only,
// as leader election judges a Lease. A replica that stops cleanly deletes its
// report; one unchanged for four times `expiry` is deleted by whoever sees it.

#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "controller/grpc/snapshot_server.h"
#include "controller/kube/clock.h"
#include "controller/kube/kube_api.h"

namespace kwd::snapshot_server {

inline constexpr std::string_view kProxyReportLabel = "dispatch.kwd.io/proxy-report";
inline constexpr std::string_view kProxiesAnnotation = "dispatch.kwd.io/proxies";

struct ReplicaReportsOptions {
  std::string lease_namespace;
  std::string identity;                       // this replica (the pod name)
  std::chrono::milliseconds period{2000};     // how often to write ours and read theirs
  std::chrono::milliseconds expiry{15000};    // a report not renewed this long is dropped
};

class ReplicaReports {
 public:
  ReplicaReports(kube::KubeApi& api, SnapshotServer& server, ReplicaReportsOptions options,
                 std::shared_ptr<const kube::Clock> clock = nullptr);

  // Syncs every period until `stop`, then deletes this replica's report.
  void Run(std::stop_token stop);
  // One round: write this replica's report, read the others'.
  void Sync();
  // Deletes this replica's report (a clean stop).
  void Withdraw();

  // "kwd-controller-proxies-" + the identity as a DNS label (lowercase;
  // anything else becomes '-'; at most 63 characters after the prefix).
  static std::string LeaseName(std::string_view identity);
  static std::string EncodeProxies(const std::vector<ProxyVersions>& proxies);
  // nullopt when the text is not what EncodeProxies writes.
  static std::optional<std::vector<ProxyVersions>> DecodeProxies(std::string_view text);

 private:
  struct Seen {
    std::string resource_version;
    std::chrono::steady_clock::time_point changed_at;
    std::vector<ProxyVersions> proxies;
  };

  void WriteOwn();
  void ReadOthers();

  kube::KubeApi& api_;
  SnapshotServer& server_;
  const ReplicaReportsOptions options_;
  const std::string lease_name_;
  std::shared_ptr<const kube::Clock> clock_;
  std::string own_resource_version_;  // "" until created or read
  std::map<std::string, Seen> others_;  // by Lease name
};

}  // namespace kwd::snapshot_server
