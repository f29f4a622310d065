#pragma once

// The pure compile step: Kubernetes objects in, a routing snapshot plus one
// status per LogonGroup/UrlMapping out. No I/O, clock, randomness or logging;
// the same objects always give byte-identical output.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/snapshot_io.h"
#include "controller/model/model.h"
#include "kwd/v1/snapshot.pb.h"

namespace kwd::compile {

// Condition types and reasons (Kubernetes convention: CamelCase reasons).
inline constexpr std::string_view kAccepted = "Accepted";
inline constexpr std::string_view kResolvedRefs = "ResolvedRefs";
// SapSystem: whether the last poll of the message server succeeded.
inline constexpr std::string_view kRefreshed = "Refreshed";

inline constexpr std::string_view kReasonAccepted = "Accepted";
inline constexpr std::string_view kReasonResolvedRefs = "ResolvedRefs";
inline constexpr std::string_view kReasonInvalidBackend = "InvalidBackend";
inline constexpr std::string_view kReasonInvalidKind = "InvalidKind";
inline constexpr std::string_view kReasonInvalidStrategy = "InvalidStrategy";
inline constexpr std::string_view kReasonInvalidField = "InvalidField";
inline constexpr std::string_view kReasonDuplicateServer = "DuplicateServer";
inline constexpr std::string_view kReasonNoEndpoints = "NoEndpoints";
inline constexpr std::string_view kReasonPortNotFound = "PortNotFound";
inline constexpr std::string_view kReasonInvalidRule = "InvalidRule";
inline constexpr std::string_view kReasonInvalidPermission = "InvalidPermission";
inline constexpr std::string_view kReasonConflicted = "Conflicted";
inline constexpr std::string_view kReasonLogonGroupNotFound = "LogonGroupNotFound";
// An endpoint left out: its server name (pod annotation, pod name or address)
// or its address or pod reference is not one a snapshot may hold.
inline constexpr std::string_view kReasonInvalidServerName = "InvalidServerName";
inline constexpr std::string_view kReasonInvalidEndpoint = "InvalidEndpoint";
// LogonGroup.spec.backend.sapSystem: the SapSystem does not exist, is
// rejected, or has no server list yet.
inline constexpr std::string_view kReasonSapSystemNotFound = "SapSystemNotFound";
inline constexpr std::string_view kReasonNoServerList = "NoServerList";
inline constexpr std::string_view kReasonNoUrlMap = "NoUrlMap";
// UrlMapping.spec.tls[].secretName: the Secret does not exist (or the
// controller cannot read it), or it holds no usable certificate and key
// (wrong type, bad PEM, key not matching, expired, not yet valid).
inline constexpr std::string_view kReasonSecretNotFound = "SecretNotFound";
inline constexpr std::string_view kReasonInvalidCertificate = "InvalidCertificate";
inline constexpr std::string_view kReasonPending = "Pending";

// One problem behind a False condition (`kwd-controller validate` prints
// each on its own line).
struct ConditionProblem {
  std::string reason;
  std::string message;  // "spec.strategy: ..." when it is about one field

  bool operator==(const ConditionProblem&) const = default;
};

struct Condition {
  std::string type;
  std::string status;  // "True" | "False"
  std::string reason;
  std::string message;
  // Status False: each problem the message joins, with its own reason.
  std::vector<ConditionProblem> problems;

  bool operator==(const Condition&) const = default;
};

struct ObjectStatus {
  std::string kind;  // LogonGroup | UrlMapping | SapSystem
  std::string namespace_;
  std::string name;
  std::int64_t generation = 0;        // becomes status.observedGeneration
  std::int32_t ready_servers = 0;     // LogonGroup only
  std::int32_t servers = 0;           // SapSystem only: instances in the last good list
  std::int32_t rules = 0;             // UrlMapping only: the rules it serves
  std::string hosts;                  // UrlMapping only: "*" (any) or "a.example,b.example"
  std::string last_refresh_time;      // SapSystem only, RFC 3339 (not compiled: the poller's)
  std::vector<Condition> conditions;  // Accepted, then ResolvedRefs
  // Rejected, and the snapshot serves the object's last accepted version
  // (LastGood) instead, of this generation.
  bool serving_last_good = false;
  std::int64_t last_good_generation = 0;

