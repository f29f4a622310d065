#include "dataplane/routing/server_health_registry.h"

namespace kwd::routing {
namespace {

void AssignKey(std::string_view group_key, std::string_view server, std::string* key) {
  key->reserve(group_key.size() + 1 + server.size());
  key->assign(group_key).append(1, '\n').append(server);
}

}  // namespace

std::string ServerHealthRegistry::Key(std::string_view group_key, std::string_view server) {
  std::string key;
  AssignKey(group_key, server, &key);
  return key;
}

std::shared_ptr<balancer::ServerHealth> ServerHealthRegistry::Find(std::string_view group_key,
                                                                   std::string_view server) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = states_.find(Key(group_key, server));
  return it == states_.end() ? nullptr : it->second.state;
}

std::vector<std::shared_ptr<balancer::ServerHealth>> ServerHealthRegistry::Replace(
    const std::vector<std::pair<std::string_view, std::string_view>>& servers) {
  std::vector<std::shared_ptr<balancer::ServerHealth>> states;
  states.reserve(servers.size());
  std::string key;
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t replace = ++replaces_;
  for (const auto& [group_key, server] : servers) {
    AssignKey(group_key, server, &key);  // reuses key's buffer
    auto it = states_.find(key);
    if (it == states_.end()) {
      it = states_.emplace(key, Slot{std::make_shared<balancer::ServerHealth>(), 0}).first;
    }
    it->second.replaced = replace;
    states.push_back(it->second.state);
  }
  std::erase_if(states_, [&](const auto& entry) { return entry.second.replaced != replace; });
  return states;
}

}  // namespace kwd::routing
