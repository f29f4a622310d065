// CompileMemo: keeps each LogonGroup's compiled result and what its compile
// read, and recompiles only the groups a reported change touches.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/snapshot_io.h"
#include "controller/compile/internal.h"

namespace kwd::compile {

using internal::Assemble;
using internal::CompiledGroup;
using internal::CompileGroup;
using internal::GroupInputs;
using internal::GroupResult;
using internal::IndexPods;
using internal::LogonGroupCompiler;
using internal::PodIndex;
using internal::PodKey;
using model::EndpointSlice;
using model::ObjectSet;

using NamespacedName = ObjectSet::NamespacedName;

struct CompileMemo::State {
  struct Entry {
    GroupResult result;
    Sha256Digest digest{};  // of *result.group
    // What its compile read besides the LogonGroup (and its last good
    // version, when that was compiled too).
    std::vector<NamespacedName> services;
    std::vector<NamespacedName> pods;
    std::vector<NamespacedName> sap_systems;  // SapSystems and their server lists
  };
  // Changes reported since the last compile; `all_changed` when there is
  // no usable earlier compile (none yet, too many changes, or one that
  // did not finish).
  std::vector<model::ObjectKey> changed;
  bool all_changed = true;
  std::map<NamespacedName, Entry> entries;  // LogonGroups by (namespace, name)
  // Which LogonGroups read a Service's slices or a Pod.
  std::map<NamespacedName, std::set<NamespacedName>> groups_by_service;
  std::map<NamespacedName, std::set<NamespacedName>> groups_by_pod;
  std::map<NamespacedName, std::set<NamespacedName>> groups_by_sap_system;
  // EndpointSlices by (namespace, service) as slice names, and each
  // labelled slice's service, kept up to date from the changes.
  std::map<NamespacedName, std::set<std::string>> slices_of_service;
  std::map<NamespacedName, std::string> service_of_slice;
  internal::ModificationCache modification_cache;
  internal::CertificateCache certificate_cache;
  std::uint64_t groups_compiled = 0;
  std::uint64_t groups_reused = 0;

  void IndexSlice(const NamespacedName& key, const EndpointSlice& slice) {
    static const std::string kServiceNameLabel(model::kServiceNameLabel);
    auto label = slice.metadata.labels.find(kServiceNameLabel);
    if (label == slice.metadata.labels.end()) {
      return;
    }
    service_of_slice[key] = label->second;
    slices_of_service[{key.first, label->second}].insert(key.second);
  }
  // Returns the service the slice was indexed under, if any.
  std::optional<NamespacedName> UnindexSlice(const NamespacedName& key) {
    auto it = service_of_slice.find(key);
    if (it == service_of_slice.end()) {
      return std::nullopt;
    }
    NamespacedName service{key.first, it->second};
    service_of_slice.erase(it);
    auto slices = slices_of_service.find(service);
    if (slices != slices_of_service.end()) {
      slices->second.erase(key.second);
      if (slices->second.empty()) {
        slices_of_service.erase(slices);
      }
    }
    return service;
  }
  void Link(const NamespacedName& group, const Entry& entry, bool add) {
    auto update = [&](std::map<NamespacedName, std::set<NamespacedName>>& index,
                      const NamespacedName& input) {
      if (add) {
        index[input].insert(group);
        return;
      }
      auto it = index.find(input);
      if (it != index.end()) {
        it->second.erase(group);
        if (it->second.empty()) {
          index.erase(it);
        }
      }
    };
    for (const NamespacedName& service : entry.services) {
      update(groups_by_service, service);
    }
    for (const NamespacedName& pod : entry.pods) {
      update(groups_by_pod, pod);
    }
    for (const NamespacedName& system : entry.sap_systems) {
      update(groups_by_sap_system, system);
    }
  }
  void MarkUsers(const std::map<NamespacedName, std::set<NamespacedName>>& index,
                 const NamespacedName& input, std::set<NamespacedName>* dirty) const {
    auto it = index.find(input);
    if (it != index.end()) {
      dirty->insert(it->second.begin(), it->second.end());
    }
  }
};

namespace {

// The memo's inputs: its slice index, the ObjectSet's pods (or a hash index
// of them for a full compile), and a record of every lookup.
class MemoInputs : public GroupInputs {
 public:
  MemoInputs(const ObjectSet& objects, const CompileMemo::State& state, const PodIndex* pods)
      : objects_(objects), state_(state), pods_(pods) {}

  void RecordInto(CompileMemo::State::Entry* entry) { entry_ = entry; }

  const std::vector<const EndpointSlice*>* SlicesOf(const std::string& ns,
                                                    const std::string& service) override {
    NamespacedName key{ns, service};
    entry_->services.push_back(key);
    auto it = state_.slices_of_service.find(key);
    if (it == state_.slices_of_service.end()) {
      return nullptr;
    }
    slices_.clear();
    for (const std::string& name : it->second) {
      auto slice = objects_.endpoint_slices().find({ns, name});
      if (slice != objects_.endpoint_slices().end()) {
        slices_.push_back(&slice->second);
      }
    }
    return slices_.empty() ? nullptr : &slices_;
  }

  const model::Pod* FindPod(std::string_view ns, std::string_view name) override {
    entry_->pods.emplace_back(ns, name);
    if (pods_ != nullptr) {
      auto it = pods_->find(PodKey{ns, name});
      return it == pods_->end() ? nullptr : it->second;
    }
    auto it = objects_.pods().find(entry_->pods.back());
    return it == objects_.pods().end() ? nullptr : &it->second;
  }

