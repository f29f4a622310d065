// The UrlMapping processor: virtual hosts with their default groups, URL
// prefix rules and permissions. Older mappings win conflicts (the caller
// compiles them in age order); a rejected mapping serves its last accepted
// version.

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "controller/compile/internal.h"

namespace kwd::compile::internal {
namespace {

constexpr std::string_view kImplicitAbapDefaultGroup = "diag";
constexpr std::string_view kImplicitJavaDefaultGroup = "j2ee";

// UrlMapping.spec.sapHeaders: a switch left out stays unspecified (the
// proxy turns it on for ABAP groups).
v1::SapHeaders CompileSapHeaders(const model::SapHeadersSpec& spec) {
  auto compile = [](const std::optional<bool>& on) {
    return !on ? v1::SAP_HEADER_SWITCH_UNSPECIFIED
               : (*on ? v1::SAP_HEADER_SWITCH_ON : v1::SAP_HEADER_SWITCH_OFF);
  };
  v1::SapHeaders out;
  out.set_client_protocol(compile(spec.client_protocol));
  out.set_access_points(compile(spec.access_points));
  return out;
}

bool SameSapHeaders(const v1::SapHeaders& a, const v1::SapHeaders& b) {
  return a.client_protocol() == b.client_protocol() && a.access_points() == b.access_points();
}

// RFC 6797 6.1.1 lets max-age be any number; two years is what the HSTS
// preload list asks for at most and browsers cap at, one year what it asks
// for at least (with includeSubDomains) before it takes a host.
constexpr std::int64_t kHstsMaxAgeLimit = 63072000;
constexpr std::int64_t kHstsPreloadMinAge = 31536000;
constexpr std::int64_t kHstsDefaultMaxAge = 31536000;

// UrlMapping.spec.hsts; false (with InvalidField findings) when it is invalid.
bool CompileHsts(const model::HstsSpec& spec, v1::Hsts* out, Findings& findings) {
  const std::int64_t max_age = spec.max_age_seconds.value_or(kHstsDefaultMaxAge);
  bool ok = true;
  if (max_age < 0 || max_age > kHstsMaxAgeLimit) {
    findings.Reject(kReasonInvalidField,
                    "spec.hsts.maxAgeSeconds: must be an integer from 0 to " +
                        std::to_string(kHstsMaxAgeLimit) + " (two years; 0 tells browsers to "
                        "forget the host), got " + std::to_string(max_age));
    ok = false;
  }
  const bool include_subdomains = spec.include_subdomains.value_or(false);
  const bool preload = spec.preload.value_or(false);
  if (preload && (!include_subdomains || max_age < kHstsPreloadMinAge)) {
    findings.Reject(kReasonInvalidField,
                    "spec.hsts.preload: true requires includeSubDomains: true and "
                    "maxAgeSeconds >= " + std::to_string(kHstsPreloadMinAge) +
                        " (the HSTS preload list's rules), got includeSubDomains: " +
                        (include_subdomains ? "true" : "false") +
                        ", maxAgeSeconds: " + std::to_string(max_age));
    ok = false;
  }
  out->set_max_age_seconds(static_cast<std::uint32_t>(ok ? max_age : 0));
  out->set_include_subdomains(include_subdomains);
  out->set_preload(preload);
  return ok;
}

bool SameHsts(const v1::VirtualHost& vhost, const std::optional<v1::Hsts>& hsts) {
  if (!vhost.has_hsts() || !hsts) {
    return vhost.has_hsts() == hsts.has_value();
  }
  return vhost.hsts().max_age_seconds() == hsts->max_age_seconds() &&
         vhost.hsts().include_subdomains() == hsts->include_subdomains() &&
         vhost.hsts().preload() == hsts->preload();
}

}  // namespace

ObjectStatus UrlMappingCompiler::Compile(const UrlMapping& um, const UrlMapping* last_good) {
  Findings findings;
  const auto& spec = um.spec;
  const std::string& ns = um.metadata.namespace_;
  std::string source = GroupKey(ns, um.metadata.name);

  v1::Kind root = v1::KIND_JAVA;
  for (const std::string& error : um.field_errors) {
    findings.Reject(kReasonInvalidField, error);
  }
  CheckObjectName(um.metadata, findings);
  bool valid_spec = !findings.rejected();
  if (spec.default_root_handler) {
    if (auto parsed = ParseKind(*spec.default_root_handler, /*accept_j2ee=*/true)) {
      root = *parsed;
    } else {
      findings.Reject(kReasonInvalidField,
                      "spec.defaultRootHandler: " + Quote(*spec.default_root_handler) +
                          " is not one of abap, java (or j2ee)");
      valid_spec = false;
    }
  }
  std::vector<std::string> hosts;
  for (const auto& raw : spec.hosts) {
    std::string host = AsciiLower(raw);
    if (!IsVirtualHost(host)) {
      findings.Reject(kReasonInvalidField,
                      "spec.hosts: " + Quote(raw) + " is not a host name or *.suffix");
      valid_spec = false;
    } else if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) {
      hosts.push_back(host);
    }
  }
  std::vector<TlsEntry> tls_entries = tls_.Check(um, hosts, findings, &valid_spec);
  if (spec.hosts.empty()) {
    hosts.push_back("");
  }

