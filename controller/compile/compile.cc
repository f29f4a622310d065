#include "controller/compile/compile.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/crypto.h"
#include "common/log.h"
#include "common/snapshot_io.h"
#include "common/string_hash.h"
#include "controller/sapsystem/spec.h"

namespace kwd::compile {
namespace {

using model::EndpointSlice;
using model::LogonGroup;
using model::ObjectSet;
using model::SapServerList;
using model::UrlMapping;

constexpr std::int64_t kUint32Max = std::numeric_limits<std::uint32_t>::max();

constexpr std::string_view kServerNameRule =
    "1 to 253 visible ASCII characters but \" , ; and \\: it goes into the affinity cookie";

constexpr std::string_view kDefaultAbapHealthPath = "/sap/public/icman/ping";
constexpr std::string_view kDefaultJavaHealthPath = "/index.html";
constexpr std::string_view kImplicitAbapDefaultGroup = "diag";
constexpr std::string_view kImplicitJavaDefaultGroup = "j2ee";

std::string AsciiLower(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
  }
  return out;
}

std::string Quote(std::string_view text) {
  return "\"" + std::string(text) + "\"";
}

std::string GroupKey(std::string_view ns, std::string_view name) {
  return std::string(ns) + "/" + std::string(name);
}

std::string JoinStrings(const std::vector<std::string>& parts, std::string_view separator) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) {
      out += separator;
    }
    out += parts[i];
  }
  return out;
}

std::optional<v1::Kind> ParseKind(std::string_view text, bool accept_j2ee) {
  if (text == "abap") {
    return v1::KIND_ABAP;
  }
  if (text == "java" || (accept_j2ee && text == "j2ee")) {
    return v1::KIND_JAVA;
  }
  return std::nullopt;
}

bool IsIpAddress(const std::string& text) {
  in6_addr buffer{};
  return inet_pton(AF_INET, text.c_str(), &buffer) == 1 ||
         inet_pton(AF_INET6, text.c_str(), &buffer) == 1;
}

// The largest caBundle taken (decoded): ample for a private CA chain and
// even a whole system store (about 220 KB).
constexpr std::size_t kMaxCaBundleBytes = 512 * 1024;

// Decodes the CRD's caBundle (base64 of PEM, line breaks allowed) into `pem`
// and checks that it holds at least one certificate and nothing OpenSSL
// cannot read. Returns "" or what is wrong.
std::string DecodeCaBundle(std::string_view base64, std::string* pem) {
  std::string compact;
  compact.reserve(base64.size());
  for (char c : base64) {
    if (c != ' ' && c != '\n' && c != '\r' && c != '\t') {
      compact.push_back(c);
    }
  }
  if (compact.empty()) {
    return "is empty (leave it out to use the proxy's system certificate store)";
  }
  if (compact.find("-----BEGIN") != std::string::npos) {
    return "is not valid base64: it holds PEM text itself (write base64 of it, e.g. "
           "base64 -w0 ca.pem)";
  }
  // Standard base64 only, as the CRD's format: byte (Base64Decode also
  // takes the URL-safe alphabet).
  bool standard = std::all_of(compact.begin(), compact.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' ||
           c == '/' || c == '=';
  });
  if (!standard) {
    return "is not valid base64 (it holds the PEM certificates base64-encoded, "
           "e.g. base64 -w0 ca.pem)";
  }
  if (compact.size() / 4 * 3 > kMaxCaBundleBytes) {
    return "is larger than " + std::to_string(kMaxCaBundleBytes / 1024) + " KiB decoded";
  }
  std::string decoded(compact.size() / 4 * 3 + 3, '\0');
  int size = Base64Decode(compact, decoded.data(), decoded.size());
  if (size < 0) {
    return "is not valid base64 (it holds the PEM certificates base64-encoded, "
           "e.g. base64 -w0 ca.pem)";
  }
  decoded.resize(static_cast<std::size_t>(size));
  if (decoded.find("-----BEGIN") == std::string::npos) {
    return "holds no PEM certificate (-----BEGIN CERTIFICATE-----) after base64 decoding";
  }
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(decoded.data(), static_cast<int>(decoded.size())), &BIO_free);
  int count = 0;
  ERR_clear_error();
  while (true) {
    X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr);
    if (cert == nullptr) {
      unsigned long error = ERR_peek_last_error();
      ERR_clear_error();
      if (ERR_GET_LIB(error) == ERR_LIB_PEM && ERR_GET_REASON(error) == PEM_R_NO_START_LINE) {
        break;  // no further certificate
      }
      return "certificate " + std::to_string(count + 1) +
             " cannot be read (not a PEM X.509 "
             "certificate)";
    }
    X509_free(cert);
    ++count;
  }
  if (count == 0) {
    return "holds no PEM certificate (-----BEGIN CERTIFICATE-----) after base64 decoding";
  }
  *pem = std::move(decoded);
  return "";
}

std::string_view KindName(v1::Kind kind) {
  return kind == v1::KIND_ABAP ? "abap" : "java";
}

// Collects what goes into an object's Accepted and ResolvedRefs conditions.
class Findings {
 public:
  // Messages quote values from objects: their control characters are
  // escaped (statuses, `validate` output and log lines stay one line each).
  void Reject(std::string_view reason, std::string_view message) {
    rejections_.push_back({std::string(reason), EscapeControlCharacters(message)});
  }
  void Unresolved(std::string_view reason, std::string_view message) {
    unresolved_.push_back({std::string(reason), EscapeControlCharacters(message)});
  }
  // Something worth telling the user that does not reject the object.
  void Note(std::string_view message) { notes_.push_back(EscapeControlCharacters(message)); }

  bool rejected() const { return !rejections_.empty(); }

  std::vector<Condition> Conditions(const std::string& accepted_summary,
                                    const std::string& resolved_summary) const {
    return {Build(kAccepted, kReasonAccepted, accepted_summary, rejections_, notes_),
            Build(kResolvedRefs, kReasonResolvedRefs, resolved_summary, unresolved_, {})};
  }

 private:
  struct Problem {
    std::string reason;
    std::string message;
  };

  static Condition Build(std::string_view type, std::string_view ok_reason,
                         const std::string& summary, const std::vector<Problem>& problems,
                         const std::vector<std::string>& notes) {
    Condition condition;
    condition.type = std::string(type);
    std::vector<std::string> messages;
    if (problems.empty()) {
      condition.status = "True";
      condition.reason = std::string(ok_reason);
      messages.push_back(summary);
    } else {
      condition.status = "False";
      condition.reason = problems.front().reason;
      for (const auto& problem : problems) {
        messages.push_back(problem.message);
      }
    }
    messages.insert(messages.end(), notes.begin(), notes.end());
    condition.message = JoinStrings(messages, "; ");
    return condition;
  }

  std::vector<Problem> rejections_;
  std::vector<Problem> unresolved_;
  std::vector<std::string> notes_;
};

// Applies a default and checks an integer range; out of range rejects the
// object with InvalidField naming the field and the allowed values.
// "255.255.240.0": four decimal octets, ones then zeros, at least one one.
bool ParseContiguousIpv4Mask(std::string_view text, uint32_t* out) {
  uint32_t value = 0;
  for (int part = 0; part < 4; ++part) {
    size_t digits = 0;
    uint32_t octet = 0;
    while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9' && digits < 3) {
      octet = octet * 10 + static_cast<uint32_t>(text[digits] - '0');
      ++digits;
    }
    if (digits == 0 || octet > 255 || (digits > 1 && text[0] == '0')) {
      return false;
    }
    text.remove_prefix(digits);
    value = (value << 8) | octet;
    if (part < 3) {
      if (text.empty() || text[0] != '.') {
        return false;
      }
      text.remove_prefix(1);
    }
  }
  const uint32_t host_bits = ~value;
  if (!text.empty() || value == 0 || (host_bits & (host_bits + 1)) != 0) {
    return false;
  }
  *out = value;
  return true;
}

