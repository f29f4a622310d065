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
#include <map>
#include <set>
#include <sstream>

#include "common/crypto.h"
#include "common/file.h"
#include "common/log.h"

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
    for (const auto& certificate : snapshot.certificates()) {
      certificate.ByteSizeLong();
      WireFormatLite::WriteMessage(v1::Snapshot::kCertificatesFieldNumber, certificate, &coded);
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
  if (snapshot.certificates().empty()) {
    return SnapshotToJsonWithPrivateKeys(snapshot);
  }
  v1::Snapshot redacted = snapshot;
  for (auto& certificate : *redacted.mutable_certificates()) {
    if (!certificate.key_pem().empty()) {
      certificate.set_key_pem(std::string(kRedactedPrivateKey));
    }
  }
  return SnapshotToJsonWithPrivateKeys(redacted);
}

std::string SnapshotToJsonWithPrivateKeys(const v1::Snapshot& snapshot) {
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

bool LoadSnapshotFile(const std::string& path, v1::Snapshot* out, std::string* error,
                      SnapshotVersionCheck check) {
  std::string json;
  if (!ReadWholeFile(path, &json, error)) {
    return false;
  }
  if (!SnapshotFromJson(json, out, error) || !VerifySnapshotVersion(*out, error)) {
    *error = path + ": " + *error;
    return false;
  }
  // `{}` (an emptied or truncated file) parses as a snapshot that routes
  // nothing: what the controller writes always carries its version.
  if (check == SnapshotVersionCheck::kRequired && out->version().empty()) {
    *error = path + ": snapshot has no version (kwd-controller compile writes one)";
    return false;
  }
  return true;
}

// ---- Names and paths ----

namespace {

bool IsLowerAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

bool IsAlnum(char c) {
  return IsLowerAlnum(c) || (c >= 'A' && c <= 'Z');
}

bool IsHexDigit(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// RFC 1123 label: [a-z0-9]([-a-z0-9]*[a-z0-9])?
bool IsDnsLabel(std::string_view label, size_t max) {
  if (label.empty() || label.size() > max || label.front() == '-' || label.back() == '-') {
    return false;
  }
  return std::all_of(label.begin(), label.end(),
                     [](char c) { return IsLowerAlnum(c) || c == '-'; });
}

// RFC 3986 pchar without pct-encoded, plus '/'.
bool IsPathChar(char c) {
  static constexpr std::string_view kOther = "-._~!$&'()*+,;=:@/";
  return IsAlnum(c) || kOther.find(c) != std::string_view::npos;
}

// Path characters, and '%' followed by two hex digits; `extra` also allowed.
bool IsPathTextWith(std::string_view text, char extra) {
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '%') {
      if (i + 2 >= text.size() || !IsHexDigit(text[i + 1]) || !IsHexDigit(text[i + 2])) {
        return false;
      }
      i += 2;
    } else if (!IsPathChar(c) && c != extra) {
      return false;
    }
  }
  return true;
}

constexpr size_t kMaxPathText = 1024;

}  // namespace

bool IsNamespaceName(std::string_view name) {
  return IsDnsLabel(name, 63);
}

bool IsObjectName(std::string_view name) {
  if (name.empty() || name.size() > 253) {
    return false;
  }
  size_t start = 0;
  while (true) {
    size_t dot = name.find('.', start);
    std::string_view label =
        name.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (!IsDnsLabel(label, 253)) {
      return false;
    }
    if (dot == std::string_view::npos) {
      return true;
    }
    start = dot + 1;
  }
}

bool IsObjectKey(std::string_view key) {
  size_t slash = key.find('/');
  return slash != std::string_view::npos && IsNamespaceName(key.substr(0, slash)) &&
         IsObjectName(key.substr(slash + 1));
}

bool IsServerName(std::string_view name) {
  if (name.empty() || name.size() > 253) {
    return false;
  }
  // cookie-octet = %x21 / %x23-2B / %x2D-3A / %x3C-5B / %x5D-7E
  return std::all_of(name.begin(), name.end(), [](char c) {
    return c > 0x20 && c < 0x7f && c != '"' && c != ',' && c != ';' && c != '\\';
  });
}