  ResolvedDefault abap = ResolveDefault(ns, spec.default_groups.abap, kImplicitAbapDefaultGroup,
                                        "spec.defaultGroups.abap", findings);
  ResolvedDefault java = ResolveDefault(ns, spec.default_groups.java, kImplicitJavaDefaultGroup,
                                        "spec.defaultGroups.java", findings);

  // spec.system.sid: the SAP system a modification rule can send requests to.
  std::string sid;
  if (spec.system_sid) {
    if (IsSapSid(*spec.system_sid)) {
      sid = *spec.system_sid;
    } else {
      findings.Reject(kReasonInvalidField,
                      "spec.system.sid: " + Quote(*spec.system_sid) +
                          " is not a SAP system ID (an uppercase letter, then two uppercase "
                          "letters or digits, e.g. ERP)");
      valid_spec = false;
    }
  }

  // spec.secureAction and spec.hsts (redirect to https, HSTS).
  bool secure_redirect = false;
  if (spec.secure_action) {
    if (*spec.secure_action == "redirect") {
      secure_redirect = true;
    } else if (*spec.secure_action != "forbid") {
      findings.Reject(kReasonInvalidField, "spec.secureAction: " + Quote(*spec.secure_action) +
                                               " is not one of forbid, redirect");
      valid_spec = false;
    }
  }
  std::optional<v1::Hsts> hsts;
  if (spec.hsts) {
    if (!CompileHsts(*spec.hsts, &hsts.emplace(), findings)) {
      valid_spec = false;
    }
  }

  std::string passthrough;
  if (spec.passthrough_group) {
    passthrough = ResolveGroupRef(ns, *spec.passthrough_group, "spec.passthroughGroup", findings);
  }

  // Rules, validated once for all hosts.
  std::vector<v1::Rule> rules;
  std::set<std::string> prefixes;
  for (std::size_t i = 0; i < spec.rules.size(); ++i) {
    const auto& in = spec.rules[i];
    std::string field = "spec.rules[" + std::to_string(i) + "]";
    std::string prefix = AsciiLower(in.prefix);
    if (!ValidPrefixShape(prefix)) {
      findings.Reject(kReasonInvalidRule,
                      field + ".prefix: " + Quote(in.prefix) +
                          " must start and end with / and not be / alone; rule dropped");
      continue;
    }
    if (!IsPathText(prefix)) {
      findings.Reject(kReasonInvalidRule, field + ".prefix: " + Quote(in.prefix) + " " +
                                              std::string(kPathCharacters) + "; rule dropped");
      continue;
    }
    v1::Kind kind = v1::KIND_ABAP;  // URL mapping table entries are ICF (ABAP) prefixes
    if (in.kind) {
      auto parsed = ParseKind(*in.kind, /*accept_j2ee=*/true);
      if (!parsed) {
        findings.Reject(kReasonInvalidRule, field + ".kind: " + Quote(*in.kind) +
                                                " is not one of abap, java; rule dropped");
        continue;
      }
      kind = *parsed;
    }
    if (!prefixes.insert(prefix).second) {
      findings.Reject(kReasonInvalidRule,
                      field + ".prefix: " + Quote(prefix) + " is listed twice; rule dropped");
      continue;
    }
    v1::Rule rule;
    rule.set_prefix(prefix);
    rule.set_kind(kind);
    rule.set_source(source);
    if (in.logon_group) {
      rule.set_group(ResolveGroupRef(ns, *in.logon_group, field + ".logonGroup", findings));
    } else {
      rule.set_group(kind == v1::KIND_ABAP ? abap.resolved : java.resolved);
    }
    rules.push_back(std::move(rule));
  }
  std::set<std::string> derived;  // prefixes of rules from spec.fromSapSystem
  if (spec.from_sap_system) {
    AddSapSystemRules(objects_, accepted_groups_, ns, *spec.from_sap_system, source, abap, java,
                      spec.from_sap_system_refines.value_or(false), &prefixes, &rules, &derived,
                      findings);
  }
  // SAP's forwarding fields: every rule of the mapping carries its switches
  // (an unset one follows the group's kind in the proxy).
  const v1::SapHeaders sap_headers = CompileSapHeaders(spec.sap_headers);
  for (v1::Rule& rule : rules) {
    *rule.mutable_sap_headers() = sap_headers;
  }
  // HSTS likewise: the mapping's rules carry it, the host's root rule and
  // default groups take the defaults' owner's (below).
  if (hsts) {
    for (v1::Rule& rule : rules) {
      *rule.mutable_hsts() = *hsts;
    }
  }

