#pragma once

// Internal to controller/compile: what its processors share. The compile is
// one builder (assemble.cc) over one processor per input kind, as Contour's
// DAG builder has one per resource kind:
//
//   logon_group.cc      LogonGroup: strategy, health check, affinity, backend
//   service_backend.cc  EndpointSlices and Pods: a Service backend's servers
//   sap_system.cc       SapSystem: its status, a sapSystem backend's servers,
//                       the URL prefixes of UrlMapping.spec.fromSapSystem
//   upstream_tls.cc     TLS material: LogonGroup.spec.upstreamTLS
//   url_mapping.cc      UrlMapping: virtual hosts, rules, permissions
//   modifications.cc    UrlMapping.spec.modifications: SAP rule files
//   tls_secrets.cc      UrlMapping.spec.tls and its Secrets: certificates
//   assemble.cc         the snapshot, statuses and version; LastGood
//   memo.cc             CompileMemo: recompiles only the groups a change touches
//   helpers.cc          the helpers below
//
// A new input gets its own file and a declaration here; callers use only
// compile.h.

#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/crypto.h"
#include "common/log.h"
#include "common/modification/program.h"
#include "common/pem_files.h"
#include "common/snapshot_io.h"
#include "common/string_hash.h"
#include "controller/compile/compile.h"
#include "controller/model/model.h"
#include "kwd/v1/snapshot.pb.h"

namespace kwd::compile::internal {

using model::EndpointSlice;
using model::LogonGroup;
using model::ObjectSet;
using model::SapServerList;
using model::UrlMapping;

constexpr std::int64_t kUint32Max = std::numeric_limits<std::uint32_t>::max();

constexpr std::string_view kServerNameRule =
    "1 to 253 visible ASCII characters but \" , ; and \\: it goes into the affinity cookie";

constexpr std::string_view kPathCharacters =
    "may hold only RFC 3986 path characters (no spaces, controls, quotes, ? or #)";

// ---- Helpers (helpers.cc) ----

std::string AsciiLower(std::string_view text);
std::string Quote(std::string_view text);
// "namespace/name": a group key, a source, a reference in a message.
std::string GroupKey(std::string_view ns, std::string_view name);
std::string JoinStrings(const std::vector<std::string>& parts, std::string_view separator);
// "abap" | "java" (and "j2ee" when `accept_j2ee`), else nullopt.
std::optional<v1::Kind> ParseKind(std::string_view text, bool accept_j2ee);
std::string_view KindName(v1::Kind kind);
// A UrlMapping rule prefix: starts and ends with /, not / alone.
bool ValidPrefixShape(std::string_view prefix);

// Collects what goes into an object's Accepted and ResolvedRefs conditions.
class Findings {
 public:
  // Messages quote values from objects: their control characters are
  // escaped (statuses, `validate` output and log lines stay one line each).
  void Reject(std::string_view reason, std::string_view message) {
    rejections_.push_back({std::string(reason), EscapeControlCharacters(message)});
  }
  void Unresolved(std::string_view reason, std::string_view message) {
    unresolved_.push_back({std::string(reason), EscapeControlCharacters(message)});
  }
  // Something worth telling the user that does not reject the object.
  void Note(std::string_view message) { notes_.push_back(EscapeControlCharacters(message)); }

  bool rejected() const { return !rejections_.empty(); }

  std::vector<Condition> Conditions(const std::string& accepted_summary,
                                    const std::string& resolved_summary) const;

 private:
  struct Problem {
    std::string reason;
    std::string message;
  };

  static Condition Build(std::string_view type, std::string_view ok_reason,
                         const std::string& summary, const std::vector<Problem>& problems,
                         const std::vector<std::string>& notes);

