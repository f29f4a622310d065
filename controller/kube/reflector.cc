#include "controller/kube/reflector.h"

#include <algorithm>

#include "common/log.h"

namespace kwd::kube {

namespace {
constexpr std::string_view kComponent = "kube-reflector";
// A watch that the server closes this quickly without a single event is
// treated like a failure, so a misbehaving server cannot make us spin.
constexpr auto kMinHealthyWatch = std::chrono::seconds(1);
}  // namespace

Reflector::Reflector(KubeApi& client, ReflectorOptions options, ReflectorSink& sink)
    : client_(client),
      options_(std::move(options)),
      sink_(sink),
      sleeper_(options_.sleeper ? options_.sleeper : std::make_shared<RealSleeper>()),
      clock_(options_.clock ? options_.clock : std::make_shared<RealClock>()),
      random_(options_.random ? options_.random : DefaultRandom()) {}

void Reflector::OnEvent(WatchEventType type, const nlohmann::json& object) {
  if (auto metadata = object.find("metadata"); metadata != object.end() && metadata->is_object()) {
    if (auto rv = metadata->find("resourceVersion"); rv != metadata->end() && rv->is_string()) {
      std::lock_guard lock(rv_mutex_);
      resource_version_ = rv->get<std::string>();
    }
  }
  switch (type) {
    case WatchEventType::kAdded:
      ++added_;
      sink_.Upsert(object);
      break;
    case WatchEventType::kModified:
      ++modified_;
      sink_.Upsert(object);
      break;
    case WatchEventType::kDeleted:
      ++deleted_;
      sink_.Delete(object);
      break;
    case WatchEventType::kBookmark:
      ++bookmarks_;
      break;
  }
}

void Reflector::Run(std::stop_token stop) {
  Backoff backoff(options_.backoff, random_);
  bool need_list = true;
  std::string rv;
  auto set_rv = [&](const std::string& value) {
    rv = value;
    std::lock_guard lock(rv_mutex_);
    resource_version_ = value;
  };

  while (!stop.stop_requested()) {
    if (need_list) {
      ListResult list = client_.List(options_.path, options_.label_selector, stop);
      if (stop.stop_requested()) {
        return;
      }
      if (!list.status.ok()) {
        ++errors_;
        Log(LogLevel::kWarn, kComponent, "list failed",
            {{"path", options_.path}, {"error", list.status.ToString()}});
        if (options_.empty_when_not_found && list.status.IsNotFound() && !synced_) {
          Log(LogLevel::kWarn, kComponent,
              "resource not served (its CRD is not installed?): empty until it is",
              {{"path", options_.path}});
          sink_.Replace({}, "");
          synced_ = true;
        }
        if (options_.empty_when_forbidden && list.status.http_code == 403 && !synced_) {
          Log(LogLevel::kError, kComponent,
              "not allowed to list this resource (RBAC): empty until it is",
              {{"path", options_.path}});
          sink_.Replace({}, "");
          synced_ = true;
        }
        if (!sleeper_->SleepFor(backoff.Next(), stop)) {
          return;
        }
        continue;
      }
      if (lists_++ > 0) {
        ++relists_;
      }
      set_rv(list.resource_version);
      sink_.Replace(std::move(list.items), list.resource_version);
      synced_ = true;
      need_list = false;
    }

    WatchOptions watch_options;
    watch_options.resource_version = rv;
    watch_options.label_selector = options_.label_selector;
    watch_options.timeout_seconds = WatchTimeoutSeconds();
    watch_options.deadline_grace = options_.deadline_grace;
    ++watches_;
    auto started = clock_->Now();
    WatchResult watch = client_.Watch(
        options_.path, watch_options,
        [this](WatchEventType type, const nlohmann::json& object) { OnEvent(type, object); }, stop);
    if (!watch.last_resource_version.empty()) {
      set_rv(watch.last_resource_version);
    }

    bool pause = false;
    switch (watch.end) {
      case WatchEnd::kStopped:
        return;
      case WatchEnd::kClosed:
        // Normal end (timeoutSeconds): resume at once.
        if (watch.events > 0 || clock_->Now() - started >= kMinHealthyWatch) {
          backoff.Reset();
        } else {
          pause = true;
        }
        break;
      case WatchEnd::kRelistNeeded:
        Log(LogLevel::kInfo, kComponent, "relisting",
            {{"path", options_.path}, {"reason", watch.status.ToString()}});
        need_list = true;
        // Relist at once after a working watch; pause when 410s come back to back.
        pause = watch.events == 0;
        if (!pause) {
          backoff.Reset();
        }
        break;
      case WatchEnd::kFailed:
        ++errors_;
        Log(LogLevel::kWarn, kComponent, "watch failed; resuming",
            {{"path", options_.path}, {"resourceVersion", rv}, {"error", watch.status.ToString()}});
        if (watch.events > 0) {
          backoff.Reset();  // it worked for a while: start the backoff over
        }
        pause = true;
        break;
    }
    if (pause && !sleeper_->SleepFor(backoff.Next(), stop)) {
      return;
    }
  }
}

int Reflector::WatchTimeoutSeconds() {
  // At most a day, so that twice the minimum cannot overflow.
  int minimum = std::clamp(options_.watch_timeout_seconds, 1, 86400);
  double spread = std::clamp(random_(), 0.0, 1.0);
  return std::min(2 * minimum - 1, minimum + static_cast<int>(spread * minimum));
}

ReflectorStats Reflector::Stats() const {
  ReflectorStats stats;
  stats.added = added_;
  stats.modified = modified_;
  stats.deleted = deleted_;
  stats.bookmarks = bookmarks_;
  stats.lists = lists_;
  stats.relists = relists_;
  stats.watches = watches_;
  stats.errors = errors_;
  return stats;
}

std::string Reflector::LastResourceVersion() const {
  std::lock_guard lock(rv_mutex_);
  return resource_version_;
}

}  // namespace kwd::kube
