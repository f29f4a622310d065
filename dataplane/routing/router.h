#pragma once

// The per-worker routing engine: classification, permissions, stickiness and
// balancing for one request at a time (docs/internals.md, "Life of a
// request", step 3). A Router is owned by one worker thread and never
// locked; what it shares with other workers is read-only (the RoutingTable, the affinity codec) or
// has its own synchronisation (session tables, health atomics).
//
// Steady-state Route() calls allocate nothing: scratch buffers are members,
// balancer state is sized when a table is applied.

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/modification/program.h"
#include "dataplane/balancer/balancer.h"
#include "dataplane/routing/clock.h"
#include "dataplane/routing/path.h"
#include "dataplane/routing/routing_table.h"
#include "dataplane/session/affinity_cookie.h"
#include "dataplane/session/session_ids.h"

namespace kwd::routing {

// The request's header fields for modification rules, collected only when
// a rule file applies to the request (the others pay nothing).
// Also %{SERVER_ADDR} and %{REMOTE_PORT} (modification::LazyVariables),
// asked only when a rule reads them.
class RequestHeaderSource : public modification::LazyVariables {
 public:
  virtual void Collect(std::vector<modification::HeaderView>* out) const = 0;
  // %{SERVER_PORT}: the port the client reached (the public one).
  virtual std::string_view ServerPort() const = 0;

 protected:
  ~RequestHeaderSource() = default;
};

// A request as the proxy sees it: views into its buffers.
struct Request {
  std::string_view method;
  std::string_view target;  // origin-form "/p?q" or absolute-form "http://h/p?q"
  std::string_view host;    // Host header value (absolute-form authority wins)
  bool https = false;
  std::span<const std::string_view> cookie_headers;  // every Cookie header value
  // For modification rules (%{REMOTE_ADDR} ...); headers null: none.
  const RequestHeaderSource* headers = nullptr;
  std::string_view remote_addr = {};
};

enum class Reason : uint8_t {
  kBalance,
  kStickyContextId,
  kStickySaplb,
  kStickyJSessionId,
  kStickySapExtSid,
  kStickyAffinityCookie,
  kDenied,
  kNoServer,
  kBadRequest,
  kSecureRedirect,  // a secure-only URL over plain http, redirected to https
  // A modification rule answered (SAP's modification handler).
  kRuleRedirect,   // "rule:redirect": status 3xx with Location
  kRuleForbidden,  // "rule:forbidden": 403
  kRuleGone,       // "rule:gone": 410
  kRuleError,      // "rule:error": 500 (a restart loop, a rewrite to no path)
  kUnknownSystem,  // "unknown-system": a rule named a SID no mapping is: 503
};
// "balance", "sticky:sap-contextid", ..., "denied", "no-server", "bad-request",
// "secure-redirect", "rule:redirect", "rule:forbidden", "rule:gone", "rule:error",
// "unknown-system".
std::string_view ReasonName(Reason reason);
// Whether a modification rule answered the request (or named an unknown SID).
inline bool IsRuleAnswer(Reason reason) {
  return reason == Reason::kRuleRedirect || reason == Reason::kRuleForbidden ||
         reason == Reason::kRuleGone || reason == Reason::kRuleError ||
         reason == Reason::kUnknownSystem;
}

enum class Identifier : uint8_t {
  kNone,
  kSapContextId,
  kSaplb,
  kJSessionId,
  kSapExtSid,
  kAffinityCookie,
};
// "sap-contextid", "saplb", "jsessionid", "sap-ext-sid", "affinity-cookie"; "" for none.
std::string_view IdentifierName(Identifier identifier);

// A secure-only URL over plain http whose permission entry asks for a
// redirect (UrlMapping.spec.secureAction: redirect).
enum class SecureRedirect : uint8_t {
  kNone,         // no such request
  kRedirected,   // answered with `location`
  kNoHttpsPort,  // the proxy has no https port to name: 403 instead
  kBadHost,      // the Host is no name a redirect may carry: 403 instead
};

struct Decision {
  // Views into the routing table: valid while the router keeps the table
  // (until Complete() for a forwarded request; until the next Apply() else).
  const VirtualHostEntry* virtual_host = nullptr;
  const GroupEntry* group = nullptr;
  std::string_view rule;  // matched prefix, "root" or "default"; empty if unclassified
  v1::Kind kind = v1::KIND_UNSPECIFIED;
  const ServerEntry* server = nullptr;  // null: the proxy answers `status` itself
  int server_index = -1;
  Reason reason = Reason::kNoServer;
  int status = 0;  // 403/503/400 (301/308: a secure redirect) when the proxy answers itself, else 0
  // A sticky identifier that named a server which is gone or unhealthy: the
  // request was balanced anew (kwd_proxy_sticky_lost_total).
  Identifier lost = Identifier::kNone;
  // SAP's forwarding fields for the server (UrlMapping.spec.sapHeaders, by
  // default on for ABAP groups): ClientProtocol and x-sap-webdisp-ap.
  bool sap_client_protocol = false;
  bool sap_access_points = false;
  // A table session was recorded for this request: send the affinity cookie
  // (AffinityCookieHeader).
  bool set_affinity_cookie = false;
  // The normalised path; valid until the next Route() on the same router.
  std::string_view path;
  // The path to forward when it is not the received one (dot segments
  // resolved); empty: the received target goes as it is. Valid like `path`:
  // use UpstreamTarget() right after Route().
  std::string_view upstream_path;
  // Modification rules ran on the request and changed or answered it; what
  // they made is the router's modification_state() until the next Route():
  // take it right after Route(). `rewritten_target`: the origin-form target
  // to forward instead of the received one (path and query), when a rule
  // rewrote the URL.
  bool modified = false;
  std::string_view rewritten_target;
  // The SAP system a rule chose (x-sap-webdisp-target-sid), "" none.
  std::string_view system;

