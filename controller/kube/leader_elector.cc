#include "controller/kube/leader_elector.h"

#include <algorithm>
#include <cstdio>
#include <ctime>

#include "common/log.h"

namespace kwd::kube {

using nlohmann::json;

namespace {

constexpr std::string_view kComponent = "leader-election";

int64_t CeilSeconds(std::chrono::milliseconds duration) {
  return std::max<int64_t>(1, (duration.count() + 999) / 1000);
}

}  // namespace

std::string FormatMicroTime(std::chrono::system_clock::time_point time) {
  auto micros = std::chrono::duration_cast<std::chrono::microseconds>(time.time_since_epoch());
  auto seconds = std::chrono::floor<std::chrono::seconds>(micros);
  std::time_t t = static_cast<std::time_t>(seconds.count());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buffer[96];
  std::snprintf(buffer, sizeof buffer, "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<long long>((micros - seconds).count()));
  return buffer;
}

std::optional<std::chrono::system_clock::time_point> ParseMicroTime(std::string_view text) {
  std::tm tm{};
  int consumed = 0;
  std::string copy(text);
  if (std::sscanf(copy.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &consumed) != 6 ||
      consumed != 19) {
    return std::nullopt;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  std::string_view rest = text.substr(19);
  int64_t micros = 0;
  if (!rest.empty() && rest.front() == '.') {
    rest.remove_prefix(1);
    int digits = 0;
    while (!rest.empty() && rest.front() >= '0' && rest.front() <= '9') {
      if (digits < 6) {
        micros = micros * 10 + (rest.front() - '0');
      }
      ++digits;
      rest.remove_prefix(1);
    }
    if (digits == 0) {
      return std::nullopt;
    }
    for (int i = digits; i < 6; ++i) {
      micros *= 10;
    }
  }
  if (rest != "Z") {
    return std::nullopt;  // the API writes UTC only
  }
  std::time_t seconds = timegm(&tm);
  return std::chrono::system_clock::time_point(std::chrono::seconds(seconds)) +
         std::chrono::microseconds(micros);
}

LeaderElector::LeaderElector(KubeApi& client, LeaderElectionConfig config,
                             LeaderCallbacks callbacks)
    : client_(client),
      config_(std::move(config)),
      callbacks_(std::move(callbacks)),
      clock_(config_.clock ? config_.clock : std::make_shared<RealClock>()),
      sleeper_(config_.sleeper ? config_.sleeper : std::make_shared<RealSleeper>()) {}

std::string LeaderElector::ObservedLeader() const {
  std::lock_guard lock(leader_mutex_);
  return observed_leader_;
}

void LeaderElector::NoteLeader(const std::string& holder) {
  {
    std::lock_guard lock(leader_mutex_);
    if (holder == observed_leader_) {
      return;
    }
    observed_leader_ = holder;
  }
  if (callbacks_.on_new_leader && !holder.empty()) {
    callbacks_.on_new_leader(holder);
  }
}

LeaderElector::Attempt LeaderElector::TryAcquireOrRenew(std::chrono::milliseconds timeout) {
  const auto now = clock_->Now();
  const std::string now_text = FormatMicroTime(clock_->WallNow());
  const int64_t duration_seconds = CeilSeconds(config_.lease_duration);

  ApiResult current = client_.GetLease(config_.lease_namespace, config_.lease_name, timeout);
  if (current.status.IsNotFound()) {
    json lease = {
        {"apiVersion", "coordination.k8s.io/v1"},
        {"kind", "Lease"},
        {"metadata", {{"name", config_.lease_name}, {"namespace", config_.lease_namespace}}},
        {"spec",
         {{"holderIdentity", config_.identity},
          {"leaseDurationSeconds", duration_seconds},
          {"acquireTime", now_text},
          {"renewTime", now_text},
          {"leaseTransitions", 0}}}};
    ApiResult created = client_.CreateLease(config_.lease_namespace, lease, timeout);
    if (!created.status.ok()) {
      return Attempt::kFailed;  // 409 AlreadyExists: another candidate was quicker
    }
    observed_record_ = created.body.value("spec", json::object()).dump();
    observed_time_ = now;
    NoteLeader(config_.identity);
    return Attempt::kAcquired;
  }
  if (!current.status.ok() || !current.body.is_object()) {
    Log(LogLevel::kWarn, kComponent, "cannot read lease",
        {{"lease", config_.lease_name}, {"error", current.status.ToString()}});
    return Attempt::kFailed;
  }

  json spec = current.body.value("spec", json::object());
  if (!spec.is_object()) {
    spec = json::object();
  }
  std::string record = spec.dump();
  if (record != observed_record_) {
    // Any change to the record (a renewal, a new holder) restarts our count.
    observed_record_ = record;
    observed_time_ = now;
  }
  std::string holder = spec.value("holderIdentity", "");
  if (!spec["holderIdentity"].is_string()) {
    holder.clear();
  }
  NoteLeader(holder);
  auto held_for = config_.lease_duration;
  if (auto seconds = spec.find("leaseDurationSeconds");
      seconds != spec.end() && seconds->is_number_integer() && seconds->get<int64_t>() > 0) {
    held_for = std::chrono::seconds(seconds->get<int64_t>());
  }
  bool mine = holder == config_.identity;
  if (!holder.empty() && !mine && now < observed_time_ + held_for) {
    return Attempt::kHeldByOther;
  }

  json lease = current.body;
  json& new_spec = lease["spec"];
  if (!new_spec.is_object()) {
    new_spec = json::object();
  }
  new_spec["holderIdentity"] = config_.identity;
  new_spec["leaseDurationSeconds"] = duration_seconds;
  new_spec["renewTime"] = now_text;
  if (!mine || !new_spec.contains("acquireTime")) {
    new_spec["acquireTime"] = now_text;
  }
  if (!mine) {
    int64_t transitions = 0;
    if (auto old = spec.find("leaseTransitions"); old != spec.end() && old->is_number_integer()) {
      transitions = old->get<int64_t>();
    }
    // An empty holder means the lease was released, so taking it is a transition too.
    new_spec["leaseTransitions"] = transitions + 1;
  }
  // metadata.resourceVersion stays as read: a concurrent writer makes this a 409.
  ApiResult updated =
      client_.UpdateLease(config_.lease_namespace, config_.lease_name, lease, timeout);
  if (!updated.status.ok()) {
    if (!updated.status.IsConflict()) {
      Log(LogLevel::kWarn, kComponent, "cannot update lease",
          {{"lease", config_.lease_name}, {"error", updated.status.ToString()}});
    }
    return Attempt::kFailed;
  }
  observed_record_ = updated.body.value("spec", json::object()).dump();
  observed_time_ = now;
  NoteLeader(config_.identity);
  return Attempt::kAcquired;
}

void LeaderElector::Release() {
  ApiResult current =
      client_.GetLease(config_.lease_namespace, config_.lease_name, config_.renew_deadline);
  if (!current.status.ok() || !current.body.is_object() || !current.body["spec"].is_object() ||
      current.body["spec"].value("holderIdentity", "") != config_.identity) {
    return;
  }
  json lease = current.body;
  lease["spec"]["holderIdentity"] = "";
  lease["spec"]["leaseDurationSeconds"] = 1;
  lease["spec"]["renewTime"] = FormatMicroTime(clock_->WallNow());
  client_.UpdateLease(config_.lease_namespace, config_.lease_name, lease, config_.renew_deadline);
}

void LeaderElector::Run(std::stop_token stop) {
  while (!stop.stop_requested()) {
    // Campaign.
    while (TryAcquireOrRenew(config_.renew_deadline) != Attempt::kAcquired) {
      if (!sleeper_->SleepFor(config_.retry_period, stop)) {
        return;
      }
    }
    if (stop.stop_requested()) {
      // Acquired just as we were told to stop: hand it back.
      if (config_.release_on_cancel) {
        Release();
      }
      return;
    }
    leading_ = true;
    Log(LogLevel::kInfo, kComponent, "started leading",
        {{"lease", config_.lease_name}, {"identity", config_.identity}});
    if (callbacks_.on_started_leading) {
      callbacks_.on_started_leading();
    }

    // Lead: renew every retry period; give up at the renew deadline.
    auto last_renew = clock_->Now();
    std::string why = "stopped";
    while (true) {
      auto deadline = last_renew + config_.renew_deadline;
      auto wait =
          std::min<std::chrono::nanoseconds>(config_.retry_period, deadline - clock_->Now());
      if (wait.count() > 0 && !sleeper_->SleepFor(wait, stop)) {
        break;
      }
      auto remaining = std::chrono::duration_cast<std::chrono::milliseconds>(
          last_renew + config_.renew_deadline - clock_->Now());
      if (remaining.count() <= 0) {
        why = "renew deadline passed";
        break;
      }
      Attempt attempt = TryAcquireOrRenew(remaining);
      if (attempt == Attempt::kAcquired) {
        last_renew = clock_->Now();
      } else if (attempt == Attempt::kHeldByOther) {
        why = "lease taken by " + ObservedLeader();
        break;
      } else if (clock_->Now() >= last_renew + config_.renew_deadline) {
        why = "renew deadline passed";
        break;
      }
    }
    leading_ = false;
    Log(LogLevel::kInfo, kComponent, "stopped leading",
        {{"lease", config_.lease_name}, {"identity", config_.identity}, {"reason", why}});
    if (callbacks_.on_stopped_leading) {
      callbacks_.on_stopped_leading();
    }
    if (stop.stop_requested()) {
      if (config_.release_on_cancel) {
        Release();
      }
      return;
    }
  }
}

}  // namespace kwd::kube
