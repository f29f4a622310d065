#include "controller/kube/event_recorder.h"

#include <cstdio>
#include <ctime>

#include "common/log.h"
#include "controller/kube/leader_elector.h"

namespace kwd::kube {
namespace {

constexpr size_t kMaxNote = 1024;

// Cuts at a UTF-8 character boundary.
std::string CutNote(std::string_view note) {
  if (note.size() <= kMaxNote) {
    return std::string(note);
  }
  size_t end = kMaxNote;
  while (end > 0 && (static_cast<unsigned char>(note[end]) & 0xC0) == 0x80) {
    --end;
  }
  return std::string(note.substr(0, end));
}

}  // namespace

EventRecorder::EventRecorder(KubeApi& api, EventRecorderOptions options)
    : api_(api),
      options_(std::move(options)),
      clock_(options_.clock ? options_.clock : std::make_shared<RealClock>()) {}

nlohmann::json EventRecorder::EventJson(const EventObjectRef& regarding, std::string_view type,
                                        std::string_view reason, std::string_view action,
                                        std::string_view note) const {
  auto wall = clock_->WallNow();
  auto nanos =
      std::chrono::duration_cast<std::chrono::nanoseconds>(wall.time_since_epoch()).count();
  char suffix[24];
  std::snprintf(suffix, sizeof suffix, "%llx", static_cast<unsigned long long>(nanos));
  // client-go's naming: "<object name>.<hex timestamp>".
  std::string name = regarding.name.substr(0, 200) + "." + suffix;
  nlohmann::json ref = {{"apiVersion", regarding.api_version},
                        {"kind", regarding.kind},
                        {"namespace", regarding.namespace_},
                        {"name", regarding.name}};
  if (!regarding.uid.empty()) {
    ref["uid"] = regarding.uid;
  }
  return {{"apiVersion", "events.k8s.io/v1"},
          {"kind", "Event"},
          {"metadata", {{"name", name}, {"namespace", regarding.namespace_}}},
          {"eventTime", FormatMicroTime(wall)},
          {"reportingController", options_.reporting_controller},
          {"reportingInstance", options_.reporting_instance.substr(0, 128)},
          {"action", std::string(action)},
          {"reason", std::string(reason)},
          {"type", std::string(type)},
          {"regarding", ref},
          {"note", CutNote(note)}};
}

void EventRecorder::Record(const EventObjectRef& regarding, std::string_view type,
                           std::string_view reason, std::string_view action,
                           std::string_view note) {
  auto now = clock_->Now();
  std::lock_guard lock(mu_);
  auto key = std::make_tuple(regarding.namespace_ + "/" + regarding.kind + "/" + regarding.name,
                             std::string(reason), std::string(note));
  if (auto it = recent_.find(key);
      it != recent_.end() && now - it->second < options_.dedupe_window) {
    return;
  }
  // Forget entries past the window so the map stays bounded by what happens
  // within one window.
  for (auto it = recent_.begin(); it != recent_.end();) {
    it = now - it->second >= options_.dedupe_window ? recent_.erase(it) : std::next(it);
  }
  recent_[key] = now;
  if (queue_.size() >= options_.max_queue) {
    Log(LogLevel::kWarn, "events", "event dropped: queue full",
        {{"object", std::get<0>(key)}, {"reason", std::string(reason)}});
    return;
  }
  queue_.push_back(Queued{regarding.namespace_, EventJson(regarding, type, reason, action, note)});
  wake_.notify_one();
}

void EventRecorder::Post(const Queued& queued) {
  ApiResult result =
      api_.Post("/apis/events.k8s.io/v1/namespaces/" + queued.namespace_ + "/events", queued.event);
  if (!result.status.ok()) {
    Log(LogLevel::kWarn, "events", "event not recorded",
        {{"object", queued.event["regarding"]["kind"].get<std::string>() + " " + queued.namespace_ +
                        "/" + queued.event["regarding"]["name"].get<std::string>()},
         {"reason", queued.event["reason"].get<std::string>()},
         {"error", result.status.ToString()}});
  }
}

void EventRecorder::Flush() {
  for (;;) {
    Queued next;
    {
      std::lock_guard lock(mu_);
      if (queue_.empty()) {
        return;
      }
      next = std::move(queue_.front());
      queue_.pop_front();
    }
    Post(next);
  }
}

void EventRecorder::Run(std::stop_token stop) {
  while (!stop.stop_requested()) {
    {
      std::unique_lock lock(mu_);
      wake_.wait(lock, stop, [this] { return !queue_.empty(); });
    }
    Flush();
  }
}

}  // namespace kwd::kube
