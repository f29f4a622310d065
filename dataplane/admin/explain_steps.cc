#include "dataplane/admin/explain_steps.h"

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "dataplane/balancer/balancer.h"
#include "dataplane/routing/path.h"
#include "dataplane/session/session_table.h"

namespace kwd::admin {
namespace {

using nlohmann::ordered_json;
using routing::Identifier;

std::string_view KindText(v1::Kind kind) {
  return kind == v1::KIND_ABAP ? "abap" : kind == v1::KIND_JAVA ? "java" : "unspecified";
}

std::string_view ActionText(v1::PermissionAction action) {
  switch (action) {
    case v1::PERMISSION_ACTION_DENY:
      return "deny";
    case v1::PERMISSION_ACTION_SECURE:
      return "secure";
    default:
      return "permit";
  }
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return (x | 0x20) == (y | 0x20);
         });
}

ordered_json Step(std::string_view name, std::string text) {
  return ordered_json{{"step", name}, {"text", std::move(text)}};
}

// The order the router tries identifiers in (router.cc), then the affinity cookie.
std::array<Identifier, 5> IdentifierOrder(v1::Kind kind) {
  if (kind == v1::KIND_ABAP) {
    return {Identifier::kSapExtSid, Identifier::kSapContextId, Identifier::kSaplb,
            Identifier::kJSessionId, Identifier::kAffinityCookie};
  }
  return {Identifier::kSaplb, Identifier::kJSessionId, Identifier::kSapContextId,
          Identifier::kSapExtSid, Identifier::kAffinityCookie};
}

routing::Reason StickyReason(Identifier identifier) {
  switch (identifier) {
    case Identifier::kSapContextId:
      return routing::Reason::kStickyContextId;
    case Identifier::kSaplb:
      return routing::Reason::kStickySaplb;
    case Identifier::kJSessionId:
      return routing::Reason::kStickyJSessionId;
    case Identifier::kSapExtSid:
      return routing::Reason::kStickySapExtSid;
    case Identifier::kAffinityCookie:
      return routing::Reason::kStickyAffinityCookie;
    case Identifier::kNone:
      break;
  }
  return routing::Reason::kBalance;
}

bool Enabled(const routing::GroupEntry& group, Identifier identifier) {
  switch (identifier) {
    case Identifier::kSapContextId:
      return group.Enabled(v1::SESSION_IDENTIFIER_SAP_CONTEXTID);
    case Identifier::kSaplb:
      return group.Enabled(v1::SESSION_IDENTIFIER_SAPLB);
    case Identifier::kJSessionId:
      return group.Enabled(v1::SESSION_IDENTIFIER_JSESSIONID);
    case Identifier::kSapExtSid:
      return group.Enabled(v1::SESSION_IDENTIFIER_SAP_EXT_SID);
    case Identifier::kAffinityCookie:
      return group.affinity_cookie_enabled;
    case Identifier::kNone:
      break;
  }
  return false;
}