  std::vector<v1::Permission> permissions;
  for (std::size_t i = 0; i < spec.permissions.size(); ++i) {
    const auto& in = spec.permissions[i];
    std::string field = "spec.permissions[" + std::to_string(i) + "]";
    v1::Permission permission;
    if (in.action == "permit") {
      permission.set_action(v1::PERMISSION_ACTION_PERMIT);
    } else if (in.action == "deny") {
      permission.set_action(v1::PERMISSION_ACTION_DENY);
    } else if (in.action == "secure") {
      permission.set_action(v1::PERMISSION_ACTION_SECURE);
      permission.set_redirect_to_https(secure_redirect);
    } else {
      findings.Reject(kReasonInvalidPermission, field + ".action: " + Quote(in.action) +
                                                    " is not one of permit, deny, secure; "
                                                    "entry dropped");
      continue;
    }
    // Lowercased like the rules: the proxy matches paths ASCII
    // case-insensitively, so a deny entry cannot be dodged by case.
    std::string pattern = AsciiLower(in.pattern);
    auto star = pattern.find('*', 1);
    if (pattern.empty() || (star != std::string::npos && star != pattern.size() - 1)) {
      findings.Reject(kReasonInvalidPermission,
                      field + ".pattern: " + Quote(in.pattern) +
                          " may hold * only at the start or the end; entry dropped");
      continue;
    }
    if (!IsPathText(pattern)) {
      findings.Reject(kReasonInvalidPermission, field + ".pattern: " + Quote(in.pattern) + " " +
                                                    std::string(kPathCharacters) +
                                                    "; entry dropped");
      continue;
    }
    permission.set_pattern(pattern);
    permissions.push_back(std::move(permission));
  }
  if (secure_redirect &&
      std::none_of(permissions.begin(), permissions.end(), [](const v1::Permission& p) {
        return p.action() == v1::PERMISSION_ACTION_SECURE;
      })) {
    findings.Note("spec.secureAction: redirect has no effect: spec.permissions has no secure entry");
  }

  // A rule file that does not compile: the mapping is never served without
  // it (its rules may be what keeps paths forbidden), only its last accepted
  // version, if any. kwd-proxy applies the rules (docs/modification-rules.md).
  std::vector<v1::Modification> modifications;
  if (!CompileModifications(um, source, &modifications, findings, modification_cache_,
                            &modification_budget_)) {
    valid_spec = false;
  }

  const bool serve_last_good = findings.rejected() && last_good != nullptr && !(*last_good == um);
  if (serve_last_good) {
    Compile(*last_good);  // its rules and permissions; its status is not this object's
  } else if (valid_spec) {
    for (const auto& host : hosts) {
      ApplyToHost(host, source, root, spec.default_root_handler.has_value(), abap, java,
                  passthrough, rules, derived, permissions, modifications, sid, sap_headers,
                  hsts, findings);
      // The root rule and the default groups follow the mapping that set
      // the defaults; a newer one asking otherwise is told so.
      HostEntry& entry = hosts_.at(host);
      if (entry.owner == source) {
        if (hsts) {
          *entry.vhost.mutable_hsts() = *hsts;
        }
        *entry.vhost.mutable_sap_headers() = sap_headers;
        continue;
      }
      auto ignored = [&](const std::string& field) {
        findings.Reject(kReasonConflicted,
                        field + " ignored for the root rule and default groups on " +
                            (host.empty() ? std::string("any host") : "host " + host) +
                            ": UrlMapping " + entry.owner +
                            " (older) sets the defaults there (its rules keep it)");
      };
      if (hsts && !SameHsts(entry.vhost, hsts)) {
        ignored("spec.hsts");
      }
      if ((spec.sap_headers.client_protocol || spec.sap_headers.access_points) &&
          !SameSapHeaders(entry.vhost.sap_headers(), sap_headers)) {
        ignored("spec.sapHeaders");
      }
    }
    tls_.Serve(source, tls_entries,
               [this](const std::string& host) { return VirtualHostOwner(host); }, findings);
  }

