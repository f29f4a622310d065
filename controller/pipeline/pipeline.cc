#include "controller/pipeline/pipeline.h"

#include <algorithm>
#include <utility>

#include "common/log.h"
#include "common/snapshot_io.h"

namespace kwd::pipeline {
namespace {

// What sources deliver (a directory reload replaces all of them); the SAP
// system poller's SapServerLists are its own.
constexpr std::string_view kAllKinds[] = {model::kLogonGroupKind, model::kUrlMappingKind,
                                          model::kEndpointSliceKind, model::kPodKind,
                                          model::kSapSystemKind, model::kSecretKind};

std::vector<double> CompileBuckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
}

}  // namespace

Pipeline::Pipeline(PipelineOptions options, SnapshotSink& sink, MetricsRegistry* metrics)
    : options_(options),
      sink_(sink),
      metrics_(metrics),
      clock_(options.clock ? options.clock : std::make_shared<kube::RealClock>()),
      coalescer_(options.hold_off, options.max_delay) {
  if (metrics_ != nullptr) {
    compile_seconds_ = &metrics_->GetHistogram("kwd_controller_compile_seconds",
                                               "Time to compile the objects into a snapshot.", {},
                                               CompileBuckets());
    snapshots_published_ = &metrics_->GetCounter("kwd_controller_snapshots_published_total",
                                                 "Snapshots with a new version published.");
    snapshots_rejected_ = &metrics_->GetCounter(
        "kwd_controller_snapshots_rejected_total",
        "Compiled snapshots that failed CheckSnapshot and were not published (a compiler bug).");
    UpdateObjectGauges();
  }
}

int Pipeline::AddSource(std::string name) {
  source_names_.push_back(std::move(name));
  source_synced_.push_back(false);
  return static_cast<int>(source_names_.size()) - 1;
}

void Pipeline::Enqueue(Event event) {
  std::lock_guard lock(mu_);
  queue_.push_back(std::move(event));
  wake_.notify_one();
}

bool Pipeline::InClass(const ObservedObject& observed) const {
  std::optional<std::string_view> class_name = model::ClassNameOf(observed.object);
  return !class_name || *class_name == options_.class_name;
}

void Pipeline::KeepClass(std::vector<ObservedObject>* objects) {
  objects->erase(std::remove_if(objects->begin(), objects->end(),
                                [this](const ObservedObject& o) { return !InClass(o); }),
                 objects->end());
}

void Pipeline::Upsert(ObservedObject observed) {
  if (!InClass(observed)) {
    // Another controller's object, or one whose class just changed away:
    // gone from this controller's view (a no-op when it never was in it).
    Log(LogLevel::kDebug, "pipeline", "object of another class ignored",
        {{"object", model::KeyOf(observed.object).ToString()},
         {"className", std::string(model::ClassNameOf(observed.object).value_or(""))}});
    Enqueue(DeleteEvent{model::KeyOf(observed.object)});
    return;
  }
  Enqueue(UpsertEvent{std::move(observed)});
}

void Pipeline::Delete(model::ObjectKey key) {
  Enqueue(DeleteEvent{std::move(key)});
}

void Pipeline::Replace(int source, std::string kind, std::string namespace_,
                       std::vector<ObservedObject> objects) {
  KeepClass(&objects);
  Enqueue(ReplaceEvent{source, {std::move(kind)}, std::move(namespace_), std::move(objects)});
}

void Pipeline::ReplaceAll(int source, std::vector<ObservedObject> objects) {
  KeepClass(&objects);
  ReplaceEvent event{source, {}, "", std::move(objects)};
  for (std::string_view kind : kAllKinds) {
    event.kinds.emplace_back(kind);
  }
  Enqueue(std::move(event));
}

void Pipeline::ResyncStatus() {
  Enqueue(ResyncEvent{});
}

std::shared_ptr<const compile::CompileResult> Pipeline::current() const {
  std::lock_guard lock(mu_);
  return current_;
}