// One identifier of the request: whether it is there, which server it
// names, whether it was honoured and why not. Never shows the session id.
ordered_json IdentifierJson(Identifier identifier, const routing::GroupEntry& group,
                            const session::SessionIds& ids, const routing::Decision& decision,
                            bool decided_earlier, const ExplainContext& context) {
  ordered_json out;
  out["identifier"] = std::string(routing::IdentifierName(identifier));
  bool found = false;
  std::string names;  // the server it names, "" when it names none
  std::string why;    // why it names none
  std::array<char, 256> server{};
  auto peek = [&](session::TableKey key, std::string_view id) {
    int length = group.sessions != nullptr
                     ? group.sessions->Peek(key, id, context.now_ms, server.data(), server.size())
                     : -1;
    if (length >= 0) {
      names.assign(server.data(), static_cast<size_t>(length));
    }
    return length >= 0;
  };
  switch (identifier) {
    case Identifier::kSapContextId:
      found = !ids.contextid_instance.empty();
      names = ids.contextid_instance;
      break;
    case Identifier::kSaplb: {
      found = ids.saplb_count > 0;
      std::span<const session::SaplbCookie> cookies(ids.saplb.data(), ids.saplb_count);
      const session::SaplbCookie* chosen = nullptr;
      for (const auto& cookie : cookies) {
        if (chosen == nullptr && EqualsIgnoreCase(cookie.group, group.name)) {
          chosen = &cookie;
        }
      }
      for (const auto& cookie : cookies) {
        if (chosen == nullptr && cookie.group == "*") {
          chosen = &cookie;
        }
      }
      for (const auto& cookie : cookies) {
        if (chosen == nullptr && group.FindServer(cookie.instance) >= 0) {
          chosen = &cookie;
        }
      }
      if (chosen != nullptr) {
        names = chosen->instance;
      } else if (found) {
        why = "no saplb cookie names this group or one of its servers";
      }
      break;
    }
    case Identifier::kJSessionId:
      found = !ids.jsessionid.empty();
      if (!ids.jsessionid_instance.empty()) {
        names = ids.jsessionid_instance;
      } else if (found && !peek(session::TableKey::kJSessionId, ids.jsessionid)) {
        why = "not in the session table (no server set it, or it expired)";
      }
      break;
    case Identifier::kSapExtSid:
      found = !ids.ext_sid.empty();
      if (found && !peek(session::TableKey::kSapExtSid, ids.ext_sid)) {
        why = "not in the session table: the balanced server would be recorded for it";
      }
      break;
    case Identifier::kAffinityCookie: {
      found = !ids.affinity_cookie.empty();
      std::string_view verified;
      if (found && context.codec != nullptr &&
          context.codec->Verify(ids.affinity_cookie, group.key, &verified)) {
        names = verified;
      } else if (found) {
        why = "signature invalid, or issued for another group";
      }
      break;
    }
    case Identifier::kNone:
      break;
  }
  out["found"] = found;
  out["names_server"] = names.empty() ? ordered_json() : ordered_json(names);
  const bool honoured = decision.reason == StickyReason(identifier) && decision.server != nullptr;
  if (found && !Enabled(group, identifier)) {
    why = identifier == Identifier::kAffinityCookie
              ? "the affinity cookie is not enabled for this group"
              : "not used by this group (sessionAffinity.identifiers)";
  } else if (found && !honoured && !names.empty()) {
    int index = group.FindServer(names);
    if (index < 0) {
      why = "names " + names + ", which is not a server of this group";
    } else if (!group.inputs[index].Healthy()) {
      why = "names " + names + ", which is unhealthy: the session is lost, balanced anew";
    } else if (decided_earlier) {
      why = "not needed: an identifier checked earlier decided";
    } else if (identifier == Identifier::kSaplb || identifier == Identifier::kSapContextId) {
      why = "names " + names + " but was not used";
    }
  } else if (found && !honoured && why.empty() && decided_earlier) {
    why = "not needed: an identifier checked earlier decided";
  }
  out["honoured"] = honoured;
  out["why_not"] = !found        ? ordered_json("not in the request")
                   : honoured    ? ordered_json()
                   : why.empty() ? ordered_json("not used")
                                 : ordered_json(why);
  return out;
}

ordered_json BalancingStep(const routing::GroupEntry& group, const routing::Decision& decision,
                           const ExplainContext& context) {
  ordered_json step = Step("balancing", "");
  step["strategy"] = std::string(balancer::StrategyName(group.strategy));
  ordered_json candidates = ordered_json::array();
  size_t usable = 0;
  for (size_t s = 0; s < group.servers.size(); ++s) {
    const routing::ServerEntry& server = group.servers[s];
    const balancer::ServerInput& input = group.inputs[s];
    std::string why_not;
    if (!input.ready) {
      why_not = "draining (snapshot): sticky traffic only";
    } else if (input.LocallyDrained()) {
      why_not = "drained on this proxy: sticky traffic only";
    } else if (!input.Healthy()) {
      why_not = "unhealthy";
    }
    usable += why_not.empty() ? 1 : 0;
    uint64_t assigned = s < context.assigned.size() ? context.assigned[s] : 0;
    uint64_t outstanding = s < context.outstanding.size() ? context.outstanding[s] : 0;
    int64_t rtt_us = input.RttUs();
    candidates.push_back(
        {{"server", server.name},
         {"capacity", server.capacity},
         {"usable", why_not.empty()},
         {"why_not", why_not.empty() ? ordered_json() : ordered_json(why_not)},
         {"assigned", assigned},
         {"outstanding", outstanding},
         {"load_factor", static_cast<double>(assigned + outstanding) /
                             static_cast<double>(std::max<uint32_t>(server.capacity, 1))},
         {"rtt_ms",
          rtt_us > 0 ? ordered_json(static_cast<double>(rtt_us) / 1000.0) : ordered_json()}});
  }
  step["candidates"] = std::move(candidates);
  std::string text = std::string(balancer::StrategyName(group.strategy)) + " over " +
                     std::to_string(usable) + " usable of " + std::to_string(group.servers.size()) +
                     " servers (live load summed over "
                     "the workers)";
  if (decision.server != nullptr) {
    text += "; the explain router picks " + decision.server->name +
            " (it balances on its own counters, so live balancing is not moved)";
  } else {
    text += "; no usable server: 503";
  }
  step["text"] = std::move(text);
  return step;
}

}  // namespace