  std::string where = spec.hosts.empty() ? "any host" : "hosts " + JoinStrings(hosts, ", ");
  std::string summary =
      std::to_string(rules.size()) + (rules.size() == 1 ? " rule, " : " rules, ") +
      (derived.empty() ? std::string()
                       : "(" + std::to_string(derived.size()) + " from SapSystem " +
                             *spec.from_sap_system + "), ") +
      std::to_string(permissions.size()) +
      (permissions.size() == 1 ? " permission" : " permissions") +
      (modifications.empty() ? std::string()
                             : ", " + std::to_string(modifications.size()) +
                                   (modifications.size() == 1 ? " modification rule file"
                                                              : " modification rule files")) +
      " on " + where;
  if (!sid.empty()) {
    summary += ", system " + sid;
  }
  if (secure_redirect) {
    summary += "; secure entries redirect plain http to https";
  }
  if (hsts) {
    summary += "; HSTS max-age=" + std::to_string(hsts->max_age_seconds());
  }
  ObjectStatus status;
  status.kind = std::string(model::kUrlMappingKind);
  status.namespace_ = ns;
  status.name = um.metadata.name;
  status.generation = um.metadata.generation;
  // For the printer columns (a JSONPath column shows one value of a list).
  status.rules = static_cast<std::int32_t>(rules.size());
  status.hosts = spec.hosts.empty() ? "*" : JoinStrings(hosts, ",");
  if (!spec.tls.empty()) {
    summary += ", " + std::to_string(tls_entries.size()) + " of " +
               std::to_string(spec.tls.size()) +
               (spec.tls.size() == 1 ? " TLS certificate" : " TLS certificates") + " usable";
  }
  status.conditions = findings.Conditions(
      summary, spec.tls.empty() ? "all LogonGroups resolved"
                                : "all LogonGroups and Secrets resolved");
  if (serve_last_good) {
    MarkServingLastGood(last_good->metadata.generation, &status);
  }
  return status;
}

const std::string* UrlMappingCompiler::VirtualHostOwner(const std::string& host) const {
  if (auto it = hosts_.find(host); it != hosts_.end()) {
    return &it->second.owner;
  }
  if (std::size_t dot = host.find('.'); dot != std::string::npos && !host.starts_with("*.")) {
    if (auto it = hosts_.find("*" + host.substr(dot)); it != hosts_.end()) {
      return &it->second.owner;
    }
  }
  if (auto it = hosts_.find(""); it != hosts_.end()) {
    return &it->second.owner;
  }
  return nullptr;
}

void UrlMappingCompiler::AppendVirtualHosts(v1::Snapshot* snapshot) {
  for (auto& [host, entry] : hosts_) {
    for (auto& [prefix, rule] : entry.rules) {
      *entry.vhost.add_rules() = std::move(rule);
    }
    for (auto& [sid, system] : entry.systems) {
      *entry.vhost.add_systems() = std::move(system);
    }
    *snapshot->add_virtual_hosts() = std::move(entry.vhost);
  }
}

// The key of an accepted LogonGroup, else "" plus LogonGroupNotFound.
std::string UrlMappingCompiler::ResolveGroupRef(const std::string& ns, const std::string& name,
                                                const std::string& field, Findings& findings) {
  std::string key = GroupKey(ns, name);
  if (accepted_groups_.count(key) > 0) {
    return key;
  }
  findings.Unresolved(
      kReasonLogonGroupNotFound,
      field + ": LogonGroup " + key +
          (existing_groups_.count(key) > 0 ? " is not accepted" : " does not exist") +
          " (requests answered 503)");
  return "";
}

ResolvedDefault UrlMappingCompiler::ResolveDefault(const std::string& ns,
                                                   const std::optional<std::string>& name,
                                                   std::string_view implicit_name,
                                                   const std::string& field, Findings& findings) {
  ResolvedDefault out;
  if (name) {
    out.explicit_ = true;
    out.intended = GroupKey(ns, *name);
    out.resolved = ResolveGroupRef(ns, *name, field, findings);
    return out;
  }
  // The implicit SAP internal groups: used when they exist, no error when not.
  std::string key = GroupKey(ns, implicit_name);
  if (accepted_groups_.count(key) > 0) {
    out.intended = key;
    out.resolved = key;
  }
  return out;
}

