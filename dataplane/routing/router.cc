#include "dataplane/routing/router.h"

#include <algorithm>
#include <array>

#include "dataplane/routing/secure_redirect.h"

namespace kwd::routing {
namespace {

// Longest normalised path we route; longer targets get a 400. The path
// scratch also holds the path to forward when dot segments are resolved.
constexpr size_t kPathScratchBytes = 8192;

char AsciiLower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

bool StartsWithIgnoreCase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) {
    return false;
  }
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (AsciiLower(s[i]) != prefix[i]) {
      return false;
    }
  }
  return true;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return AsciiLower(x) == AsciiLower(y);
         });
}

// Splits an absolute-form target into authority and origin-form target.
// Returns false when `target` is not absolute-form.
bool SplitAbsoluteForm(std::string_view target, std::string_view* authority,
                       std::string_view* origin_form) {
  size_t scheme_length;
  if (StartsWithIgnoreCase(target, "http://")) {
    scheme_length = 7;
  } else if (StartsWithIgnoreCase(target, "https://")) {
    scheme_length = 8;
  } else {
    return false;
  }
  std::string_view rest = target.substr(scheme_length);
  size_t path_start = rest.find_first_of("/?#");
  *authority = rest.substr(0, path_start);
  if (size_t at = authority->rfind('@'); at != std::string_view::npos) {
    authority->remove_prefix(at + 1);  // userinfo never names the host
  }
  *origin_form =
      path_start == std::string_view::npos ? std::string_view("/") : rest.substr(path_start);
  return true;
}

// Where a path goes on a virtual host, and what its permissions say.
struct Classification {
  v1::Kind kind = v1::KIND_UNSPECIFIED;
  std::string_view rule;
  int group_index = -1;
  v1::PermissionAction action = v1::PERMISSION_ACTION_UNSPECIFIED;
  bool secure_redirect = false;   // the SECURE entry asks for a redirect to https
  SapHeaderSwitches sap_headers;  // follows the rule: not compared
  std::string_view hsts;          // likewise

  bool operator==(const Classification& other) const {
    return kind == other.kind && rule == other.rule && group_index == other.group_index &&
           action == other.action && secure_redirect == other.secure_redirect;
  }
};

// `vhost`'s routes (the host's, or a system's on it) and `permissions` (the host's).
// Inlined: the returned struct then lives in registers, not on the stack.
[[gnu::always_inline]] inline Classification Classify(const VirtualHostEntry& vhost,
                                                      const PermissionTable& permissions,
                                                      std::string_view path,
                                                      std::string_view lower_path) {
  Classification c;
  if (IsRootPath(path)) {
    c.kind = vhost.default_root_handler;
    c.rule = "root";
    c.group_index = vhost.DefaultGroup(c.kind);
    c.sap_headers = vhost.sap_headers;
    c.hsts = vhost.hsts;
  } else if (int rule = vhost.prefixes.LongestMatch(lower_path); rule >= 0) {
    c.kind = vhost.rules[rule].kind;
    c.rule = vhost.rules[rule].prefix;
    c.group_index = vhost.rules[rule].group;
    c.sap_headers = vhost.rules[rule].sap_headers;
    c.hsts = vhost.rules[rule].hsts;
  } else {
    c.kind = v1::KIND_JAVA;
    c.rule = "default";
    c.group_index = vhost.default_java_group;
    c.sap_headers = vhost.sap_headers;
    c.hsts = vhost.hsts;
  }
  if (int entry = permissions.Match(lower_path); entry >= 0) {
    c.action = permissions.action(entry);
    c.secure_redirect = permissions.redirect_to_https(entry);
  } else {
    c.action = v1::PERMISSION_ACTION_PERMIT;
  }
  return c;
}

// Seed 002 "Determining the Server Group": an ABAP group checks sap-ext-sid
// before sap-contextid, a Java group saplb_* before JSESSIONID; then the
// other identifiers. The affinity cookie comes last in both.
constexpr std::array<Identifier, 4> kAbapOrder = {Identifier::kSapExtSid, Identifier::kSapContextId,
                                                  Identifier::kSaplb, Identifier::kJSessionId};
constexpr std::array<Identifier, 4> kJavaOrder = {
    Identifier::kSaplb, Identifier::kJSessionId, Identifier::kSapContextId, Identifier::kSapExtSid};

