#pragma once

// Kubernetes Events (events.k8s.io/v1) from the controller: what `kubectl
// describe` and `kubectl get events` show next to an object. Recording never
// blocks the caller: events are queued and posted by Run's thread; when the
// queue is full, or the API refuses, the event is dropped and logged (events
// are best effort, like client-go's recorder). The same regarding object,
// reason and note are posted at most once per dedupe window.

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stop_token>
#include <string>
#include <tuple>

#include "controller/kube/clock.h"
#include "controller/kube/kube_api.h"

namespace kwd::kube {

struct EventObjectRef {
  std::string api_version;  // "dispatch.kwd.io/v1alpha1", "coordination.k8s.io/v1"
  std::string kind;
  std::string namespace_;
  std::string name;
  std::string uid;  // lets `kubectl describe` find the event; may be empty
};

struct EventRecorderOptions {
  std::string reporting_controller = "dispatch.kwd.io/kwd-controller";
  std::string reporting_instance;  // this replica (its leader-election identity)
  std::chrono::milliseconds dedupe_window{std::chrono::minutes(10)};
  size_t max_queue = 1000;
  std::shared_ptr<const Clock> clock;  // default: RealClock
};

class EventRecorder {
 public:
  EventRecorder(KubeApi& api, EventRecorderOptions options);

  // type: "Normal" or "Warning"; reason: CamelCase (a condition reason);
  // action: what the controller did ("Validate", "LeaderElection"); note:
  // the message (cut to the API's 1 KiB).
  void Record(const EventObjectRef& regarding, std::string_view type, std::string_view reason,
              std::string_view action, std::string_view note);

  // Posts queued events until `stop`.
  void Run(std::stop_token stop);
  // Posts what is queued now (tests, shutdown).
  void Flush();

  // The Event object Record would post (exposed for tests).
  nlohmann::json EventJson(const EventObjectRef& regarding, std::string_view type,
                           std::string_view reason, std::string_view action,
                           std::string_view note) const;

 private:
  struct Queued {
    std::string namespace_;
    nlohmann::json event;
  };
  void Post(const Queued& queued);

  KubeApi& api_;
  const EventRecorderOptions options_;
  std::shared_ptr<const Clock> clock_;
  std::mutex mu_;
  std::condition_variable_any wake_;
  std::deque<Queued> queue_;
  // (namespace/kind/name, reason, note) -> when it was last queued.
  std::map<std::tuple<std::string, std::string, std::string>, std::chrono::steady_clock::time_point>
      recent_;
};

}  // namespace kwd::kube
