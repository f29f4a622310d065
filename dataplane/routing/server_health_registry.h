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
#include <unordered_set>

#include "dataplane/balancer/balancer.h"

namespace kwd::routing {

class ServerHealthRegistry {
 public:
  // The state of `server` in `group_key`, created healthy when new.
  std::shared_ptr<balancer::ServerHealth> Get(std::string_view group_key, std::string_view server);
  // Null when the server is unknown.
  std::shared_ptr<balancer::ServerHealth> Find(std::string_view group_key,
                                               std::string_view server) const;
  // Forgets every server whose "<group_key>\n<server>" key is not in `live`.
  void Retain(const std::unordered_set<std::string>& live);

  static std::string Key(std::string_view group_key, std::string_view server);

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<balancer::ServerHealth>> states_;
};

}  // namespace kwd::routing
