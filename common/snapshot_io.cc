#include "common/snapshot_io.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/util/json_util.h>

#include <fstream>
#include <set>
#include <sstream>

#include "common/crypto.h"

namespace kwd {

std::string ComputeSnapshotVersion(const v1::Snapshot& snapshot) {
  v1::Snapshot copy = snapshot;
  copy.clear_version();
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    copy.SerializeToCodedStream(&coded);
  }
  return HexEncode(Sha256(bytes));
}

void StampSnapshotVersion(v1::Snapshot* snapshot) {
  snapshot->set_version(ComputeSnapshotVersion(*snapshot));
}

std::string SnapshotToJson(const v1::Snapshot& snapshot) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  std::string out;
  auto status = google::protobuf::util::MessageToJsonString(snapshot, &out, options);
  // Serializing a well-formed message cannot fail.
  if (!status.ok()) {
    std::abort();
  }
  return out;
}

bool SnapshotFromJson(std::string_view json, v1::Snapshot* out, std::string* error) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), out, options);
  if (!status.ok()) {
    *error = "snapshot is not valid JSON for kwd.v1.Snapshot: " + std::string(status.message());
    return false;
  }
  return true;
}

bool LoadSnapshotFile(const std::string& path, v1::Snapshot* out, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = "cannot read snapshot file " + path;
    return false;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (!SnapshotFromJson(buffer.str(), out, error)) {
    *error = path + ": " + *error;
    return false;
  }
  return true;
}

std::vector<std::string> CheckSnapshot(const v1::Snapshot& snapshot) {
  std::vector<std::string> problems;
  std::set<std::string> group_keys;
  const std::string* previous_group = nullptr;
  for (const auto& group : snapshot.groups()) {
    if (group.key().empty()) {
      problems.push_back("a group has an empty key");
    }
    if (previous_group != nullptr && !(*previous_group < group.key())) {
      problems.push_back("groups are not sorted by unique key at " + group.key());
    }
    previous_group = &group.key();
    group_keys.insert(group.key());
    if (group.kind() == v1::KIND_UNSPECIFIED) {
      problems.push_back("group " + group.key() + " has no kind");
    }
    if (group.strategy() == v1::STRATEGY_UNSPECIFIED) {
      problems.push_back("group " + group.key() + " has no strategy");
    }
    const std::string* previous_server = nullptr;
    for (const auto& server : group.servers()) {
      if (server.name().empty()) {
        problems.push_back("group " + group.key() + " has a server without a name");
      }
      if (previous_server != nullptr && !(*previous_server < server.name())) {
        problems.push_back("group " + group.key() + ": servers not sorted by unique name at " +
                           server.name());
      }
      previous_server = &server.name();
      if (server.capacity() < 1) {
        problems.push_back("group " + group.key() + ": server " + server.name() +
                           " has capacity 0");
      }
      if (server.port() == 0 || server.port() > 65535) {
        problems.push_back("group " + group.key() + ": server " + server.name() +
                           " has an invalid port");
      }
      if (server.address().empty()) {
        problems.push_back("group " + group.key() + ": server " + server.name() +
                           " has no address");
      }
      if (server.state() == v1::SERVER_STATE_UNSPECIFIED) {
        problems.push_back("group " + group.key() + ": server " + server.name() +
                           " has no state");
      }
    }
  }
  auto check_ref = [&](const std::string& where, const std::string& key) {
    if (!key.empty() && group_keys.count(key) == 0) {
      problems.push_back(where + " names unknown group " + key);
    }
  };
  const std::string* previous_host = nullptr;
  for (const auto& vhost : snapshot.virtual_hosts()) {
    std::string where = "virtual host \"" + vhost.host() + "\"";
    if (previous_host != nullptr && !(*previous_host < vhost.host())) {
      problems.push_back("virtual hosts are not sorted by unique host at " + where);
    }
    previous_host = &vhost.host();
    check_ref(where + " default abap group", vhost.default_abap_group());
    check_ref(where + " default java group", vhost.default_java_group());
    const std::string* previous_prefix = nullptr;
    for (const auto& rule : vhost.rules()) {
      const std::string& p = rule.prefix();
      if (p.size() < 2 || p.front() != '/' || p.back() != '/') {
        problems.push_back(where + ": rule prefix \"" + p + "\" must start and end with /");
      }
      if (previous_prefix != nullptr && !(*previous_prefix < p)) {
        problems.push_back(where + ": rules not sorted by unique prefix at " + p);
      }
      previous_prefix = &p;
      if (rule.kind() == v1::KIND_UNSPECIFIED) {
        problems.push_back(where + ": rule " + p + " has no kind");
      }
      check_ref(where + " rule " + p, rule.group());
    }
    for (const auto& permission : vhost.permissions()) {
      const std::string& pattern = permission.pattern();
      auto star = pattern.find('*', 1);
      if (pattern.empty() || (star != std::string::npos && star != pattern.size() - 1)) {
        problems.push_back(where + ": permission pattern \"" + pattern +
                           "\" may hold * only at the start or the end");
      }
      if (permission.action() == v1::PERMISSION_ACTION_UNSPECIFIED) {
        problems.push_back(where + ": permission " + pattern + " has no action");
      }
    }
  }
  if (!snapshot.version().empty() && snapshot.version() != ComputeSnapshotVersion(snapshot)) {
    problems.push_back("version does not match the content hash");
  }
  return problems;
}

}  // namespace kwd
