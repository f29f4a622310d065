#include "controller/grpc/programmed.h"

#include <algorithm>

namespace kwd::snapshot_server {

bool SnapshotIncludes(const v1::Snapshot& snapshot, std::string_view kind,
                      std::string_view namespace_, std::string_view name, int64_t generation) {
  // sources are sorted by kind, namespace, name (compile's contract).
  auto key = [](const v1::SourceObject& source) {
    return std::tuple<std::string_view, std::string_view, std::string_view>(
        source.kind(), source.namespace_(), source.name());
  };
  auto wanted = std::make_tuple(kind, namespace_, name);
  auto it = std::lower_bound(
      snapshot.sources().begin(), snapshot.sources().end(), wanted,
      [&](const v1::SourceObject& source, const auto& target) { return key(source) < target; });
  if (it != snapshot.sources().end() && key(*it) == wanted) {
    return it->generation() >= generation;
  }
  // Not sorted as promised (an old controller?): fall back to a scan.
  return std::any_of(snapshot.sources().begin(), snapshot.sources().end(),
                     [&](const v1::SourceObject& source) {
                       return key(source) == wanted && source.generation() >= generation;
                     });
}

compile::Condition ProgrammedCondition(std::string_view kind, std::string_view namespace_,
                                       std::string_view name, int64_t generation,
                                       const std::vector<ProxyVersions>& proxies,
                                       const SnapshotLookup& lookup) {
  compile::Condition condition;
  condition.type = std::string(kProgrammed);
  if (proxies.empty()) {
    condition.status = "False";
    condition.reason = std::string(kReasonNoProxies);
    condition.message = "no proxy is connected";
    return condition;
  }
  auto includes = [&](const std::string& version) {
    if (version.empty()) {
      return false;
    }
    const v1::Snapshot* snapshot = lookup(version);
    return snapshot != nullptr && SnapshotIncludes(*snapshot, kind, namespace_, name, generation);
  };
  size_t programmed = 0;
  const ProxyVersions* rejecting = nullptr;
  for (const auto& proxy : proxies) {
    if (includes(proxy.acked_version)) {
      ++programmed;
    } else if (includes(proxy.nacked_version) &&
               (rejecting == nullptr || proxy.node_id < rejecting->node_id)) {
      rejecting = &proxy;
    }
  }
  const std::string counts = std::to_string(programmed) + " of " + std::to_string(proxies.size()) +
                             " connected proxies run generation " + std::to_string(generation);
  if (programmed == proxies.size()) {
    condition.status = "True";
    condition.reason = std::string(kReasonProgrammed);
    condition.message = counts;
  } else if (rejecting != nullptr) {
    condition.status = "False";
    condition.reason = std::string(kReasonRejected);
    condition.message = "proxy " + rejecting->node_id +
                        " rejected the snapshot: " + rejecting->nack_message + " (" + counts + ")";
  } else {
    condition.status = "False";
    condition.reason = std::string(kReasonPending);
    condition.message = counts;
  }
  return condition;
}

}  // namespace kwd::snapshot_server