Reason StickyReason(Identifier identifier) {
  switch (identifier) {
    case Identifier::kSapContextId:
      return Reason::kStickyContextId;
    case Identifier::kSaplb:
      return Reason::kStickySaplb;
    case Identifier::kJSessionId:
      return Reason::kStickyJSessionId;
    case Identifier::kSapExtSid:
      return Reason::kStickySapExtSid;
    case Identifier::kAffinityCookie:
      return Reason::kStickyAffinityCookie;
    case Identifier::kNone:
      break;
  }
  return Reason::kBalance;
}

}  // namespace

std::string_view ReasonName(Reason reason) {
  switch (reason) {
    case Reason::kBalance:
      return "balance";
    case Reason::kStickyContextId:
      return "sticky:sap-contextid";
    case Reason::kStickySaplb:
      return "sticky:saplb";
    case Reason::kStickyJSessionId:
      return "sticky:jsessionid";
    case Reason::kStickySapExtSid:
      return "sticky:sap-ext-sid";
    case Reason::kStickyAffinityCookie:
      return "sticky:affinity-cookie";
    case Reason::kDenied:
      return "denied";
    case Reason::kNoServer:
      return "no-server";
    case Reason::kBadRequest:
      return "bad-request";
    case Reason::kSecureRedirect:
      return "secure-redirect";
    case Reason::kRuleRedirect:
      return "rule:redirect";
    case Reason::kRuleForbidden:
      return "rule:forbidden";
    case Reason::kRuleGone:
      return "rule:gone";
    case Reason::kRuleError:
      return "rule:error";
    case Reason::kUnknownSystem:
      return "unknown-system";
  }
  return "unknown";
}

std::string_view IdentifierName(Identifier identifier) {
  switch (identifier) {
    case Identifier::kSapContextId:
      return "sap-contextid";
    case Identifier::kSaplb:
      return "saplb";
    case Identifier::kJSessionId:
      return "jsessionid";
    case Identifier::kSapExtSid:
      return "sap-ext-sid";
    case Identifier::kAffinityCookie:
      return "affinity-cookie";
    case Identifier::kNone:
      break;
  }
  return "";
}

bool UpstreamTarget(const Decision& decision, std::string_view received_target, std::string* out) {
  if (!decision.rewritten_target.empty()) {
    out->assign(decision.rewritten_target);
    return true;
  }
  if (decision.upstream_path.empty()) {
    return false;
  }
  out->assign(decision.upstream_path);
  // An absolute-form authority holds no "?": the first one starts the query.
  const size_t query = received_target.find('?');
  if (query != std::string_view::npos) {
    std::string_view rest = received_target.substr(query);
    out->append(rest.substr(0, rest.find('#')));
  }
  return true;
}

Router::Router(std::shared_ptr<const session::AffinityCookieCodec> affinity_codec,
               std::shared_ptr<const Clock> clock)
    : affinity_codec_(std::move(affinity_codec)),
      clock_(std::move(clock)),
      path_scratch_(2 * kPathScratchBytes),
      lower_scratch_(kPathScratchBytes),
      decoded_path_scratch_(2 * kPathScratchBytes),
      decoded_lower_scratch_(kPathScratchBytes),
      mod_state_(std::make_unique<modification::State>()),
      mod_previous_(std::make_unique<modification::State>()) {}

