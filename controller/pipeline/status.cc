#include "controller/pipeline/status.h"

#include <ctime>
#include <set>

#include "common/log.h"

namespace kwd::pipeline {

using nlohmann::json;

std::string FormatTime(std::chrono::system_clock::time_point time) {
  std::time_t seconds = std::chrono::system_clock::to_time_t(time);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buffer;
}

std::string ObjectPath(std::string_view kind, std::string_view namespace_, std::string_view name) {
  std::string_view plural = kind == model::kLogonGroupKind   ? "logongroups"
                            : kind == model::kSapSystemKind ? "sapsystems"
                                                            : "urlmappings";
  return "/apis/dispatch.kwd.io/v1alpha1/namespaces/" + std::string(namespace_) + "/" +
         std::string(plural) + "/" + std::string(name);
}

std::optional<json> StatusToWrite(const compile::ObjectStatus& desired, const json* observed,
                                  std::chrono::system_clock::time_point now) {
  const bool has_observed = observed != nullptr && observed->is_object();
  json status = has_observed ? *observed : json::object();
  status["observedGeneration"] = desired.generation;
  if (desired.kind == model::kLogonGroupKind) {
    status["readyServers"] = desired.ready_servers;
  }
  if (desired.kind == model::kUrlMappingKind) {
    status["rules"] = desired.rules;
    status["hosts"] = desired.hosts;
  }
  if (desired.kind == model::kSapSystemKind) {
    status["servers"] = desired.servers;
    if (!desired.last_refresh_time.empty()) {
      status["lastRefreshTime"] = desired.last_refresh_time;
    }
  }
  const json* existing = nullptr;
  if (has_observed) {
    auto it = observed->find("conditions");
    if (it != observed->end() && it->is_array()) {
      existing = &*it;
    }
  }
  auto find_existing = [&](const std::string& type) -> const json* {
    if (existing == nullptr) {
      return nullptr;
    }
    for (const json& condition : *existing) {
      if (condition.is_object() && condition.value("type", "") == type) {
        return &condition;
      }
    }
    return nullptr;
  };

  json conditions = json::array();
  std::set<std::string> ours;
  const std::string now_text = FormatTime(now);
  for (const compile::Condition& condition : desired.conditions) {
    ours.insert(condition.type);
    json entry = {{"type", condition.type},
                  {"status", condition.status},
                  {"reason", condition.reason},
                  {"message", condition.message},
                  {"observedGeneration", desired.generation},
                  {"lastTransitionTime", now_text}};
    if (const json* before = find_existing(condition.type)) {
      auto time = before->find("lastTransitionTime");
      if (before->value("status", "") == condition.status && time != before->end() &&
          time->is_string()) {
        entry["lastTransitionTime"] = *time;
      }
    }
    conditions.push_back(std::move(entry));
  }
  if (existing != nullptr) {
    for (const json& condition : *existing) {
      if (!condition.is_object() || !ours.contains(condition.value("type", ""))) {
        conditions.push_back(condition);  // someone else's condition type (e.g. Programmed)
      }
    }
  }
  status["conditions"] = std::move(conditions);
  if (has_observed && status == *observed) {
    return std::nullopt;
  }
  return status;
}

StatusWriter::StatusWriter(kube::KubeApi& api, StatusWriterOptions options,
                           MetricsRegistry* metrics)
    : api_(api), options_(options), metrics_(metrics) {
  if (metrics_ != nullptr) {
    for (std::string_view result : {"ok", "not_found", "error"}) {
      CounterFor(result);  // every series exists from the start, at 0
    }
  }
}

Counter* StatusWriter::CounterFor(std::string_view result) {
  if (metrics_ == nullptr) {
    return nullptr;
  }
  return &metrics_->GetCounter(
      "kwd_controller_status_writes_total",
      "Status subresource writes by result (ok; not_found: the object was deleted; error).",
      {{"result", std::string(result)}});
}

void StatusWriter::Count(std::string_view result) {
  if (Counter* counter = CounterFor(result)) {
    counter->Inc();
  }
}

void StatusWriter::Submit(std::vector<StatusUpdate> updates) {
  std::lock_guard lock(mu_);
  if (!leader_) {
    return;
  }
  for (StatusUpdate& update : updates) {
    auto written = written_.find(update.key);
    if (written != written_.end() && written->second == update.status) {
      pending_.erase(update.key);
      continue;
    }
    Pending& pending = pending_[update.key];
    pending.path = ObjectPath(update.key.kind, update.key.namespace_, update.key.name);
    pending.status = std::move(update.status);
    pending.sequence = next_sequence_++;
  }
  wake_.notify_all();
}

void StatusWriter::SetLeader(bool leader) {
  std::lock_guard lock(mu_);
  if (leader_ == leader) {
    return;
  }
  leader_ = leader;
  pending_.clear();
  // Another replica may have written since; trust only what the watch says.
  written_.clear();
  wake_.notify_all();
}

bool StatusWriter::leader() const {
  std::lock_guard lock(mu_);
  return leader_;
}

std::size_t StatusWriter::pending() const {
  std::lock_guard lock(mu_);
  return pending_.size();
}

void StatusWriter::Run(std::stop_token stop) {
  std::unique_lock lock(mu_);
  while (!stop.stop_requested()) {
    if (!leader_ || pending_.empty()) {
      wake_.wait(lock, stop, [&] { return leader_ && !pending_.empty(); });
      continue;
    }
    auto next = pending_.begin();
    for (auto it = pending_.begin(); it != pending_.end(); ++it) {
      if (it->second.not_before < next->second.not_before) {
        next = it;
      }
    }
    auto now = std::chrono::steady_clock::now();
    if (next->second.not_before > now) {
      auto until = next->second.not_before;
      std::uint64_t generation = next_sequence_;
      wake_.wait_until(lock, stop, until, [&] { return !leader_ || next_sequence_ != generation; });
      continue;
    }
    model::ObjectKey key = next->first;
    std::string path = next->second.path;
    json status = next->second.status;
    std::uint64_t sequence = next->second.sequence;
    lock.unlock();
    kube::ApiResult result = api_.MergePatchStatus(path, json{{"status", status}});
    lock.lock();
    auto it = pending_.find(key);
    const bool unchanged = it != pending_.end() && it->second.sequence == sequence;
    if (result.status.ok()) {
      Count("ok");
      if (leader_) {
        written_[key] = status;
      }
      if (unchanged) {
        pending_.erase(it);
      }
      Log(LogLevel::kDebug, "status", "status written", {{"object", key.ToString()}});
    } else if (result.status.IsNotFound()) {
      Count("not_found");
      written_.erase(key);
      if (unchanged) {
        pending_.erase(it);
      }
    } else {
      Count("error");
      Log(LogLevel::kWarn, "status", "status write failed; retrying",
          {{"object", key.ToString()}, {"error", result.status.ToString()}});
      if (it != pending_.end()) {
        if (!it->second.backoff) {
          it->second.backoff.emplace(options_.backoff, kube::DefaultRandom());
        }
        it->second.not_before = std::chrono::steady_clock::now() +
                                std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    it->second.backoff->Next());
      }
    }
  }
}

