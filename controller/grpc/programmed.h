#pragma once

// The `Programmed` condition of a LogonGroup or UrlMapping: True once every
// connected proxy runs a snapshot compiled from the object's current
// generation (Snapshot.sources), False with the NACK's reason when a proxy
// rejected such a snapshot, False "Pending" while a proxy has not got there.
// A proxy that has not answered a snapshot for a while (unresponsive) is
// named in the message but not counted: a client that never ACKs cannot
// hold every object at Pending. Pure: the caller supplies what each proxy
// runs and how to find a snapshot by version.
//
// What a proxy sends (node id, NACK text) is untrusted: it is made
// printable and bounded (PrintableText) before it is kept, and the
// condition message is bounded as a whole (the CRDs allow 32768 bytes; a
// longer one makes the API server refuse the whole status patch).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "controller/compile/compile.h"
#include "kwd/v1/snapshot.pb.h"

namespace kwd::snapshot_server {

inline constexpr std::string_view kProgrammed = "Programmed";
inline constexpr std::string_view kReasonProgrammed = "Programmed";
inline constexpr std::string_view kReasonPending = "Pending";
inline constexpr std::string_view kReasonRejected = "Rejected";
inline constexpr std::string_view kReasonNoProxies = "NoProxies";

// Bounds for what a proxy sends.
inline constexpr std::size_t kMaxNodeIdBytes = 128;
inline constexpr std::size_t kMaxNackMessageBytes = 1024;
// Bound for a Programmed message (well below the CRDs' 32768).
inline constexpr std::size_t kMaxProgrammedMessageBytes = 4096;

// `text` with control characters escaped (\n, \xNN), bytes that are not
// UTF-8 written as \xNN, C1 controls and the bidirectional and separator
// format characters (U+202E...) as \uNNNN, and at most `max_bytes` long (cut
// on a character boundary, "..." added).
std::string PrintableText(std::string_view text, std::size_t max_bytes);

// What one connected proxy runs and what it rejected last.
struct ProxyVersions {
  std::string node_id;
  std::string acked_version;   // the version it runs ("" before its first)
  std::string nacked_version;  // the last version it rejected, or ""
  std::string nack_message;
  // It has not answered the last snapshot sent to it within the ACK
  // timeout: listed, not counted for Programmed.
  bool unresponsive = false;

  bool operator==(const ProxyVersions&) const = default;
};

// The snapshot with this version, or nullptr when it is not known (any more).
using SnapshotLookup = std::function<const v1::Snapshot*(std::string_view version)>;

// Whether `snapshot` was compiled from generation >= `generation` of the object.
bool SnapshotIncludes(const v1::Snapshot& snapshot, std::string_view kind,
                      std::string_view namespace_, std::string_view name, int64_t generation);

compile::Condition ProgrammedCondition(std::string_view kind, std::string_view namespace_,
                                       std::string_view name, int64_t generation,
                                       const std::vector<ProxyVersions>& proxies,
                                       const SnapshotLookup& lookup);

// Proxies that run and rejected the same versions and answer alike, as
// one: the one with the lowest node id (the one a Rejected message would
// name) and how many there are. A fleet runs a handful of versions, so
// Programmed of every object costs a few lookups each instead of one per
// proxy (1,000 objects x 1,000 proxies was ~0.45 s per status resync).
struct ProxyFold {
  ProxyVersions proxy;
  std::size_t count = 0;
};
std::vector<ProxyFold> FoldProxies(const std::vector<ProxyVersions>& proxies);
// The same condition as above, from folded proxies.
compile::Condition ProgrammedCondition(std::string_view kind, std::string_view namespace_,
                                       std::string_view name, int64_t generation,
                                       const std::vector<ProxyFold>& proxies,
                                       const SnapshotLookup& lookup);

}  // namespace kwd::snapshot_server