  // Redirect to https and HSTS (UrlMapping.spec.secureAction, spec.hsts).
  // `location`: the https URL of a kRedirected request, valid like `path`.
  // `hsts`: the Strict-Transport-Security value for an https response to
  // this request ("" none); a view into the table, valid like `rule`.
  SecureRedirect secure_redirect = SecureRedirect::kNone;
  std::string_view location;
  std::string_view hsts;

  // Bookkeeping for Complete().
  int group_index = -1;
  uint64_t table_generation = 0;
  bool counted = false;
};

// The origin-form target to send upstream for `decision`, which Route() made
// for `received_target`: its upstream_path followed by the received query.
// Returns false, leaving `out` alone, when the received target can be sent as
// it is.
bool UpstreamTarget(const Decision& decision, std::string_view received_target, std::string* out);

class Router {
 public:
  Router(std::shared_ptr<const session::AffinityCookieCodec> affinity_codec,
         std::shared_ptr<const Clock> clock);
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  // Switches to `table` (off the request path). Balancer state is carried over
  // per group key and server name; decisions routed on the previous table can
  // still be completed.
  void Apply(std::shared_ptr<const RoutingTable> table);
  const std::shared_ptr<const RoutingTable>& table() const { return table_; }

  Decision Route(const Request& request);
  // The response to a forwarded decision arrived (outstanding -= 1). Call once
  // per decision; decisions that were not forwarded are ignored.
  void Complete(const Decision& decision);
  // The backend set JSESSIONID=`jsessionid` on the response to `decision`:
  // records it in the group's session table. Returns true when the proxy
  // should also set the affinity cookie (AffinityCookieHeader).
  bool LearnJSessionId(const Decision& decision, std::string_view jsessionid);

  // The Set-Cookie header value naming the decision's server (allocates; only
  // when a session starts).
  std::string AffinityCookieHeader(const Decision& decision, bool https) const;

  // The port a secure redirect names (the proxy's public https port); 0:
  // none, so such requests get 403.
  void set_https_port(uint16_t port) { https_port_ = port; }
  uint16_t https_port() const { return https_port_; }

  // Explaining (admin port): the session tables are read with Peek and never
  // written (no recording, refresh, expiry or erasure), so a decision can be
  // explained on the live tables without changing them.
  void set_read_only_sessions(bool read_only) { read_only_sessions_ = read_only; }