bool Router::RunModifications(const VirtualHostEntry& vhost, const Request& request,
                              std::string_view lower_path, std::string_view forward_path,
                              std::string_view query, bool has_query) {
  // Most requests on a host with rules are under none of their prefixes:
  // they leave here, having compared the prefixes only.
  const std::vector<ModificationEntry>& entries = vhost.modifications;
  size_t first = 0;
  while (first < entries.size() && !lower_path.starts_with(entries[first].prefix)) {
    ++first;
  }
  if (first == entries.size()) {
    return false;
  }
  bool ran = false;
  mod_trace_sources_.clear();
  modification::RequestView view;
  view.method = request.method;
  view.https = request.https;
  view.remote_addr = request.remote_addr;
  if (request.headers != nullptr) {
    view.server_port = request.headers->ServerPort();
    view.lazy = request.headers;
  }
  for (size_t i = first; i < entries.size(); ++i) {
    const ModificationEntry& entry = entries[i];
    // A later file's prefix meets the path as the files before it left it.
    if (!(ran ? StartsWithIgnoreCase(mod_state_->path, entry.prefix)
              : lower_path.starts_with(entry.prefix))) {
      continue;
    }
    if (!ran) {
      // The first file sees the request as received (dot segments resolved).
      ran = true;
      // %{PATH}: every escape decoded (the normaliser checked them all).
      mod_decoded_path_.resize(forward_path.size());
      const int decoded = session::PercentDecode(forward_path, mod_decoded_path_.data(),
                                                 mod_decoded_path_.size(), false);
      if (decoded >= 0) {
        mod_decoded_path_.resize(static_cast<size_t>(decoded));
      } else {
        mod_decoded_path_.assign(forward_path);
      }
      mod_headers_.clear();
      if (request.headers != nullptr) {
        request.headers->Collect(&mod_headers_);
      }
      view.path = mod_decoded_path_;
      view.raw_path = forward_path;
      view.query = query;
      view.has_query = has_query;
      view.headers = mod_headers_;
      mod_state_->tracing = trace_modifications_;
      entry.program->Evaluate(view, mod_state_.get());
    } else {
      // The next file sees what the files before it made.
      std::swap(mod_state_, mod_previous_);
      modification::State& previous = *mod_previous_;
      if (previous.headers_changed) {
        mod_headers_.clear();
        for (const auto& [name, value] : previous.headers) {
          mod_headers_.emplace_back(name, value);
        }
      }
      view.path = previous.path;
      view.raw_path = previous.raw_path;
      view.query = previous.query;
      view.has_query = previous.has_query;
      view.headers = mod_headers_;
      mod_state_->tracing = trace_modifications_;
      entry.program->Evaluate(view, mod_state_.get());
      modification::State& current = *mod_state_;
      if (!current.headers_changed && previous.headers_changed) {
        std::swap(current.headers, previous.headers);
        current.headers_changed = true;
      }
      if (!previous.response_edits.empty()) {
        current.response_edits.insert(current.response_edits.begin(),
                                      std::make_move_iterator(previous.response_edits.begin()),
                                      std::make_move_iterator(previous.response_edits.end()));
      }
      if (!previous.trace.empty()) {
        current.trace.insert(current.trace.begin(),
                             std::make_move_iterator(previous.trace.begin()),
                             std::make_move_iterator(previous.trace.end()));
      }
      if (current.target_sid.empty()) {
        std::swap(current.target_sid, previous.target_sid);
      }
      current.fired += previous.fired;
      current.url_changed = current.url_changed || previous.url_changed;
    }
    if (trace_modifications_) {
      // This file's steps are the last ones of the trace.
      mod_trace_sources_.resize(mod_state_->trace.size(), &entry);
    }
    if (mod_state_->outcome != modification::Outcome::kContinue) {
      break;
    }
  }
  return ran;
}

void Router::Apply(std::shared_ptr<const RoutingTable> table) {
  std::vector<std::unique_ptr<balancer::Balancer>> balancers;
  if (table != nullptr) {
    balancers.reserve(table->groups().size());
    for (const GroupEntry& group : table->groups()) {
      const int old_index = table_ == nullptr ? -1 : table_->FindGroup(group.key);
      std::unique_ptr<balancer::Balancer> balancer;
      if (old_index >= 0 && balancers_[old_index] != nullptr &&
          balancers_[old_index]->strategy() == group.strategy) {
        const GroupEntry& old_group = table_->groups()[old_index];
        std::vector<int> new_to_old;
        new_to_old.reserve(group.servers.size());
        for (const ServerEntry& server : group.servers) {
          new_to_old.push_back(old_group.FindServer(server.name));
        }
        balancer = std::move(balancers_[old_index]);
        balancer->Rebind(new_to_old);
        balancer->set_load_reset_interval_ms(group.load_reset_interval_ms);
      } else {
        balancer = balancer::MakeBalancer(group.strategy, group.servers.size(),
                                          group.load_reset_interval_ms);
      }
      balancers.push_back(std::move(balancer));
    }
  }
  if (table_ != nullptr && in_flight_ > 0) {
    retired_.push_back(RetiredTable{table_, generation_, in_flight_});
  }
  table_ = std::move(table);
  balancers_ = std::move(balancers);
  in_flight_ = 0;
  ++generation_;
}