bool Pipeline::Apply(Event& event, bool* resync) {
  if (auto* upsert = std::get_if<UpsertEvent>(&event)) {
    sap_systems_touched_ =
        sap_systems_touched_ || model::KindOf(upsert->observed.object) == model::kSapSystemKind;
    return store_.Upsert(std::move(upsert->observed));
  }
  if (auto* removal = std::get_if<DeleteEvent>(&event)) {
    sap_systems_touched_ = sap_systems_touched_ || removal->key.kind == model::kSapSystemKind;
    return store_.Remove(removal->key);
  }
  if (auto* replace = std::get_if<ReplaceEvent>(&event)) {
    bool changed = false;
    for (const std::string& kind : replace->kinds) {
      sap_systems_touched_ = sap_systems_touched_ || kind == model::kSapSystemKind;
      std::vector<ObservedObject> of_kind;
      for (ObservedObject& observed : replace->objects) {
        if (model::KindOf(observed.object) == kind) {
          of_kind.push_back(std::move(observed));
        }
      }
      changed = store_.Replace(kind, replace->namespace_, std::move(of_kind)) || changed;
    }
    if (replace->source >= 0 && static_cast<size_t>(replace->source) < source_synced_.size()) {
      source_synced_[replace->source] = true;
    }
    return changed;
  }
  *resync = true;
  return false;
}

void Pipeline::Run(std::stop_token stop) {
  while (!stop.stop_requested()) {
    std::deque<Event> batch;
    {
      std::unique_lock lock(mu_);
      auto has_events = [&] { return !queue_.empty(); };
      std::optional<Coalescer::TimePoint> deadline = coalescer_.Deadline();
      if (certificate_expiry_ && (!deadline || *certificate_expiry_ < *deadline)) {
        deadline = certificate_expiry_;
      }
      if (deadline) {
        // RealClock's Now() is steady_clock::now(); a fake clock is only
        // used where no real wait is needed.
        wake_.wait_until(lock, stop, *deadline, has_events);
      } else {
        wake_.wait(lock, stop, has_events);
      }
      batch.swap(queue_);
    }
    if (stop.stop_requested()) {
      break;
    }
    bool changed = false;
    bool resync = false;
    for (Event& event : batch) {
      changed = Apply(event, &resync) || changed;
    }
    if (!batch.empty()) {
      UpdateObjectGauges();
      std::vector<model::ObjectKey> wanted = store_.TakeWantedSecrets();
      if (!wanted.empty() && secret_fetcher_) {
        secret_fetcher_(std::move(wanted));
      }
    }
    if (certificate_expiry_ && clock_->Now() >= *certificate_expiry_) {
      certificate_expiry_.reset();
      changed = true;
      Log(LogLevel::kInfo, "pipeline", "a certificate reached its expiry; compiling again");
    }
    if (sap_systems_touched_ && sap_system_observer_) {
      sap_systems_touched_ = false;
      std::vector<model::SapSystem> systems;
      for (const auto& [key, system] : store_.objects().sap_systems()) {
        systems.push_back(system);
      }
      sap_system_observer_(std::move(systems));
    }
    if (!all_synced_) {
      all_synced_ = std::all_of(source_synced_.begin(), source_synced_.end(),
                                [](bool synced) { return synced; });
      if (all_synced_) {
        changed = true;  // the first compile
        Log(LogLevel::kInfo, "pipeline", "initial lists complete; compiling");
      }
    }
    if (changed && all_synced_) {
      coalescer_.Note(clock_->Now());
    }
    if (coalescer_.Due(clock_->Now())) {
      coalescer_.Reset();
      Rebuild();
    } else if (resync) {
      DiffStatuses();
    }
  }
}