std::uint32_t CheckedNumber(const std::optional<std::int64_t>& value, std::int64_t fallback,
                            std::int64_t min, std::int64_t max, std::string_view field,
                            Findings& findings) {
  std::int64_t number = value.value_or(fallback);
  if (number < min || number > max) {
    findings.Reject(kReasonInvalidField, std::string(field) + ": must be an integer from " +
                                             std::to_string(min) + " to " + std::to_string(max) +
                                             ", got " + std::to_string(number));
    return static_cast<std::uint32_t>(fallback);
  }
  return static_cast<std::uint32_t>(number);
}

// Kubernetes validates object names; dir mode and a hand-built ObjectSet do
// not. They become group keys and snapshot sources (log lines, metric labels,
// the affinity cookie's MAC input).
void CheckObjectName(const model::ObjectMeta& meta, Findings& findings) {
  if (!IsNamespaceName(meta.namespace_)) {
    findings.Reject(kReasonInvalidField,
                    "metadata.namespace: " + Quote(meta.namespace_) +
                        " is not a valid namespace (lowercase letters, digits and -, at most 63)");
  }
  if (!IsObjectName(meta.name)) {
    findings.Reject(kReasonInvalidField, "metadata.name: " + Quote(meta.name) +
                                             " is not a valid object name (lowercase letters, "
                                             "digits, - and ., at most 253)");
  }
}

bool HasValidName(const model::ObjectMeta& meta) {
  return IsNamespaceName(meta.namespace_) && IsObjectName(meta.name);
}

// A positive integer annotation value, or nullopt.
std::optional<std::uint32_t> ParseCapacity(std::string_view text) {
  if (text.empty() || text.size() > 10) {
    return std::nullopt;
  }
  std::int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') {
      return std::nullopt;
    }
    value = value * 10 + (c - '0');
  }
  if (value < 1 || value > kUint32Max) {
    return std::nullopt;
  }
  return static_cast<std::uint32_t>(value);
}

// EndpointSlices by (namespace, service name), each list in slice-name order.
using SliceIndex = std::map<std::pair<std::string, std::string>, std::vector<const EndpointSlice*>>;

SliceIndex IndexSlices(const ObjectSet& objects) {
  static const std::string kServiceNameLabel(model::kServiceNameLabel);
  SliceIndex index;
  for (const auto& [key, slice] : objects.endpoint_slices()) {
    auto label = slice.metadata.labels.find(kServiceNameLabel);
    if (label == slice.metadata.labels.end()) {
      continue;
    }
    index[{slice.metadata.namespace_, label->second}].push_back(&slice);
  }
  return index;
}

// Pods by (namespace, name), as views into the ObjectSet's keys. Every
// endpoint looks its pod up: a hash lookup instead of a walk down the
// ordered map comparing string pairs (only lookups: no order leaks out).
struct PodKey {
  std::string_view namespace_;
  std::string_view name;
  bool operator==(const PodKey&) const = default;
};
struct PodKeyHash {
  size_t operator()(const PodKey& key) const {
    return static_cast<size_t>(HashString(key.name, HashString(key.namespace_)));
  }
};
using PodIndex = std::unordered_map<PodKey, const model::Pod*, PodKeyHash>;

PodIndex IndexPods(const ObjectSet& objects) {
  PodIndex index;
  index.reserve(objects.pods().size());
  for (const auto& [key, pod] : objects.pods()) {
    index.emplace(PodKey{key.first, key.second}, &pod);
  }
  return index;
}

// What a LogonGroup's compile reads besides the LogonGroup itself. The
// memo's implementation also records each lookup, to know which groups an
// EndpointSlice or Pod change touches.
class GroupInputs {
 public:
  virtual ~GroupInputs() = default;
  // The EndpointSlices labelled for Service ns/name in slice-name order, or null.
  virtual const std::vector<const EndpointSlice*>* SlicesOf(const std::string& ns,
                                                            const std::string& service) = 0;
  virtual const model::Pod* FindPod(std::string_view ns, std::string_view name) = 0;
  // The SapSystem ns/name and the poller's server list of it, or null.
  virtual const model::SapSystem* FindSapSystem(const std::string& ns, const std::string& name) = 0;
  virtual const model::SapServerList* FindServerList(const std::string& ns,
                                                     const std::string& name) = 0;
};

// Everything indexed up front: the pure compile.
class IndexedInputs : public GroupInputs {
 public:
  explicit IndexedInputs(const ObjectSet& objects)
      : objects_(objects), slices_(IndexSlices(objects)), pods_(IndexPods(objects)) {}

  const model::SapSystem* FindSapSystem(const std::string& ns, const std::string& name) override {
    auto it = objects_.sap_systems().find({ns, name});
    return it == objects_.sap_systems().end() ? nullptr : &it->second;
  }
  const model::SapServerList* FindServerList(const std::string& ns,
                                             const std::string& name) override {
    auto it = objects_.sap_server_lists().find({ns, name});
    return it == objects_.sap_server_lists().end() ? nullptr : &it->second;
  }

  const std::vector<const EndpointSlice*>* SlicesOf(const std::string& ns,
                                                    const std::string& service) override {
    auto it = slices_.find({ns, service});
    return it == slices_.end() ? nullptr : &it->second;
  }
  const model::Pod* FindPod(std::string_view ns, std::string_view name) override {
    auto it = pods_.find(PodKey{ns, name});
    return it == pods_.end() ? nullptr : it->second;
  }

 private:
  const ObjectSet& objects_;
  SliceIndex slices_;
  PodIndex pods_;
};

struct GroupResult {
  std::optional<v1::Group> group;  // set when accepted
  ObjectStatus status;
};

void MarkServingLastGood(std::int64_t generation, ObjectStatus* status) {
  status->serving_last_good = true;
  status->last_good_generation = generation;
  for (Condition& condition : status->conditions) {
    if (condition.type == kAccepted) {
      condition.message += "; serving the last accepted version";
      if (generation > 0) {
        condition.message += " (generation " + std::to_string(generation) + ")";
      }
    }
  }
}

class LogonGroupCompiler {
 public:
  explicit LogonGroupCompiler(GroupInputs& inputs) : inputs_(inputs) {}

  GroupResult Compile(const LogonGroup& lg) {
    Findings findings;
    const auto& spec = lg.spec;
    for (const std::string& error : lg.field_errors) {
      findings.Reject(kReasonInvalidField, error);
    }
    v1::Group group;
    group.set_key(GroupKey(lg.metadata.namespace_, lg.metadata.name));
    CheckObjectName(lg.metadata, findings);

    v1::Kind kind = v1::KIND_ABAP;
    if (spec.kind) {
      if (auto parsed = ParseKind(*spec.kind, /*accept_j2ee=*/false)) {
        kind = *parsed;
      } else {
        findings.Reject(kReasonInvalidKind,
                        "spec.kind: " + Quote(*spec.kind) + " is not one of abap, java");
      }
    }
    group.set_kind(kind);

    std::string strategy_name = spec.strategy.value_or("weighted_round_robin");
    if (strategy_name == "weighted_round_robin") {
      group.set_strategy(v1::STRATEGY_WEIGHTED_ROUND_ROBIN);
    } else if (strategy_name == "simple_weighted_round_robin") {
      group.set_strategy(v1::STRATEGY_SIMPLE_WEIGHTED_ROUND_ROBIN);
    } else if (strategy_name == "adaptive") {
      group.set_strategy(v1::STRATEGY_ADAPTIVE);
    } else {
      findings.Reject(kReasonInvalidStrategy,
                      "spec.strategy: " + Quote(strategy_name) +
                          " is not one of weighted_round_robin, simple_weighted_round_robin, "
                          "adaptive");
    }

    std::uint32_t default_capacity =
        CheckedNumber(spec.default_capacity, 1, 1, kUint32Max, "spec.defaultCapacity", findings);
    group.set_load_reset_interval_seconds(CheckedNumber(spec.load_reset_interval_seconds, 25, 1,
                                                        kUint32Max, "spec.loadResetIntervalSeconds",
                                                        findings));

    CompileHealthCheck(spec.health_check, kind, group.mutable_health_check(), findings);
    CompileSessionAffinity(spec.session_affinity, group.mutable_session_affinity(), findings);
    CompileUpstreamTls(spec.upstream_tls, spec.backend, group.mutable_upstream_tls(), findings);

    std::string resolved_summary;
    CompileBackend(lg, default_capacity, &group, findings, &resolved_summary);

    // Service backends come out sorted already; sorting protobuf messages
    // moves every one of them even then.
    auto by_name = [](const v1::Server& a, const v1::Server& b) { return a.name() < b.name(); };
    if (!std::is_sorted(group.servers().begin(), group.servers().end(), by_name)) {
      std::sort(group.mutable_servers()->begin(), group.mutable_servers()->end(), by_name);
    }

    int ready = 0;
    int draining = 0;
    for (const auto& server : group.servers()) {
      if (server.state() == v1::SERVER_STATE_READY) {
        ++ready;
      } else {
        ++draining;
      }
    }
    std::string accepted_summary = "strategy " + strategy_name + ", " +
                                   std::to_string(group.servers_size()) +
                                   (group.servers_size() == 1 ? " server" : " servers");
    if (draining > 0) {
      accepted_summary += " (" + std::to_string(draining) + " draining)";
    }

    GroupResult result;
    result.status.kind = std::string(model::kLogonGroupKind);
    result.status.namespace_ = lg.metadata.namespace_;
    result.status.name = lg.metadata.name;
    result.status.generation = lg.metadata.generation;
    result.status.conditions = findings.Conditions(accepted_summary, resolved_summary);
    if (!findings.rejected()) {
      result.status.ready_servers = ready;
      result.group = std::move(group);
    }
    return result;
  }