const balancer::Balancer* Router::BalancerFor(size_t group_index) const {
  return group_index < balancers_.size() ? balancers_[group_index].get() : nullptr;
}

int Router::StickyServer(const GroupEntry& group, std::string_view name, Identifier identifier,
                         Identifier* lost) const {
  int index = group.FindServer(name);
  if (index >= 0 && group.inputs[index].Healthy()) {
    // Ready or draining: a terminating server that still serves keeps its sessions.
    return index;
  }
  if (*lost == Identifier::kNone) {
    *lost = identifier;
  }
  return -1;
}

int Router::LookupSession(const GroupEntry& group, session::TableKey kind, std::string_view id,
                          int64_t now_ms) {
  return read_only_sessions_ ? group.sessions->Peek(kind, id, now_ms, server_scratch_.data(),
                                                    server_scratch_.size())
                             : group.sessions->Lookup(kind, id, now_ms, server_scratch_.data(),
                                                      server_scratch_.size());
}

void Router::EraseSession(const GroupEntry& group, session::TableKey kind, std::string_view id) {
  if (!read_only_sessions_) {
    group.sessions->Erase(kind, id);
  }
}

int Router::ResolveSticky(const GroupEntry& group, Identifier* routed_by, Identifier* lost,
                          bool* record_ext_sid, int64_t now_ms) {
  // An identifier that names a lost server does not end the search: a later
  // one may still name a live server of the group.
  // Only the identifiers the request carries are looked at (StickyBy finds
  // nothing for an absent one, at the cost of a call).
  static_assert(static_cast<int>(Identifier::kSapExtSid) == 4,
                "present[] is indexed by Identifier");
  const bool present[] = {false, !ids_.contextid_instance.empty(), ids_.saplb_count != 0,
                          !ids_.jsessionid.empty(), !ids_.ext_sid.empty()};
  const auto& order = group.kind == v1::KIND_ABAP ? kAbapOrder : kJavaOrder;
  for (Identifier identifier : order) {
    if (!present[static_cast<size_t>(identifier)]) {
      continue;
    }
    int index = StickyBy(identifier, group, lost, record_ext_sid, now_ms);
    if (index >= 0) {
      *routed_by = identifier;
      return index;
    }
  }
  if (group.affinity_cookie_enabled && !ids_.affinity_cookie.empty() &&
      affinity_codec_ != nullptr) {
    std::string_view server;
    if (affinity_codec_->Verify(ids_.affinity_cookie, group.key, &server)) {
      int index = StickyServer(group, server, Identifier::kAffinityCookie, lost);
      if (index >= 0) {
        *routed_by = Identifier::kAffinityCookie;
        return index;
      }
    }
  }
  return -1;
}

int Router::StickyBy(Identifier identifier, const GroupEntry& group, Identifier* lost,
                     bool* record_ext_sid, int64_t now_ms) {
  switch (identifier) {
    case Identifier::kSapContextId:
      if (group.Enabled(v1::SESSION_IDENTIFIER_SAP_CONTEXTID) && !ids_.contextid_instance.empty()) {
        return StickyServer(group, ids_.contextid_instance, Identifier::kSapContextId, lost);
      }
      return -1;
    case Identifier::kSaplb: {
      if (!group.Enabled(v1::SESSION_IDENTIFIER_SAPLB) || ids_.saplb_count == 0) {
        return -1;
      }
      std::span<const session::SaplbCookie> cookies(ids_.saplb.data(), ids_.saplb_count);
      // saplb_<group name>, then saplb_*, then any other whose instance is ours.
      for (const session::SaplbCookie& cookie : cookies) {
        if (EqualsIgnoreCase(cookie.group, group.name)) {
          int index = StickyServer(group, cookie.instance, Identifier::kSaplb, lost);
          if (index >= 0) {
            return index;
          }
        }
      }
      for (const session::SaplbCookie& cookie : cookies) {
        if (cookie.group == "*") {
          int index = StickyServer(group, cookie.instance, Identifier::kSaplb, lost);
          if (index >= 0) {
            return index;
          }
        }
      }
      for (const session::SaplbCookie& cookie : cookies) {
        if (cookie.group != "*" && !EqualsIgnoreCase(cookie.group, group.name) &&
            group.FindServer(cookie.instance) >= 0) {
          int index = StickyServer(group, cookie.instance, Identifier::kSaplb, lost);
          if (index >= 0) {
            return index;
          }
        }
      }
      return -1;
    }
    case Identifier::kJSessionId: {
      if (!group.Enabled(v1::SESSION_IDENTIFIER_JSESSIONID) || ids_.jsessionid.empty()) {
        return -1;
      }
      if (!ids_.jsessionid_instance.empty()) {
        return StickyServer(group, ids_.jsessionid_instance, Identifier::kJSessionId, lost);
      }
      int length = LookupSession(group, session::TableKey::kJSessionId, ids_.jsessionid, now_ms);
      if (length < 0) {
        return -1;
      }
      int index = StickyServer(group, std::string_view(server_scratch_.data(), length),
                               Identifier::kJSessionId, lost);
      if (index < 0) {
        EraseSession(group, session::TableKey::kJSessionId, ids_.jsessionid);
      }
      return index;
    }
    case Identifier::kSapExtSid: {
      if (!group.Enabled(v1::SESSION_IDENTIFIER_SAP_EXT_SID) || ids_.ext_sid.empty()) {
        return -1;
      }
      int length = LookupSession(group, session::TableKey::kSapExtSid, ids_.ext_sid, now_ms);
      if (length >= 0) {
        int index = StickyServer(group, std::string_view(server_scratch_.data(), length),
                                 Identifier::kSapExtSid, lost);
        if (index >= 0) {
          return index;
        }
        EraseSession(group, session::TableKey::kSapExtSid, ids_.ext_sid);
      }
      *record_ext_sid = true;
      return -1;
    }
    case Identifier::kAffinityCookie:
    case Identifier::kNone:
      break;
  }
  return -1;
}

