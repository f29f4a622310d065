#include "controller/pipeline/store.h"

#include <set>
#include <type_traits>
#include <variant>

namespace kwd::pipeline {
namespace {

template <typename Map>
void AddRef(Map* map, const typename Map::key_type& key, int delta) {
  int& count = (*map)[key];
  count += delta;
  if (count <= 0) {
    map->erase(key);
  }
}

template <typename Map>
void CollectKeys(const Map& map, std::string_view kind, std::string_view namespace_,
                 std::vector<model::ObjectKey>* keys) {
  for (const auto& [name, object] : map) {
    if (namespace_.empty() || name.first == namespace_) {
      keys->push_back(model::ObjectKey{std::string(kind), name.first, name.second});
    }
  }
}

}  // namespace

void TrimForCompile(model::Object* object) {
  std::visit(
      [](auto& typed) {
        typed.metadata.resource_version.clear();
        using T = std::decay_t<decltype(typed)>;
        if constexpr (std::is_same_v<T, model::Pod>) {
          // A pod changes often (status, labels); the compile reads only these three.
          typed.metadata.labels.clear();
          std::map<std::string, std::string> kept;
          for (std::string_view name : {model::kCapacityAnnotation, model::kInstanceNameAnnotation,
                                        model::kDrainAnnotation}) {
            auto it = typed.metadata.annotations.find(std::string(name));
            if (it != typed.metadata.annotations.end()) {
              kept.emplace(it->first, it->second);
            }
          }
          typed.metadata.annotations = std::move(kept);
          typed.metadata.generation = 0;
        }
        if constexpr (std::is_same_v<T, model::Secret>) {
          typed.metadata.labels.clear();
          typed.metadata.annotations.clear();  // kubectl's last-applied copy holds the data
        }
      },
      *object);
}

bool ObjectStore::IsRelevant(const model::Object& object) const {
  if (const auto* slice = std::get_if<model::EndpointSlice>(&object)) {
    auto label = slice->metadata.labels.find(std::string(model::kServiceNameLabel));
    return label != slice->metadata.labels.end() &&
           referenced_services_.contains({slice->metadata.namespace_, label->second});
  }
  if (const auto* pod = std::get_if<model::Pod>(&object)) {
    return referenced_pods_.contains({pod->metadata.namespace_, pod->metadata.name});
  }
  if (const auto* secret = std::get_if<model::Secret>(&object)) {
    return referenced_secrets_.contains({secret->metadata.namespace_, secret->metadata.name});
  }
  return true;  // LogonGroups, UrlMappings, SapSystems and their lists are always compiled
}

void ObjectStore::Index(const model::Object& object, int delta) {
  if (const auto* group = std::get_if<model::LogonGroup>(&object)) {
    const auto& backend = group->spec.backend;
    if (backend && backend->service && !backend->service->name.empty()) {
      AddRef(&referenced_services_, {group->metadata.namespace_, backend->service->name}, delta);
    }
  } else if (const auto* mapping = std::get_if<model::UrlMapping>(&object)) {
    std::set<std::string> names;  // one reference per mapping and Secret
    for (const model::UrlMappingTls& tls : mapping->spec.tls) {
      names.insert(tls.secret_name);
    }
    for (const std::string& name : names) {
      NamespacedName key{mapping->metadata.namespace_, name};
      AddRef(&referenced_secrets_, key, delta);
      if (!referenced_secrets_.contains(key)) {
        // No longer named: forget the Secret and its key.
        wanted_secrets_.erase(key);
        if (objects_.Remove(model::ObjectKey{std::string(model::kSecretKind), key.first,
                                             key.second})) {
          memo_.Changed({std::string(model::kSecretKind), key.first, key.second});
        }
      } else if (delta > 0 && !objects_.secrets().contains(key)) {
        wanted_secrets_.insert(key);
      }
    }
  } else if (const auto* slice = std::get_if<model::EndpointSlice>(&object)) {
    for (const model::Endpoint& endpoint : slice->endpoints) {
      if (!endpoint.target_ref || endpoint.target_ref->name.empty() ||
          (!endpoint.target_ref->kind.empty() && endpoint.target_ref->kind != model::kPodKind)) {
        continue;
      }
      const std::string& ns = endpoint.target_ref->namespace_.empty()
                                  ? slice->metadata.namespace_
                                  : endpoint.target_ref->namespace_;
      AddRef(&referenced_pods_, {ns, endpoint.target_ref->name}, delta);
    }
  }
}

bool ObjectStore::Upsert(ObservedObject observed) {
  TrimForCompile(&observed.object);
  model::ObjectKey key = model::KeyOf(observed.object);
  if (key.kind == model::kLogonGroupKind || key.kind == model::kUrlMappingKind ||
      key.kind == model::kSapSystemKind) {
    if (observed.status.is_null()) {
      statuses_.erase(key);
    } else {
      statuses_[key] = std::move(observed.status);
    }
  }
  if (key.kind == model::kSecretKind &&
      !referenced_secrets_.contains({key.namespace_, key.name})) {
    // Named by no UrlMapping: dropped on arrival (and never logged).
    return Remove(key);
  }
  if (key.kind == model::kSecretKind) {
    wanted_secrets_.erase({key.namespace_, key.name});
  }
  std::optional<model::Object> previous = objects_.Find(key);
  if (previous && *previous == observed.object) {
    return false;
  }
  bool was_relevant = previous && IsRelevant(*previous);
  // New references first: a Secret both versions name never drops to zero.
  Index(observed.object, +1);
  if (previous) {
    Index(*previous, -1);
  }
  bool is_relevant = IsRelevant(observed.object);
  memo_.Changed(key);
  objects_.Upsert(std::move(observed.object));
  return was_relevant || is_relevant;
}

bool ObjectStore::Remove(const model::ObjectKey& key) {
  statuses_.erase(key);
  std::optional<model::Object> previous = objects_.Find(key);
  if (!previous) {
    return false;
  }
  bool was_relevant = IsRelevant(*previous);
  Index(*previous, -1);
  memo_.Changed(key);
  objects_.Remove(key);
  return was_relevant;
}

std::vector<model::ObjectKey> ObjectStore::KeysOf(std::string_view kind,
                                                  std::string_view namespace_) const {
  std::vector<model::ObjectKey> keys;
  if (kind == model::kLogonGroupKind) {
    CollectKeys(objects_.logon_groups(), kind, namespace_, &keys);
  } else if (kind == model::kUrlMappingKind) {
    CollectKeys(objects_.url_mappings(), kind, namespace_, &keys);
  } else if (kind == model::kEndpointSliceKind) {
    CollectKeys(objects_.endpoint_slices(), kind, namespace_, &keys);
  } else if (kind == model::kPodKind) {
    CollectKeys(objects_.pods(), kind, namespace_, &keys);
  } else if (kind == model::kSapSystemKind) {
    CollectKeys(objects_.sap_systems(), kind, namespace_, &keys);
  } else if (kind == model::kSapServerListKind) {
    CollectKeys(objects_.sap_server_lists(), kind, namespace_, &keys);
  } else if (kind == model::kSecretKind) {
    CollectKeys(objects_.secrets(), kind, namespace_, &keys);
  }
  return keys;
}

bool ObjectStore::Replace(std::string_view kind, std::string_view namespace_,
                          std::vector<ObservedObject> objects) {
  std::set<model::ObjectKey> incoming;
  for (const ObservedObject& observed : objects) {
    incoming.insert(model::KeyOf(observed.object));
  }
  bool changed = false;
  for (const model::ObjectKey& key : KeysOf(kind, namespace_)) {
    if (!incoming.contains(key)) {
      changed = Remove(key) || changed;
    }
  }
  for (ObservedObject& observed : objects) {
    changed = Upsert(std::move(observed)) || changed;
  }
  return changed;
}

void ObjectStore::RememberAccepted(const compile::CompileResult& result) {
  for (const model::ObjectKey& key : compile::UpdateLastGood(objects_, result, &last_good_)) {
    memo_.Changed(key);
  }
}

const nlohmann::json* ObjectStore::ObservedStatus(const model::ObjectKey& key) const {
  auto it = statuses_.find(key);
  return it == statuses_.end() ? nullptr : &it->second;
}

std::size_t ObjectStore::CountOf(std::string_view kind) const {
  if (kind == model::kLogonGroupKind) {
    return objects_.logon_groups().size();
  }
  if (kind == model::kUrlMappingKind) {
    return objects_.url_mappings().size();
  }
  if (kind == model::kEndpointSliceKind) {
    return objects_.endpoint_slices().size();
  }
  if (kind == model::kPodKind) {
    return objects_.pods().size();
  }
  if (kind == model::kSapSystemKind) {
    return objects_.sap_systems().size();
  }
  if (kind == model::kSapServerListKind) {
    return objects_.sap_server_lists().size();
  }
  if (kind == model::kSecretKind) {
    return objects_.secrets().size();
  }
  return 0;
}

std::vector<model::ObjectKey> ObjectStore::TakeWantedSecrets() {
  std::vector<model::ObjectKey> keys;
  for (const NamespacedName& key : wanted_secrets_) {
    if (!objects_.secrets().contains(key)) {
      keys.push_back({std::string(model::kSecretKind), key.first, key.second});
    }
  }
  wanted_secrets_.clear();
  return keys;
}

}  // namespace kwd::pipeline
