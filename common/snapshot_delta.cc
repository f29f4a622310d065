#include "common/snapshot_delta.h"

#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <vector>

#include "common/snapshot_io.h"

namespace kwd {
namespace {

using google::protobuf::util::MessageDifferencer;

// Equal apart from the given field (compared field by field, so a field
// added to the proto later is compared too).
bool EqualIgnoring(const google::protobuf::Message& a, const google::protobuf::Message& b,
                   const google::protobuf::FieldDescriptor* ignored,
                   const google::protobuf::FieldDescriptor* also_ignored = nullptr) {
  MessageDifferencer differencer;
  differencer.IgnoreField(ignored);
  if (also_ignored != nullptr) {
    differencer.IgnoreField(also_ignored);
  }
  return differencer.Compare(a, b);
}

}  // namespace

std::optional<v1::SnapshotDelta> ComputeEndpointDelta(const v1::Snapshot& from,
                                                      const v1::Snapshot& to,
                                                      const SnapshotDigests* from_digests,
                                                      const SnapshotDigests* to_digests) {
  if (from.groups_size() != to.groups_size()) {
    return std::nullopt;
  }
  // Digests that were never computed (a default SnapshotDigests) are all
  // zeros; a SHA-256 never is.
  const Sha256Digest unset{};
  const bool digested = from_digests != nullptr && to_digests != nullptr &&
                        from_digests->rest != unset && to_digests->rest != unset &&
                        from_digests->groups.size() == static_cast<size_t>(from.groups_size()) &&
                        to_digests->groups.size() == static_cast<size_t>(to.groups_size());
  if (digested) {
    if (from_digests->rest != to_digests->rest) {
      return std::nullopt;
    }
  } else {
    const auto* descriptor = v1::Snapshot::descriptor();
    if (!EqualIgnoring(from, to, descriptor->FindFieldByNumber(v1::Snapshot::kGroupsFieldNumber),
                       descriptor->FindFieldByNumber(v1::Snapshot::kVersionFieldNumber))) {
      return std::nullopt;
    }
  }
  const auto* servers_field =
      v1::Group::descriptor()->FindFieldByNumber(v1::Group::kServersFieldNumber);
  v1::SnapshotDelta delta;
  delta.set_base_version(from.version());
  // Serialized bytes decide "unchanged" quickly (no maps in the proto, so
  // equal messages serialize equally); only groups that differ get the
  // field-by-field comparison of everything but their servers.
  std::string from_bytes;
  std::string to_bytes;
  for (int i = 0; i < from.groups_size(); ++i) {
    const v1::Group& old_group = from.groups(i);
    const v1::Group& new_group = to.groups(i);
    if (old_group.key() != new_group.key()) {
      return std::nullopt;
    }
    if (digested) {
      if (from_digests->groups[static_cast<size_t>(i)] ==
          to_digests->groups[static_cast<size_t>(i)]) {
        continue;
      }
    } else {
      old_group.SerializeToString(&from_bytes);
      new_group.SerializeToString(&to_bytes);
      if (from_bytes == to_bytes) {
        continue;
      }
    }
    if (!EqualIgnoring(old_group, new_group, servers_field)) {
      return std::nullopt;
    }
    v1::GroupServers* changed = delta.add_groups();
    changed->set_group(new_group.key());
    *changed->mutable_servers() = new_group.servers();
  }
  return delta;
}

bool SwapDeltaServers(v1::Snapshot* snapshot, v1::SnapshotDelta* delta,
                      std::vector<int>* changed_groups, std::string* error) {
  std::vector<int> targets;
  targets.reserve(static_cast<size_t>(delta->groups_size()));
  std::vector<bool> named(static_cast<size_t>(snapshot->groups_size()), false);
  for (const auto& changed : delta->groups()) {
    // The running snapshot passed CheckSnapshot: its groups are sorted.
    int index = FindSortedGroup(*snapshot, changed.group());
    if (index < 0) {
      *error = "delta names group " + changed.group() + ", which the running snapshot lacks";
      return false;
    }
    if (named[static_cast<size_t>(index)]) {
      *error = "delta names group " + changed.group() + " twice";
      return false;
    }
    named[static_cast<size_t>(index)] = true;
    targets.push_back(index);
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    snapshot->mutable_groups(targets[i])
        ->mutable_servers()
        ->Swap(delta->mutable_groups(static_cast<int>(i))->mutable_servers());
  }
  if (changed_groups != nullptr) {
    *changed_groups = std::move(targets);
  }
  return true;
}

}  // namespace kwd