  std::vector<Problem> rejections_;
  std::vector<Problem> unresolved_;
  std::vector<std::string> notes_;
};

// Applies a default and checks an integer range; out of range rejects the
// object with InvalidField naming the field and the allowed values.
std::uint32_t CheckedNumber(const std::optional<std::int64_t>& value, std::int64_t fallback,
                            std::int64_t min, std::int64_t max, std::string_view field,
                            Findings& findings);

// Kubernetes validates object names; dir mode and a hand-built ObjectSet do
// not. They become group keys and snapshot sources (log lines, metric labels,
// the affinity cookie's MAC input).
void CheckObjectName(const model::ObjectMeta& meta, Findings& findings);
bool HasValidName(const model::ObjectMeta& meta);

// The Accepted condition says the snapshot serves the object's last
// accepted version, of `generation`.
void MarkServingLastGood(std::int64_t generation, ObjectStatus* status);

// ---- What a LogonGroup's compile reads (inputs.cc) ----

// EndpointSlices by (namespace, service name), each list in slice-name order.
using SliceIndex = std::map<std::pair<std::string, std::string>, std::vector<const EndpointSlice*>>;
SliceIndex IndexSlices(const ObjectSet& objects);

// Pods by (namespace, name), as views into the ObjectSet's keys. Every
// endpoint looks its pod up: a hash lookup instead of a walk down the
// ordered map comparing string pairs (only lookups: no order leaks out).
struct PodKey {
  std::string_view namespace_;
  std::string_view name;
  bool operator==(const PodKey&) const = default;
};
struct PodKeyHash {
  size_t operator()(const PodKey& key) const {
    return static_cast<size_t>(HashString(key.name, HashString(key.namespace_)));
  }
};
using PodIndex = std::unordered_map<PodKey, const model::Pod*, PodKeyHash>;
PodIndex IndexPods(const ObjectSet& objects);

// What a LogonGroup's compile reads besides the LogonGroup itself. The
// memo's implementation also records each lookup, to know which groups an
// EndpointSlice or Pod change touches.
class GroupInputs {
 public:
  virtual ~GroupInputs() = default;
  // The EndpointSlices labelled for Service ns/name in slice-name order, or null.
  virtual const std::vector<const EndpointSlice*>* SlicesOf(const std::string& ns,
                                                            const std::string& service) = 0;
  virtual const model::Pod* FindPod(std::string_view ns, std::string_view name) = 0;
  // The SapSystem ns/name and the poller's server list of it, or null.
  virtual const model::SapSystem* FindSapSystem(const std::string& ns, const std::string& name) = 0;
  virtual const model::SapServerList* FindServerList(const std::string& ns,
                                                     const std::string& name) = 0;
};

// Everything indexed up front: the pure compile.
class IndexedInputs : public GroupInputs {
 public:
  explicit IndexedInputs(const ObjectSet& objects);

  const std::vector<const EndpointSlice*>* SlicesOf(const std::string& ns,
                                                    const std::string& service) override;
  const model::Pod* FindPod(std::string_view ns, std::string_view name) override;
  const model::SapSystem* FindSapSystem(const std::string& ns, const std::string& name) override;
  const model::SapServerList* FindServerList(const std::string& ns,
                                             const std::string& name) override;

 private:
  const ObjectSet& objects_;
  SliceIndex slices_;
  PodIndex pods_;
};

// ---- LogonGroup (logon_group.cc) ----

struct GroupResult {
  std::optional<v1::Group> group;  // set when accepted
  ObjectStatus status;
};

class LogonGroupCompiler {
 public:
  explicit LogonGroupCompiler(GroupInputs& inputs) : inputs_(inputs) {}

  GroupResult Compile(const LogonGroup& lg);

 private:
  void CompileBackend(const LogonGroup& lg, std::uint32_t default_capacity, v1::Group* group,
                      Findings& findings, std::string* resolved_summary);