bool IsServerAddress(std::string_view address) {
  if (address.empty() || address.size() > 253) {
    return false;
  }
  return std::all_of(address.begin(), address.end(), [](char c) {
    return IsAlnum(c) || c == '.' || c == '-' || c == '_' || c == ':';
  });
}

bool IsCookieName(std::string_view name) {
  if (name.empty()) {
    return false;
  }
  constexpr std::string_view kSeparators = "()<>@,;:\\\"/[]?={} \t";
  return std::all_of(name.begin(), name.end(), [&](char c) {
    return c > 0x20 && c < 0x7f && kSeparators.find(c) == std::string_view::npos;
  });
}

bool IsSapSid(std::string_view sid) {
  auto upper_or_digit = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); };
  return sid.size() == 3 && sid[0] >= 'A' && sid[0] <= 'Z' &&
         std::all_of(sid.begin(), sid.end(), upper_or_digit);
}

bool IsVirtualHost(std::string_view host) {
  if (host.size() > 255) {
    return false;
  }
  if (host.substr(0, 2) == "*.") {
    host.remove_prefix(2);
  }
  if (host.empty()) {
    return false;
  }
  return std::all_of(host.begin(), host.end(),
                     [](char c) { return IsLowerAlnum(c) || c == '-' || c == '.'; });
}

bool IsPathText(std::string_view text) {
  return text.size() <= kMaxPathText && IsPathTextWith(text, '/');
}