Decision Router::Route(const Request& request) {
  Decision decision;
  decision.table_generation = generation_;
  const RoutingTable* table = table_.get();
  if (table == nullptr) {
    decision.reason = Reason::kNoServer;
    decision.status = 503;
    return decision;
  }

  std::string_view target = request.target;
  std::string_view host = request.host;
  const bool https = request.https;
  std::string_view authority;
  std::string_view origin_form;
  // The connection, not the target's scheme, says whether the request came over TLS.
  if (SplitAbsoluteForm(target, &authority, &origin_form)) {
    target = origin_form;
    host = authority;
  }
  const std::string_view received_target = target;  // for a redirect to https
  decision.virtual_host = table->FindVirtualHost(host, host_scratch_);

  // "http://host?q" has an empty path, which is "/" (RFC 9112 3.2.2).
  std::string_view query_only;
  const std::string_view origin_target = target;  // for the rules: whether it has a query
  if (!target.empty() && target.front() == '?') {
    query_only = target.substr(1);
    target = "/";
  }
  // Every field is written by the normaliser: a member, not zeroed per request.
  NormalizedTarget& normalized = normalized_;
  std::string_view lower_path;
  // The path scratch holds twice the lowercase one (for the resolved path):
  // a longer normalised path (explain takes URLs beyond the proxy's 8 KiB
  // request line) is refused before it is lowercased.
  if (!NormalizeTargetLower(target, path_scratch_, lower_scratch_, &normalized, &lower_path)) {
    decision.reason = Reason::kBadRequest;
    decision.status = 400;
    return decision;
  }
  if (!query_only.empty()) {
    normalized.query = query_only.substr(0, query_only.find('#'));
  }
  decision.path = normalized.path;
  if (normalized.forward_path.data() != normalized.raw_path.data()) {
    decision.upstream_path = normalized.forward_path;
  }

  const VirtualHostEntry* vhost = decision.virtual_host;
  if (vhost == nullptr) {
    decision.reason = Reason::kNoServer;
    decision.status = 503;
    return decision;
  }

  // SAP's modification handler runs first: permissions, URL mapping,
  // stickiness and balancing see the request as its rules leave it. A host
  // without rule files (most) pays one empty() check.
  const VirtualHostEntry* routes = vhost;
  if (!vhost->modifications.empty() &&
      RunModifications(*vhost, request, lower_path, normalized.forward_path, normalized.query,
                       origin_target.find('?') != std::string_view::npos) &&
      (mod_state_->fired > 0 || mod_state_->outcome != modification::Outcome::kContinue)) {
    const modification::State& state = *mod_state_;
    decision.modified = true;
    switch (state.outcome) {
      case modification::Outcome::kContinue:
        break;
      case modification::Outcome::kRedirect:
        decision.reason = Reason::kRuleRedirect;
        decision.status = state.status;
        return decision;
      case modification::Outcome::kForbidden:
        decision.reason = Reason::kRuleForbidden;
        decision.status = 403;
        return decision;
      case modification::Outcome::kGone:
        decision.reason = Reason::kRuleGone;
        decision.status = 410;
        return decision;
      case modification::Outcome::kError:
        decision.reason = Reason::kRuleError;
        decision.status = 500;
        return decision;
    }
    if (state.url_changed) {
      // The rewritten target is routed and forwarded like a received one:
      // normalised again (a rewrite that climbs above "/" or makes a
      // malformed escape is a 400, as the same target received would be).
      mod_target_.assign(state.raw_path);
      if (state.has_query) {
        mod_target_ += '?';
        mod_target_ += state.query;
      }
      if (!NormalizeTargetLower(mod_target_, path_scratch_, lower_scratch_, &normalized,
                                &lower_path)) {
        decision.reason = Reason::kBadRequest;
        decision.status = 400;
        return decision;
      }
      decision.path = normalized.path;
      decision.upstream_path = normalized.forward_path;
      mod_forward_.assign(normalized.forward_path);
      if (state.has_query) {
        mod_forward_ += '?';
        mod_forward_ += normalized.query;
      }
      decision.rewritten_target = mod_forward_;
    }
    if (!state.target_sid.empty()) {
      decision.system = state.target_sid;
      // The mapping with that SID on the request's host, else on any host
      // (SAP chooses among all its systems).
      routes = vhost->FindSystem(state.target_sid);
      if (routes == nullptr) {
        routes = table->FindSystemAnywhere(state.target_sid);
      }
      if (routes == nullptr) {
        decision.reason = Reason::kUnknownSystem;
        decision.status = 503;
        return decision;
      }
    }
  }

  // Classification first so that a denied request still shows where it
  // would have gone; permissions decide before any server is chosen.
  const Classification classification =
      Classify(*routes, vhost->permissions, normalized.path, lower_path);
  if (normalized.encoded_separator) {
    // A backend that decodes "%2F" or "%5C" into "/" sees other segments in
    // what we forward: route only when its reading reaches the same rule and
    // permission.
    NormalizedTarget decoded;
    bool same = NormalizeTargetSeparatorsDecoded(normalized.forward_path, decoded_path_scratch_,
                                                 &decoded) &&
                decoded.path.size() <= decoded_lower_scratch_.size();
    if (same) {
      AsciiLowerInto(decoded.path, decoded_lower_scratch_.data());
      same = Classify(*routes, vhost->permissions, decoded.path,
                      std::string_view(decoded_lower_scratch_.data(), decoded.path.size())) ==
             classification;
    }
    if (!same) {
      decision.reason = Reason::kBadRequest;
      decision.status = 400;
      return decision;
    }
  }
  decision.kind = classification.kind;
  decision.rule = classification.rule;
  decision.hsts = classification.hsts;
  const int group_index = classification.group_index;
  if (group_index >= 0) {
    decision.group_index = group_index;
    decision.group = &table->groups()[group_index];
    const v1::Kind group_kind = decision.group->kind;
    decision.sap_client_protocol =
        SapHeaderSwitches::On(classification.sap_headers.client_protocol, group_kind);
    decision.sap_access_points =
        SapHeaderSwitches::On(classification.sap_headers.access_points, group_kind);
  }

  const v1::PermissionAction action = classification.action;
  if (action == v1::PERMISSION_ACTION_SECURE && !https && classification.secure_redirect) {
    // UrlMapping.spec.secureAction: redirect. Without a port to name, or
    // for a Host no redirect may carry, the request is forbidden as SAP does.
    decision.reason = Reason::kDenied;
    decision.status = 403;
    if (https_port_ == 0) {
      decision.secure_redirect = SecureRedirect::kNoHttpsPort;
    } else if (!BuildSecureRedirectLocation(host, received_target, https_port_, &location_)) {
      decision.secure_redirect = SecureRedirect::kBadHost;
    } else {
      decision.secure_redirect = SecureRedirect::kRedirected;
      decision.reason = Reason::kSecureRedirect;
      decision.status = SecureRedirectStatus(request.method);
      decision.location = location_;
    }
    return decision;
  }
  if (action == v1::PERMISSION_ACTION_DENY || (action == v1::PERMISSION_ACTION_SECURE && !https)) {
    decision.reason = Reason::kDenied;
    decision.status = 403;
    return decision;
  }
  if (decision.group == nullptr) {
    decision.reason = Reason::kNoServer;
    decision.status = 503;
    return decision;
  }

  const GroupEntry& group = *decision.group;
  balancer::Balancer& balancer = *balancers_[group_index];
  const int64_t now_ms = clock_->NowMs();
  session::RequestParts parts;
  parts.path = normalized.forward_path;  // what the backend sees, not a removed segment
  parts.query = normalized.query;
  parts.cookie_headers = request.cookie_headers;
  parts.bracket_segment = normalized.bracket_segment;
  parts.path_without_params = normalized.no_params;
  session::ExtractSessionIds(parts, group.affinity_cookie_name, &ids_);

  Identifier routed_by = Identifier::kNone;
  bool record_ext_sid = false;
  // Most balanced requests carry no identifier at all: nothing to look up.
  int server = ids_.contextid_instance.empty() && ids_.saplb_count == 0 &&
                       ids_.jsessionid.empty() && ids_.ext_sid.empty() &&
                       ids_.affinity_cookie.empty()
                   ? -1
                   : ResolveSticky(group, &routed_by, &decision.lost, &record_ext_sid, now_ms);
  if (server >= 0) {
    balancer.CountSticky(server, now_ms);
    decision.reason = StickyReason(routed_by);
  } else {
    server = balancer.Pick(group.inputs, now_ms);
    if (server < 0) {
      decision.reason = Reason::kNoServer;
      decision.status = 503;
      return decision;
    }
    decision.reason = Reason::kBalance;
    if (record_ext_sid) {
      if (!read_only_sessions_) {
        group.sessions->Record(session::TableKey::kSapExtSid, ids_.ext_sid,
                               group.servers[server].name, now_ms);
      }
      decision.set_affinity_cookie = group.affinity_cookie_enabled;
    }
  }
  decision.server_index = server;
  decision.server = &group.servers[server];
  decision.counted = true;
  ++in_flight_;
  return decision;
}