 private:
  static void CompileHealthCheck(const model::HealthCheckSpec& spec, v1::Kind kind,
                                 v1::HealthCheck* out, Findings& findings) {
    std::string path(kind == v1::KIND_ABAP ? kDefaultAbapHealthPath : kDefaultJavaHealthPath);
    if (spec.path) {
      // It goes into the probe's request line as is.
      if (!IsOriginForm(*spec.path)) {
        findings.Reject(kReasonInvalidField,
                        "spec.healthCheck.path: must start with / and be an origin-form path "
                        "(RFC 3986 path and query characters), got " +
                            Quote(*spec.path));
      } else {
        path = *spec.path;
      }
    }
    out->set_path(path);
    out->set_interval_seconds(CheckedNumber(spec.interval_seconds, 25, 1, kUint32Max,
                                            "spec.healthCheck.intervalSeconds", findings));
    out->set_timeout_seconds(CheckedNumber(spec.timeout_seconds, 5, 1, kUint32Max,
                                           "spec.healthCheck.timeoutSeconds", findings));
    out->set_unhealthy_threshold(CheckedNumber(spec.unhealthy_threshold, 2, 1, kUint32Max,
                                               "spec.healthCheck.unhealthyThreshold", findings));
    out->set_healthy_threshold(CheckedNumber(spec.healthy_threshold, 1, 1, kUint32Max,
                                             "spec.healthCheck.healthyThreshold", findings));
  }

  static void CompileSessionAffinity(const model::SessionAffinitySpec& spec,
                                     v1::SessionAffinity* out, Findings& findings) {
    static const std::map<std::string, v1::SessionIdentifier, std::less<>> kIdentifiers = {
        {"sap-contextid", v1::SESSION_IDENTIFIER_SAP_CONTEXTID},
        {"saplb", v1::SESSION_IDENTIFIER_SAPLB},
        {"jsessionid", v1::SESSION_IDENTIFIER_JSESSIONID},
        {"sap-ext-sid", v1::SESSION_IDENTIFIER_SAP_EXT_SID},
    };
    std::set<v1::SessionIdentifier> enabled;
    if (spec.identifiers) {
      for (const auto& name : *spec.identifiers) {
        auto it = kIdentifiers.find(name);
        if (it == kIdentifiers.end()) {
          findings.Reject(kReasonInvalidField,
                          "spec.sessionAffinity.identifiers: " + Quote(name) +
                              " is not one of sap-contextid, saplb, jsessionid, sap-ext-sid");
        } else {
          enabled.insert(it->second);
        }
      }
    } else {
      for (const auto& [name, id] : kIdentifiers) {
        enabled.insert(id);
      }
    }
    for (auto id : enabled) {
      out->add_identifiers(id);
    }
    out->set_session_table_max_entries(
        CheckedNumber(spec.session_table.max_entries, 50000, 1, kUint32Max,
                      "spec.sessionAffinity.sessionTable.maxEntries", findings));
    out->set_session_table_idle_timeout_seconds(
        CheckedNumber(spec.session_table.idle_timeout_seconds, 3600, 1, kUint32Max,
                      "spec.sessionAffinity.sessionTable.idleTimeoutSeconds", findings));
    out->set_affinity_cookie_enabled(spec.affinity_cookie.enabled.value_or(true));
    std::string cookie = spec.affinity_cookie.name.value_or("kwd_affinity");
    if (!IsCookieName(cookie)) {
      findings.Reject(kReasonInvalidField, "spec.sessionAffinity.affinityCookie.name: " +
                                               Quote(cookie) + " is not a valid cookie name");
    }
    out->set_affinity_cookie_name(cookie);
    if (spec.client_ip) {
      v1::ClientIpAffinity* client_ip = out->mutable_client_ip();
      client_ip->set_enabled(true);
      const std::string mask = spec.client_ip->mask.value_or("255.255.240.0");
      uint32_t bits = 0;
      if (!ParseContiguousIpv4Mask(mask, &bits)) {
        findings.Reject(kReasonInvalidField, "spec.sessionAffinity.clientIP.mask: " + Quote(mask) +
                                                 " is not a contiguous dotted IPv4 mask "
                                                 "(e.g. 255.255.240.0)");
        bits = 0xFFFFF000;
      }
      client_ip->set_ipv4_mask(bits);
      client_ip->set_ipv6_prefix_length(64);
      client_ip->set_max_entries(CheckedNumber(spec.client_ip->max_entries, 50000, 1, kUint32Max,
                                               "spec.sessionAffinity.clientIP.maxEntries",
                                               findings));
      client_ip->set_idle_timeout_seconds(
          CheckedNumber(spec.client_ip->idle_timeout_seconds, 3600, 1, kUint32Max,
                        "spec.sessionAffinity.clientIP.idleTimeoutSeconds", findings));
    }
  }

  static void CompileUpstreamTls(const model::UpstreamTlsSpec& spec,
                                 const std::optional<model::Backend>& backend, v1::UpstreamTls* out,
                                 Findings& findings) {
    std::string mode = spec.mode.value_or("none");
    if (mode == "none") {
      out->set_mode(v1::UPSTREAM_TLS_MODE_NONE);
      // Settings that would do nothing are a mistake to point out, not to
      // ignore: the group's traffic goes in clear.
      for (const auto& [field, value] :
           {std::pair{"caBundle", &spec.ca_bundle}, std::pair{"serverName", &spec.server_name},
            std::pair{"clientCertSecret", &spec.client_cert_secret}}) {
        if (value->has_value()) {
          findings.Reject(kReasonInvalidField, std::string("spec.upstreamTLS.") + field +
                                                   ": only with mode reencrypt (mode is none: "
                                                   "plain HTTP to the servers)");
        }
      }
      return;
    }
    if (mode != "reencrypt") {
      findings.Reject(kReasonInvalidField,
                      "spec.upstreamTLS.mode: " + Quote(mode) + " is not one of none, reencrypt");
      return;
    }
    out->set_mode(v1::UPSTREAM_TLS_MODE_REENCRYPT);

    if (spec.server_name) {
      std::string name = AsciiLower(*spec.server_name);
      if (!IsObjectName(name)) {
        findings.Reject(kReasonInvalidField,
                        "spec.upstreamTLS.serverName: " + Quote(*spec.server_name) +
                            " is not a DNS name (letters, digits, - and ., at most 253)");
      } else {
        out->set_server_name(name);
      }
    } else if (std::string why = WhyServerNameIsNeeded(backend); !why.empty()) {
      // Without a name there is nothing to send as SNI and nothing to check
      // the server's certificate against.
      findings.Reject(kReasonInvalidField,
                      "spec.upstreamTLS.serverName: required with mode reencrypt unless every "
                      "server address is a host name (" +
                          why + ")");
    }

    if (spec.ca_bundle) {
      std::string pem;
      std::string error = DecodeCaBundle(*spec.ca_bundle, &pem);
      if (!error.empty()) {
        findings.Reject(kReasonInvalidField, "spec.upstreamTLS.caBundle: " + error);
      } else {
        out->set_ca_bundle_pem(std::move(pem));
      }
    }

    if (spec.client_cert_secret) {
      if (!IsObjectName(*spec.client_cert_secret)) {
        findings.Reject(kReasonInvalidField,
                        "spec.upstreamTLS.clientCertSecret: " + Quote(*spec.client_cert_secret) +
                            " is not a Secret name (a-z, 0-9, - and ., at most 253)");
      } else {
        out->set_client_cert_secret(*spec.client_cert_secret);
      }
    }
  }

