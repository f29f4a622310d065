#pragma once

// The pure compile step: Kubernetes objects in, a routing snapshot plus one
// status per LogonGroup/UrlMapping out. No I/O, clock, randomness or logging;
// the same objects always give byte-identical output.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/crypto.h"
#include "controller/model/model.h"
#include "kwd/v1/snapshot.pb.h"

namespace kwd::compile {

// Condition types and reasons (Kubernetes convention: CamelCase reasons).
inline constexpr std::string_view kAccepted = "Accepted";
inline constexpr std::string_view kResolvedRefs = "ResolvedRefs";

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

struct Condition {
  std::string type;
  std::string status;  // "True" | "False"
  std::string reason;
  std::string message;

  bool operator==(const Condition&) const = default;
};

struct ObjectStatus {
  std::string kind;  // LogonGroup | UrlMapping
  std::string namespace_;
  std::string name;
  std::int64_t generation = 0;        // becomes status.observedGeneration
  std::int32_t ready_servers = 0;     // LogonGroup only
  std::vector<Condition> conditions;  // Accepted, then ResolvedRefs

  const Condition* Find(std::string_view type) const;
  bool operator==(const ObjectStatus&) const = default;
};

struct CompileResult {
  v1::Snapshot snapshot;               // version stamped; passes CheckSnapshot
  std::vector<ObjectStatus> statuses;  // sorted by kind, namespace, name
};

// Remembers each LogonGroup's compiled result between compiles of one
// ObjectSet (the pipeline's store): a group whose inputs (the LogonGroup,
// its Service's EndpointSlices and the Pods they name) kept their
// revisions (model::ObjectSet::Revision) is reused with its content digest
// instead of being compiled and hashed again, so an endpoint change costs
// about one group's compile. Output is identical with or without a cache
// (CompileCacheTest). One per pipeline; not thread-safe.
class CompileCache {
 public:
  std::uint64_t hits() const { return hits_; }      // groups reused, over all compiles
  std::uint64_t misses() const { return misses_; }  // groups compiled

  // Internal to Compile.
  struct Entry {
    std::vector<std::uint64_t> inputs;  // revisions; 0 = no such object
    std::optional<v1::Group> group;
    Sha256Digest digest{};  // of *group
    ObjectStatus status;
  };

 private:
  friend CompileResult Compile(const model::ObjectSet& objects, CompileCache* cache);
  std::uint64_t set_id_ = 0;
  std::map<model::ObjectSet::NamespacedName, Entry> entries_;
  std::uint64_t hits_ = 0;
  std::uint64_t misses_ = 0;
};

// `cache` may be null (compile everything).
CompileResult Compile(const model::ObjectSet& objects, CompileCache* cache = nullptr);

}  // namespace kwd::compile
