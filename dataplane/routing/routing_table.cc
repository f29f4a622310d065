#include "dataplane/routing/routing_table.h"

#include <algorithm>

#include "common/host_name.h"
#include "common/snapshot_io.h"
#include "dataplane/routing/path.h"

namespace kwd::routing {
namespace {

std::string Lowercase(std::string_view in) {
  std::string out(in.size(), '\0');
  AsciiLowerInto(in, out.data());
  return out;
}

std::string_view TrimSpaces(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) {
    s.remove_suffix(1);
  }
  return s;
}

// A virtual host's or a system's routes: defaults, rules and their index.
void FillRoutes(VirtualHostEntry* entry, const RoutingTable& table, v1::Kind root,
                const std::string& abap, const std::string& java,
                const google::protobuf::RepeatedPtrField<v1::Rule>& rules,
                const v1::SapHeaders& sap_headers, std::string hsts) {
  entry->default_root_handler = root == v1::KIND_ABAP ? v1::KIND_ABAP : v1::KIND_JAVA;
  entry->default_abap_group = table.FindGroup(abap);
  entry->default_java_group = table.FindGroup(java);
  std::vector<std::string> lowercase_prefixes;
  for (const v1::Rule& rule : rules) {
    entry->rules.push_back(RuleEntry{rule.prefix(), rule.kind(), table.FindGroup(rule.group()),
                                     SapHeaderSwitches::From(rule.sap_headers()),
                                     rule.has_hsts() ? HstsFieldValue(rule.hsts()) : ""});
    lowercase_prefixes.push_back(Lowercase(rule.prefix()));
  }
  entry->prefixes = PrefixIndex(std::move(lowercase_prefixes));
  entry->sap_headers = SapHeaderSwitches::From(sap_headers);
  entry->hsts = std::move(hsts);
}

}  // namespace

std::shared_ptr<const modification::Program> ModificationPrograms::Get(
    const std::string& text, modification::ParseError* error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = programs_.find(text); it != programs_.end()) {
      return it->second;
    }
  }
  std::shared_ptr<const modification::Program> program =
      modification::Program::CompileText(text, error);
  if (program != nullptr) {
    std::lock_guard<std::mutex> lock(mu_);
    programs_.emplace(text, program);
  }
  return program;
}

void ModificationPrograms::Retain(const std::vector<const std::string*>& texts) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = programs_.begin(); it != programs_.end();) {
    bool used = std::any_of(texts.begin(), texts.end(),
                            [&](const std::string* text) { return *text == it->first; });
    it = used ? std::next(it) : programs_.erase(it);
  }
}

size_t ModificationPrograms::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return programs_.size();
}

bool VirtualHostEntry::IsSystem(std::string_view wanted) const {
  return sid.size() == wanted.size() &&
         std::equal(wanted.begin(), wanted.end(), sid.begin(), [](char a, char b) {
           return (a >= 'a' && a <= 'z' ? static_cast<char>(a - 'a' + 'A') : a) == b;
         });
}

const VirtualHostEntry* VirtualHostEntry::FindSystem(std::string_view wanted) const {
  for (const VirtualHostEntry& system : systems) {
    if (system.IsSystem(wanted)) {
      return &system;
    }
  }
  return nullptr;
}

std::string HstsFieldValue(const v1::Hsts& hsts) {
  std::string value = "max-age=" + std::to_string(hsts.max_age_seconds());
  if (hsts.include_subdomains()) {
    value += "; includeSubDomains";
  }
  if (hsts.preload()) {
    value += "; preload";
  }
  return value;
}

