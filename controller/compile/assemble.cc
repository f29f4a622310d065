// The builder: compiles every LogonGroup (logon_group.cc), then puts the
// groups, the UrlMappings (url_mapping.cc) and the SapSystems' statuses
// (sap_system.cc) together into one snapshot with a content version. Also
// the LastGood bookkeeping.

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "common/crypto.h"
#include "common/snapshot_io.h"
#include "controller/compile/internal.h"

namespace kwd::compile {
namespace {

using internal::Assemble;
using internal::CompiledGroup;
using internal::CompileGroup;
using internal::GroupResult;
using internal::IndexedInputs;
using internal::LogonGroupCompiler;
using model::ObjectSet;

std::unique_ptr<google::protobuf::Arena> MakeSnapshotArena() {
  google::protobuf::ArenaOptions options;
  options.start_block_size = 64 * 1024;
  options.max_block_size = 1024 * 1024;
  return std::make_unique<google::protobuf::Arena>(options);
}

}  // namespace

CompileResult::CompileResult()
    : arena(MakeSnapshotArena()),
      snapshot(*google::protobuf::Arena::CreateMessage<v1::Snapshot>(arena.get())) {}

const Condition* ObjectStatus::Find(std::string_view type) const {
  for (const auto& condition : conditions) {
    if (condition.type == type) {
      return &condition;
    }
  }
  return nullptr;
}

namespace internal {

CompileResult Assemble(const ObjectSet& objects, const std::vector<CompiledGroup>& compiled,
                       bool take, const LastGood* last_good,
                       ModificationCache* modification_cache,
                       CertificateCache* certificate_cache) {
  CompileResult result;
  v1::Snapshot& snapshot = result.snapshot;
  std::set<std::string> accepted_groups;
  std::set<std::string> existing_groups;
  std::vector<const CompiledGroup*> accepted;
  result.statuses.reserve(compiled.size() + objects.url_mappings().size() +
                          objects.sap_systems().size());
  for (const CompiledGroup& group : compiled) {
    ObjectStatus& status = group.result->status;
    existing_groups.insert(GroupKey(status.namespace_, status.name));
    if (group.result->group) {
      accepted_groups.insert(group.result->group->key());
      accepted.push_back(&group);
    }
    if (take) {
      result.statuses.push_back(std::move(status));
    } else {
      result.statuses.push_back(status);
    }
  }
  // Groups in key order: "ns/name" text order is not (namespace, name)
  // order ("erp-dev/x" sorts before "erp/x").
  std::sort(accepted.begin(), accepted.end(), [](const CompiledGroup* a, const CompiledGroup* b) {
    return a->result->group->key() < b->result->group->key();
  });
  snapshot.mutable_groups()->Reserve(static_cast<int>(accepted.size()));
  for (const CompiledGroup* group : accepted) {
    if (take) {
      *snapshot.add_groups() = std::move(*group->result->group);
    } else {
      *snapshot.add_groups() = *group->result->group;
    }
  }

  // Older UrlMappings win conflicts: age is creationTimestamp (RFC 3339 in
  // UTC compares as text; a missing one counts as oldest), then namespace/name.
  std::vector<const UrlMapping*> by_age;
  for (const auto& [key, um] : objects.url_mappings()) {
    by_age.push_back(&um);
  }
  std::stable_sort(by_age.begin(), by_age.end(), [](const UrlMapping* a, const UrlMapping* b) {
    return a->metadata.creation_timestamp < b->metadata.creation_timestamp;
  });
  UrlMappingCompiler mapping_compiler(objects, accepted_groups, existing_groups,
                                      modification_cache, certificate_cache);
  std::vector<ObjectStatus> mapping_statuses;
  for (const UrlMapping* um : by_age) {
    const UrlMapping* previous = nullptr;
    if (last_good != nullptr) {
      auto it = last_good->url_mappings.find({um->metadata.namespace_, um->metadata.name});
      if (it != last_good->url_mappings.end()) {
        previous = &it->second;
      }
    }
    mapping_statuses.push_back(mapping_compiler.Compile(*um, previous));
  }
  mapping_compiler.AppendVirtualHosts(&snapshot);
  result.certificates_expire = mapping_compiler.AppendCertificates(&snapshot);
  std::sort(mapping_statuses.begin(), mapping_statuses.end(),
            [](const ObjectStatus& a, const ObjectStatus& b) {
              return std::tie(a.namespace_, a.name) < std::tie(b.namespace_, b.name);
            });
  for (auto& status : mapping_statuses) {
    result.statuses.push_back(std::move(status));
  }

  for (const auto& [key, system] : objects.sap_systems()) {
    const SapServerList* list = nullptr;
    if (auto it = objects.sap_server_lists().find(key); it != objects.sap_server_lists().end()) {
      list = &it->second;
    }
    result.statuses.push_back(SapSystemStatus(system, list));
  }

  // An object whose name no snapshot may hold (rejected, see CheckObjectName)
  // is left out of the sources too.
  for (const auto& [key, lg] : objects.logon_groups()) {
    if (!HasValidName(lg.metadata)) {
      continue;
    }
    auto* source = snapshot.add_sources();
    source->set_kind(std::string(model::kLogonGroupKind));
    source->set_namespace_(key.first);
    source->set_name(key.second);
    source->set_generation(lg.metadata.generation);
  }
  for (const auto& [key, um] : objects.url_mappings()) {
    if (!HasValidName(um.metadata)) {
      continue;
    }
    auto* source = snapshot.add_sources();
    source->set_kind(std::string(model::kUrlMappingKind));
    source->set_namespace_(key.first);
    source->set_name(key.second);
    source->set_generation(um.metadata.generation);
  }

  SnapshotDigests& digests = result.digests;
  digests.rest = SnapshotRestDigest(snapshot);
  digests.groups.reserve(accepted.size());
  for (int i = 0; i < snapshot.groups_size(); ++i) {
    const Sha256Digest* known = accepted[static_cast<size_t>(i)]->digest;
    digests.groups.push_back(known != nullptr ? *known : GroupDigest(snapshot.groups(i)));
  }
  snapshot.set_version(digests.Version());
  return result;
}

}  // namespace internal

CompileResult Compile(const ObjectSet& objects, const LastGood* last_good) {
  IndexedInputs inputs(objects);
  LogonGroupCompiler group_compiler(inputs);
  std::vector<GroupResult> results;
  results.reserve(objects.logon_groups().size());
  for (const auto& [key, lg] : objects.logon_groups()) {
    results.push_back(CompileGroup(group_compiler, lg, last_good));
  }
  std::vector<CompiledGroup> compiled;
  compiled.reserve(results.size());
  for (GroupResult& result : results) {
    compiled.push_back({&result, nullptr});
  }
  return Assemble(objects, compiled, /*take=*/true, last_good);
}

std::vector<model::ObjectKey> UpdateLastGood(const ObjectSet& objects, const CompileResult& result,
                                             LastGood* last_good) {
  std::vector<model::ObjectKey> changed;
  auto remember = [&](const ObjectStatus& status, const auto& current, auto& kept) {
    ObjectSet::NamespacedName key{status.namespace_, status.name};
    auto it = current.find(key);
    if (it == current.end()) {
      return;
    }
    auto [slot, inserted] = kept.try_emplace(key, it->second);
    if (!inserted && slot->second == it->second) {
      return;
    }
    slot->second = it->second;
    changed.push_back({status.kind, status.namespace_, status.name});
  };
  for (const ObjectStatus& status : result.statuses) {
    const Condition* accepted = status.Find(kAccepted);
    if (accepted == nullptr || accepted->status != "True") {
      continue;
    }
    if (status.kind == model::kLogonGroupKind) {
      remember(status, objects.logon_groups(), last_good->logon_groups);
    } else if (status.kind == model::kUrlMappingKind) {
      remember(status, objects.url_mappings(), last_good->url_mappings);
    }
  }
  auto forget = [&](std::string_view kind, const auto& current, auto& kept) {
    for (auto it = kept.begin(); it != kept.end();) {
      if (current.contains(it->first)) {
        ++it;
        continue;
      }
      changed.push_back({std::string(kind), it->first.first, it->first.second});
      it = kept.erase(it);
    }
  };
  forget(model::kLogonGroupKind, objects.logon_groups(), last_good->logon_groups);
  forget(model::kUrlMappingKind, objects.url_mappings(), last_good->url_mappings);
  return changed;
}

std::size_t CountRejected(const CompileResult& result, std::string_view kind) {
  return static_cast<std::size_t>(
      std::count_if(result.statuses.begin(), result.statuses.end(), [&](const ObjectStatus& s) {
        const Condition* accepted = s.Find(kAccepted);
        return s.kind == kind && accepted != nullptr && accepted->status == "False";
      }));
}

}  // namespace kwd::compile