std::string ObjectsJson(const compile::CompileResult& result) {
  nlohmann::json objects = nlohmann::json::array();
  int rejected = 0;
  for (const compile::ObjectStatus& status : result.statuses) {
    const compile::Condition* accepted = status.Find(compile::kAccepted);
    bool is_accepted = accepted != nullptr && accepted->status == "True";
    rejected += is_accepted ? 0 : 1;
    nlohmann::json conditions = nlohmann::json::array();
    for (const compile::Condition& condition : status.conditions) {
      conditions.push_back({{"type", condition.type},
                            {"status", condition.status},
                            {"reason", condition.reason},
                            {"message", condition.message}});
    }
    nlohmann::json object = {{"kind", status.kind},
                             {"namespace", status.namespace_},
                             {"name", status.name},
                             {"generation", status.generation},
                             {"accepted", is_accepted},
                             {"servingLastGood", status.serving_last_good},
                             {"conditions", std::move(conditions)}};
    if (status.serving_last_good) {
      object["lastGoodGeneration"] = status.last_good_generation;
    }
    objects.push_back(std::move(object));
  }
  // Invalid UTF-8 from an object's field is replaced, never thrown.
  return nlohmann::json{{"objects", std::move(objects)}, {"rejected", rejected}}.dump(
             2, ' ', false, nlohmann::json::error_handler_t::replace) +
         "\n";
}

}  // namespace kwd::pipeline