  GroupInputs& inputs_;
};

// Compiles `lg`; when it is rejected, the group of its last accepted
// version (compiled against the same endpoints) goes into the snapshot.
GroupResult CompileGroup(LogonGroupCompiler& compiler, const LogonGroup& lg,
                         const LastGood* last_good);

// ---- EndpointSlices and Pods (service_backend.cc) ----

// spec.backend.service: the group's servers from the Service's
// EndpointSlices, named after their pods.
void CompileServiceBackend(GroupInputs& inputs, const LogonGroup& lg,
                           const model::ServiceBackend& service, std::uint32_t default_capacity,
                           v1::Group* group, Findings& findings, std::string* resolved_summary);

// ---- TLS material (upstream_tls.cc) ----

// spec.upstreamTLS of a LogonGroup with `backend`.
void CompileUpstreamTls(const model::UpstreamTlsSpec& spec,
                        const std::optional<model::Backend>& backend, v1::UpstreamTls* out,
                        Findings& findings);

// ---- SapSystem (sap_system.cc) ----

// spec.backend.sapSystem: the group's servers from the poller's list.
void CompileSapSystemBackend(GroupInputs& inputs, const LogonGroup& lg,
                             const model::SapSystemBackend& sap, v1::Kind kind,
                             std::uint32_t default_capacity, v1::Group* group, Findings& findings,
                             std::string* resolved_summary);

// A SapSystem's status: Accepted from its spec, Refreshed and the server
// count from the poller's list.
ObjectStatus SapSystemStatus(const model::SapSystem& system, const SapServerList* list);

// A UrlMapping's default group of one kind.
struct ResolvedDefault {
  std::string intended;  // the key asked for, "" when nothing was asked for
  std::string resolved;  // the key in the snapshot, "" when none
  bool explicit_ = false;
};

// UrlMapping.spec.fromSapSystem: the SapSystem's URL prefixes as rules,
// appended to `rules` unless `prefixes` holds them already. A prefix under
// one of the operator's rules is left out unless `may_refine`
// (spec.fromSapSystemRefines), and never one that would lower the upstream
// TLS of the traffic it takes.
void AddSapSystemRules(const ObjectSet& objects, const std::set<std::string>& accepted_groups,
                       const std::string& ns, const std::string& system_name,
                       const std::string& source, const ResolvedDefault& abap,
                       const ResolvedDefault& java, bool may_refine,
                       std::set<std::string>* prefixes, std::vector<v1::Rule>* rules,
                       std::set<std::string>* derived, Findings& findings);

// ---- Modification rules (modifications.cc) ----

// spec.modifications of `um`: each validated (parsed, patterns compiled) into
// `out`. Returns false, with InvalidRule findings naming the field and the
// rule's line and column, when any is invalid (that entry is left out).
//
// What checking rule files may cost: each file's patterns at most
// modification::kMaxProgramInstructions RE2 instructions (about a
// microsecond each to compile), one UrlMapping's files together at most
// kMaxMappingRegexInstructions, and all UrlMappings of one compile together
// at most kMaxClusterRegexInstructions, counted in age order (`cluster_left`
// is what is left of it). Beyond a bound the file is refused without being
// compiled, so a compile costs at most a few seconds even with nothing
// cached, whatever the objects hold. The outcome depends only on the
// objects, never on what the cache holds.
inline constexpr std::int64_t kMaxMappingRegexInstructions =
    modification::kMaxMappingInstructions;
inline constexpr std::int64_t kMaxClusterRegexInstructions =
    modification::kMaxClusterInstructions;

// `cache` (may be null): earlier verdicts by the SHA-256 of the rule text
// (checked against the per-file bound only). UrlMappings are compiled on
// every compile; the memo keeps the verdicts, the output is the same. The
// oldest verdicts go first once it holds kMaxEntries.
struct ModificationCache {
  struct Verdict {
    bool ok = false;
    int line = 0;
    int column = 0;
    std::string message;
    std::int64_t instructions = 0;  // ok: the file's RE2 instructions
  };
  std::map<Sha256Digest, Verdict> verdicts;
  std::deque<Sha256Digest> order;  // insertion order, for eviction
  static constexpr std::size_t kMaxEntries = 8192;
};
bool CompileModifications(const UrlMapping& um, const std::string& source,
                          std::vector<v1::Modification>* out, Findings& findings,
                          ModificationCache* cache = nullptr,
                          std::int64_t* cluster_left = nullptr);

// ---- TLS certificates from Secrets (tls_secrets.cc) ----

// Whether `pattern` (a host or "*.suffix") covers `host` (a host or
// "*.suffix"): equal, or one label in front of the suffix.
bool HostCovers(std::string_view pattern, std::string_view host);

// A Secret as the compile judged it (once per compile).
struct CheckedSecret {
  const model::Secret* secret = nullptr;  // null: not found
  std::string reason;                     // "": usable; else SecretNotFound | InvalidCertificate
  std::string error;                      // why not, naming the Secret
  CertificateInfo info;
};

// One spec.tls[] entry that may be served: its Secret checked and usable.
struct TlsEntry {
  std::string secret;              // "namespace/name"
  std::vector<std::string> hosts;  // lowercase, unique
  const CheckedSecret* checked = nullptr;
};

// Earlier key-pair checks by content, as ModificationCache keeps rule
// verdicts: UrlMappings are compiled on every compile (an endpoint change
// included) and checking a pair costs about half a millisecond; the memo
// keeps this between compiles, the output is the same. The validity period
// is judged every compile from the kept dates.
struct CertificateCache {
  struct Verdict {
    std::string error;  // "": the pair is good
    CertificateInfo info;
  };
  std::map<Sha256Digest, Verdict> verdicts;  // by SHA-256 of tls.crt, NUL, tls.key
  static constexpr std::size_t kMaxEntries = 4096;  // then it starts over
};

class TlsCertificates {
 public:
  static constexpr std::size_t kMaxTlsEntries = 16;  // as the CRD's maxItems