  const Condition* Find(std::string_view type) const;
  bool operator==(const ObjectStatus&) const = default;
};

struct CompileResult {
  CompileResult();
  CompileResult(CompileResult&&) noexcept = default;
  CompileResult(const CompileResult&) = delete;
  CompileResult& operator=(const CompileResult&) = delete;

  // The snapshot lives on its own arena: putting 10,000 servers together and
  // freeing them again costs a few large allocations instead of tens of
  // thousands of small ones (which also fragmented the controller's heap).
  std::unique_ptr<google::protobuf::Arena> arena;
  v1::Snapshot& snapshot;              // version stamped; passes CheckSnapshot
  std::vector<ObjectStatus> statuses;  // sorted by kind, namespace, name
  SnapshotDigests digests;             // the snapshot's, as its version was built from
  // The earliest notAfter (Unix seconds) of the snapshot's certificates, 0
  // when none: the compile's verdict changes then, so compile again.
  std::int64_t certificates_expire = 0;
};

// The last accepted version of each LogonGroup and UrlMapping, which the
// caller keeps between compiles (the pipeline: UpdateLastGood after each
// compile). When an object's current version is rejected for something in
// its spec, the snapshot carries the last accepted version instead (compiled
// against the current endpoints) and the status says Accepted=False with
// the reason: one bad edit does not withdraw a group that served before.
// An object that was never accepted stays out, as without LastGood.
struct LastGood {
  std::map<model::ObjectSet::NamespacedName, model::LogonGroup> logon_groups;
  std::map<model::ObjectSet::NamespacedName, model::UrlMapping> url_mappings;

  bool operator==(const LastGood&) const = default;
};

// Makes `last_good` remember every object that `result` (compiled from
// `objects`) accepted, and forget objects no longer in `objects`. Returns
// the keys whose entry changed.
std::vector<model::ObjectKey> UpdateLastGood(const model::ObjectSet& objects,
                                             const CompileResult& result, LastGood* last_good);

// Objects whose status says Accepted=False, by kind.
std::size_t CountRejected(const CompileResult& result, std::string_view kind);

CompileResult Compile(const model::ObjectSet& objects, const LastGood* last_good = nullptr);

// Remembers each LogonGroup's compiled result (and content digest) between
// compiles of one ObjectSet, and what each read: its Service's
// EndpointSlices and the Pods their endpoints name. The owner of the
// ObjectSet reports every object added, changed or removed since the last
// compile (Changed); the next compile then compiles only the LogonGroups
// those changes touch and reuses the rest, so an endpoint change costs one
// group's compile plus putting the snapshot together. The output is
// exactly Compile(objects)'s (CompileMemoTest). Not thread-safe.
class CompileMemo {
 public:
  CompileMemo();
  ~CompileMemo();
  CompileMemo(const CompileMemo&) = delete;
  CompileMemo& operator=(const CompileMemo&) = delete;

  void Changed(const model::ObjectKey& key);
  // Forget everything: the next compile compiles every group.
  void ChangedAll();

  std::uint64_t groups_compiled() const;  // over all compiles
  std::uint64_t groups_reused() const;

  struct State;  // internal to memo.cc

 private:
  friend CompileResult Compile(const model::ObjectSet& objects, CompileMemo& memo,
                               const LastGood* last_good);
  std::unique_ptr<State> state_;
};

// Compile(objects, last_good) with the memo's help. A change of a
// LastGood entry must be reported to the memo (Changed) like an object's.
CompileResult Compile(const model::ObjectSet& objects, CompileMemo& memo,
                      const LastGood* last_good = nullptr);

}  // namespace kwd::compile
