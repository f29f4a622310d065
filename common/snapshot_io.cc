#include "common/snapshot_io.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/wire_format_lite.h>
#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "common/crypto.h"
#include "common/file.h"

namespace kwd {

namespace {

// Feeds serialized bytes straight into SHA-256 through a small buffer, so a
// digest needs no copy of the serialization in memory.
// One stream hashes many messages in turn (Finish, then the next): a
// snapshot has a digest per group, and setting up a context per group would
// cost more than hashing a small group.
class Sha256OutputStream final : public google::protobuf::io::ZeroCopyOutputStream {
 public:
  Sha256OutputStream() : context_(EVP_MD_CTX_new()) {
    if (context_ == nullptr) {
      std::abort();  // out of memory: nothing sensible to do
    }
    Restart();
  }
  ~Sha256OutputStream() override { EVP_MD_CTX_free(context_); }
  Sha256OutputStream(const Sha256OutputStream&) = delete;
  Sha256OutputStream& operator=(const Sha256OutputStream&) = delete;

  bool Next(void** data, int* size) override {
    Consume();
    *data = buffer_.data();
    *size = static_cast<int>(buffer_.size());
    used_ = buffer_.size();
    return true;
  }
  void BackUp(int count) override { used_ -= static_cast<size_t>(count); }
  int64_t ByteCount() const override { return static_cast<int64_t>(consumed_ + used_); }

  // The digest of everything written since the last Finish; then starts over.
  Sha256Digest Finish() {
    Consume();
    Sha256Digest digest{};
    unsigned int length = 0;
    EVP_DigestFinal_ex(context_, digest.data(), &length);
    Restart();
    return digest;
  }

 private:
  void Restart() {
    // Fetched once: OpenSSL 3 looks the algorithm up on every implicit use.
    static const EVP_MD* const kSha256 = EVP_MD_fetch(nullptr, "SHA256", nullptr);
    if (kSha256 == nullptr || EVP_DigestInit_ex(context_, kSha256, nullptr) != 1) {
      std::abort();  // a broken OpenSSL: nothing sensible to do
    }
    consumed_ = 0;
    used_ = 0;
  }

  void Consume() {
    if (used_ > 0) {
      EVP_DigestUpdate(context_, buffer_.data(), used_);
    }
    consumed_ += used_;
    used_ = 0;
  }

