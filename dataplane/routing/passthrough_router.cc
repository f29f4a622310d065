#include "dataplane/routing/passthrough_router.h"

namespace kwd::routing {

std::string_view PassthroughReasonName(PassthroughReason reason) {
  switch (reason) {
    case PassthroughReason::kBalance:
      return "balance";
    case PassthroughReason::kAffinity:
      return "affinity:client-ip";
    case PassthroughReason::kNoGroup:
      return "no-group";
    case PassthroughReason::kNoServer:
      return "no-server";
  }
  return "no-server";
}

void PassthroughRouter::Apply(std::shared_ptr<const RoutingTable> table) {
  std::vector<std::unique_ptr<balancer::Balancer>> balancers;
  if (table != nullptr) {
    balancers.reserve(table->groups().size());
    for (const GroupEntry& group : table->groups()) {
      const int old_index = table_ == nullptr ? -1 : table_->FindGroup(group.key);
      std::unique_ptr<balancer::Balancer> balancer;
      if (old_index >= 0 && balancers_[old_index] != nullptr) {
        const GroupEntry& old_group = table_->groups()[old_index];
        std::vector<int> new_to_old;
        new_to_old.reserve(group.servers.size());
        for (const ServerEntry& server : group.servers) {
          new_to_old.push_back(old_group.FindServer(server.name));
        }
        balancer = std::move(balancers_[old_index]);
        balancer->Rebind(new_to_old);
      } else {
        // Passthrough connections are balanced without load resets: open
        // connections are the load.
        balancer =
            balancer::MakeBalancer(v1::STRATEGY_WEIGHTED_ROUND_ROBIN, group.servers.size(), 0);
      }
      balancers.push_back(std::move(balancer));
    }
  }
  table_ = std::move(table);
  balancers_ = std::move(balancers);
  ++generation_;
}

PassthroughDecision PassthroughRouter::Route(std::string_view sni, std::string_view client_address,
                                             int exclude_server) {
  PassthroughDecision decision;
  if (table_ == nullptr) {
    return decision;
  }
  decision.group_index = table_->FindPassthroughGroup(sni);
  if (decision.group_index < 0) {
    return decision;
  }
  decision.table = table_;
  decision.generation = generation_;
  const GroupEntry& group = table_->groups()[decision.group_index];
  decision.group = &group;
  balancer::Balancer& balancer = *balancers_[decision.group_index];
  const int64_t now_ms = clock_->NowMs();

  int server = -1;
  if (group.client_ips != nullptr) {
    std::string name = group.client_ips->Lookup(client_address, now_ms);
    if (!name.empty()) {
      int index = group.FindServer(name);
      // Ready or draining, as HTTP stickiness: a draining server keeps its clients.
      if (index >= 0 && index != exclude_server && group.inputs[index].Healthy()) {
        server = index;
        balancer.CountSticky(static_cast<size_t>(server), now_ms);
        decision.reason = PassthroughReason::kAffinity;
      }
    }
  }
  if (server < 0) {
    server = balancer.Pick(group.inputs, now_ms);
    // A retry: the failed server is passed over. Each pick counts against
    // the server it returns, so picking again moves on; the extra counts on
    // the failed server are given back. Bounded: a few rounds, then none.
    int passed_over = 0;
    while (server >= 0 && server == exclude_server && passed_over < 64) {
      ++passed_over;
      server = balancer.Pick(group.inputs, now_ms);
    }
    for (int i = 0; i < passed_over; ++i) {
      balancer.Complete(static_cast<size_t>(exclude_server));
    }
    if (server == exclude_server && server >= 0) {
      balancer.Complete(static_cast<size_t>(server));
      server = -1;
    }
    if (server < 0) {
      decision.reason = PassthroughReason::kNoServer;
      return decision;
    }
    decision.reason = PassthroughReason::kBalance;
    if (group.client_ips != nullptr) {
      group.client_ips->Record(client_address, group.servers[server].name, now_ms);
    }
  }
  decision.server_index = server;
  decision.server = &group.servers[server];
  decision.counted = true;
  return decision;
}

void PassthroughRouter::Complete(PassthroughDecision* decision) {
  if (!decision->counted) {
    return;
  }
  decision->counted = false;
  if (decision->generation == generation_) {
    balancers_[decision->group_index]->Complete(static_cast<size_t>(decision->server_index));
    return;
  }
  // Routed on an earlier table: its counters moved to this one by name.
  if (table_ == nullptr) {
    return;
  }
  int group_index = table_->FindGroup(decision->group->key);
  if (group_index < 0) {
    return;
  }
  int server_index = table_->groups()[group_index].FindServer(decision->server->name);
  if (server_index >= 0) {
    balancers_[group_index]->Complete(static_cast<size_t>(server_index));
  }
}

void PassthroughRouter::ForgetAffinity(const PassthroughDecision& decision,
                                       std::string_view client_address) {
  if (decision.group != nullptr && decision.group->client_ips != nullptr) {
    decision.group->client_ips->Erase(client_address);
  }
}

}  // namespace kwd::routing