std::shared_ptr<const RoutingTable> RoutingTable::Build(const v1::Snapshot& snapshot,
                                                        const TableContext& context,
                                                        std::string* error) {
  std::vector<std::string> problems = CheckSnapshot(snapshot);
  if (!problems.empty()) {
    std::string message = "invalid snapshot: ";
    for (size_t i = 0; i < problems.size(); ++i) {
      message += (i == 0 ? "" : "; ") + problems[i];
    }
    *error = std::move(message);
    return nullptr;
  }
  if (context.sessions == nullptr || context.health == nullptr) {
    *error = "routing table context lacks a session or health registry";
    return nullptr;
  }

  std::shared_ptr<RoutingTable> table(new RoutingTable());
  table->version_ = snapshot.version();
  std::vector<std::string> live_groups;
  // (group key, server name) of each server in order, for the health registry.
  std::vector<std::pair<std::string_view, std::string_view>> server_names;

  table->groups_.reserve(snapshot.groups_size());
  for (const v1::Group& group : snapshot.groups()) {
    GroupEntry entry;
    entry.key = group.key();
    size_t slash = entry.key.rfind('/');
    entry.name = slash == std::string::npos ? entry.key : entry.key.substr(slash + 1);
    entry.kind = group.kind();
    entry.strategy = group.strategy();
    entry.load_reset_interval_ms = int64_t{group.load_reset_interval_seconds()} * 1000;
    entry.health_check = group.health_check();
    entry.reencrypt = group.upstream_tls().mode() == v1::UPSTREAM_TLS_MODE_REENCRYPT;
    if (entry.reencrypt && context.upstream_tls) {
      entry.tls = context.upstream_tls(group);
    }
    const v1::SessionAffinity& affinity = group.session_affinity();
    for (int identifier : affinity.identifiers()) {
      if (identifier > 0 && static_cast<size_t>(identifier) < entry.identifier_enabled.size()) {
        entry.identifier_enabled[identifier] = true;
      }
    }
    entry.affinity_cookie_enabled = affinity.affinity_cookie_enabled();
    entry.affinity_cookie_name = affinity.affinity_cookie_name().empty()
                                     ? std::string(kDefaultAffinityCookieName)
                                     : affinity.affinity_cookie_name();
    entry.servers.reserve(static_cast<size_t>(group.servers_size()));
    for (const v1::Server& server : group.servers()) {
      ServerEntry s;
      s.name = server.name();
      s.address = server.address();
      s.port = server.port();
      s.capacity = std::max<uint32_t>(server.capacity(), 1);
      s.state = server.state();
      s.pod = server.pod();
      server_names.emplace_back(group.key(), server.name());
      entry.server_index.Insert(s.name, static_cast<int>(entry.servers.size()));
      entry.servers.push_back(std::move(s));
    }
    session::SessionTableOptions options;
    options.max_entries = affinity.session_table_max_entries() > 0
                              ? affinity.session_table_max_entries()
                              : kDefaultSessionTableEntries;
    options.idle_timeout_ms = int64_t{affinity.session_table_idle_timeout_seconds() > 0
                                          ? affinity.session_table_idle_timeout_seconds()
                                          : kDefaultSessionIdleSeconds} *
                              1000;
    entry.sessions = context.sessions->TableFor(entry.key, options);
    entry.sessions->Reconfigure(options);
    if (const v1::ClientIpAffinity& client_ip = affinity.client_ip(); client_ip.enabled()) {
      session::ClientIpTableOptions ip_options;
      ip_options.ipv4_mask =
          client_ip.ipv4_mask() != 0 ? client_ip.ipv4_mask() : kDefaultClientIpMask;
      ip_options.ipv6_prefix_length = client_ip.ipv6_prefix_length() != 0
                                          ? client_ip.ipv6_prefix_length()
                                          : kDefaultClientIpv6PrefixLength;
      ip_options.max_entries =
          client_ip.max_entries() > 0 ? client_ip.max_entries() : kDefaultSessionTableEntries;
      ip_options.idle_timeout_ms =
          int64_t{client_ip.idle_timeout_seconds() > 0 ? client_ip.idle_timeout_seconds()
                                                       : kDefaultSessionIdleSeconds} *
          1000;
      entry.client_ips = context.sessions->ClientIpTableFor(entry.key, ip_options);
    }
    live_groups.push_back(entry.key);
    table->group_index_.Insert(entry.key, static_cast<int>(table->groups_.size()));
    table->groups_.push_back(std::move(entry));
  }

  std::vector<const std::string*> rule_texts;
  for (const v1::VirtualHost& vhost : snapshot.virtual_hosts()) {
    VirtualHostEntry entry;
    entry.host = vhost.host();
    entry.source = vhost.source();
    FillRoutes(&entry, *table, vhost.default_root_handler(), vhost.default_abap_group(),
               vhost.default_java_group(), vhost.rules(), vhost.sap_headers(),
               vhost.has_hsts() ? HstsFieldValue(vhost.hsts()) : "");
    entry.permissions = PermissionTable(vhost.permissions());
    entry.passthrough_group = table->FindGroup(vhost.passthrough_group());
    for (const v1::SystemRoute& system : vhost.systems()) {
      VirtualHostEntry& sub = entry.systems.emplace_back();
      sub.host = entry.host;
      sub.source = system.source();
      sub.sid = system.sid();
      FillRoutes(&sub, *table, system.default_root_handler(), system.default_abap_group(),
                 system.default_java_group(), system.rules(), system.sap_headers(),
                 system.has_hsts() ? HstsFieldValue(system.hsts()) : "");
    }
    // Rule files: compiled here, off the request path. The controller
    // checked them; one that fails here refuses the whole snapshot (NACK),
    // so the proxy never serves a host with its rules missing.
    for (const v1::Modification& modification : vhost.modifications()) {
      modification::ParseError parse_error;
      std::shared_ptr<const modification::Program> program =
          context.programs != nullptr
              ? context.programs->Get(modification.rules(), &parse_error)
              : std::shared_ptr<const modification::Program>(
                    modification::Program::CompileText(modification.rules(), &parse_error));
      if (program == nullptr) {
        *error = "virtual host \"" + vhost.host() + "\": modification rules " +
                 modification.source() + " spec.modifications[" +
                 std::to_string(modification.index()) + "]: " + parse_error.ToString();
        return nullptr;
      }
      rule_texts.push_back(&modification.rules());
      entry.modifications.push_back(ModificationEntry{Lowercase(modification.prefix()),
                                                      modification.source(),
                                                      modification.index(), std::move(program)});
    }
    table->has_passthrough_ = table->has_passthrough_ || entry.passthrough_group >= 0;
    const int index = static_cast<int>(table->virtual_hosts_.size());
    std::string host = Lowercase(entry.host);
    if (host.empty()) {
      table->any_host_ = index;
    } else if (host.starts_with("*.")) {
      table->wildcard_hosts_.Insert(std::string_view(host).substr(1), index);
    } else {
      table->exact_hosts_.Insert(host, index);
    }
    table->virtual_hosts_.push_back(std::move(entry));
  }

  if (context.programs != nullptr) {
    context.programs->Retain(rule_texts);
  }
  for (const VirtualHostEntry& vhost : table->virtual_hosts_) {
    for (const VirtualHostEntry& system : vhost.systems) {
      table->systems_.push_back(&system);
    }
  }
  std::sort(live_groups.begin(), live_groups.end());
  context.sessions->Retain(live_groups);
  // Health state: kept for servers that stay, new for new ones, forgotten
  // for the rest; then the balancer inputs point at it.
  std::vector<std::shared_ptr<balancer::ServerHealth>> health =
      context.health->Replace(server_names);
  size_t next_health = 0;
  for (GroupEntry& entry : table->groups_) {
    entry.inputs.reserve(entry.servers.size());
    for (ServerEntry& s : entry.servers) {
      s.health = std::move(health[next_health++]);
      entry.inputs.push_back(
          balancer::ServerInput{s.capacity, s.state == v1::SERVER_STATE_READY, s.health.get()});
    }
  }
  return table;
}

