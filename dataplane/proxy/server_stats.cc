#include "dataplane/proxy/server_stats.h"

#include <algorithm>
#include <cstring>

namespace kwd::proxy {
namespace {

void CopyInto(std::string_view text, char* out, size_t capacity, uint8_t* size) {
  size_t n = std::min(text.size(), capacity);
  std::memcpy(out, text.data(), n);
  *size = static_cast<uint8_t>(n);
}

bool IsError(size_t status_class) {
  return status_class == 0 || status_class == 5;
}

}  // namespace

void WorkerStats::Apply(std::shared_ptr<const routing::RoutingTable> table, int64_t now_ms) {
  if (started_ms_ < 0) {
    started_ms_ = now_ms;
  }
  std::vector<GroupTraffic> groups;
  if (table != nullptr) {
    groups.resize(table->groups().size());
    for (size_t g = 0; g < groups.size(); ++g) {
      const routing::GroupEntry& group = table->groups()[g];
      groups[g].servers.resize(group.servers.size());
      int old_group = table_ != nullptr ? table_->FindGroup(group.key) : -1;
      if (old_group < 0) {
        continue;
      }
      GroupTraffic& old = groups_[old_group];
      groups[g].sticky_routed = old.sticky_routed;
      groups[g].sticky_lost = old.sticky_lost;
      const routing::GroupEntry& old_entry = table_->groups()[old_group];
      for (size_t s = 0; s < group.servers.size(); ++s) {
        int old_server = old_entry.FindServer(group.servers[s].name);
        if (old_server >= 0) {
          groups[g].servers[s] = old.servers[old_server];
        }
      }
    }
  }
  table_ = std::move(table);
  groups_ = std::move(groups);
}

GroupTraffic* WorkerStats::GroupFor(const routing::Decision& decision, int* server) {
  *server = -1;
  if (table_ == nullptr || decision.group == nullptr) {
    return nullptr;
  }
  int group_index = decision.group_index;
  const auto groups = table_->groups();
  // A decision routed on an earlier table (a swap in flight) names its group
  // and server by pointers into that table: match them by name.
  bool same_table = group_index >= 0 && static_cast<size_t>(group_index) < groups.size() &&
                    &groups[group_index] == decision.group;
  if (!same_table) {
    group_index = table_->FindGroup(decision.group->key);
    if (group_index < 0) {
      return nullptr;
    }
  }
  if (decision.server != nullptr) {
    *server =
        same_table ? decision.server_index : groups[group_index].FindServer(decision.server->name);
    if (*server >= static_cast<int>(groups_[group_index].servers.size())) {
      *server = -1;
    }
  }
  return &groups_[group_index];
}

void WorkerStats::CountResponse(const routing::Decision* decision, int status, int64_t now_ms) {
  if (decision == nullptr) {
    return;
  }
  int server = -1;
  GroupTraffic* group = GroupFor(*decision, &server);
  if (group == nullptr) {
    return;
  }
  if (decision->lost != routing::Identifier::kNone) {
    ++group->sticky_lost;
  }
  switch (decision->reason) {
    case routing::Reason::kStickyContextId:
    case routing::Reason::kStickySaplb:
    case routing::Reason::kStickyJSessionId:
    case routing::Reason::kStickySapExtSid:
    case routing::Reason::kStickyAffinityCookie:
      ++group->sticky_routed;
      break;
    default:
      break;
  }
  if (server < 0) {
    return;
  }
  ServerTraffic& traffic = group->servers[server];
  size_t status_class = status >= 100 && status < 600 ? static_cast<size_t>(status / 100) : 0;
  ++traffic.responses[status_class];
  int64_t epoch = now_ms / kRateBucketMs;
  size_t bucket = static_cast<size_t>(epoch % static_cast<int64_t>(kRateBuckets));
  if (traffic.bucket_epoch[bucket] != epoch) {
    traffic.bucket_epoch[bucket] = epoch;
    traffic.bucket_requests[bucket] = 0;
    traffic.bucket_errors[bucket] = 0;
  }
  ++traffic.bucket_requests[bucket];
  if (IsError(status_class)) {
    ++traffic.bucket_errors[bucket];
  }
}

void WorkerStats::RecordLocalAnswer(const routing::Decision* decision, int status,
                                    std::string_view sap_code, std::string_view reason,
                                    std::string_view detail, int64_t unix_ms) {
  LocalAnswer& answer = answers_[answers_recorded_ % kLocalAnswerRing];
  ++answers_recorded_;
  answer.unix_ms = unix_ms;
  answer.status = status;
  answer.sap_code = sap_code;
  answer.reason = reason;
  CopyInto(detail, answer.detail.data(), answer.detail.size(), &answer.detail_size);
  answer.group_size = 0;
  if (decision != nullptr && decision->group != nullptr) {
    CopyInto(decision->group->key, answer.group.data(), answer.group.size(), &answer.group_size);
  }
}

TrafficView WorkerStats::Read(const routing::RoutingTable& table, int64_t now_ms) const {
  TrafficView view;
  const int64_t epoch = now_ms / kRateBucketMs;
  const int64_t covered =
      static_cast<int64_t>(kRateBuckets - 1) * kRateBucketMs + now_ms % kRateBucketMs;
  view.window_seconds =
      static_cast<double>(started_ms_ < 0 ? 0 : std::min(covered, now_ms - started_ms_)) / 1000.0;
  view.groups.resize(table.groups().size());
  for (size_t g = 0; g < view.groups.size(); ++g) {
    const routing::GroupEntry& group = table.groups()[g];
    GroupTrafficView& out = view.groups[g];
    out.servers.resize(group.servers.size());
    int mine = table_ != nullptr ? table_->FindGroup(group.key) : -1;
    if (mine < 0) {
      continue;
    }
    const GroupTraffic& traffic = groups_[mine];
    out.sticky_routed = traffic.sticky_routed;
    out.sticky_lost = traffic.sticky_lost;
    const routing::GroupEntry& my_group = table_->groups()[mine];
    for (size_t s = 0; s < group.servers.size(); ++s) {
      int index = my_group.FindServer(group.servers[s].name);
      if (index < 0) {
        continue;
      }
      const ServerTraffic& server = traffic.servers[index];
      ServerTrafficView& counts = out.servers[s];
      counts.responses = server.responses;
      for (size_t b = 0; b < kRateBuckets; ++b) {
        if (server.bucket_epoch[b] > epoch - static_cast<int64_t>(kRateBuckets) &&
            server.bucket_epoch[b] <= epoch) {
          counts.window_requests += server.bucket_requests[b];
          counts.window_errors += server.bucket_errors[b];
        }
      }
    }
  }
  size_t kept = std::min(answers_recorded_, kLocalAnswerRing);
  for (size_t i = answers_recorded_ - kept; i < answers_recorded_; ++i) {
    view.local_answers.push_back(answers_[i % kLocalAnswerRing]);
  }
  return view;
}

}  // namespace kwd::proxy