void Pipeline::Rebuild() {
  auto start = std::chrono::steady_clock::now();
  const std::uint64_t compiled_before = store_.memo().groups_compiled();
  const std::int64_t wall_now = std::chrono::duration_cast<std::chrono::seconds>(
                                   clock_->WallNow().time_since_epoch())
                                   .count();
  auto result = std::make_shared<compile::CompileResult>(store_.Compile(wall_now));
  certificate_expiry_.reset();
  if (result->certificates_expire > 0) {
    certificate_expiry_ =
        clock_->Now() + std::chrono::seconds(std::max<std::int64_t>(
                            1, result->certificates_expire - wall_now + 1));
  }
  const std::uint64_t groups_compiled = store_.memo().groups_compiled() - compiled_before;
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  compiles_.fetch_add(1);
  if (compile_seconds_ != nullptr) {
    compile_seconds_->Observe(seconds);
  }
  std::vector<std::string> problems = CheckSnapshot(result->snapshot);
  if (!problems.empty()) {
    // A compiler bug: keep serving the last good snapshot.
    for (const std::string& problem : problems) {
      Log(LogLevel::kError, "pipeline", "compiled snapshot is inconsistent; not published",
          {{"problem", problem}});
    }
    if (snapshots_rejected_ != nullptr) {
      snapshots_rejected_->Inc();
    }
    return;
  }
  const std::string version = result->snapshot.version();
  store_.RememberAccepted(*result);
  {
    std::lock_guard lock(mu_);
    current_ = result;
  }
  if (metrics_ != nullptr) {
    for (std::string_view kind : {model::kLogonGroupKind, model::kUrlMappingKind}) {
      metrics_
          ->GetGauge("kwd_controller_objects_rejected",
                     "LogonGroups and UrlMappings whose current version is rejected "
                     "(Accepted=False); the last accepted version, if any, is served.",
                     {{"kind", std::string(kind)}})
          .Set(static_cast<double>(compile::CountRejected(*result, kind)));
    }
    // A series per group that exists at 0: a group without servers answers
    // every request 503, and has no kwd_proxy_server_up series to alert on.
    std::vector<std::string> groups;
    for (const auto& group : result->snapshot.groups()) {
      metrics_
          ->GetGauge("kwd_controller_group_servers",
                     "Servers of each logon group in the published snapshot (draining ones "
                     "included); 0: every request to the group is answered 503.",
                     {{"group", group.key()}})
          .Set(static_cast<double>(group.servers_size()));
      groups.push_back(group.key());
    }
    std::sort(groups.begin(), groups.end());
    metrics_->RetainLabelValues("kwd_controller_group_servers", "group", groups);
  }
  // Each rejection is logged once (again when its message changes).
  std::map<model::ObjectKey, std::string> rejected;
  for (const compile::ObjectStatus& status : result->statuses) {
    const compile::Condition* accepted = status.Find(compile::kAccepted);
    if (accepted == nullptr || accepted->status != "False") {
      continue;
    }
    model::ObjectKey key{status.kind, status.namespace_, status.name};
    auto logged = rejected_logged_.find(key);
    if (logged == rejected_logged_.end() || logged->second != accepted->message) {
      Log(LogLevel::kWarn, "pipeline", "object rejected",
          {{"object", key.ToString()},
           {"reason", accepted->reason},
           {"message", accepted->message}});
    }
    rejected.emplace(std::move(key), accepted->message);
  }
  rejected_logged_ = std::move(rejected);
  if (version != published_version_) {
    published_version_ = version;
    if (metrics_ != nullptr) {
      metrics_
          ->GetGauge("kwd_controller_snapshot_info",
                     "The current snapshot (value 1), labelled with its version.",
                     {{"version", version}})
          .Set(1);
      metrics_->RetainLabelValues("kwd_controller_snapshot_info", "version", {version});
      snapshots_published_->Inc();
    }
    Log(LogLevel::kInfo, "pipeline", "snapshot published",
        {{"version", version},
         {"compile_ms", std::to_string(seconds * 1000.0)},
         {"groups_compiled", std::to_string(groups_compiled)}});
    sink_.Publish(result);
  }
  ready_ = true;
  DiffStatuses();
}

void Pipeline::DiffStatuses() {
  std::shared_ptr<const compile::CompileResult> result = current();
  if (status_writer_ == nullptr || result == nullptr || !status_writer_->leader()) {
    return;
  }
  std::vector<StatusUpdate> updates;
  auto now = clock_->WallNow();
  for (const compile::ObjectStatus& status : result->statuses) {
    model::ObjectKey key{status.kind, status.namespace_, status.name};
    std::optional<model::Object> object = store_.objects().Find(key);
    if (!object) {
      continue;
    }
    compile::ObjectStatus desired = status;
    if (status_decorator_) {
      status_decorator_(&desired);
    }
    if (extra_conditions_) {
      for (compile::Condition& condition : extra_conditions_(status)) {
        desired.conditions.push_back(std::move(condition));
      }
    }
    if (auto write = StatusToWrite(desired, store_.ObservedStatus(key), now)) {
      if (status_observer_) {
        status_observer_(desired, store_.ObservedStatus(key), model::MetadataOf(*object).uid);
      }
      updates.push_back(StatusUpdate{std::move(key), std::move(*write)});
    }
  }
  if (!updates.empty()) {
    status_writer_->Submit(std::move(updates));
  }
}

void Pipeline::UpdateObjectGauges() {
  if (metrics_ == nullptr) {
    return;
  }
  for (std::string_view kind : kAllKinds) {
    metrics_
        ->GetGauge("kwd_controller_objects", "Objects in the controller's store by kind.",
                   {{"kind", std::string(kind)}})
        .Set(static_cast<double>(store_.CountOf(kind)));
  }
}

}  // namespace kwd::pipeline