  // Why the servers' addresses cannot serve as TLS names, or "" when they can.
  static std::string WhyServerNameIsNeeded(const std::optional<model::Backend>& backend) {
    if (!backend) {
      return "";  // CompileBackend reports the missing backend
    }
    if (backend->service) {
      return "spec.backend.service: the servers are pod IP addresses";
    }
    if (backend->static_servers) {
      const auto& servers = *backend->static_servers;
      for (std::size_t i = 0; i < servers.size(); ++i) {
        if (IsIpAddress(servers[i].address)) {
          return "spec.backend.staticServers[" + std::to_string(i) + "].address " +
                 Quote(servers[i].address) + " is an IP address";
        }
      }
    }
    return "";
  }

  void CompileBackend(const LogonGroup& lg, std::uint32_t default_capacity, v1::Group* group,
                      Findings& findings, std::string* resolved_summary) {
    const auto& backend = lg.spec.backend;
    bool has_service = backend && backend->service.has_value();
    bool has_static = backend && backend->static_servers.has_value();
    bool has_sap = backend && backend->sap_system.has_value();
    int count = int{has_service} + int{has_static} + int{has_sap};
    if (count != 1) {
      std::string message =
          std::string("spec.backend: exactly one of service, staticServers or sapSystem ") +
          "must be set, got " + (count == 0 ? "neither" : count == 2 ? "both" : "all three");
      findings.Reject(kReasonInvalidBackend, message);
      findings.Unresolved(kReasonInvalidBackend, message);
      return;
    }
    if (has_sap) {
      CompileSapSystemBackend(lg, *backend->sap_system, group->kind(), default_capacity, group,
                              findings, resolved_summary);
      return;
    }
    if (has_static) {
      CompileStaticServers(*backend->static_servers, default_capacity, group, findings);
      *resolved_summary = "static servers";
      return;
    }
    CompileServiceBackend(lg, *backend->service, default_capacity, group, findings,
                          resolved_summary);
  }

  static void CompileStaticServers(const std::vector<model::StaticServer>& servers,
                                   std::uint32_t default_capacity, v1::Group* group,
                                   Findings& findings) {
    std::set<std::string> names;
    for (std::size_t i = 0; i < servers.size(); ++i) {
      const auto& in = servers[i];
      std::string field = "spec.backend.staticServers[" + std::to_string(i) + "]";
      if (in.name.empty()) {
        findings.Reject(kReasonInvalidField, field + ".name: must not be empty");
        continue;
      }
      if (!IsServerName(in.name)) {
        findings.Reject(kReasonInvalidField, field + ".name: " + Quote(in.name) +
                                                 " is not a valid server name (" +
                                                 std::string(kServerNameRule) + ")");
        continue;
      }
      if (!names.insert(in.name).second) {
        findings.Reject(kReasonDuplicateServer,
                        field + ".name: server name " + Quote(in.name) + " is used twice");
        continue;
      }
      if (in.address.empty()) {
        findings.Reject(kReasonInvalidField, field + ".address: must not be empty");
      } else if (!IsServerAddress(in.address)) {
        findings.Reject(kReasonInvalidField,
                        field + ".address: " + Quote(in.address) +
                            " is not an IP address or host name (letters, digits, . - _ :, "
                            "an IPv6 address without brackets)");
      }
      if (!in.port) {
        findings.Reject(kReasonInvalidField, field + ".port: missing (1 to 65535)");
      }
      auto* server = group->add_servers();
      server->set_name(in.name);
      server->set_address(in.address);
      server->set_port(CheckedNumber(in.port.value_or(1), 1, 1, 65535, field + ".port", findings));
      server->set_capacity(CheckedNumber(in.capacity, default_capacity, 1, kUint32Max,
                                         field + ".capacity", findings));
      server->set_state(in.drain.value_or(false) ? v1::SERVER_STATE_DRAINING
                                                 : v1::SERVER_STATE_READY);
    }
  }

  // The port of `slice` that `service.port` selects, or nullopt.
  static std::optional<std::uint32_t> SelectPort(const std::optional<model::IntOrString>& wanted,
                                                 const EndpointSlice& slice) {
    auto valid = [](const std::optional<std::int64_t>& port) {
      return port && *port >= 1 && *port <= 65535;
    };
    if (!wanted) {
      if (slice.ports.size() == 1 && valid(slice.ports[0].port)) {
        return static_cast<std::uint32_t>(*slice.ports[0].port);
      }
      return std::nullopt;
    }
    if (wanted->is_number) {
      // A slice without ports exposes all ports of its endpoints.
      if (slice.ports.empty()) {
        return static_cast<std::uint32_t>(wanted->number);
      }
      for (const auto& port : slice.ports) {
        if (valid(port.port) && *port.port == wanted->number) {
          return static_cast<std::uint32_t>(*port.port);
        }
      }
      return std::nullopt;
    }
    for (const auto& port : slice.ports) {
      if (valid(port.port) && port.name == wanted->name) {
        return static_cast<std::uint32_t>(*port.port);
      }
    }
    return std::nullopt;
  }

