#include "controller/pipeline/kube_source.h"

#include <type_traits>
#include <variant>

#include "common/log.h"

namespace kwd::pipeline {
namespace {

constexpr std::string_view kWatchedKinds[] = {model::kLogonGroupKind, model::kUrlMappingKind,
                                              model::kEndpointSliceKind, model::kPodKind,
                                              model::kSapSystemKind, model::kSecretKind};

bool IsCustomKind(std::string_view kind) {
  return kind == model::kLogonGroupKind || kind == model::kUrlMappingKind ||
         kind == model::kSapSystemKind;
}

std::optional<model::ObjectKey> KeyFromJson(std::string_view kind, const nlohmann::json& json) {
  auto metadata = json.find("metadata");
  if (!json.is_object() || metadata == json.end() || !metadata->is_object()) {
    return std::nullopt;
  }
  model::ObjectKey key;
  key.kind = std::string(kind);
  key.namespace_ = metadata->value("namespace", "default");
  key.name = metadata->value("name", "");
  if (key.name.empty()) {
    return std::nullopt;
  }
  return key;
}

}  // namespace

std::string CollectionPath(std::string_view kind, std::string_view namespace_) {
  std::string prefix;
  std::string_view plural;
  if (IsCustomKind(kind)) {
    prefix = "/apis/dispatch.kwd.io/v1alpha1";
    plural = kind == model::kLogonGroupKind   ? "logongroups"
             : kind == model::kSapSystemKind ? "sapsystems"
                                             : "urlmappings";
  } else if (kind == model::kEndpointSliceKind) {
    prefix = "/apis/discovery.k8s.io/v1";
    plural = "endpointslices";
  } else {
    prefix = "/api/v1";
    plural = kind == model::kSecretKind ? "secrets" : "pods";
  }
  if (!namespace_.empty()) {
    prefix += "/namespaces/" + std::string(namespace_);
  }
  return prefix + "/" + std::string(plural);
}

std::optional<ObservedObject> DecodeObserved(std::string_view kind, const nlohmann::json& json,
                                             std::string* error) {
  model::DecodeResult decoded = model::DecodeObjectOfKind(kind, json);
  if (!decoded.ok() && IsCustomKind(kind) &&
      json.is_object() && json.contains("metadata")) {
    // A LogonGroup/UrlMapping whose spec cannot be read (a CRD newer than
    // this controller) is kept as an object the compiler rejects, so that
    // its last accepted version stays served and its status says why.
    model::DecodeResult stub =
        model::DecodeObjectOfKind(kind, nlohmann::json{{"metadata", json["metadata"]}});
    if (stub.ok()) {
      std::visit(
          [&](auto& typed) {
            using T = std::decay_t<decltype(typed)>;
            if constexpr (std::is_same_v<T, model::LogonGroup> ||
                          std::is_same_v<T, model::UrlMapping> ||
                          std::is_same_v<T, model::SapSystem>) {
              typed.field_errors.push_back(decoded.error);
            }
          },
          *stub.object);
      decoded = std::move(stub);
    }
  }
  if (!decoded.ok()) {
    *error = decoded.error;
    return std::nullopt;
  }
  ObservedObject observed{std::move(*decoded.object), nullptr};
  if (IsCustomKind(kind)) {
    auto status = json.find("status");
    if (status != json.end() && status->is_object()) {
      observed.status = *status;
    }
  }
  return observed;
}

// Decodes on the reflector's thread and enqueues; the store lives on the
// pipeline thread.
class KubeSource::Sink final : public kube::ReflectorSink {
 public:
  Sink(Pipeline& pipeline, std::string kind, std::string namespace_)
      : pipeline_(pipeline),
        kind_(std::move(kind)),
        namespace_(std::move(namespace_)),
        source_(pipeline.AddSource(kind_ + " " +
                                   (this->namespace_.empty() ? "*" : this->namespace_))) {}

  void Replace(std::vector<nlohmann::json> objects, const std::string& resource_version) override {
    std::vector<ObservedObject> decoded;
    decoded.reserve(objects.size());
    for (const nlohmann::json& json : objects) {
      if (auto observed = Decode(json)) {
        decoded.push_back(std::move(*observed));
      }
    }
    Log(LogLevel::kDebug, "watch", "list",
        {{"kind", kind_},
         {"count", std::to_string(decoded.size())},
         {"resourceVersion", resource_version}});
    pipeline_.Replace(source_, kind_, namespace_, std::move(decoded));
  }

  void Upsert(const nlohmann::json& object) override {
    if (auto observed = Decode(object)) {
      pipeline_.Upsert(std::move(*observed));
    } else if (auto key = KeyFromJson(kind_, object)) {
      // An object we cannot read is dropped from the snapshot, not kept stale.
      pipeline_.Delete(std::move(*key));
    }
  }

  void Delete(const nlohmann::json& object) override {
    if (auto key = KeyFromJson(kind_, object)) {
      pipeline_.Delete(std::move(*key));
    }
  }