  EVP_MD_CTX* context_;
  std::array<char, 16384> buffer_;
  size_t used_ = 0;
  size_t consumed_ = 0;
};

Sha256Digest DigestOf(const google::protobuf::Message& message, Sha256OutputStream* stream) {
  {
    google::protobuf::io::CodedOutputStream coded(stream);
    coded.SetSerializationDeterministic(true);
    message.SerializeToCodedStream(&coded);
  }
  return stream->Finish();
}

}  // namespace

std::string SnapshotDigests::Version() const {
  std::string joined;
  joined.reserve(sizeof(Sha256Digest) * (1 + groups.size()));
  joined.append(reinterpret_cast<const char*>(rest.data()), rest.size());
  for (const auto& group : groups) {
    joined.append(reinterpret_cast<const char*>(group.data()), group.size());
  }
  return HexEncode(Sha256(joined));
}

namespace {

// Everything but `version` and `groups`: the bytes of a Snapshot holding only
// those fields, written field by field (in field-number order, as generated
// code does) rather than copied into one. SnapshotIoTest.DigestsCoverEveryField
// fails when a field is added to Snapshot and not here, and the reference
// version in the tests (a copy, serialized) when the bytes differ.
Sha256Digest RestDigest(const v1::Snapshot& snapshot, Sha256OutputStream* stream) {
  using google::protobuf::internal::WireFormatLite;
  {
    google::protobuf::io::CodedOutputStream coded(stream);
    coded.SetSerializationDeterministic(true);
    for (const auto& host : snapshot.virtual_hosts()) {
      host.ByteSizeLong();  // WriteMessage writes the cached size
      WireFormatLite::WriteMessage(v1::Snapshot::kVirtualHostsFieldNumber, host, &coded);
    }
    for (const auto& source : snapshot.sources()) {
      source.ByteSizeLong();
      WireFormatLite::WriteMessage(v1::Snapshot::kSourcesFieldNumber, source, &coded);
    }
  }
  return stream->Finish();
}

}  // namespace

SnapshotDigests ComputeSnapshotDigests(const v1::Snapshot& snapshot) {
  Sha256OutputStream stream;
  SnapshotDigests digests;
  digests.rest = RestDigest(snapshot, &stream);
  digests.groups.reserve(static_cast<size_t>(snapshot.groups_size()));
  for (const auto& group : snapshot.groups()) {
    digests.groups.push_back(DigestOf(group, &stream));
  }
  return digests;
}

Sha256Digest SnapshotRestDigest(const v1::Snapshot& snapshot) {
  Sha256OutputStream stream;
  return RestDigest(snapshot, &stream);
}

Sha256Digest GroupDigest(const v1::Group& group) {
  Sha256OutputStream stream;
  return DigestOf(group, &stream);
}

void UpdateGroupDigest(const v1::Snapshot& snapshot, int index, SnapshotDigests* digests) {
  Sha256OutputStream stream;
  digests->groups.at(static_cast<size_t>(index)) = DigestOf(snapshot.groups(index), &stream);
}

std::string ComputeSnapshotVersion(const v1::Snapshot& snapshot) {
  return ComputeSnapshotDigests(snapshot).Version();
}

bool VerifySnapshotVersion(const v1::Snapshot& snapshot, std::string* error) {
  if (snapshot.version().empty() || snapshot.version() == ComputeSnapshotVersion(snapshot)) {
    return true;
  }
  *error = "version " + snapshot.version() + " does not match the content hash";
  return false;
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
  std::string json;
  if (!ReadWholeFile(path, &json, error)) {
    return false;
  }
  if (!SnapshotFromJson(json, out, error) || !VerifySnapshotVersion(*out, error)) {
    *error = path + ": " + *error;
    return false;
  }
  return true;
}

int FindSortedGroup(const v1::Snapshot& snapshot, std::string_view key) {
  const auto& groups = snapshot.groups();
  auto it =
      std::lower_bound(groups.begin(), groups.end(), key,
                       [](const v1::Group& group, std::string_view k) { return group.key() < k; });
  return it != groups.end() && it->key() == key ? static_cast<int>(it - groups.begin()) : -1;
}

std::vector<std::string> CheckSnapshot(const v1::Snapshot& snapshot) {
  // Runs on every proxy for every snapshot: no allocation unless there is a
  // problem to describe.
  std::vector<std::string> problems;
  bool groups_sorted = true;
  const std::string* previous_group = nullptr;
  for (const auto& group : snapshot.groups()) {
    if (group.key().empty()) {
      problems.push_back("a group has an empty key");
    }
    if (previous_group != nullptr && !(*previous_group < group.key())) {
      problems.push_back("groups are not sorted by unique key at " + group.key());
      groups_sorted = false;
    }
    previous_group = &group.key();
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
        problems.push_back("group " + group.key() + ": server " + server.name() + " has no state");
      }
    }
  }
  auto group_exists = [&](const std::string& key) {
    if (groups_sorted) {
      return FindSortedGroup(snapshot, key) >= 0;
    }
    // Already reported; look everywhere so as not to add false reports.
    return std::any_of(snapshot.groups().begin(), snapshot.groups().end(),
                       [&](const v1::Group& group) { return group.key() == key; });
  };
  // `describe` builds the "where" text only when there is a problem.
  auto check_ref = [&](const auto& describe, const std::string& key) {
    if (!key.empty() && !group_exists(key)) {
      problems.push_back(describe() + " names unknown group " + key);
    }
  };
  const std::string* previous_host = nullptr;
  for (const auto& vhost : snapshot.virtual_hosts()) {
    std::string where = "virtual host \"" + vhost.host() + "\"";
    if (previous_host != nullptr && !(*previous_host < vhost.host())) {
      problems.push_back("virtual hosts are not sorted by unique host at " + where);
    }
    previous_host = &vhost.host();
    check_ref([&] { return where + " default abap group"; }, vhost.default_abap_group());
    check_ref([&] { return where + " default java group"; }, vhost.default_java_group());
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
      check_ref([&] { return where + " rule " + p; }, rule.group());
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
  return problems;
}

}  // namespace kwd
