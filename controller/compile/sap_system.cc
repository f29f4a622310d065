// The SapSystem processor: what a SapSystem and the poller's server list of
// it feed into the compile: the servers of a LogonGroup with
// spec.backend.sapSystem, the rules of a UrlMapping with
// spec.fromSapSystem, and the SapSystem's own status.

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "controller/compile/internal.h"
#include "controller/sapsystem/spec.h"

namespace kwd::compile::internal {

// The servers of a SapSystem: the instances of its last good server list
// that have the port the group talks to (HTTP; HTTPS with reencrypt) and
// belong to the group's stack, or to the named SMLG logon group. Every
// name and address in the list was checked by the poller; checked again
// here, as the compile trusts no input.
void CompileSapSystemBackend(GroupInputs& inputs, const LogonGroup& lg,
                             const model::SapSystemBackend& sap, v1::Kind kind,
                             std::uint32_t default_capacity, v1::Group* group, Findings& findings,
                             std::string* resolved_summary) {
  if (sap.name.empty()) {
    std::string message = "spec.backend.sapSystem.name: must not be empty";
    findings.Reject(kReasonInvalidBackend, message);
    findings.Unresolved(kReasonInvalidBackend, message);
    return;
  }
  if (sap.logon_group && (sap.logon_group->empty() || !IsServerName(*sap.logon_group))) {
    std::string message = "spec.backend.sapSystem.logonGroup: " + Quote(*sap.logon_group) +
                          " is not a valid logon group name";
    findings.Reject(kReasonInvalidField, message);
    findings.Unresolved(kReasonInvalidField, message);
    return;
  }
  const std::string& ns = lg.metadata.namespace_;
  std::string system_ref = "SapSystem " + GroupKey(ns, sap.name);
  const model::SapSystem* system = inputs.FindSapSystem(ns, sap.name);
  if (system == nullptr) {
    findings.Unresolved(kReasonSapSystemNotFound, system_ref + " not found");
    return;
  }
  const model::SapServerList* list = inputs.FindServerList(ns, sap.name);
  if (list == nullptr || !list->has_list) {
    std::string why = list == nullptr ? std::string("not polled yet") : list->message;
    findings.Unresolved(kReasonNoServerList, system_ref + " has no server list yet: " + why);
    return;
  }
  const bool https = lg.spec.upstream_tls.mode.value_or("none") == "reencrypt";
  // The poller applied the SapSystem's address rule; applied again with
  // the current spec (a list polled before allowedNetworks was narrowed
  // may still be here). The controller's own addresses are the poller's
  // part: the compile does no I/O.
  sapsystem::AddressPolicy policy;
  if (sapsystem::SpecCheck check = sapsystem::CheckSapSystem(*system); check.config) {
    policy.allowed = check.config->allowed_networks;
  }
  std::size_t refused = 0;
  const std::vector<std::string>* members = nullptr;
  if (sap.logon_group) {
    if (!list->has_groups) {
      findings.Unresolved(kReasonNoServerList,
                          system_ref + " has no logon group information (spec.logonGroups " +
                              "true on the SapSystem?): " + list->message);
      return;
    }
    auto it = list->logon_groups.find(*sap.logon_group);
    if (it == list->logon_groups.end()) {
      std::vector<std::string> known;
      for (const auto& [name, group_members] : list->logon_groups) {
        if (known.size() == 10) {
          known.push_back("...");
          break;
        }
        known.push_back(name);
      }
      findings.Unresolved(kReasonLogonGroupNotFound,
                          "logon group " + Quote(*sap.logon_group) + " not in " + system_ref +
                              " (groups: " + JoinStrings(known, ", ") + ")");
      return;
    }
    members = &it->second;
  }
  std::size_t without_port = 0;
  for (const model::SapInstance& instance : list->instances) {
    std::uint32_t port = https ? instance.https_port : instance.http_port;
    if (members != nullptr) {
      if (!std::binary_search(members->begin(), members->end(), instance.name)) {
        continue;
      }
    } else if (instance.abap || instance.java) {
      // SAP's internal groups: !DIAG for abap, !J2EE for java.
      if ((kind == v1::KIND_ABAP && !instance.abap) || (kind == v1::KIND_JAVA && !instance.java)) {
        continue;
      }
    }
    if (port == 0) {
      ++without_port;
      continue;
    }
    if (!IsServerName(instance.name) || !IsServerAddress(instance.address)) {
      findings.Note("instance " + Quote(instance.name) + " left out: invalid name or address");
      continue;
    }
    if (std::string why = sapsystem::RefusalReason(policy, instance.address); !why.empty()) {
      if (++refused <= 5) {
        findings.Note("instance " + Quote(instance.name) + " left out: address " +
                      instance.address + " refused: " + why);
      }
      continue;
    }
    v1::Server* server = group->add_servers();
    server->set_name(instance.name);
    server->set_address(instance.address);
    server->set_port(port);
    server->set_capacity(instance.capacity > 0 ? instance.capacity : default_capacity);
    server->set_state(v1::SERVER_STATE_READY);
  }
  if (without_port > 0) {
    findings.Note(std::to_string(without_port) + (without_port == 1 ? " instance" : " instances") +
                  " without an " + (https ? "HTTPS" : "HTTP") + " port left out");
  }
  *resolved_summary = system_ref + (sap.logon_group ? ", logon group " + *sap.logon_group : "") +
                      ": " + std::to_string(group->servers_size()) + " of " +
                      std::to_string(list->instances.size()) + " instances";
}

ObjectStatus SapSystemStatus(const model::SapSystem& system, const SapServerList* list) {
  ObjectStatus status;
  status.kind = std::string(model::kSapSystemKind);
  status.namespace_ = system.metadata.namespace_;
  status.name = system.metadata.name;
  status.generation = system.metadata.generation;
  Findings findings;
  CheckObjectName(system.metadata, findings);
  sapsystem::SpecCheck check = sapsystem::CheckSapSystem(system);
  for (const std::string& error : check.errors) {
    findings.Reject(kReasonInvalidField, error);
  }
  std::string summary;
  if (check.config) {
    summary = "message server " + sapsystem::ServerListUrl(*check.config) + ", every " +
              std::to_string(check.config->refresh_interval_seconds) + "s";
  }
  Condition accepted = findings.Conditions(summary, "").front();
  status.conditions.push_back(std::move(accepted));
  // Refreshed comes from the poller's list: none before its first poll (and
  // none offline, e.g. `kwd-controller validate`).
  if (list == nullptr) {
    return status;
  }
  Condition refreshed;
  refreshed.type = std::string(kRefreshed);
  refreshed.status = list->refreshed ? "True" : "False";
  refreshed.reason = list->reason.empty() ? std::string(kReasonPending) : list->reason;
  refreshed.message = EscapeControlCharacters(list->message);
  status.servers = static_cast<std::int32_t>(list->instances.size());
  status.conditions.push_back(std::move(refreshed));
  return status;
}

namespace {

// Whether a LogonGroup re-encrypts to its servers; nullopt for no group
// ("" or unknown: nothing is sent anywhere).
std::optional<bool> Reencrypts(const ObjectSet& objects, const std::string& group_key) {
  std::size_t slash = group_key.find('/');
  if (group_key.empty() || slash == std::string::npos) {
    return std::nullopt;
  }
  auto it = objects.logon_groups().find({group_key.substr(0, slash), group_key.substr(slash + 1)});
  if (it == objects.logon_groups().end()) {
    return std::nullopt;
  }
  return it->second.spec.upstream_tls.mode.value_or("none") == "reencrypt";
}

}  // namespace

// spec.fromSapSystem: the SapSystem's ICF URL prefixes as rules, after
// the mapping's own (which win on the same prefix). A prefix with an SMLG
// GROUP goes to the accepted LogonGroup of this namespace whose backend is
// that SapSystem's logon group (the first by name), else to the default
// group of its kind. Every prefix and group name was checked by the
// poller; checked again here.
void AddSapSystemRules(const ObjectSet& objects, const std::set<std::string>& accepted_groups,
                       const std::string& ns, const std::string& system_name,
                       const std::string& source, const ResolvedDefault& abap,
                       const ResolvedDefault& java, bool may_refine,
                       std::set<std::string>* prefixes, std::vector<v1::Rule>* rules,
                       std::set<std::string>* derived, Findings& findings) {
  if (!IsObjectName(system_name)) {
    findings.Reject(kReasonInvalidField,
                    "spec.fromSapSystem: " + Quote(system_name) + " is not a valid SapSystem name");
    return;
  }
  std::string system_ref = "SapSystem " + GroupKey(ns, system_name);
  if (objects.sap_systems().find({ns, system_name}) == objects.sap_systems().end()) {
    findings.Unresolved(kReasonSapSystemNotFound,
                        "spec.fromSapSystem: " + system_ref + " not found (no rules from it)");
    return;
  }
  auto list_it = objects.sap_server_lists().find({ns, system_name});
  const SapServerList* list =
      list_it == objects.sap_server_lists().end() ? nullptr : &list_it->second;
  if (list == nullptr || !list->has_url_map) {
    std::string why = list == nullptr ? std::string("not polled yet") : list->message;
    findings.Unresolved(kReasonNoUrlMap,
                        "spec.fromSapSystem: " + system_ref +
                            " has no URL map yet (spec.urlMap true on the SapSystem?): " + why);
    return;
  }
  // SMLG group -> LogonGroup key, from the LogonGroups of this namespace.
  std::map<std::string, std::string> smlg_groups;
  for (const auto& [key, lg] : objects.logon_groups()) {
    if (key.first != ns || !lg.spec.backend || !lg.spec.backend->sap_system ||
        lg.spec.backend->sap_system->name != system_name ||
        !lg.spec.backend->sap_system->logon_group) {
      continue;
    }
    std::string group_key = GroupKey(ns, key.second);
    if (accepted_groups.count(group_key) > 0) {
      smlg_groups.try_emplace(*lg.spec.backend->sap_system->logon_group, group_key);
    }
  }
  std::set<std::string> unmapped;
  std::size_t shadowed = 0;
  std::size_t invalid = 0;
  // The operator's rules: the ones in `rules` before this adds any.
  const std::size_t own_rules = rules->size();
  std::vector<std::string> covered;  // left out: under an own rule
  std::vector<std::string> lowered;  // left out: would lower the upstream TLS
  for (const model::SapUrlPrefix& entry : list->url_prefixes) {
    std::string prefix = AsciiLower(entry.prefix);
    if (!ValidPrefixShape(prefix) || !IsPathText(prefix) ||
        (!entry.logon_group.empty() && !IsServerName(entry.logon_group))) {
      ++invalid;
      continue;
    }
    if (prefixes->count(prefix) > 0) {
      ++shadowed;  // the mapping's own rule wins
      continue;
    }
    v1::Kind kind = entry.java ? v1::KIND_JAVA : v1::KIND_ABAP;
    std::string group = kind == v1::KIND_ABAP ? abap.resolved : java.resolved;
    if (!entry.logon_group.empty()) {
      if (auto it = smlg_groups.find(entry.logon_group); it != smlg_groups.end()) {
        group = it->second;
      } else if (unmapped.size() < 10) {
        unmapped.insert(entry.logon_group);
      }
    }
    // The traffic this prefix would take: that of the longest own rule it
    // lies under (prefixes end in "/", so this is a path-segment match),
    // else that of the default group unmatched paths go to (java).
    const v1::Rule* under = nullptr;
    for (std::size_t i = 0; i < own_rules; ++i) {
      const v1::Rule& own = (*rules)[i];
      if (prefix.starts_with(own.prefix()) &&
          (under == nullptr || own.prefix().size() > under->prefix().size())) {
        under = &own;
      }
    }
    if (under != nullptr && !may_refine) {
      covered.push_back(prefix + " (under " + under->prefix() + ")");
      continue;
    }
    const std::string& before = under != nullptr ? under->group() : java.resolved;
    // Lowered: traffic that went to a re-encrypting group would go in clear.
    // Traffic that went nowhere (no group: 503) or to a plain group loses
    // nothing.
    if (Reencrypts(objects, before) == true && Reencrypts(objects, group) == false) {
      lowered.push_back(prefix + " (" + group + ", plain HTTP, instead of " + before +
                        ", re-encrypted)");
      continue;
    }
    prefixes->insert(prefix);
    v1::Rule rule;
    rule.set_prefix(prefix);
    rule.set_kind(kind);
    rule.set_source(source);
    rule.set_group(group);
    derived->insert(prefix);
    rules->push_back(std::move(rule));
  }
  std::string note = std::to_string(derived->size()) + " rules from " + system_ref;
  if (shadowed > 0) {
    note += " (" + std::to_string(shadowed) + " prefixes defined by spec.rules)";
  }
  if (invalid > 0) {
    note += "; " + std::to_string(invalid) + " invalid prefixes left out";
  }
  // At most 10 named; the rest counted.
  auto listed = [](const std::vector<std::string>& items) {
    std::vector<std::string> shown(items.begin(),
                                   items.begin() + std::min<std::size_t>(items.size(), 10));
    if (items.size() > shown.size()) {
      shown.push_back("...");
    }
    return JoinStrings(shown, ", ");
  };
  if (!covered.empty()) {
    note += "; " + std::to_string(covered.size()) +
            (covered.size() == 1 ? " prefix" : " prefixes") +
            " under spec.rules left out (spec.fromSapSystemRefines: false): " + listed(covered);
  }
  if (!lowered.empty()) {
    note += "; " + std::to_string(lowered.size()) +
            (lowered.size() == 1
                 ? " prefix left out as it would lower the upstream TLS of the traffic it takes: "
                 : " prefixes left out as they would lower the upstream TLS of the traffic they "
                   "take: ") +
            listed(lowered);
  }
  if (!unmapped.empty()) {
    note +=
        "; logon groups without a LogonGroup (backend.sapSystem.logonGroup), default group "
        "used: " +
        JoinStrings(std::vector<std::string>(unmapped.begin(), unmapped.end()), ", ");
  }
  findings.Note(note);
}

}  // namespace kwd::compile::internal