 private:
  std::optional<ObservedObject> Decode(const nlohmann::json& json) {
    std::string error;
    auto observed = DecodeObserved(kind_, json, &error);
    if (!observed) {
      auto key = KeyFromJson(kind_, json);
      Log(LogLevel::kWarn, "watch", "cannot decode object; ignoring it",
          {{"object", key ? key->ToString() : kind_}, {"error", error}});
    }
    return observed;
  }

  Pipeline& pipeline_;
  const std::string kind_;
  const std::string namespace_;
  const int source_;
};

KubeSource::KubeSource(kube::KubeApi& api, Pipeline& pipeline, KubeSourceOptions options)
    : api_(api), pipeline_(pipeline) {
  pipeline_.SetSecretFetcher(
      [this](std::vector<model::ObjectKey> keys) { FetchSecrets(std::move(keys)); });
  std::vector<std::string> namespaces = options.namespaces;
  if (namespaces.empty()) {
    namespaces.emplace_back();
  }
  for (std::string_view kind : kWatchedKinds) {
    for (const std::string& ns : namespaces) {
      Watch watch;
      watch.kind = std::string(kind);
      watch.sink = std::make_unique<Sink>(pipeline_, watch.kind, ns);
      kube::ReflectorOptions reflector_options;
      reflector_options.path = CollectionPath(kind, ns);
      if (kind == model::kEndpointSliceKind) {
        reflector_options.label_selector = std::string(model::kServiceNameLabel);
      }
      // Added after LogonGroup and UrlMapping: a cluster may not have its CRD yet.
      reflector_options.empty_when_not_found = kind == model::kSapSystemKind;
      // RBAC not granting Secrets (an older chart's Role): serve everything
      // else; UrlMapping.spec.tls then says SecretNotFound.
      reflector_options.empty_when_forbidden = kind == model::kSecretKind;
      reflector_options.watch_timeout_seconds = options.watch_timeout_seconds;
      reflector_options.backoff = options.backoff;
      watch.reflector =
          std::make_unique<kube::Reflector>(api_, std::move(reflector_options), *watch.sink);
      watches_.push_back(std::move(watch));
    }
  }
}

KubeSource::~KubeSource() {
  Stop();
}

void KubeSource::FetchSecrets(std::vector<model::ObjectKey> keys) {
  {
    std::lock_guard lock(fetch_mu_);
    for (model::ObjectKey& key : keys) {
      fetch_queue_.insert(std::move(key));
    }
  }
  fetch_cv_.notify_one();
}

void KubeSource::RunFetcher(std::stop_token stop) {
  while (true) {
    model::ObjectKey key;
    {
      std::unique_lock lock(fetch_mu_);
      if (!fetch_cv_.wait(lock, stop, [&] { return !fetch_queue_.empty(); })) {
        return;  // stopped
      }
      key = *fetch_queue_.begin();
      fetch_queue_.erase(fetch_queue_.begin());
    }
    kube::ApiResult got =
        api_.Get(CollectionPath(model::kSecretKind, key.namespace_) + "/" + key.name);
    if (got.status.IsNotFound()) {
      continue;  // the watch delivers it when it is made
    }
    if (!got.status.ok()) {
      Log(LogLevel::kWarn, "watch", "cannot read a Secret a UrlMapping names",
          {{"object", key.ToString()}, {"error", got.status.ToString()}});
      continue;
    }
    std::string error;
    if (auto observed = DecodeObserved(model::kSecretKind, got.body, &error)) {
      pipeline_.Upsert(std::move(*observed));
    } else {
      Log(LogLevel::kWarn, "watch", "cannot decode object; ignoring it",
          {{"object", key.ToString()}, {"error", error}});
    }
  }
}

void KubeSource::Start() {
  threads_.emplace_back([this](std::stop_token stop) { RunFetcher(stop); });
  for (Watch& watch : watches_) {
    kube::Reflector* reflector = watch.reflector.get();
    threads_.emplace_back([reflector](std::stop_token stop) { reflector->Run(stop); });
  }
}

void KubeSource::Stop() {
  for (std::jthread& thread : threads_) {
    thread.request_stop();
  }
  threads_.clear();  // joins
}

std::vector<KubeSource::KindStats> KubeSource::Stats() const {
  std::vector<KindStats> out;
  for (std::string_view kind : kWatchedKinds) {
    KindStats sum{std::string(kind), {}};
    for (const Watch& watch : watches_) {
      if (watch.kind != kind) {
        continue;
      }
      kube::ReflectorStats stats = watch.reflector->Stats();
      sum.stats.added += stats.added;
      sum.stats.modified += stats.modified;
      sum.stats.deleted += stats.deleted;
      sum.stats.bookmarks += stats.bookmarks;
      sum.stats.lists += stats.lists;
      sum.stats.relists += stats.relists;
      sum.stats.watches += stats.watches;
      sum.stats.errors += stats.errors;
    }
    out.push_back(std::move(sum));
  }
  return out;
}

bool KubeSource::HasSynced() const {
  for (const Watch& watch : watches_) {
    if (!watch.reflector->HasSynced()) {
      return false;
    }
  }
  return true;
}

}  // namespace kwd::pipeline