  // `cache` may be null.
  TlsCertificates(const ObjectSet& objects, CertificateCache* cache);

  // spec.tls of `um` (whose normalized spec.hosts are `hosts`): a bad entry
  // rejects the mapping (InvalidField, *valid_spec = false); a Secret that
  // is missing or unusable is ResolvedRefs=False (SecretNotFound,
  // InvalidCertificate) and that entry is left out; a certificate that does
  // not name a listed host is a note. Returns the entries to serve.
  std::vector<TlsEntry> Check(const UrlMapping& um, const std::vector<std::string>& hosts,
                              Findings& findings, bool* valid_spec);
  // Serves `entries` of the mapping `source`, after its virtual hosts are
  // applied. Only the mapping that owns a host's virtual host (`owner_of`:
  // the oldest mapping on it, see UrlMappingCompiler) sets its certificate:
  // a newer mapping naming a host another serves gets a note, so it cannot
  // put its certificate in front of that host's traffic.
  void Serve(const std::string& source, const std::vector<TlsEntry>& entries,
             const std::function<const std::string*(const std::string&)>& owner_of,
             Findings& findings);
  // Moves the certificates into the snapshot, sorted by name with sorted
  // hosts. Returns the earliest notAfter (0: none).
  std::int64_t AppendCertificates(v1::Snapshot* snapshot);

 private:
  const CheckedSecret& CheckSecret(const std::string& ns, const std::string& name);

  struct HostOwner {
    std::string secret;
    std::string source;
  };

