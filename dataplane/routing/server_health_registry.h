#pragma once

// Runtime health and ping RTT per server, kept across snapshot swaps by
// group key + server name: the health checker flips the flags, every routing
// table built afterwards points at the same atomics. Thread-safe; used when a
// table is built and by the health checker, never per request.

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dataplane/balancer/balancer.h"

namespace kwd::routing {

class ServerHealthRegistry {
 public:
  // Null when the server is unknown.
  std::shared_ptr<balancer::ServerHealth> Find(std::string_view group_key,
                                               std::string_view server) const;
  // Makes `servers` ((group key, server name) pairs, as a routing table
  // lists them) the known servers: returns each one's state in order, kept
  // from before or created healthy, and forgets every other server. One
  // call, and one lock, per routing table build; servers that stay cost a
  // lookup, not an allocation.
  std::vector<std::shared_ptr<balancer::ServerHealth>> Replace(
      const std::vector<std::pair<std::string_view, std::string_view>>& servers);

  static std::string Key(std::string_view group_key, std::string_view server);

 private:
  mutable std::mutex mu_;
  struct Slot {
    std::shared_ptr<balancer::ServerHealth> state;
    uint64_t replaced = 0;  // the Replace call that last listed it
  };
  std::unordered_map<std::string, Slot> states_;  // by Key
  uint64_t replaces_ = 0;
};

}  // namespace kwd::routing