const VirtualHostEntry* RoutingTable::FindSystemAnywhere(std::string_view sid) const {
  for (const VirtualHostEntry* system : systems_) {
    if (system->IsSystem(sid)) {
      return system;
    }
  }
  return nullptr;
}

int RoutingTable::FindGroup(std::string_view key) const {
  if (key.empty()) {
    return -1;
  }
  return group_index_.Find(key);
}

const VirtualHostEntry* RoutingTable::FindNamedVirtualHost(std::string_view host_header,
                                                           std::span<char> scratch) const {
  std::string_view host = HostWithoutPort(TrimSpaces(host_header));
  if (!host.empty() && host.size() <= scratch.size()) {
    AsciiLowerInto(host, scratch.data());
    std::string_view lower(scratch.data(), host.size());
    if (int index = exact_hosts_.Find(lower); index >= 0) {
      return &virtual_hosts_[index];
    }
    if (!wildcard_hosts_.empty()) {
      // "a.b.example.com" tries ".b.example.com", then ".example.com", ".com".
      for (size_t dot = lower.find('.'); dot != std::string_view::npos;
           dot = lower.find('.', dot + 1)) {
        if (int index = wildcard_hosts_.Find(lower.substr(dot)); index >= 0) {
          return &virtual_hosts_[index];
        }
      }
    }
  }
  return any_host_ >= 0 ? &virtual_hosts_[any_host_] : nullptr;
}

int RoutingTable::FindPassthroughGroup(std::string_view sni) const {
  if (!sni.empty()) {
    if (int index = exact_hosts_.Find(sni);
        index >= 0 && virtual_hosts_[index].passthrough_group >= 0) {
      return virtual_hosts_[index].passthrough_group;
    }
    for (size_t dot = sni.find('.'); dot != std::string_view::npos; dot = sni.find('.', dot + 1)) {
      if (int index = wildcard_hosts_.Find(sni.substr(dot));
          index >= 0 && virtual_hosts_[index].passthrough_group >= 0) {
        return virtual_hosts_[index].passthrough_group;
      }
    }
  }
  return any_host_ >= 0 ? virtual_hosts_[any_host_].passthrough_group : -1;
}

}  // namespace kwd::routing
