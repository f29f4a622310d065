#pragma once

// The immutable routing table a proxy builds from a Snapshot, off the request
// path, and shares read-only between workers as
// std::shared_ptr<const RoutingTable> (Envoy's route config shape). Mutable
// state it points at (server health atomics, session tables) outlives it: the
// registries hand the same objects to the next table for the same group key.

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/modification/program.h"
#include "dataplane/balancer/balancer.h"
#include "dataplane/routing/name_index.h"
#include "dataplane/routing/permissions.h"
#include "dataplane/routing/prefix_index.h"
#include "dataplane/routing/server_health_registry.h"
#include "dataplane/session/session_table.h"
#include "kwd/v1/snapshot.pb.h"

namespace kwd::tls {
class UpstreamTls;  // dataplane/tls/upstream_tls.h
}  // namespace kwd::tls

namespace kwd::routing {

struct ServerEntry {
  std::string name;  // SAP instance name
  std::string address;
  uint32_t port = 0;
  uint32_t capacity = 1;
  v1::ServerState state = v1::SERVER_STATE_READY;
  std::string pod;
  std::shared_ptr<balancer::ServerHealth> health;
};

struct GroupEntry {
  std::string key;   // "namespace/name"
  std::string name;  // the part after "/": what saplb_<group> cookies name
  v1::Kind kind = v1::KIND_UNSPECIFIED;
  v1::Strategy strategy = v1::STRATEGY_WEIGHTED_ROUND_ROBIN;
  int64_t load_reset_interval_ms = 0;
  std::array<bool, 5> identifier_enabled{};  // indexed by v1::SessionIdentifier
  bool affinity_cookie_enabled = false;
  std::string affinity_cookie_name;           // "kwd_affinity" unless configured
  std::vector<ServerEntry> servers;           // the snapshot's order (by name)
  std::vector<balancer::ServerInput> inputs;  // parallel to `servers`
  NameIndex server_index;
  std::shared_ptr<session::SessionTable> sessions;
  v1::HealthCheck health_check;  // as compiled (defaults filled in); read by the health checker
  // TLS passthrough client-IP affinity; null when the group has none.
  std::shared_ptr<session::ClientIpTable> client_ips;
  // Mode REENCRYPT: the servers are reached over TLS only. `tls` is built
  // with the table (TableContext::upstream_tls); null or with an error: the
  // group's requests get 502, never clear text.
  bool reencrypt = false;
  std::shared_ptr<const tls::UpstreamTls> tls;

  bool Enabled(v1::SessionIdentifier identifier) const {
    return identifier_enabled[static_cast<size_t>(identifier)];
  }
  int FindServer(std::string_view name) const { return server_index.Find(name); }
};

// UrlMapping.spec.sapHeaders as compiled (each switch on, off or unset).
struct SapHeaderSwitches {
  v1::SapHeaderSwitch client_protocol = v1::SAP_HEADER_SWITCH_UNSPECIFIED;
  v1::SapHeaderSwitch access_points = v1::SAP_HEADER_SWITCH_UNSPECIFIED;

  static SapHeaderSwitches From(const v1::SapHeaders& headers) {
    return {headers.client_protocol(), headers.access_points()};
  }
  // Whether the field goes to a server of a group of `kind`: an unset switch
  // is on for ABAP groups (SAP's Web Dispatcher adds them for ABAP systems).
  static bool On(v1::SapHeaderSwitch s, v1::Kind kind) {
    return s == v1::SAP_HEADER_SWITCH_ON ||
           (s == v1::SAP_HEADER_SWITCH_UNSPECIFIED && kind == v1::KIND_ABAP);
  }
};

// The Strict-Transport-Security value of a compiled UrlMapping.spec.hsts
// ("max-age=31536000; includeSubDomains; preload"); "" when it has none.
std::string HstsFieldValue(const v1::Hsts& hsts);

struct RuleEntry {
  std::string prefix;
  v1::Kind kind = v1::KIND_UNSPECIFIED;
  int group = -1;  // index into RoutingTable::groups(), -1: none
  SapHeaderSwitches sap_headers;
  std::string hsts;  // Strict-Transport-Security for https responses; "": none
};

// One modification rule file (SAP's icm/HTTP/mod_<xx>), compiled once.
struct ModificationEntry {
  std::string prefix;  // lowercase; the request's path starts with it (any case)
  std::string source;  // "namespace/name" of the UrlMapping
  int index = 0;       // its position in the mapping's spec.modifications
  std::shared_ptr<const modification::Program> program;
};

struct VirtualHostEntry {
  std::string host;    // "" = any host
  std::string source;  // the UrlMapping ("namespace/name") that set the defaults
  v1::Kind default_root_handler = v1::KIND_JAVA;
  int default_abap_group = -1;
  int default_java_group = -1;
  std::vector<RuleEntry> rules;
  PrefixIndex prefixes;  // parallel to `rules`, lowercase
  PermissionTable permissions;
  int passthrough_group = -1;  // TLS passthrough connections with this SNI, -1: none
  SapHeaderSwitches sap_headers;  // for the root rule and the default groups
  // Modification rules in evaluation order; empty for most hosts (nothing
  // to do per request).
  std::vector<ModificationEntry> modifications;
  // The mappings on the host that name a SAP system (spec.system.sid), by
  // SID: each an entry of its own (its defaults, rules and prefixes; `sid`
  // set, no permissions, modifications or systems of its own).
  std::string sid;
  std::vector<VirtualHostEntry> systems;

