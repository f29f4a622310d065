#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/crypto.h"
#include "kwd/v1/snapshot.pb.h"

namespace kwd {

// The content hash, built so that a change to one group re-hashes only that
// group: SHA-256 of the concatenated SHA-256 digests of (1) the snapshot
// without `version` and `groups`, then (2) each group, in order, every part
// serialized deterministically. Lowercase hex. Equal content gives an equal
// version.
struct SnapshotDigests {
  Sha256Digest rest{};
  std::vector<Sha256Digest> groups;
  std::string Version() const;
};
SnapshotDigests ComputeSnapshotDigests(const v1::Snapshot& snapshot);
// The parts, for a caller that keeps group digests between versions.
Sha256Digest SnapshotRestDigest(const v1::Snapshot& snapshot);
Sha256Digest GroupDigest(const v1::Group& group);
// After groups(index) changed in place.
void UpdateGroupDigest(const v1::Snapshot& snapshot, int index, SnapshotDigests* digests);
std::string ComputeSnapshotVersion(const v1::Snapshot& snapshot);
void StampSnapshotVersion(v1::Snapshot* snapshot);
// True when `version` is empty or is the content hash; else false with a reason.
// Run where a snapshot enters a process (file, gRPC), not by CheckSnapshot.
bool VerifySnapshotVersion(const v1::Snapshot& snapshot, std::string* error);

// Proto3 JSON mapping (lowerCamelCase fields, enum names), indented.
std::string SnapshotToJson(const v1::Snapshot& snapshot);
bool SnapshotFromJson(std::string_view json, v1::Snapshot* out, std::string* error);
// Parses and verifies the version (when set).
bool LoadSnapshotFile(const std::string& path, v1::Snapshot* out, std::string* error);

// Index of the group with `key` in a snapshot whose groups are sorted by key
// (as CheckSnapshot requires), or -1.
int FindSortedGroup(const v1::Snapshot& snapshot, std::string_view key);

// The invariants listed in snapshot.proto, except the version (see
// VerifySnapshotVersion). Returns one message per violation;
// an empty list means the snapshot may be applied. Run by the controller
// before publishing and by the proxy before swapping a snapshot in.
std::vector<std::string> CheckSnapshot(const v1::Snapshot& snapshot);

}  // namespace kwd