  void CompileServiceBackend(const LogonGroup& lg, const model::ServiceBackend& service,
                             std::uint32_t default_capacity, v1::Group* group, Findings& findings,
                             std::string* resolved_summary) {
    if (service.name.empty()) {
      std::string message = "spec.backend.service.name: must not be empty";
      findings.Reject(kReasonInvalidBackend, message);
      findings.Unresolved(kReasonInvalidBackend, message);
      return;
    }
    if (service.port) {
      bool valid = service.port->is_number
                       ? service.port->number >= 1 && service.port->number <= 65535
                       : !service.port->name.empty();
      if (!valid) {
        std::string message =
            "spec.backend.service.port: must be a port number from 1 to 65535 or a port name";
        findings.Reject(kReasonInvalidField, message);
        findings.Unresolved(kReasonInvalidField, message);
        return;
      }
    }
    const std::string& ns = lg.metadata.namespace_;
    std::string service_ref = "Service " + GroupKey(ns, service.name);
    const std::vector<const EndpointSlice*>* slices = inputs_.SlicesOf(ns, service.name);
    if (slices == nullptr) {
      findings.Unresolved(kReasonNoEndpoints, "no EndpointSlice labelled " +
                                                  std::string(model::kServiceNameLabel) + "=" +
                                                  service.name + " in namespace " + ns);
      return;
    }

    std::vector<Candidate> candidates;
    std::vector<std::string> unmatched_slices;
    std::size_t empty_slices = 0;
    for (const EndpointSlice* slice : *slices) {
      if (slice->endpoints.empty()) {
        // No endpoint at all (a Deployment scaled to 0 leaves "endpoints":
        // null and "ports": null): nothing to serve, and no port to judge.
        ++empty_slices;
        continue;
      }
      auto port = SelectPort(service.port, *slice);
      if (!port) {
        unmatched_slices.push_back(slice->metadata.name);
        continue;
      }
      for (const auto& endpoint : slice->endpoints) {
        if (endpoint.addresses.empty() || endpoint.addresses.front().empty()) {
          continue;
        }
        const auto& conditions = endpoint.conditions;
        v1::ServerState state;
        if (conditions.IsReady()) {
          state = v1::SERVER_STATE_READY;
        } else if (conditions.IsServing() && conditions.IsTerminating()) {
          state = v1::SERVER_STATE_DRAINING;
        } else {
          continue;
        }
        if (auto candidate =
                MakeCandidate(*slice, endpoint, *port, state, default_capacity, findings)) {
          candidates.push_back(*candidate);
        }
      }
    }

    // The same endpoint can sit in two slices during a slice handover: keep
    // one, preferring READY, then the earlier slice (stable sort).
    auto ready_rank = [](const Candidate& c) { return c.state == v1::SERVER_STATE_READY ? 0 : 1; };
    std::stable_sort(candidates.begin(), candidates.end(),
                     [&](const Candidate& a, const Candidate& b) {
                       return std::tuple(a.address, a.port, ready_rank(a)) <
                              std::tuple(b.address, b.port, ready_rank(b));
                     });
    candidates.erase(std::unique(candidates.begin(), candidates.end(),
                                 [](const Candidate& a, const Candidate& b) {
                                   return a.address == b.address && a.port == b.port;
                                 }),
                     candidates.end());
    // Server names must be unique: on a clash keep the READY one, then the
    // lowest address:port, and say which endpoint was left out.
    std::sort(candidates.begin(), candidates.end(), [&](const Candidate& a, const Candidate& b) {
      return std::tuple(std::string_view(a.name), ready_rank(a), a.address, a.port) <
             std::tuple(std::string_view(b.name), ready_rank(b), b.address, b.port);
    });
    group->mutable_servers()->Reserve(static_cast<int>(candidates.size()));
    const Candidate* previous = nullptr;
    for (const Candidate& c : candidates) {
      if (previous != nullptr && previous->name == c.name) {
        findings.Note("endpoint " + std::string(c.address) + ":" + std::to_string(c.port) +
                      " left out: server name " + Quote(c.name) + " is used twice");
        continue;
      }
      previous = &c;
      v1::Server* server = group->add_servers();
      server->set_name(c.name.data(), c.name.size());
      server->set_address(c.address.data(), c.address.size());
      server->set_port(c.port);
      server->set_capacity(c.capacity);
      server->set_state(c.state);
      if (c.has_pod) {
        server->set_pod(GroupKey(c.pod_namespace, c.pod_name));
      }
    }

    if (empty_slices == slices->size()) {
      findings.Unresolved(
          kReasonNoEndpoints,
          service_ref + " has no endpoints (its EndpointSlices are empty: scaled to 0?)");
      return;
    }
    if (unmatched_slices.size() == slices->size() - empty_slices) {
      std::string wanted = !service.port ? std::string(
                                               "(none given; a slice must "
                                               "list exactly one port)")
                           : service.port->is_number ? std::to_string(service.port->number)
                                                     : Quote(service.port->name);
      findings.Unresolved(kReasonPortNotFound,
                          "no EndpointSlice of " + service_ref + " has port " + wanted +
                              " (slices: " + JoinStrings(unmatched_slices, ", ") + ")");
      return;
    }
    if (!unmatched_slices.empty()) {
      findings.Note("EndpointSlices without the service port ignored: " +
                    JoinStrings(unmatched_slices, ", "));
    }
    std::size_t slice_count = slices->size() - unmatched_slices.size() - empty_slices;
    *resolved_summary = service_ref + ": " + std::to_string(slice_count) +
                        (slice_count == 1 ? " EndpointSlice" : " EndpointSlices");
  }

  // The servers of a SapSystem: the instances of its last good server list
  // that have the port the group talks to (HTTP; HTTPS with reencrypt) and
  // belong to the group's stack, or to the named SMLG logon group. Every
  // name and address in the list was checked by the poller; checked again
  // here, as the compile trusts no input.
  void CompileSapSystemBackend(const LogonGroup& lg, const model::SapSystemBackend& sap,
                               v1::Kind kind, std::uint32_t default_capacity, v1::Group* group,
                               Findings& findings, std::string* resolved_summary) {
    if (sap.name.empty()) {
      std::string message = "spec.backend.sapSystem.name: must not be empty";
      findings.Reject(kReasonInvalidBackend, message);
      findings.Unresolved(kReasonInvalidBackend, message);
      return;
    }
    if (sap.logon_group && (sap.logon_group->empty() || !IsServerName(*sap.logon_group))) {
      std::string message = "spec.backend.sapSystem.logonGroup: " + Quote(*sap.logon_group) +
                            " is not a valid logon group name";
      findings.Reject(kReasonInvalidField, message);
      findings.Unresolved(kReasonInvalidField, message);
      return;
    }
    const std::string& ns = lg.metadata.namespace_;
    std::string system_ref = "SapSystem " + GroupKey(ns, sap.name);
    const model::SapSystem* system = inputs_.FindSapSystem(ns, sap.name);
    if (system == nullptr) {
      findings.Unresolved(kReasonSapSystemNotFound, system_ref + " not found");
      return;
    }
    const model::SapServerList* list = inputs_.FindServerList(ns, sap.name);
    if (list == nullptr || !list->has_list) {
      std::string why = list == nullptr ? std::string("not polled yet") : list->message;
      findings.Unresolved(kReasonNoServerList, system_ref + " has no server list yet: " + why);
      return;
    }
    const bool https = lg.spec.upstream_tls.mode.value_or("none") == "reencrypt";
    const std::vector<std::string>* members = nullptr;
    if (sap.logon_group) {
      if (!list->has_groups) {
        findings.Unresolved(kReasonNoServerList,
                            system_ref + " has no logon group information (spec.logonGroups " +
                                "true on the SapSystem?): " + list->message);
        return;
      }
      auto it = list->logon_groups.find(*sap.logon_group);
      if (it == list->logon_groups.end()) {
        std::vector<std::string> known;
        for (const auto& [name, group_members] : list->logon_groups) {
          if (known.size() == 10) {
            known.push_back("...");
            break;
          }
          known.push_back(name);
        }
        findings.Unresolved(kReasonLogonGroupNotFound,
                            "logon group " + Quote(*sap.logon_group) + " not in " + system_ref +
                                " (groups: " + JoinStrings(known, ", ") + ")");
        return;
      }
      members = &it->second;
    }
    std::size_t without_port = 0;
    for (const model::SapInstance& instance : list->instances) {
      std::uint32_t port = https ? instance.https_port : instance.http_port;
      if (members != nullptr) {
        if (!std::binary_search(members->begin(), members->end(), instance.name)) {
          continue;
        }
      } else if (instance.abap || instance.java) {
        // SAP's internal groups: !DIAG for abap, !J2EE for java.
        if ((kind == v1::KIND_ABAP && !instance.abap) ||
            (kind == v1::KIND_JAVA && !instance.java)) {
          continue;
        }
      }
      if (port == 0) {
        ++without_port;
        continue;
      }
      if (!IsServerName(instance.name) || !IsServerAddress(instance.address)) {
        findings.Note("instance " + Quote(instance.name) + " left out: invalid name or address");
        continue;
      }
      v1::Server* server = group->add_servers();
      server->set_name(instance.name);
      server->set_address(instance.address);
      server->set_port(port);
      server->set_capacity(instance.capacity > 0 ? instance.capacity : default_capacity);
      server->set_state(v1::SERVER_STATE_READY);
    }
    if (without_port > 0) {
      findings.Note(std::to_string(without_port) + (without_port == 1 ? " instance" : " instances") +
                    " without an " + (https ? "HTTPS" : "HTTP") + " port left out");
    }
    *resolved_summary = system_ref + (sap.logon_group ? ", logon group " + *sap.logon_group : "") +
                        ": " + std::to_string(group->servers_size()) + " of " +
                        std::to_string(list->instances.size()) + " instances";
  }

  // A server built from an endpoint, before de-duplication. Views into the
  // objects only, so the sorts below move a few words per candidate.
  struct Candidate {
    std::string_view address;  // points into the EndpointSlice
    std::uint32_t port = 0;
    v1::ServerState state = v1::SERVER_STATE_UNSPECIFIED;
    std::uint32_t capacity = 1;
    std::string_view name;
    // The backing pod "pod_namespace/pod_name", when has_pod.
    bool has_pod = false;
    std::string_view pod_namespace;
    std::string_view pod_name;
  };