  const ObjectSet& objects_;
  CertificateCache* cache_;
  std::map<std::string, CheckedSecret> checked_;  // by "ns/name", this compile
  std::map<std::string, v1::Certificate> certificates_;           // by "ns/name"
  std::map<std::string, HostOwner> host_owner_;
};

// ---- UrlMapping (url_mapping.cc) ----

class UrlMappingCompiler {
 public:
  // `accepted_groups` and `existing_groups`: LogonGroup keys.
  UrlMappingCompiler(const ObjectSet& objects, const std::set<std::string>& accepted_groups,
                     const std::set<std::string>& existing_groups,
                     ModificationCache* modification_cache = nullptr,
                     CertificateCache* certificate_cache = nullptr)
      : objects_(objects),
        accepted_groups_(accepted_groups),
        existing_groups_(existing_groups),
        modification_cache_(modification_cache),
        tls_(objects, certificate_cache) {}

  // Call in age order (older mappings win conflicts). `last_good`: the
  // version to serve instead when this one's spec is rejected.
  ObjectStatus Compile(const UrlMapping& um, const UrlMapping* last_good = nullptr);

  // Virtual hosts sorted by host ("" first), rules sorted by prefix.
  void AppendVirtualHosts(v1::Snapshot* snapshot);
  // The UrlMapping ("ns/name") whose virtual host serves SNI `host`: the
  // exact entry, else the "*.suffix" one covering it, else the "" (any
  // host) one; null when none.
  const std::string* VirtualHostOwner(const std::string& host) const;
  // The certificates of spec.tls; returns the earliest notAfter (0: none).
  std::int64_t AppendCertificates(v1::Snapshot* snapshot) {
    return tls_.AppendCertificates(snapshot);
  }

 private:
  struct HostEntry {
    v1::VirtualHost vhost;
    std::string owner;  // "ns/name" of the UrlMapping that set the defaults
    // Intended default group keys of the owner (explicit names even when they
    // do not resolve), to detect a newer mapping that asks for other values.
    std::string intended_abap;
    std::string intended_java;
    std::map<std::string, v1::Rule> rules;  // by prefix
    std::string owner_sid;  // the owner's spec.system.sid ("" none)
    std::map<std::string, v1::SystemRoute> systems;  // by SID
  };

  std::string ResolveGroupRef(const std::string& ns, const std::string& name,
                              const std::string& field, Findings& findings);
  ResolvedDefault ResolveDefault(const std::string& ns, const std::optional<std::string>& name,
                                 std::string_view implicit_name, const std::string& field,
                                 Findings& findings);
  void ApplyToHost(const std::string& host, const std::string& source, v1::Kind root,
                   bool explicit_root, const ResolvedDefault& abap, const ResolvedDefault& java,
                   const std::string& passthrough, const std::vector<v1::Rule>& rules,
                   const std::set<std::string>& derived,
                   const std::vector<v1::Permission>& permissions,
                   const std::vector<v1::Modification>& modifications,
                   const std::string& sid, const v1::SapHeaders& sap_headers,
                   const std::optional<v1::Hsts>& hsts, Findings& findings);

  const ObjectSet& objects_;
  const std::set<std::string>& accepted_groups_;
  const std::set<std::string>& existing_groups_;
  ModificationCache* modification_cache_;
  // What is left of kMaxClusterRegexInstructions in this compile.
  std::int64_t modification_budget_ = kMaxClusterRegexInstructions;
  TlsCertificates tls_;
  std::map<std::string, HostEntry> hosts_;
};

// ---- Assembly (assemble.cc) ----

// A compiled LogonGroup on its way into a CompileResult.
struct CompiledGroup {
  GroupResult* result;
  const Sha256Digest* digest;  // of *result->group; null: computed in Assemble
};

// Puts the compiled LogonGroups (in (namespace, name) order), the
// UrlMappings and the SapSystems' statuses together into the snapshot and
// the statuses, and stamps the version. Moves out of the results when
// `take`, else copies them.
CompileResult Assemble(const ObjectSet& objects, const std::vector<CompiledGroup>& compiled,
                       bool take, const LastGood* last_good,
                       ModificationCache* modification_cache = nullptr,
                       CertificateCache* certificate_cache = nullptr);

}  // namespace kwd::compile::internal