bool IsOriginForm(std::string_view target) {
  if (target.empty() || target.front() != '/' || target.size() > kMaxPathText) {
    return false;
  }
  size_t question = target.find('?');
  if (question == std::string_view::npos) {
    return IsPathTextWith(target, '/');
  }
  return IsPathTextWith(target.substr(0, question), '/') &&
         IsPathTextWith(target.substr(question + 1), '?');
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
    } else if (!IsObjectKey(group.key())) {
      problems.push_back("a group has an invalid key \"" + group.key() + "\" (not namespace/name)");
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
    const std::string& health_path = group.health_check().path();
    if (!health_path.empty() && !IsOriginForm(health_path)) {
      problems.push_back("group " + group.key() + ": health check path \"" + health_path +
                         "\" is not an origin-form path");
    }
    const std::string& cookie = group.session_affinity().affinity_cookie_name();
    if (!cookie.empty() && !IsCookieName(cookie)) {
      problems.push_back("group " + group.key() + ": affinity cookie name \"" + cookie +
                         "\" is not a cookie name");
    }
    if (const auto& client_ip = group.session_affinity().client_ip(); client_ip.enabled()) {
      const uint32_t host_bits = ~client_ip.ipv4_mask();  // must be 0...01...1
      if ((host_bits & (host_bits + 1)) != 0 || client_ip.ipv4_mask() == 0) {
        problems.push_back("group " + group.key() +
                           ": client IP affinity mask is not a contiguous IPv4 mask");
      }
      if (client_ip.ipv6_prefix_length() > 128) {
        problems.push_back("group " + group.key() +
                           ": client IP affinity IPv6 prefix length is above 128");
      }
    }
    const std::string* previous_server = nullptr;
    for (const auto& server : group.servers()) {
      if (server.name().empty()) {
        problems.push_back("group " + group.key() + " has a server without a name");
      } else if (!IsServerName(server.name())) {
        problems.push_back("group " + group.key() + " has an invalid server name \"" +
                           server.name() + "\"");
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
      } else if (!IsServerAddress(server.address())) {
        problems.push_back("group " + group.key() + ": server " + server.name() +
                           " has an invalid address \"" + server.address() + "\"");
      }
      if (!server.pod().empty() && !IsObjectKey(server.pod())) {
        problems.push_back("group " + group.key() + ": server " + server.name() +
                           " has an invalid pod \"" + server.pod() + "\"");
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
    if (!vhost.host().empty() && !IsVirtualHost(vhost.host())) {
      problems.push_back(where + " is an invalid host (lowercase DNS name or *.suffix)");
    }
    if (!vhost.source().empty() && !IsObjectKey(vhost.source())) {
      problems.push_back(where + " has an invalid source \"" + vhost.source() + "\"");
    }
    previous_host = &vhost.host();
    check_ref([&] { return where + " default abap group"; }, vhost.default_abap_group());
    check_ref([&] { return where + " default java group"; }, vhost.default_java_group());
    check_ref([&] { return where + " passthrough group"; }, vhost.passthrough_group());
    const std::string* previous_prefix = nullptr;
    for (const auto& rule : vhost.rules()) {
      const std::string& p = rule.prefix();
      if (p.size() < 2 || p.front() != '/' || p.back() != '/') {
        problems.push_back(where + ": rule prefix \"" + p + "\" must start and end with /");
      } else if (!IsPathText(p)) {
        problems.push_back(where + ": rule prefix \"" + p + "\" may hold only path characters");
      }
      if (!rule.source().empty() && !IsObjectKey(rule.source())) {
        problems.push_back(where + ": rule " + p + " has an invalid source \"" + rule.source() +
                           "\"");
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
    const std::string* previous_sid = nullptr;
    for (const auto& system : vhost.systems()) {
      const std::string& sid = system.sid();
      if (!IsSapSid(sid)) {
        problems.push_back(where + ": system \"" + sid + "\" is not a SAP system ID");
      }
      if (previous_sid != nullptr && !(*previous_sid < sid)) {
        problems.push_back(where + ": systems not sorted by unique SID at " + sid);
      }
      previous_sid = &sid;
      check_ref([&] { return where + " system " + sid + " default abap group"; },
                system.default_abap_group());
      check_ref([&] { return where + " system " + sid + " default java group"; },
                system.default_java_group());
      for (const auto& rule : system.rules()) {
        check_ref([&] { return where + " system " + sid + " rule " + rule.prefix(); },
                  rule.group());
      }
    }
    for (const auto& permission : vhost.permissions()) {
      const std::string& pattern = permission.pattern();
      auto star = pattern.find('*', 1);
      if (pattern.empty() || (star != std::string::npos && star != pattern.size() - 1)) {
        problems.push_back(where + ": permission pattern \"" + pattern +
                           "\" may hold * only at the start or the end");
      } else if (!IsPathText(pattern)) {
        problems.push_back(where + ": permission pattern \"" + pattern +
                           "\" may hold only path characters");
      }
      if (permission.action() == v1::PERMISSION_ACTION_UNSPECIFIED) {
        problems.push_back(where + ": permission " + pattern + " has no action");
      }
    }
  }
  for (const auto& source : snapshot.sources()) {
    bool kind_ok =
        !source.kind().empty() && std::all_of(source.kind().begin(), source.kind().end(), IsAlnum);
    if (!kind_ok || !IsNamespaceName(source.namespace_()) || !IsObjectName(source.name())) {
      problems.push_back("invalid source object \"" + source.kind() + " " + source.namespace_() +
                         "/" + source.name() + "\"");
    }
  }
  const std::string* previous_certificate = nullptr;
  std::map<std::string_view, const std::string*> certificate_of_host;
  for (const auto& certificate : snapshot.certificates()) {
    std::string where = "certificate \"" + certificate.name() + "\"";
    if (!IsObjectKey(certificate.name())) {
      problems.push_back(where + " has an invalid name (namespace/secret)");
    }
    if (previous_certificate != nullptr && !(*previous_certificate < certificate.name())) {
      problems.push_back("certificates are not sorted by unique name at " + where);
    }
    previous_certificate = &certificate.name();
    if (certificate.cert_pem().empty() || certificate.key_pem().empty()) {
      problems.push_back(where + " has no certificate or no key");
    }
    if (certificate.hosts().empty()) {
      problems.push_back(where + " serves no host");
    }
    const std::string* previous = nullptr;
    for (const std::string& host : certificate.hosts()) {
      if (!IsVirtualHost(host)) {
        problems.push_back(where + ": \"" + host + "\" is an invalid host");
      }
      if (previous != nullptr && !(*previous < host)) {
        problems.push_back(where + ": hosts not sorted and unique at " + host);
      }
      previous = &host;
      auto [it, inserted] = certificate_of_host.emplace(host, &certificate.name());
      if (!inserted && *it->second != certificate.name()) {
        problems.push_back(where + ": host " + host + " is also served by certificate \"" +
                           *it->second + "\"");
      }
    }
  }
  // The problems quote names from the snapshot; they go to logs and back to
  // the controller in a NACK.
  for (std::string& problem : problems) {
    problem = EscapeControlCharacters(problem);
  }
  return problems;
}

}  // namespace kwd
