#pragma once

// The controller's /admin/api/state: what the controller's admin page shows.
//   {"snapshot": {version, published_at, groups, virtual_hosts} | null,
//    "ready": bool,
//    "proxies": [{node_id, replica: "this"|"other", peer, connected_since,
//                 acked_version, current, last_nack: {version, error} | null}],
//    "objects": [{kind, namespace, name, generation, ready_servers,
//                 serving_last_good, conditions: [{type, status, reason, message}]}],
//    "compile_problems": [{kind, namespace, name, type, reason, message}]}

#include <string>

#include "controller/admin/admin_server.h"
#include "controller/grpc/snapshot_server.h"
#include "controller/pipeline/pipeline.h"

namespace kwd::controller_admin {

std::string StateJson(const LatestSnapshot& latest, const snapshot_server::SnapshotServer& server,
                      const pipeline::Pipeline& pipeline);

}  // namespace kwd::controller_admin