ordered_json ExplainSteps(const routing::Router& router, const routing::Decision& decision,
                          const routing::ExplainRequest& request, const ExplainContext& context) {
  ordered_json steps = ordered_json::array();
  const routing::VirtualHostEntry* vhost = decision.virtual_host;

  // Virtual host.
  {
    std::string host = request.host.empty() ? "(none)" : "\"" + request.host + "\"";
    std::string text;
    if (vhost == nullptr) {
      text = "Host " + host + ": no URL mapping serves it: 503";
    } else {
      text = "Host " + host + " uses the URL mapping for " +
             (vhost->host.empty() ? std::string("any host") : "\"" + vhost->host + "\"") +
             (vhost->source.empty() ? std::string() : " (UrlMapping " + vhost->source + ")");
    }
    ordered_json step = Step("virtual host", std::move(text));
    step["host"] = vhost == nullptr      ? ordered_json()
                   : vhost->host.empty() ? ordered_json("*")
                                         : ordered_json(vhost->host);
    steps.push_back(std::move(step));
  }
  if (decision.reason == routing::Reason::kBadRequest) {
    steps.push_back(Step("target", "malformed or too long a target: the proxy answers 400"));
    return steps;
  }
  if (vhost == nullptr) {
    return steps;
  }

  // SAP's modification rules (before permissions and URL mapping).
  if (decision.modified) {
    const modification::State& state = router.modification_state();
    std::string text = std::to_string(state.trace.size()) +
                       (state.trace.size() == 1 ? " modification rule fired" :
                                                  " modification rules fired");
    if (!decision.rewritten_target.empty()) {
      text += "; the request goes on as " + std::string(decision.rewritten_target);
    }
    if (!decision.system.empty()) {
      text += "; SAP system " + std::string(decision.system);
    }
    if (routing::IsRuleAnswer(decision.reason)) {
      text += "; the proxy answers " + std::to_string(decision.status) + " (" +
              std::string(routing::ReasonName(decision.reason)) + ")";
      if (decision.reason == routing::Reason::kRuleRedirect) {
        text += " to " + state.location;
      }
    }
    steps.push_back(Step("modification rules", std::move(text)));
    if (routing::IsRuleAnswer(decision.reason)) {
      return steps;
    }
  }

  // Permission table (first match wins).
  {
    std::string lower(decision.path.size(), '\0');
    routing::AsciiLowerInto(decision.path, lower.data());
    int match = vhost->permissions.Match(lower);
    ordered_json step = Step("permission", "");
    std::string text;
    if (match < 0) {
      text = vhost->permissions.empty()
                 ? "no permission table: every URL is permitted"
                 : "no permission rule matched " + std::string(decision.path) + ": permitted";
      step["rule"] = ordered_json();
    } else {
      v1::PermissionAction action = vhost->permissions.action(match);
      text = "rule " + std::to_string(match + 1) + " (" + std::string(ActionText(action)) + " " +
             vhost->permissions.pattern(match) + ") matched " + std::string(decision.path);
      if (action == v1::PERMISSION_ACTION_DENY) {
        text += ": denied, the proxy answers 403";
      } else if (action == v1::PERMISSION_ACTION_SECURE && request.https) {
        text += ": https only, and this request is https: permitted";
      } else if (action == v1::PERMISSION_ACTION_SECURE) {
        text += ": https only, and this request is plain http: ";
        switch (decision.secure_redirect) {
          case routing::SecureRedirect::kRedirected:
            text += "redirected (secureAction: redirect), the proxy answers " +
                    std::to_string(decision.status) + " to " + std::string(decision.location);
            break;
          case routing::SecureRedirect::kNoHttpsPort:
            text += "secureAction: redirect, but the proxy has no https port (--tls-listen or "
                    "--public-ports https=PORT): 403";
            break;
          case routing::SecureRedirect::kBadHost:
            text += "secureAction: redirect, but the Host is no name a redirect may carry: 403";
            break;
          case routing::SecureRedirect::kNone:
            text += "403";
            break;
        }
      } else {
        text += ": permitted";
      }
      step["rule"] = {{"index", match + 1},
                      {"action", ActionText(action)},
                      {"pattern", vhost->permissions.pattern(match)}};
      if (action == v1::PERMISSION_ACTION_SECURE) {
        step["rule"]["secure_action"] =
            vhost->permissions.redirect_to_https(match) ? "redirect" : "forbid";
      }
    }
    step["text"] = std::move(text);
    steps.push_back(std::move(step));
  }

  // Classification.
  {
    std::string group_text =
        decision.group != nullptr ? "group " + decision.group->key : "no logon group: 503";
    std::string text;
    if (decision.rule == "root") {
      text = "root URL (one \"/\" in the path): the default root handler is " +
             std::string(KindText(decision.kind)) + "; " + group_text;
    } else if (decision.rule == "default") {
      text = "no rule prefix matched: kind java, the default java group; " + group_text;
    } else {
      text = "longest matching prefix " + std::string(decision.rule) + ": kind " +
             std::string(KindText(decision.kind)) + "; " + group_text;
    }
    ordered_json step = Step("classification", std::move(text));
    step["rule"] = std::string(decision.rule);
    step["kind"] = std::string(KindText(decision.kind));
    step["group"] = decision.group != nullptr ? ordered_json(decision.group->key) : ordered_json();
    steps.push_back(std::move(step));
  }
  if (decision.reason == routing::Reason::kSecureRedirect) {
    steps.push_back(Step("result", "the proxy answers " + std::to_string(decision.status) +
                                       " itself (secure-redirect) to " +
                                       std::string(decision.location)));
    return steps;
  }
  if (decision.reason == routing::Reason::kDenied || decision.group == nullptr) {
    steps.push_back(Step("result", "the proxy answers " + std::to_string(decision.status) +
                                       " itself (" +
                                       std::string(routing::ReasonName(decision.reason)) + ")"));
    return steps;
  }
  const routing::GroupEntry& group = *decision.group;

  // Session identifiers, in the order the group checks them.
  {
    const session::SessionIds& ids = router.session_ids();
    ordered_json identifiers = ordered_json::array();
    bool decided = false;
    std::vector<std::string> found;
    for (Identifier identifier : IdentifierOrder(group.kind)) {
      ordered_json item = IdentifierJson(identifier, group, ids, decision, decided, context);
      if (item["found"].get<bool>()) {
        found.push_back(item["identifier"].get<std::string>());
      }
      decided = decided || item["honoured"].get<bool>();
      identifiers.push_back(std::move(item));
    }
    std::string text;
    if (found.empty()) {
      text = "no session identifier in the request";
    } else {
      text = "found:";
      for (const std::string& name : found) {
        text += " " + name;
      }
      text += decision.reason == routing::Reason::kBalance || decision.server == nullptr
                  ? "; none honoured"
                  : "; honoured: " + std::string(routing::ReasonName(decision.reason));
    }
    if (decision.lost != Identifier::kNone) {
      text += "; the session on a lost server (" +
              std::string(routing::IdentifierName(decision.lost)) + ") is balanced anew";
    }
    ordered_json step = Step("session identifiers", std::move(text));
    step["identifiers"] = std::move(identifiers);
    steps.push_back(std::move(step));
  }

  if (decision.reason == routing::Reason::kBalance || decision.server == nullptr) {
    steps.push_back(BalancingStep(group, decision, context));
  } else {
    steps.push_back(Step("balancing", "skipped: a session identifier chose the server"));
  }

  std::string result;
  if (decision.server != nullptr) {
    result = "server " + decision.server->name + " (" + decision.server->address + ":" +
             std::to_string(decision.server->port) + "), reason " +
             std::string(routing::ReasonName(decision.reason));
    if (decision.set_affinity_cookie) {
      result += "; the proxy would set the affinity cookie";
    }
  } else {
    result = "the proxy answers " + std::to_string(decision.status) + " itself (" +
             std::string(routing::ReasonName(decision.reason)) + ")";
  }
  steps.push_back(Step("result", std::move(result)));
  return steps;
}

}  // namespace kwd::admin
