#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <stop_token>
#include <string>

#include "controller/kube/clock.h"
#include "controller/kube/kube_api.h"

namespace kwd::kube {

// Kubernetes MicroTime: RFC 3339 in UTC with microseconds,
// "2026-11-30T10:00:00.000000Z".
std::string FormatMicroTime(std::chrono::system_clock::time_point time);
std::optional<std::chrono::system_clock::time_point> ParseMicroTime(std::string_view text);

struct LeaderElectionConfig {
  std::string lease_namespace;
  std::string lease_name = "kwd-controller";
  std::string identity;  // unique per replica, e.g. the pod name
  std::chrono::milliseconds lease_duration{15000};
  std::chrono::milliseconds renew_deadline{10000};
  std::chrono::milliseconds retry_period{2000};
  // On stop, hand the lease back (empty holder) so another replica need not
  // wait out the lease duration.
  bool release_on_cancel = true;
  std::shared_ptr<const Clock> clock;  // default: RealClock
  std::shared_ptr<Sleeper> sleeper;    // default: RealSleeper
};

struct LeaderCallbacks {
  std::function<void()> on_started_leading;
  std::function<void()> on_stopped_leading;
  std::function<void(const std::string& identity)> on_new_leader;  // optional
};

// Lease-based leader election with client-go's semantics: a candidate takes
// the lease only when its local clock has seen no change to the lease record
// for the lease's duration (no reliance on the holder's clock); the leader
// renews every retry period and stops leading at once when it finds another
// holder or cannot renew within the renew deadline. No fencing: callers must
// tolerate a short overlap, as with client-go.
class LeaderElector {
 public:
  LeaderElector(KubeApi& client, LeaderElectionConfig config, LeaderCallbacks callbacks);

  // Campaigns, leads, and campaigns again after losing the lease, until `stop`.
  // Calls on_stopped_leading before returning if it was leading.
  void Run(std::stop_token stop);

  bool IsLeader() const { return leading_.load(); }
  std::string ObservedLeader() const;

 private:
  enum class Attempt { kAcquired, kHeldByOther, kFailed };
  Attempt TryAcquireOrRenew(std::chrono::milliseconds timeout);
  void Release();
  void NoteLeader(const std::string& holder);

  KubeApi& client_;
  const LeaderElectionConfig config_;
  const LeaderCallbacks callbacks_;
  std::shared_ptr<const Clock> clock_;
  std::shared_ptr<Sleeper> sleeper_;
  std::atomic<bool> leading_{false};

  // Only the Run thread touches these, apart from observed_leader_.
  std::string observed_record_;  // the lease spec as last seen, compared for equality
  std::chrono::steady_clock::time_point observed_time_{};
  mutable std::mutex leader_mutex_;
  std::string observed_leader_;
};

}  // namespace kwd::kube
