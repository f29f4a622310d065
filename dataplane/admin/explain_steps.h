#pragma once

// Every step of one routing decision, for /admin/api/explain and the admin
// page's explain form: virtual host, permission rule, classification rule,
// each session identifier (found, the server it names, honoured or why
// not), the balancing candidates with their live load, and the result.
// Reads only: the session tables are peeked, nothing is recorded.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>

#include "dataplane/routing/decision_json.h"
#include "dataplane/routing/router.h"
#include "dataplane/session/affinity_cookie.h"

namespace kwd::admin {

struct ExplainContext {
  const session::AffinityCookieCodec* codec = nullptr;
  int64_t now_ms = 0;  // the session tables' clock
  // The decision group's live load summed over the workers (may be empty).
  std::span<const uint64_t> assigned;
  std::span<const uint64_t> outstanding;
};

// `decision` is what `router` just routed for `request` (before its next
// Route()). Returns an array of {"step", "text", ...details}.
nlohmann::ordered_json ExplainSteps(const routing::Router& router,
                                    const routing::Decision& decision,
                                    const routing::ExplainRequest& request,
                                    const ExplainContext& context);

}  // namespace kwd::admin
