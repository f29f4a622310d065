#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kwd/v1/snapshot.pb.h"

namespace kwd {

// Lowercase hex SHA-256 of the snapshot serialized deterministically with
// `version` cleared: equal content gives an equal version.
std::string ComputeSnapshotVersion(const v1::Snapshot& snapshot);
void StampSnapshotVersion(v1::Snapshot* snapshot);

// Proto3 JSON mapping (lowerCamelCase fields, enum names), indented.
std::string SnapshotToJson(const v1::Snapshot& snapshot);
bool SnapshotFromJson(std::string_view json, v1::Snapshot* out, std::string* error);
bool LoadSnapshotFile(const std::string& path, v1::Snapshot* out, std::string* error);

// The invariants listed in snapshot.proto. Returns one message per violation;
// an empty list means the snapshot may be applied. Run by the controller
// before publishing and by the proxy before swapping a snapshot in.
std::vector<std::string> CheckSnapshot(const v1::Snapshot& snapshot);

}  // namespace kwd