  // The server an endpoint becomes, or nullopt when its address, pod
  // reference or server name is not one a snapshot may hold: that endpoint is
  // left out (ResolvedRefs=False says which and why) and the group keeps
  // its other servers, as it would without that pod.
  std::optional<Candidate> MakeCandidate(const EndpointSlice& slice,
                                         const model::Endpoint& endpoint, std::uint32_t port,
                                         v1::ServerState state, std::uint32_t default_capacity,
                                         Findings& findings) {
    static const std::string kInstanceName(model::kInstanceNameAnnotation);
    static const std::string kCapacity(model::kCapacityAnnotation);
    static const std::string kDrain(model::kDrainAnnotation);
    Candidate c;
    c.address = endpoint.addresses.front();
    if (!IsServerAddress(c.address)) {
      findings.Unresolved(kReasonInvalidEndpoint,
                          "endpoint " + Quote(c.address) + " left out: not a valid address");
      return std::nullopt;
    }
    c.port = port;
    c.state = state;
    c.capacity = default_capacity;
    const std::string* name = &endpoint.addresses.front();
    const std::string* annotation = nullptr;  // the instance name's, when it names the server
    auto where = [&] { return "endpoint " + std::string(c.address) + ":" + std::to_string(port); };
    if (endpoint.target_ref && !endpoint.target_ref->name.empty()) {
      const auto& ref = *endpoint.target_ref;
      const std::string& pod_ns =
          ref.namespace_.empty() ? slice.metadata.namespace_ : ref.namespace_;
      if (!IsNamespaceName(pod_ns) || !IsObjectName(ref.name)) {
        findings.Unresolved(
            kReasonInvalidEndpoint,
            where() + " left out: targetRef " +
                Quote(ref.namespace_.empty() ? ref.name : GroupKey(ref.namespace_, ref.name)) +
                " is not a valid pod name");
        return std::nullopt;
      }
      name = &ref.name;
      if (ref.kind.empty() || ref.kind == model::kPodKind) {
        c.has_pod = true;
        c.pod_namespace = pod_ns;
        c.pod_name = ref.name;
        if (const model::Pod* pod = inputs_.FindPod(pod_ns, ref.name)) {
          const auto& annotations = pod->metadata.annotations;
          auto instance = annotations.find(kInstanceName);
          if (instance != annotations.end() && !instance->second.empty()) {
            name = &instance->second;
            annotation = &kInstanceName;
          }
          // dispatch.kwd.io/drain: "true": a ready server takes sticky traffic only.
          auto drain = annotations.find(kDrain);
          if (drain != annotations.end() && drain->second == "true") {
            c.state = v1::SERVER_STATE_DRAINING;
          }
          auto capacity = annotations.find(kCapacity);
          if (capacity != annotations.end()) {
            if (auto parsed = ParseCapacity(capacity->second)) {
              c.capacity = *parsed;
            } else {
              findings.Note("pod " + GroupKey(pod_ns, ref.name) + ": annotation " + kCapacity +
                            "=" + Quote(capacity->second) +
                            " is not a positive integer, using capacity " +
                            std::to_string(default_capacity));
            }
          }
        }
      }
    }
    if (!IsServerName(*name)) {
      std::string what = annotation != nullptr ? "annotation " + *annotation + "=" + Quote(*name)
                                               : "name " + Quote(*name);
      findings.Unresolved(
          kReasonInvalidServerName,
          where() +
              (c.has_pod ? " (pod " + GroupKey(c.pod_namespace, c.pod_name) + ")" : std::string()) +
              " left out: " + what + " is not a valid server name (" +
              std::string(kServerNameRule) + ")");
      return std::nullopt;
    }
    c.name = *name;
    return c;
  }

  GroupInputs& inputs_;
};

// ---- UrlMappings ----

struct HostEntry {
  v1::VirtualHost vhost;
  std::string owner;  // "ns/name" of the UrlMapping that set the defaults
  // Intended default group keys of the owner (explicit names even when they
  // do not resolve), to detect a newer mapping that asks for other values.
  std::string intended_abap;
  std::string intended_java;
  std::map<std::string, v1::Rule> rules;  // by prefix
};

struct ResolvedDefault {
  std::string intended;  // the key asked for, "" when nothing was asked for
  std::string resolved;  // the key in the snapshot, "" when none
  bool explicit_ = false;
};

constexpr std::string_view kPathCharacters =
    "may hold only RFC 3986 path characters (no spaces, controls, quotes, ? or #)";

bool ValidPrefixShape(std::string_view prefix) {
  return prefix.size() >= 2 && prefix.front() == '/' && prefix.back() == '/';
}

class UrlMappingCompiler {
 public:
  UrlMappingCompiler(const ObjectSet& objects, const std::set<std::string>& accepted_groups,
                     const std::set<std::string>& existing_groups)
      : objects_(objects), accepted_groups_(accepted_groups), existing_groups_(existing_groups) {}

  // `last_good`: the version to serve instead when this one's spec is rejected.
  ObjectStatus Compile(const UrlMapping& um, const UrlMapping* last_good = nullptr) {
    Findings findings;
    const auto& spec = um.spec;
    const std::string& ns = um.metadata.namespace_;
    std::string source = GroupKey(ns, um.metadata.name);

    v1::Kind root = v1::KIND_JAVA;
    for (const std::string& error : um.field_errors) {
      findings.Reject(kReasonInvalidField, error);
    }
    CheckObjectName(um.metadata, findings);
    bool valid_spec = !findings.rejected();
    if (spec.default_root_handler) {
      if (auto parsed = ParseKind(*spec.default_root_handler, /*accept_j2ee=*/true)) {
        root = *parsed;
      } else {
        findings.Reject(kReasonInvalidField,
                        "spec.defaultRootHandler: " + Quote(*spec.default_root_handler) +
                            " is not one of abap, java (or j2ee)");
        valid_spec = false;
      }
    }
    std::vector<std::string> hosts;
    for (const auto& raw : spec.hosts) {
      std::string host = AsciiLower(raw);
      if (!IsVirtualHost(host)) {
        findings.Reject(kReasonInvalidField,
                        "spec.hosts: " + Quote(raw) + " is not a host name or *.suffix");
        valid_spec = false;
      } else if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) {
        hosts.push_back(host);
      }
    }
    if (spec.hosts.empty()) {
      hosts.push_back("");
    }

    ResolvedDefault abap = ResolveDefault(ns, spec.default_groups.abap, kImplicitAbapDefaultGroup,
                                          "spec.defaultGroups.abap", findings);
    ResolvedDefault java = ResolveDefault(ns, spec.default_groups.java, kImplicitJavaDefaultGroup,
                                          "spec.defaultGroups.java", findings);

    std::string passthrough;
    if (spec.passthrough_group) {
      passthrough = ResolveGroupRef(ns, *spec.passthrough_group, "spec.passthroughGroup", findings);
    }

    // Rules, validated once for all hosts.
    std::vector<v1::Rule> rules;
    std::set<std::string> prefixes;
    for (std::size_t i = 0; i < spec.rules.size(); ++i) {
      const auto& in = spec.rules[i];
      std::string field = "spec.rules[" + std::to_string(i) + "]";
      std::string prefix = AsciiLower(in.prefix);
      if (!ValidPrefixShape(prefix)) {
        findings.Reject(kReasonInvalidRule,
                        field + ".prefix: " + Quote(in.prefix) +
                            " must start and end with / and not be / alone; rule dropped");
        continue;
      }
      if (!IsPathText(prefix)) {
        findings.Reject(kReasonInvalidRule, field + ".prefix: " + Quote(in.prefix) + " " +
                                                std::string(kPathCharacters) + "; rule dropped");
        continue;
      }
      v1::Kind kind = v1::KIND_ABAP;  // URL mapping table entries are ICF (ABAP) prefixes
      if (in.kind) {
        auto parsed = ParseKind(*in.kind, /*accept_j2ee=*/true);
        if (!parsed) {
          findings.Reject(kReasonInvalidRule, field + ".kind: " + Quote(*in.kind) +
                                                  " is not one of abap, java; rule dropped");
          continue;
        }
        kind = *parsed;
      }
      if (!prefixes.insert(prefix).second) {
        findings.Reject(kReasonInvalidRule,
                        field + ".prefix: " + Quote(prefix) + " is listed twice; rule dropped");
        continue;
      }
      v1::Rule rule;
      rule.set_prefix(prefix);
      rule.set_kind(kind);
      rule.set_source(source);
      if (in.logon_group) {
        rule.set_group(ResolveGroupRef(ns, *in.logon_group, field + ".logonGroup", findings));
      } else {
        rule.set_group(kind == v1::KIND_ABAP ? abap.resolved : java.resolved);
      }
      rules.push_back(std::move(rule));
    }
    std::set<std::string> derived;  // prefixes of rules from spec.fromSapSystem
    if (spec.from_sap_system) {
      AddSapSystemRules(ns, *spec.from_sap_system, source, abap, java, &prefixes, &rules, &derived,
                        findings);
    }