  // The session identifiers the last Route() found (explaining). Filled only
  // when that request reached a group past the permission table.
  const session::SessionIds& session_ids() const { return ids_; }

  // What the modification rules of the last Route() made (Decision::modified).
  // The caller may move its headers and response edits out.
  modification::State& modification_state() { return *mod_state_; }
  const modification::State& modification_state() const { return *mod_state_; }
  // While tracing: the rule file of each step of modification_state().trace.
  const std::vector<const ModificationEntry*>& modification_trace_sources() const {
    return mod_trace_sources_;
  }
  // Explaining: record every rule that fired (State::trace).
  void set_trace_modifications(bool trace) { trace_modifications_ = trace; }

  // Balancer state of group `group_index` of the current table (admin pages).
  const balancer::Balancer* BalancerFor(size_t group_index) const;

 private:
  struct RetiredTable {
    std::shared_ptr<const RoutingTable> table;
    uint64_t generation;
    uint64_t in_flight;
  };

  // Index of a server of `group` that may take sticky traffic for `name`:
  // present and healthy (ready or draining). -1 otherwise, noting the loss.
  int StickyServer(const GroupEntry& group, std::string_view name, Identifier identifier,
                   Identifier* lost) const;
  // The group's session table entry for `id` into server_scratch_ (length, or -1).
  int LookupSession(const GroupEntry& group, session::TableKey kind, std::string_view id,
                    int64_t now_ms);
  void EraseSession(const GroupEntry& group, session::TableKey kind, std::string_view id);
  int ResolveSticky(const GroupEntry& group, Identifier* routed_by, Identifier* lost,
                    bool* record_ext_sid, int64_t now_ms);
  // One identifier's server for `group`, -1 when it names none that is usable.
  int StickyBy(Identifier identifier, const GroupEntry& group, Identifier* lost,
               bool* record_ext_sid, int64_t now_ms);

  // Runs the rule files of `vhost` whose prefix `lower_path` starts with, in
  // order. False when none applies (nothing was done).
  bool RunModifications(const VirtualHostEntry& vhost, const Request& request,
                        std::string_view lower_path, std::string_view forward_path,
                        std::string_view query, bool has_query);

  std::shared_ptr<const session::AffinityCookieCodec> affinity_codec_;
  std::shared_ptr<const Clock> clock_;
  std::shared_ptr<const RoutingTable> table_;
  uint64_t generation_ = 0;
  uint64_t in_flight_ = 0;  // counted decisions on the current table
  std::vector<std::unique_ptr<balancer::Balancer>> balancers_;  // per group
  std::vector<RetiredTable> retired_;
  bool read_only_sessions_ = false;
  uint16_t https_port_ = 0;
  std::string location_;  // the last secure redirect's Location

  // Per-request scratch, not zeroed when made: the 48 KiB are touched only
  // as far as targets reach (an idle proxy's Routers hold no resident pages
  // of them).
  class Scratch {
   public:
    explicit Scratch(size_t size) : data_(new char[size]), size_(size) {}
    char* data() { return data_.get(); }
    size_t size() const { return size_; }
    operator std::span<char>() { return {data_.get(), size_}; }

   private:
    std::unique_ptr<char[]> data_;
    size_t size_;
  };
  Scratch path_scratch_;
  Scratch lower_scratch_;
  // The reading with "%2F" and "%5C" decoded (only for targets holding them).
  Scratch decoded_path_scratch_;
  Scratch decoded_lower_scratch_;
  NormalizedTarget normalized_;  // the last Route()'s target
  std::array<char, 256> host_scratch_{};
  std::array<char, 256> server_scratch_{};
  session::SessionIds ids_;
  // Modification rules: two states, the result of one file feeding the next
  // (mod_state_ holds the latest); reused, so steady state allocates nothing.
  std::unique_ptr<modification::State> mod_state_;
  std::unique_ptr<modification::State> mod_previous_;
  std::vector<modification::HeaderView> mod_headers_;
  std::string mod_decoded_path_;
  std::string mod_target_;
  std::string mod_forward_;
  bool trace_modifications_ = false;
  std::vector<const ModificationEntry*> mod_trace_sources_;
};

}  // namespace kwd::routing