  // The system entry for `sid` (any case) on this host, or null.
  const VirtualHostEntry* FindSystem(std::string_view sid) const;
  // Whether this is the system entry of `sid` (any case).
  bool IsSystem(std::string_view sid) const;
  std::string hsts;               // likewise (HstsFieldValue); "": none

  int DefaultGroup(v1::Kind kind) const {
    return kind == v1::KIND_ABAP ? default_abap_group : default_java_group;
  }
};

// What a table is built with: the registries shared by every table of a proxy.
struct TableContext {
  session::SessionRegistry* sessions = nullptr;
  ServerHealthRegistry* health = nullptr;
  // Builds the TLS settings of a REENCRYPT group (unset: none are built).
  std::function<std::shared_ptr<const tls::UpstreamTls>(const v1::Group&)> upstream_tls = {};
  // Compiled modification rule files kept from table to table (a 10,000-rule
  // file takes a third of a second to compile; endpoint changes rebuild the
  // table often). Null: every table compiles its own.
  class ModificationPrograms* programs = nullptr;
};

// Rule files compiled by earlier tables, by text. Build takes a file from
// here when it has it and keeps only the files of the newest table.
class ModificationPrograms {
 public:
  // The compiled `text`, or null with `error`.
  std::shared_ptr<const modification::Program> Get(const std::string& text,
                                                   modification::ParseError* error);
  // Forgets every file not in `texts`.
  void Retain(const std::vector<const std::string*>& texts);
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<const modification::Program>, std::less<>> programs_;
};

inline constexpr std::string_view kDefaultAffinityCookieName = "kwd_affinity";
inline constexpr size_t kDefaultSessionTableEntries = 50000;
inline constexpr int64_t kDefaultSessionIdleSeconds = 3600;
inline constexpr uint32_t kDefaultClientIpMask = 0xFFFFF000;  // 255.255.240.0 (SAP)
inline constexpr uint32_t kDefaultClientIpv6PrefixLength = 64;

class RoutingTable {
 public:
  // Builds a table, or returns null with `error` set when the snapshot breaks
  // its invariants (common/snapshot_io CheckSnapshot). On success the
  // registries drop state of groups and servers the snapshot no longer has.
  static std::shared_ptr<const RoutingTable> Build(const v1::Snapshot& snapshot,
                                                   const TableContext& context, std::string* error);

  const std::string& version() const { return version_; }
  std::span<const GroupEntry> groups() const { return groups_; }
  std::span<const VirtualHostEntry> virtual_hosts() const { return virtual_hosts_; }
  int FindGroup(std::string_view key) const;

  // The virtual host for a Host header value: lowercased, port stripped; an
  // exact entry, else the "*.suffix" entry with the longest suffix, else the
  // "" entry; null when none applies. `scratch` holds the lowercased host.
  const VirtualHostEntry* FindVirtualHost(std::string_view host_header,
                                          std::span<char> scratch) const {
    if (exact_hosts_.empty() && wildcard_hosts_.empty()) {
      // Only the any-host entry (the common single-mapping setup): nothing to parse.
      return any_host_ >= 0 ? &virtual_hosts_[any_host_] : nullptr;
    }
    return FindNamedVirtualHost(host_header, scratch);
  }
  // The group for a TLS passthrough connection with server name `sni`
  // (lowercase, as the ClientHello parser gives it; "" when none was sent):
  // the exact virtual host's passthrough group, else the longest "*.suffix"
  // one's, else the "" host's (the default); -1 when none applies.
  int FindPassthroughGroup(std::string_view sni) const;
  bool has_passthrough() const { return has_passthrough_; }
  // The system entry (VirtualHostEntry::systems) for `sid` (any case) on any
  // host, the first by host order ("" first), or null: for a SID no mapping
  // on the request's own host names.
  const VirtualHostEntry* FindSystemAnywhere(std::string_view sid) const;

 private:
  RoutingTable() = default;

  std::string version_;
  std::vector<GroupEntry> groups_;
  NameIndex group_index_;
  // FindVirtualHost when some entry names a host.
  const VirtualHostEntry* FindNamedVirtualHost(std::string_view host_header,
                                               std::span<char> scratch) const;

  std::vector<VirtualHostEntry> virtual_hosts_;
  NameIndex exact_hosts_;     // host -> virtual host index
  NameIndex wildcard_hosts_;  // ".suffix" -> virtual host index
  int any_host_ = -1;
  bool has_passthrough_ = false;
  std::vector<const VirtualHostEntry*> systems_;  // every host's, in host order
};

}  // namespace kwd::routing