    std::vector<v1::Permission> permissions;
    for (std::size_t i = 0; i < spec.permissions.size(); ++i) {
      const auto& in = spec.permissions[i];
      std::string field = "spec.permissions[" + std::to_string(i) + "]";
      v1::Permission permission;
      if (in.action == "permit") {
        permission.set_action(v1::PERMISSION_ACTION_PERMIT);
      } else if (in.action == "deny") {
        permission.set_action(v1::PERMISSION_ACTION_DENY);
      } else if (in.action == "secure") {
        permission.set_action(v1::PERMISSION_ACTION_SECURE);
      } else {
        findings.Reject(kReasonInvalidPermission, field + ".action: " + Quote(in.action) +
                                                      " is not one of permit, deny, secure; "
                                                      "entry dropped");
        continue;
      }
      // Lowercased like the rules: the proxy matches paths ASCII
      // case-insensitively, so a deny entry cannot be dodged by case.
      std::string pattern = AsciiLower(in.pattern);
      auto star = pattern.find('*', 1);
      if (pattern.empty() || (star != std::string::npos && star != pattern.size() - 1)) {
        findings.Reject(kReasonInvalidPermission,
                        field + ".pattern: " + Quote(in.pattern) +
                            " may hold * only at the start or the end; entry dropped");
        continue;
      }
      if (!IsPathText(pattern)) {
        findings.Reject(kReasonInvalidPermission, field + ".pattern: " + Quote(in.pattern) + " " +
                                                      std::string(kPathCharacters) +
                                                      "; entry dropped");
        continue;
      }
      permission.set_pattern(pattern);
      permissions.push_back(std::move(permission));
    }

    const bool serve_last_good = findings.rejected() && last_good != nullptr && !(*last_good == um);
    if (serve_last_good) {
      Compile(*last_good);  // its rules and permissions; its status is not this object's
    } else if (valid_spec) {
      for (const auto& host : hosts) {
        ApplyToHost(host, source, root, spec.default_root_handler.has_value(), abap, java,
                    passthrough, rules, derived, permissions, findings);
      }
    }

    std::string where = spec.hosts.empty() ? "any host" : "hosts " + JoinStrings(hosts, ", ");
    std::string summary =
        std::to_string(rules.size()) + (rules.size() == 1 ? " rule, " : " rules, ") +
        (derived.empty() ? std::string()
                         : "(" + std::to_string(derived.size()) + " from SapSystem " +
                               *spec.from_sap_system + "), ") +
        std::to_string(permissions.size()) +
        (permissions.size() == 1 ? " permission" : " permissions") + " on " + where;
    ObjectStatus status;
    status.kind = std::string(model::kUrlMappingKind);
    status.namespace_ = ns;
    status.name = um.metadata.name;
    status.generation = um.metadata.generation;
    // For the printer columns (a JSONPath column shows one value of a list).
    status.rules = static_cast<std::int32_t>(rules.size());
    status.hosts = spec.hosts.empty() ? "*" : JoinStrings(hosts, ",");
    status.conditions = findings.Conditions(summary, "all LogonGroups resolved");
    if (serve_last_good) {
      MarkServingLastGood(last_good->metadata.generation, &status);
    }
    return status;
  }

  // Virtual hosts sorted by host ("" first), rules sorted by prefix.
  void AppendVirtualHosts(v1::Snapshot* snapshot) {
    for (auto& [host, entry] : hosts_) {
      for (auto& [prefix, rule] : entry.rules) {
        *entry.vhost.add_rules() = std::move(rule);
      }
      *snapshot->add_virtual_hosts() = std::move(entry.vhost);
    }
  }

 private:
  // The key of an accepted LogonGroup, else "" plus LogonGroupNotFound.
  std::string ResolveGroupRef(const std::string& ns, const std::string& name,
                              const std::string& field, Findings& findings) {
    std::string key = GroupKey(ns, name);
    if (accepted_groups_.count(key) > 0) {
      return key;
    }
    findings.Unresolved(
        kReasonLogonGroupNotFound,
        field + ": LogonGroup " + key +
            (existing_groups_.count(key) > 0 ? " is not accepted" : " does not exist") +
            " (requests answered 503)");
    return "";
  }

  ResolvedDefault ResolveDefault(const std::string& ns, const std::optional<std::string>& name,
                                 std::string_view implicit_name, const std::string& field,
                                 Findings& findings) {
    ResolvedDefault out;
    if (name) {
      out.explicit_ = true;
      out.intended = GroupKey(ns, *name);
      out.resolved = ResolveGroupRef(ns, *name, field, findings);
      return out;
    }
    // The implicit SAP internal groups: used when they exist, no error when not.
    std::string key = GroupKey(ns, implicit_name);
    if (accepted_groups_.count(key) > 0) {
      out.intended = key;
      out.resolved = key;
    }
    return out;
  }

  void ApplyToHost(const std::string& host, const std::string& source, v1::Kind root,
                   bool explicit_root, const ResolvedDefault& abap, const ResolvedDefault& java,
                   const std::string& passthrough, const std::vector<v1::Rule>& rules,
                   const std::set<std::string>& derived,
                   const std::vector<v1::Permission>& permissions, Findings& findings) {
    std::string host_label = host.empty() ? "any host" : "host " + host;
    auto [it, created] = hosts_.try_emplace(host);
    HostEntry& entry = it->second;
    if (created) {
      entry.owner = source;
      entry.vhost.set_host(host);
      entry.vhost.set_default_root_handler(root);
      entry.vhost.set_default_abap_group(abap.resolved);
      entry.vhost.set_default_java_group(java.resolved);
      entry.vhost.set_passthrough_group(passthrough);
      entry.vhost.set_source(source);
      entry.intended_abap = abap.intended;
      entry.intended_java = java.intended;
    } else {
      std::vector<std::string> differing;
      if (explicit_root && root != entry.vhost.default_root_handler()) {
        differing.push_back("defaultRootHandler " + std::string(KindName(root)));
      }
      if (abap.explicit_ && abap.intended != entry.intended_abap) {
        differing.push_back("defaultGroups.abap " + abap.intended);
      }
      if (java.explicit_ && java.intended != entry.intended_java) {
        differing.push_back("defaultGroups.java " + java.intended);
      }
      if (!passthrough.empty()) {
        if (entry.vhost.passthrough_group().empty()) {
          entry.vhost.set_passthrough_group(passthrough);
        } else if (entry.vhost.passthrough_group() != passthrough) {
          differing.push_back("passthroughGroup " + passthrough);
        }
      }
      if (!differing.empty()) {
        findings.Reject(kReasonConflicted, JoinStrings(differing, ", ") + " ignored on " +
                                               host_label + ": UrlMapping " + entry.owner +
                                               " (older) sets the defaults there");
      }
    }
    for (const auto& rule : rules) {
      auto [rule_it, inserted] = entry.rules.try_emplace(rule.prefix(), rule);
      if (!inserted && derived.count(rule.prefix()) > 0) {
        // A rule from the SapSystem's URL map is no error of this object.
        findings.Note("rule " + rule.prefix() + " from spec.fromSapSystem on " + host_label +
                      " not used: UrlMapping " + rule_it->second.source() + " (older) defines it");
      } else if (!inserted) {
        findings.Reject(kReasonConflicted, "rule " + rule.prefix() + " on " + host_label +
                                               " dropped: UrlMapping " + rule_it->second.source() +
                                               " (older) defines it");
      }
    }
    for (const auto& permission : permissions) {
      *entry.vhost.add_permissions() = permission;
    }
  }

  // spec.fromSapSystem: the SapSystem's ICF URL prefixes as rules, after
  // the mapping's own (which win on the same prefix). A prefix with an SMLG
  // GROUP goes to the accepted LogonGroup of this namespace whose backend is
  // that SapSystem's logon group (the first by name), else to the default
  // group of its kind. Every prefix and group name was checked by the
  // poller; checked again here.
  void AddSapSystemRules(const std::string& ns, const std::string& system_name,
                         const std::string& source, const ResolvedDefault& abap,
                         const ResolvedDefault& java, std::set<std::string>* prefixes,
                         std::vector<v1::Rule>* rules, std::set<std::string>* derived,
                         Findings& findings) {
    if (!IsObjectName(system_name)) {
      findings.Reject(kReasonInvalidField, "spec.fromSapSystem: " + Quote(system_name) +
                                               " is not a valid SapSystem name");
      return;
    }
    std::string system_ref = "SapSystem " + GroupKey(ns, system_name);
    if (objects_.sap_systems().find({ns, system_name}) == objects_.sap_systems().end()) {
      findings.Unresolved(kReasonSapSystemNotFound,
                          "spec.fromSapSystem: " + system_ref + " not found (no rules from it)");
      return;
    }
    auto list_it = objects_.sap_server_lists().find({ns, system_name});
    const SapServerList* list =
        list_it == objects_.sap_server_lists().end() ? nullptr : &list_it->second;
    if (list == nullptr || !list->has_url_map) {
      std::string why = list == nullptr ? std::string("not polled yet") : list->message;
      findings.Unresolved(kReasonNoUrlMap,
                          "spec.fromSapSystem: " + system_ref +
                              " has no URL map yet (spec.urlMap true on the SapSystem?): " + why);
      return;
    }
    // SMLG group -> LogonGroup key, from the LogonGroups of this namespace.
    std::map<std::string, std::string> smlg_groups;
    for (const auto& [key, lg] : objects_.logon_groups()) {
      if (key.first != ns || !lg.spec.backend || !lg.spec.backend->sap_system ||
          lg.spec.backend->sap_system->name != system_name ||
          !lg.spec.backend->sap_system->logon_group) {
        continue;
      }
      std::string group_key = GroupKey(ns, key.second);
      if (accepted_groups_.count(group_key) > 0) {
        smlg_groups.try_emplace(*lg.spec.backend->sap_system->logon_group, group_key);
      }
    }
    std::set<std::string> unmapped;
    std::size_t shadowed = 0;
    std::size_t invalid = 0;
    for (const model::SapUrlPrefix& entry : list->url_prefixes) {
      std::string prefix = AsciiLower(entry.prefix);
      if (!ValidPrefixShape(prefix) || !IsPathText(prefix) ||
          (!entry.logon_group.empty() && !IsServerName(entry.logon_group))) {
        ++invalid;
        continue;
      }
      if (!prefixes->insert(prefix).second) {
        ++shadowed;  // the mapping's own rule wins
        continue;
      }
      v1::Kind kind = entry.java ? v1::KIND_JAVA : v1::KIND_ABAP;
      v1::Rule rule;
      rule.set_prefix(prefix);
      rule.set_kind(kind);
      rule.set_source(source);
      std::string group = kind == v1::KIND_ABAP ? abap.resolved : java.resolved;
      if (!entry.logon_group.empty()) {
        if (auto it = smlg_groups.find(entry.logon_group); it != smlg_groups.end()) {
          group = it->second;
        } else if (unmapped.size() < 10) {
          unmapped.insert(entry.logon_group);
        }
      }
      rule.set_group(group);
      derived->insert(prefix);
      rules->push_back(std::move(rule));
    }
    std::string note = std::to_string(derived->size()) + " rules from " + system_ref;
    if (shadowed > 0) {
      note += " (" + std::to_string(shadowed) + " prefixes defined by spec.rules)";
    }
    if (invalid > 0) {
      note += "; " + std::to_string(invalid) + " invalid prefixes left out";
    }
    if (!unmapped.empty()) {
      note +=
          "; logon groups without a LogonGroup (backend.sapSystem.logonGroup), default group "
          "used: " +
          JoinStrings(std::vector<std::string>(unmapped.begin(), unmapped.end()), ", ");
    }
    findings.Note(note);
  }

  const ObjectSet& objects_;
  const std::set<std::string>& accepted_groups_;
  const std::set<std::string>& existing_groups_;
  std::map<std::string, HostEntry> hosts_;
};

}  // namespace

