#pragma once

// Endpoint-only deltas between snapshots (SnapshotDelta in
// proto/kwd/v1/snapshot.proto). Most changes a cluster makes are endpoint
// changes: a pod scales up, becomes ready, starts terminating. For those
// the controller sends only the server lists that changed instead of the
// whole snapshot, and the proxy patches the snapshot it runs.

#include <optional>
#include <string>
#include <vector>

#include "common/snapshot_io.h"
#include "kwd/v1/snapshot.pb.h"

namespace kwd {

// The delta that turns `from` into `to`, when they differ only in the
// servers of some groups (same groups in the same order, same virtual hosts,
// same sources, same group settings). nullopt otherwise: send `to` whole.
// base_version is from.version().
//
// With both snapshots' digests (as the compile keeps them), equal digests
// stand for equal parts and only the groups whose digests differ are
// compared; without them every part is compared.
std::optional<v1::SnapshotDelta> ComputeEndpointDelta(const v1::Snapshot& from,
                                                      const v1::Snapshot& to,
                                                      const SnapshotDigests* from_digests = nullptr,
                                                      const SnapshotDigests* to_digests = nullptr);

// Exchanges each delta group's server list with the list of the snapshot's
// group with the same key, so the snapshot takes the new lists and `delta`
// keeps the old ones: calling it again undoes it. Does not touch versions.
// `changed_groups` (may be null) receives the indexes of the groups swapped,
// e.g. for UpdateGroupDigest. False (and nothing changed) when the delta
// names a group the snapshot lacks or names a group twice.
bool SwapDeltaServers(v1::Snapshot* snapshot, v1::SnapshotDelta* delta,
                      std::vector<int>* changed_groups, std::string* error);

}  // namespace kwd
