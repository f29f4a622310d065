#include "dataplane/routing/server_health_registry.h"

namespace kwd::routing {

std::string ServerHealthRegistry::Key(std::string_view group_key, std::string_view server) {
  std::string key;
  key.reserve(group_key.size() + 1 + server.size());
  key.append(group_key).append(1, '\n').append(server);
  return key;
}

std::shared_ptr<balancer::ServerHealth> ServerHealthRegistry::Get(std::string_view group_key,
                                                                  std::string_view server) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& state = states_[Key(group_key, server)];
  if (state == nullptr) {
    state = std::make_shared<balancer::ServerHealth>();
  }
  return state;
}

std::shared_ptr<balancer::ServerHealth> ServerHealthRegistry::Find(std::string_view group_key,
                                                                   std::string_view server) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = states_.find(Key(group_key, server));
  return it == states_.end() ? nullptr : it->second;
}

void ServerHealthRegistry::Retain(const std::unordered_set<std::string>& live) {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(states_, [&](const auto& entry) { return live.count(entry.first) == 0; });
}

}  // namespace kwd::routing