namespace {

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

namespace {

// Compiles `lg`; when it is rejected, the group of its last accepted
// version (compiled against the same endpoints) goes into the snapshot.
GroupResult CompileGroup(LogonGroupCompiler& compiler, const LogonGroup& lg,
                         const LastGood* last_good) {
  GroupResult result = compiler.Compile(lg);
  if (result.group || last_good == nullptr) {
    return result;
  }
  auto it = last_good->logon_groups.find({lg.metadata.namespace_, lg.metadata.name});
  if (it == last_good->logon_groups.end() || it->second == lg) {
    return result;
  }
  GroupResult previous = compiler.Compile(it->second);
  if (previous.group) {
    result.group = std::move(previous.group);
    result.status.ready_servers = previous.status.ready_servers;
    MarkServingLastGood(it->second.metadata.generation, &result.status);
  }
  return result;
}

// A compiled LogonGroup on its way into a CompileResult.
struct CompiledGroup {
  GroupResult* result;
  const Sha256Digest* digest;  // of *result->group; null: computed in Assemble
};

// Puts the compiled LogonGroups (in (namespace, name) order) and the
// UrlMappings together into the snapshot and the statuses, and stamps the
// version. Moves out of the results when `take`, else copies them.
// A SapSystem's status: Accepted from its spec, Refreshed and the server
// count from the poller's list.
ObjectStatus SapSystemStatus(const model::SapSystem& system, const SapServerList* list) {
  ObjectStatus status;
  status.kind = std::string(model::kSapSystemKind);
  status.namespace_ = system.metadata.namespace_;
  status.name = system.metadata.name;
  status.generation = system.metadata.generation;
  Findings findings;
  CheckObjectName(system.metadata, findings);
  sapsystem::SpecCheck check = sapsystem::CheckSapSystem(system);
  for (const std::string& error : check.errors) {
    findings.Reject(kReasonInvalidField, error);
  }
  std::string summary;
  if (check.config) {
    summary = "message server " + sapsystem::ServerListUrl(*check.config) + ", every " +
              std::to_string(check.config->refresh_interval_seconds) + "s";
  }
  Condition accepted = findings.Conditions(summary, "").front();
  status.conditions.push_back(std::move(accepted));
  // Refreshed comes from the poller's list: none before its first poll (and
  // none offline, e.g. `kwd-controller validate`).
  if (list == nullptr) {
    return status;
  }
  Condition refreshed;
  refreshed.type = std::string(kRefreshed);
  refreshed.status = list->refreshed ? "True" : "False";
  refreshed.reason = list->reason.empty() ? std::string(kReasonPending) : list->reason;
  refreshed.message = EscapeControlCharacters(list->message);
  status.servers = static_cast<std::int32_t>(list->instances.size());
  status.conditions.push_back(std::move(refreshed));
  return status;
}

CompileResult Assemble(const ObjectSet& objects, const std::vector<CompiledGroup>& compiled,
                       bool take, const LastGood* last_good) {
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
  UrlMappingCompiler mapping_compiler(objects, accepted_groups, existing_groups);
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

}  // namespace

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

// ---- CompileMemo ----

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
  CompileResult result = Assemble(objects, compiled, /*take=*/false, last_good);
  state.all_changed = false;
  return result;
}

}  // namespace kwd::compile
