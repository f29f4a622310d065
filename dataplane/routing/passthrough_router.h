#pragma once

// Balancing for TLS passthrough connections (SAP's end-to-end SSL), one per
// worker: the ClientHello's server name picks the group
// (RoutingTable::FindPassthroughGroup), client-IP affinity (when the group
// has it) keeps a client on its server, else the group's servers are taken
// in turn by capacity: the lowest (connections assigned + open + 1) /
// capacity among the usable servers (ready and healthy), as HTTP's
// weighted_round_robin does per request. The counters are the worker's own
// and separate from the HTTP balancers'.

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "dataplane/balancer/balancer.h"
#include "dataplane/routing/clock.h"
#include "dataplane/routing/routing_table.h"

namespace kwd::routing {

enum class PassthroughReason : uint8_t {
  kBalance,   // picked by capacity
  kAffinity,  // the client's address had a server
  kNoGroup,   // no server name matched and there is no default
  kNoServer,  // the group has no usable server
};
// "balance", "affinity:client-ip", "no-group", "no-server".
std::string_view PassthroughReasonName(PassthroughReason reason);

struct PassthroughDecision {
  std::shared_ptr<const RoutingTable> table;  // keeps `group` and `server` valid
  const GroupEntry* group = nullptr;
  int group_index = -1;
  const ServerEntry* server = nullptr;
  int server_index = -1;
  PassthroughReason reason = PassthroughReason::kNoGroup;
  uint64_t generation = 0;
  bool counted = false;
};

class PassthroughRouter {
 public:
  explicit PassthroughRouter(std::shared_ptr<const Clock> clock) : clock_(std::move(clock)) {}
  PassthroughRouter(const PassthroughRouter&) = delete;
  PassthroughRouter& operator=(const PassthroughRouter&) = delete;

  // Switches to `table`, carrying counters over per group key and server name.
  void Apply(std::shared_ptr<const RoutingTable> table);
  const std::shared_ptr<const RoutingTable>& table() const { return table_; }

  // The server for a new connection with server name `sni` ("" when none)
  // from `client_address`. `exclude` (a server index of the same group, or
  // -1) is skipped: a retry after its connect failed.
  PassthroughDecision Route(std::string_view sni, std::string_view client_address,
                            int exclude_server = -1);
  // The connection ended (open -= 1). Once per counted decision.
  void Complete(PassthroughDecision* decision);
  // The connect to the decision's server failed: forget the client's
  // affinity to it so the next connection is balanced anew.
  void ForgetAffinity(const PassthroughDecision& decision, std::string_view client_address);

  const balancer::Balancer* BalancerFor(size_t group_index) const {
    return group_index < balancers_.size() ? balancers_[group_index].get() : nullptr;
  }

 private:
  std::shared_ptr<const Clock> clock_;
  std::shared_ptr<const RoutingTable> table_;
  uint64_t generation_ = 0;
  std::vector<std::unique_ptr<balancer::Balancer>> balancers_;  // per group
};

}  // namespace kwd::routing
