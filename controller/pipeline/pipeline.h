#pragma once

// The controller's core loop. Sources (Kubernetes reflectors, the directory
// watcher) only enqueue; one thread applies the queue to the ObjectStore it
// owns, coalesces bursts of relevant changes, compiles (pure), checks the
// snapshot and hands it to a SnapshotSink, then diffs statuses for the
// StatusWriter.
//
// The first compile waits until every source has delivered its initial
// list: a snapshot built from LogonGroups without their EndpointSlices would
// publish empty groups and write wrong conditions.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <variant>
#include <vector>

#include "common/metrics.h"
#include "controller/compile/compile.h"
#include "controller/kube/clock.h"
#include "controller/pipeline/coalescer.h"
#include "controller/pipeline/status.h"
#include "controller/pipeline/store.h"

namespace kwd::pipeline {

// Where compiled snapshots go: the admin port's /debug/snapshot now, the
// gRPC snapshot server later. Called on the pipeline thread with each new
// snapshot version; must not block for long.
class SnapshotSink {
 public:
  virtual ~SnapshotSink() = default;
  virtual void Publish(std::shared_ptr<const compile::CompileResult> result) = 0;
};

struct PipelineOptions {
  std::chrono::milliseconds hold_off{10};
  std::chrono::milliseconds max_delay{100};
  std::shared_ptr<const kube::Clock> clock;  // default: RealClock
  // Only LogonGroups, UrlMappings and SapSystems whose spec.className is this
  // enter the store (`serve --class`; "" keeps those without a className), so
  // two controllers on one cluster each program and write status for their
  // own objects. An object whose class changes away is deleted from the view.
  std::string class_name;
};

class Pipeline {
 public:
  Pipeline(PipelineOptions options, SnapshotSink& sink, MetricsRegistry* metrics);

  // Registers a source before Run; the pipeline is ready once every source
  // has called Replace (or ReplaceAll) once and the first compile ran.
  int AddSource(std::string name);
  // Status diffs go to `writer` (optional; not with --source=dir).
  void SetStatusWriter(StatusWriter* writer) { status_writer_ = writer; }
  // Conditions the compile cannot know (Programmed, from the gRPC snapshot
  // server), added to each object's status before the diff. Set before Run;
  // called on the pipeline thread. ResyncStatus when their inputs change.
  using ExtraConditions =
      std::function<std::vector<compile::Condition>(const compile::ObjectStatus&)>;
  void SetExtraConditions(ExtraConditions extra) { extra_conditions_ = std::move(extra); }
  // Fields of a status the compile does not know (a SapSystem's
  // lastRefreshTime, from its poller), set before the diff. Set before Run.
  using StatusDecorator = std::function<void(compile::ObjectStatus*)>;
  void SetStatusDecorator(StatusDecorator decorator) { status_decorator_ = std::move(decorator); }
  // Told every SapSystem (current versions) on the pipeline thread after
  // each batch that delivered SapSystems, so that the SAP system poller
  // polls what the sources hold. Set before Run; must not block.
  using SapSystemObserver = std::function<void(std::vector<model::SapSystem>)>;
  void SetSapSystemObserver(SapSystemObserver observer) {
    sap_system_observer_ = std::move(observer);
  }
  // Called (on the pipeline thread, while leading) for each object whose
  // status is about to be written: what it will say, what it said (or null),
  // and the object's uid. Kubernetes Events come from here. Set before Run.
  using StatusObserver =
      std::function<void(const compile::ObjectStatus& desired, const nlohmann::json* observed,
                         const std::string& uid)>;
  void SetStatusObserver(StatusObserver observer) { status_observer_ = std::move(observer); }
  // Told (on the pipeline thread) the Secrets a UrlMapping's spec.tls newly
  // names that the store does not hold: the store drops Secrets no mapping
  // names, so a source that delivered one before must fetch it again (the
  // Kubernetes source GETs it). Set before Run; must not block.
  using SecretFetcher = std::function<void(std::vector<model::ObjectKey>)>;
  void SetSecretFetcher(SecretFetcher fetcher) { secret_fetcher_ = std::move(fetcher); }

  // Thread-safe; only enqueue.
  void Upsert(ObservedObject observed);
  void Delete(model::ObjectKey key);
  // The complete set of `kind` objects in `namespace_` ("" = all namespaces).
  void Replace(int source, std::string kind, std::string namespace_,
               std::vector<ObservedObject> objects);
  // The complete set of every kind (a directory reload).
  void ReplaceAll(int source, std::vector<ObservedObject> objects);
  // Diff every status again (this replica just became the leader).
  void ResyncStatus();

  void Run(std::stop_token stop);

  bool ready() const { return ready_.load(); }
  std::shared_ptr<const compile::CompileResult> current() const;
  std::uint64_t compiles() const { return compiles_.load(); }

 private:
  struct UpsertEvent {
    ObservedObject observed;
  };
  struct DeleteEvent {
    model::ObjectKey key;
  };
  struct ReplaceEvent {
    int source = 0;
    std::vector<std::string> kinds;
    std::string namespace_;
    std::vector<ObservedObject> objects;
  };
  struct ResyncEvent {};
  using Event = std::variant<UpsertEvent, DeleteEvent, ReplaceEvent, ResyncEvent>;

  void Enqueue(Event event);
  // Whether an object belongs to this pipeline's class (kinds without a class do).
  bool InClass(const ObservedObject& observed) const;
  // Drops the objects of other classes.
  void KeepClass(std::vector<ObservedObject>* objects);
  // Applies one event; returns whether the compile's view changed.
  bool Apply(Event& event, bool* resync);
  void Rebuild();
  void DiffStatuses();
  void UpdateObjectGauges();

  const PipelineOptions options_;
  SnapshotSink& sink_;
  MetricsRegistry* metrics_;
  std::shared_ptr<const kube::Clock> clock_;
  StatusWriter* status_writer_ = nullptr;
  ExtraConditions extra_conditions_;
  StatusDecorator status_decorator_;
  SapSystemObserver sap_system_observer_;
  StatusObserver status_observer_;
  SecretFetcher secret_fetcher_;

  mutable std::mutex mu_;
  std::condition_variable_any wake_;
  std::deque<Event> queue_;
  std::shared_ptr<const compile::CompileResult> current_;

  // Pipeline thread only.
  ObjectStore store_;
  Coalescer coalescer_;
  std::vector<std::string> source_names_;
  std::vector<bool> source_synced_;
  bool all_synced_ = false;
  bool sap_systems_touched_ = false;
  std::string published_version_;
  std::map<model::ObjectKey, std::string> rejected_logged_;  // Accepted=False messages logged
  // When the first certificate in the snapshot expires: compile again then
  // (its UrlMappings get InvalidCertificate and the proxies stop serving it).
  std::optional<std::chrono::steady_clock::time_point> certificate_expiry_;

  std::atomic<bool> ready_{false};
  std::atomic<std::uint64_t> compiles_{0};
  Histogram* compile_seconds_ = nullptr;
  Counter* snapshots_published_ = nullptr;
  Counter* snapshots_rejected_ = nullptr;
};

}  // namespace kwd::pipeline