void Router::Complete(const Decision& decision) {
  if (!decision.counted) {
    return;
  }
  if (decision.table_generation == generation_) {
    if (decision.group_index >= 0 &&
        static_cast<size_t>(decision.group_index) < balancers_.size()) {
      balancers_[decision.group_index]->Complete(decision.server_index);
    }
    if (in_flight_ > 0) {
      --in_flight_;
    }
    return;
  }
  // Routed on an earlier table, which is kept alive until its last request
  // completes: the counters moved to the same group and server by name.
  auto retired = std::find_if(retired_.begin(), retired_.end(), [&](const RetiredTable& r) {
    return r.generation == decision.table_generation;
  });
  if (retired == retired_.end()) {
    return;
  }
  if (table_ != nullptr && decision.group != nullptr && decision.server != nullptr) {
    int group_index = table_->FindGroup(decision.group->key);
    if (group_index >= 0) {
      int server_index = table_->groups()[group_index].FindServer(decision.server->name);
      if (server_index >= 0) {
        balancers_[group_index]->Complete(server_index);
      }
    }
  }
  if (--retired->in_flight == 0) {
    retired_.erase(retired);
  }
}

bool Router::LearnJSessionId(const Decision& decision, std::string_view jsessionid) {
  if (decision.group == nullptr || decision.server == nullptr || jsessionid.empty() ||
      !decision.group->Enabled(v1::SESSION_IDENTIFIER_JSESSIONID) || read_only_sessions_) {
    return false;
  }
  decision.group->sessions->Record(session::TableKey::kJSessionId, jsessionid,
                                   decision.server->name, clock_->NowMs());
  return decision.group->affinity_cookie_enabled;
}

std::string Router::AffinityCookieHeader(const Decision& decision, bool https) const {
  if (decision.group == nullptr || decision.server == nullptr || affinity_codec_ == nullptr) {
    return {};
  }
  return session::AffinityCookieCodec::SetCookieValue(
      decision.group->affinity_cookie_name,
      affinity_codec_->Encode(decision.group->key, decision.server->name), https);
}

}  // namespace kwd::routing
