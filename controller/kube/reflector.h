#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stop_token>
#include <string>
#include <vector>

#include "controller/kube/backoff.h"
#include "controller/kube/clock.h"
#include "controller/kube/kube_api.h"

namespace kwd::kube {

// Receives a reflector's view of one resource. Called on the reflector's
// thread; implementations should only enqueue (one thread owns the store).
class ReflectorSink {
 public:
  virtual ~ReflectorSink() = default;
  // The complete current set, after the first list and after every relist:
  // whatever the sink holds that is not in `objects` is gone.
  virtual void Replace(std::vector<nlohmann::json> objects,
                       const std::string& resource_version) = 0;
  virtual void Upsert(const nlohmann::json& object) = 0;
  virtual void Delete(const nlohmann::json& object) = 0;  // the object's last state
};

struct ReflectorOptions {
  std::string path;  // collection, e.g. "/apis/discovery.k8s.io/v1/endpointslices"
  std::string label_selector;
  // A 404 on the first list (a custom resource whose CRD is not installed,
  // e.g. SapSystem after an upgrade that did not apply the new CRD) counts
  // as an empty list, so the controller does not wait for it forever; the
  // list is retried with backoff until the resource is served.
  bool empty_when_not_found = false;
  // Likewise for a 403 (RBAC does not grant the resource): logged as an
  // error, empty until a list succeeds.
  bool empty_when_forbidden = false;
  // Each watch asks the server to end it after a random time from
  // watch_timeout_seconds to twice that (client-go: 5 to 10 minutes), so that
  // the watches of many controllers do not all restart together. A quiet
  // watch is healthy until then; see WatchOptions::deadline_grace.
  int watch_timeout_seconds = 300;
  std::chrono::seconds deadline_grace{30};
  BackoffPolicy backoff;
  std::function<double()> random;      // default: DefaultRandom()
  std::shared_ptr<Sleeper> sleeper;    // default: RealSleeper
  std::shared_ptr<const Clock> clock;  // default: RealClock
};

// Counters for metrics; read with Stats() from any thread.
struct ReflectorStats {
  uint64_t added = 0;
  uint64_t modified = 0;
  uint64_t deleted = 0;
  uint64_t bookmarks = 0;
  uint64_t lists = 0;    // successful lists, the first one included
  uint64_t relists = 0;  // successful lists after the first (410 Gone, ERROR events)
  uint64_t watches = 0;  // watch requests started
  uint64_t errors = 0;   // failed lists and watches (transport, stall, drop, HTTP errors)
};

// client-go's Reflector for one resource: list, then watch from the list's
// resourceVersion; relist on 410/ERROR; after a dropped, stalled or failed
// watch, back off (jittered, exponential) and resume from the last seen
// resourceVersion without relisting.
class Reflector {
 public:
  Reflector(KubeApi& client, ReflectorOptions options, ReflectorSink& sink);

  // Blocks until `stop` is requested; run it on its own (j)thread.
  void Run(std::stop_token stop);

  ReflectorStats Stats() const;
  std::string LastResourceVersion() const;
  bool HasSynced() const { return synced_.load(); }

 private:
  void OnEvent(WatchEventType type, const nlohmann::json& object);
  // The timeoutSeconds of the next watch: watch_timeout_seconds to twice that.
  int WatchTimeoutSeconds();

  KubeApi& client_;
  const ReflectorOptions options_;
  ReflectorSink& sink_;
  std::shared_ptr<Sleeper> sleeper_;
  std::shared_ptr<const Clock> clock_;
  std::function<double()> random_;
  std::atomic<bool> synced_{false};

  std::atomic<uint64_t> added_{0}, modified_{0}, deleted_{0}, bookmarks_{0};
  std::atomic<uint64_t> lists_{0}, relists_{0}, watches_{0}, errors_{0};
  mutable std::mutex rv_mutex_;
  std::string resource_version_;
};

}  // namespace kwd::kube