  const model::SapSystem* FindSapSystem(const std::string& ns, const std::string& name) override {
    entry_->sap_systems.emplace_back(ns, name);
    auto it = objects_.sap_systems().find({ns, name});
    return it == objects_.sap_systems().end() ? nullptr : &it->second;
  }
  const model::SapServerList* FindServerList(const std::string& ns,
                                             const std::string& name) override {
    entry_->sap_systems.emplace_back(ns, name);
    auto it = objects_.sap_server_lists().find({ns, name});
    return it == objects_.sap_server_lists().end() ? nullptr : &it->second;
  }

 private:
  const ObjectSet& objects_;
  const CompileMemo::State& state_;
  const PodIndex* pods_;
  CompileMemo::State::Entry* entry_ = nullptr;
  std::vector<const EndpointSlice*> slices_;
};

}  // namespace

CompileMemo::CompileMemo() : state_(std::make_unique<State>()) {}
CompileMemo::~CompileMemo() = default;

void CompileMemo::Changed(const model::ObjectKey& key) {
  constexpr std::size_t kMaxChanges = 100000;  // beyond that a full compile is cheaper
  if (state_->all_changed) {
    return;
  }
  if (state_->changed.size() >= kMaxChanges) {
    state_->all_changed = true;
    state_->changed.clear();
    return;
  }
  state_->changed.push_back(key);
}

void CompileMemo::ChangedAll() {
  state_->all_changed = true;
  state_->changed.clear();
}

std::uint64_t CompileMemo::groups_compiled() const {
  return state_->groups_compiled;
}

std::uint64_t CompileMemo::groups_reused() const {
  return state_->groups_reused;
}

CompileResult Compile(const ObjectSet& objects, CompileMemo& memo, const LastGood* last_good) {
  CompileMemo::State& state = *memo.state_;
  std::set<NamespacedName> dirty;
  std::optional<PodIndex> pod_index;
  const bool full = state.all_changed;
  // Until this compile finishes, the memo is not usable: an exception from
  // here on makes the next compile a full one.
  state.all_changed = true;
  if (full) {
    state.entries.clear();
    state.groups_by_service.clear();
    state.groups_by_pod.clear();
    state.groups_by_sap_system.clear();
    state.slices_of_service.clear();
    state.service_of_slice.clear();
    for (const auto& [key, slice] : objects.endpoint_slices()) {
      state.IndexSlice(key, slice);
    }
    for (const auto& [key, lg] : objects.logon_groups()) {
      dirty.insert(dirty.end(), key);
    }
    pod_index = IndexPods(objects);
  } else {
    for (const model::ObjectKey& changed : state.changed) {
      NamespacedName key{changed.namespace_, changed.name};
      if (changed.kind == model::kLogonGroupKind) {
        dirty.insert(key);
      } else if (changed.kind == model::kEndpointSliceKind) {
        if (auto before = state.UnindexSlice(key)) {
          state.MarkUsers(state.groups_by_service, *before, &dirty);
        }
        auto now = objects.endpoint_slices().find(key);
        if (now != objects.endpoint_slices().end()) {
          state.IndexSlice(key, now->second);
          if (auto it = state.service_of_slice.find(key); it != state.service_of_slice.end()) {
            state.MarkUsers(state.groups_by_service, {key.first, it->second}, &dirty);
          }
        }
      } else if (changed.kind == model::kPodKind) {
        state.MarkUsers(state.groups_by_pod, key, &dirty);
      } else if (changed.kind == model::kSapSystemKind ||
                 changed.kind == model::kSapServerListKind) {
        state.MarkUsers(state.groups_by_sap_system, key, &dirty);
      }
      // UrlMappings are compiled every time (Assemble).
    }
  }
  state.changed.clear();

  MemoInputs inputs(objects, state, pod_index ? &*pod_index : nullptr);
  LogonGroupCompiler group_compiler(inputs);
  std::size_t compiled_now = 0;
  for (const NamespacedName& name : dirty) {
    if (auto old = state.entries.find(name); old != state.entries.end()) {
      state.Link(name, old->second, /*add=*/false);
      state.entries.erase(old);
    }
    auto lg = objects.logon_groups().find(name);
    if (lg == objects.logon_groups().end()) {
      continue;
    }
    CompileMemo::State::Entry entry;
    inputs.RecordInto(&entry);
    entry.result = CompileGroup(group_compiler, lg->second, last_good);
    if (entry.result.group) {
      entry.digest = GroupDigest(*entry.result.group);
    }
    state.Link(name, entry, /*add=*/true);
    state.entries.emplace(name, std::move(entry));
    ++compiled_now;
  }
  state.groups_compiled += compiled_now;
  state.groups_reused += state.entries.size() - compiled_now;

  std::vector<CompiledGroup> compiled;
  compiled.reserve(state.entries.size());
  for (auto& [name, entry] : state.entries) {
    compiled.push_back({&entry.result, &entry.digest});
  }
  CompileResult result =
      Assemble(objects, compiled, /*take=*/false, last_good, &state.modification_cache,
               &state.certificate_cache);
  state.all_changed = false;
  return result;
}

}  // namespace kwd::compile