void UrlMappingCompiler::ApplyToHost(const std::string& host, const std::string& source,
                                     v1::Kind root, bool explicit_root, const ResolvedDefault& abap,
                                     const ResolvedDefault& java, const std::string& passthrough,
                                     const std::vector<v1::Rule>& rules,
                                     const std::set<std::string>& derived,
                                     const std::vector<v1::Permission>& permissions,
                                     const std::vector<v1::Modification>& modifications,
                                     const std::string& sid, const v1::SapHeaders& sap_headers,
                                     const std::optional<v1::Hsts>& hsts, Findings& findings) {
  std::string host_label = host.empty() ? "any host" : "host " + host;
  auto [it, created] = hosts_.try_emplace(host);
  HostEntry& entry = it->second;
  if (!sid.empty()) {
    // Its own routing, for the requests a rule sends to its SID.
    auto [system_it, new_system] = entry.systems.try_emplace(sid);
    if (new_system) {
      v1::SystemRoute& system = system_it->second;
      system.set_sid(sid);
      system.set_source(source);
      system.set_default_root_handler(root);
      system.set_default_abap_group(abap.resolved);
      system.set_default_java_group(java.resolved);
      std::vector<const v1::Rule*> sorted;
      for (const auto& rule : rules) {
        sorted.push_back(&rule);
      }
      std::sort(sorted.begin(), sorted.end(),
                [](const v1::Rule* a, const v1::Rule* b) { return a->prefix() < b->prefix(); });
      for (const v1::Rule* rule : sorted) {
        *system.add_rules() = *rule;
      }
      *system.mutable_sap_headers() = sap_headers;
      if (hsts) {
        *system.mutable_hsts() = *hsts;
      }
    } else {
      findings.Reject(kReasonConflicted, "spec.system.sid " + sid + " ignored on " + host_label +
                                             ": UrlMapping " + system_it->second.source() +
                                             " (older) is system " + sid + " there");
    }
  }
  // A mapping for another SAP system than the host's owner's is reached by
  // its SID only: its rules and defaults stay out of the host's shared table
  // (no conflict with the owner's), its permissions and rules files join.
  const bool sid_only = !created && !sid.empty() && sid != entry.owner_sid;
  if (created) {
    entry.owner_sid = sid;
    entry.owner = source;
    entry.vhost.set_host(host);
    entry.vhost.set_default_root_handler(root);
    entry.vhost.set_default_abap_group(abap.resolved);
    entry.vhost.set_default_java_group(java.resolved);
    entry.vhost.set_passthrough_group(passthrough);
    entry.vhost.set_source(source);
    entry.intended_abap = abap.intended;
    entry.intended_java = java.intended;
  } else if (!sid_only) {
    std::vector<std::string> differing;
    if (explicit_root && root != entry.vhost.default_root_handler()) {
      differing.push_back("defaultRootHandler " + std::string(KindName(root)));
    }
    if (abap.explicit_ && abap.intended != entry.intended_abap) {
      differing.push_back("defaultGroups.abap " + abap.intended);
    }
    if (java.explicit_ && java.intended != entry.intended_java) {
      differing.push_back("defaultGroups.java " + java.intended);
    }
    if (!passthrough.empty()) {
      if (entry.vhost.passthrough_group().empty()) {
        entry.vhost.set_passthrough_group(passthrough);
      } else if (entry.vhost.passthrough_group() != passthrough) {
        differing.push_back("passthroughGroup " + passthrough);
      }
    }
    if (!differing.empty()) {
      findings.Reject(kReasonConflicted, JoinStrings(differing, ", ") + " ignored on " +
                                             host_label + ": UrlMapping " + entry.owner +
                                             " (older) sets the defaults there");
    }
  }
  for (const auto& rule : sid_only ? std::vector<v1::Rule>() : rules) {
    auto [rule_it, inserted] = entry.rules.try_emplace(rule.prefix(), rule);
    if (!inserted && derived.count(rule.prefix()) > 0) {
      // A rule from the SapSystem's URL map is no error of this object.
      findings.Note("rule " + rule.prefix() + " from spec.fromSapSystem on " + host_label +
                    " not used: UrlMapping " + rule_it->second.source() + " (older) defines it");
    } else if (!inserted) {
      findings.Reject(kReasonConflicted, "rule " + rule.prefix() + " on " + host_label +
                                             " dropped: UrlMapping " + rule_it->second.source() +
                                             " (older) defines it");
    }
  }
  for (const auto& permission : permissions) {
    *entry.vhost.add_permissions() = permission;
  }
  // Older mappings first (the caller's order), each mapping's in its order.
  for (const auto& modification : modifications) {
    *entry.vhost.add_modifications() = modification;
  }
}

}  // namespace kwd::compile::internal
