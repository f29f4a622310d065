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

// Proto3 JSON mapping (lowerCamelCase fields, enum names), indented, with
// every certificate's private key (keyPem) replaced by kRedactedPrivateKey:
// what debug pages, `kwd-controller compile` and logs may show.
std::string SnapshotToJson(const v1::Snapshot& snapshot);
inline constexpr std::string_view kRedactedPrivateKey = "(private key not shown)";
// The same with the private keys: only for the proxy's --snapshot-cache
// file (written 0600), which must restore the certificates.
std::string SnapshotToJsonWithPrivateKeys(const v1::Snapshot& snapshot);
bool SnapshotFromJson(std::string_view json, v1::Snapshot* out, std::string* error);
enum class SnapshotVersionCheck { kRequired, kIfSet };
// Parses and verifies the version (when set).
bool LoadSnapshotFile(const std::string& path, v1::Snapshot* out, std::string* error,
                      SnapshotVersionCheck check = SnapshotVersionCheck::kRequired);

// ---- Names and paths ----
// What a snapshot may hold where a name or path ends up in a header (the
// affinity cookie's Set-Cookie, the health check's request line and Host),
// a log line or a metric label. The compile rejects objects that break these
// (with a condition saying so) and CheckSnapshot rejects snapshots that do;
// none admits a control character or a space.

// A Kubernetes namespace: an RFC 1123 label (a-z, 0-9, '-'), at most 63.
bool IsNamespaceName(std::string_view name);
// A Kubernetes object name: an RFC 1123 subdomain (labels joined by '.'), at most 253.
bool IsObjectName(std::string_view name);
// "namespace/name" of the two above: group keys, pods, UrlMapping sources.
bool IsObjectKey(std::string_view key);
// A server (SAP instance) name: 1 to 253 RFC 6265 cookie-octets (visible
// ASCII but space " , ; \), as it goes into the affinity cookie's value.
bool IsServerName(std::string_view name);
// A server address: an IP address or a DNS name, 1 to 253 of A-Z a-z 0-9 . - _ :
// (an IPv6 address without brackets).
bool IsServerAddress(std::string_view address);
// An RFC 6265 cookie name (an RFC 9110 token).
bool IsCookieName(std::string_view name);
// A SAP system ID: three upper-case letters or digits, a letter first (ERP).
bool IsSapSid(std::string_view sid);
// A virtual host: a lowercase DNS name or "*." and one (a-z 0-9 . -), at most 255.
bool IsVirtualHost(std::string_view host);
// RFC 3986 path characters (unreserved, sub-delims, ':', '@', '/', and '%'
// with two hex digits), at most 1024: rule prefixes and permission patterns
// (where '*' is a sub-delim).
bool IsPathText(std::string_view text);
// An origin-form request target (RFC 9112 3.2.1): "/" path [ "?" query ],
// path and query of RFC 3986 characters, at most 1024: the health check path.
bool IsOriginForm(std::string_view target);

// Index of the group with `key` in a snapshot whose groups are sorted by key
// (as CheckSnapshot requires), or -1.
int FindSortedGroup(const v1::Snapshot& snapshot, std::string_view key);

// The invariants listed in snapshot.proto, except the version (see
// VerifySnapshotVersion). Returns one message per violation;
// an empty list means the snapshot may be applied. Run by the controller
// before publishing and by the proxy before swapping a snapshot in.
std::vector<std::string> CheckSnapshot(const v1::Snapshot& snapshot);

}  // namespace kwd
