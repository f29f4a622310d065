// `kwd-controller ensure-grpc-certs`: makes and renews the certificates of
// the mutual-TLS gRPC port between controller and proxies, in three Secrets
// of the release's namespace:
//   CA secret          tls.crt + tls.key: the release's own CA (its key never
//                      leaves this Secret; nothing mounts it)
//   controller secret  tls.crt + tls.key: the controller's serving
//                      certificate (the --dns-name names); ca.crt: the CA
//   proxy secret       tls.crt + tls.key: the proxies' client certificate;
//                      ca.crt: the CA
// The chart runs it as a pre-install/pre-upgrade hook Job and from a CronJob,
// so that rendering the chart never generates a key (`helm template` gives
// the same manifests every time: GitOps-safe), the certificates survive
// upgrades, and they are renewed before they expire. The controller re-reads
// its files when they change and the proxies re-read theirs on reconnect, so
// a renewal needs no restart.
//
// What a run does:
//   - all three Secrets complete, valid for longer than --renew-before, the
//     controller certificate naming every --dns-name: nothing;
//   - a leaf certificate expiring within --renew-before, unreadable, not
//     signed by the CA or (controller) missing a name: that one is made anew
//     with the same CA (no peer has to learn a new CA);
//   - the CA missing, unreadable or expiring within --renew-before: a new CA
//     and both leaf certificates; ca.crt holds the new CA followed by the old
//     one while the old one is valid, so peers that still present a
//     certificate of the old CA keep working until they reload.
// Writes use the resourceVersion that was read (PUT), so two runs at the
// same time cannot both win; the loser exits 1 and the next run finds the
// winner's certificates.

#include <openssl/asn1.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "common/crypto.h"
#include "common/duration.h"
#include "common/openssl_ptr.h"
#include "controller/cli/cli.h"
#include "controller/kube/kube_client.h"
#include "controller/kube/kube_config.h"

namespace kwd::cli {
namespace {

constexpr std::string_view kUsage =
    "usage: kwd-controller ensure-grpc-certs --namespace NS --ca-secret NAME\n"
    "           --controller-secret NAME --proxy-secret NAME --dns-name NAME [--dns-name NAME]...\n"
    "           [--validity DURATION] [--ca-validity DURATION] [--renew-before DURATION]\n"
    "           [--kubeconfig FILE]\n"
    "\n"
    "Makes, keeps and renews the gRPC mutual-TLS certificates of controller and\n"
    "proxies in three kubernetes.io/tls Secrets of NS: the CA (tls.crt, tls.key),\n"
    "the controller's serving certificate for the --dns-name names and the proxies'\n"
    "client certificate (tls.crt, tls.key, ca.crt each). Complete Secrets valid for\n"
    "longer than --renew-before are kept; a certificate that expires sooner is made\n"
    "anew (leaf certificates with the same CA). Needs get, create and update on\n"
    "secrets.\n"
    "\n"
    "flags:\n"
    "  --validity DURATION       lifetime of the leaf certificates (default 8760h)\n"
    "  --ca-validity DURATION    lifetime of the CA (default 87600h)\n"
    "  --renew-before DURATION   renew this long before expiry (default 720h)\n"
    "\n"
    "Exit 0 when the Secrets hold valid certificates, 1 when the API refuses or a\n"
    "Secret cannot be read, 2 on a usage error.\n";

constexpr std::string_view kCommand = "kwd-controller ensure-grpc-certs";

struct KeyPair {
  X509Ptr cert;
  KeyPtr key;
  std::string cert_pem;
  std::string key_pem;
};

std::string BioText(BIO* bio) {
  char* data = nullptr;
  long size = BIO_get_mem_data(bio, &data);
  return std::string(data, static_cast<size_t>(size));
}

std::string CertPem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509(bio.get(), cert);
  return BioText(bio.get());
}

std::string KeyPem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr);
  return BioText(bio.get());
}

X509Ptr ParseCert(const std::string& pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  return cert;
}

KeyPtr ParseKey(const std::string& pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  KeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  return key;
}

bool AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (ext == nullptr) {
    return false;
  }
  bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

enum class Role { kCa, kServer, kClient };

// A new P-256 key and a certificate for it, signed by `issuer` (self-signed
// when null). Returns nullopt when OpenSSL fails.
std::optional<KeyPair> MakeCertificate(Role role, const std::string& common_name,
                                       const std::vector<std::string>& dns_names,
                                       std::chrono::seconds validity, const KeyPair* issuer) {
  KeyPair out;
  out.key.reset(EVP_EC_gen("P-256"));
  out.cert.reset(X509_new());
  if (!out.key || !out.cert) {
    return std::nullopt;
  }
  X509* cert = out.cert.get();
  X509_set_version(cert, 2);
  unsigned char serial_bytes[16];
  if (RAND_bytes(serial_bytes, sizeof serial_bytes) != 1) {
    return std::nullopt;
  }
  serial_bytes[0] &= 0x7f;  // a positive serial number
  BIGNUM* serial = BN_bin2bn(serial_bytes, sizeof serial_bytes, nullptr);
  BN_to_ASN1_INTEGER(serial, X509_get_serialNumber(cert));
  BN_free(serial);
  // Valid from a minute ago: a peer whose clock is a little behind accepts it.
  X509_gmtime_adj(X509_getm_notBefore(cert), -60);
  X509_gmtime_adj(X509_getm_notAfter(cert), static_cast<long>(validity.count()));
  X509_NAME* name = X509_get_subject_name(cert);
  // X.509 allows at most 64 characters in a common name (RFC 5280 ub-common-name).
  const std::string cn = common_name.substr(0, 64);
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("kwd"),
                             -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509* issuer_cert = issuer != nullptr ? issuer->cert.get() : cert;
  X509_set_issuer_name(cert, X509_get_subject_name(issuer_cert));
  X509_set_pubkey(cert, out.key.get());
  bool ok = AddExtension(cert, issuer_cert, NID_subject_key_identifier, "hash");
  if (issuer != nullptr) {
    ok = ok && AddExtension(cert, issuer_cert, NID_authority_key_identifier, "keyid:always");
  }
  switch (role) {
    case Role::kCa:
      ok = ok &&
           AddExtension(cert, issuer_cert, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") &&
           AddExtension(cert, issuer_cert, NID_key_usage, "critical,keyCertSign,cRLSign");
      break;
    case Role::kServer: {
      std::string san;
      for (const std::string& dns : dns_names) {
        san += (san.empty() ? "DNS:" : ",DNS:") + dns;
      }
      ok = ok && AddExtension(cert, issuer_cert, NID_basic_constraints, "critical,CA:FALSE") &&
           AddExtension(cert, issuer_cert, NID_key_usage, "critical,digitalSignature") &&
           AddExtension(cert, issuer_cert, NID_ext_key_usage, "serverAuth") &&
           (san.empty() || AddExtension(cert, issuer_cert, NID_subject_alt_name, san.c_str()));
      break;
    }
    case Role::kClient:
      ok = ok && AddExtension(cert, issuer_cert, NID_basic_constraints, "critical,CA:FALSE") &&
           AddExtension(cert, issuer_cert, NID_key_usage, "critical,digitalSignature") &&
           AddExtension(cert, issuer_cert, NID_ext_key_usage, "clientAuth");
      break;
  }
  EVP_PKEY* signing_key = issuer != nullptr ? issuer->key.get() : out.key.get();
  if (!ok || X509_sign(cert, signing_key, EVP_sha256()) <= 0) {
    ERR_clear_error();
    return std::nullopt;
  }
  out.cert_pem = CertPem(cert);
  out.key_pem = KeyPem(out.key.get());
  return out;
}

// Seconds until `cert` expires (negative once it has).
int64_t SecondsLeft(X509* cert) {
  int days = 0;
  int seconds = 0;
  if (ASN1_TIME_diff(&days, &seconds, nullptr, X509_get0_notAfter(cert)) != 1) {
    return -1;
  }
  return int64_t{days} * 86400 + seconds;
}

bool NamesEveryDnsName(X509* cert, const std::vector<std::string>& dns_names) {
  for (const std::string& dns : dns_names) {
    if (X509_check_host(cert, dns.data(), dns.size(), X509_CHECK_FLAG_NO_WILDCARDS, nullptr) != 1) {
      return false;
    }
  }
  return true;
}

// Base64 back from Secret data (the API server's encoding; Base64Encode
// the other way).
std::optional<std::string> Unbase64(const std::string& text) {
  std::string out(3 * (text.size() / 4) + 3, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(text.data()),
                          static_cast<int>(text.size()));
  if (n < 0 || text.size() % 4 != 0) {
    return std::nullopt;
  }
  size_t padding = 0;
  if (!text.empty() && text.back() == '=') {
    padding = text.size() >= 2 && text[text.size() - 2] == '=' ? 2 : 1;
  }
  if (padding > static_cast<size_t>(n)) {
    return std::nullopt;
  }
  out.resize(static_cast<size_t>(n) - padding);
  return out;
}

// One Secret as read: absent, or its decoded data and resourceVersion.
struct SecretState {
  std::string name;
  bool exists = false;
  std::string resource_version;
  std::map<std::string, std::string> data;
};

class Run {
 public:
  Run(kube::KubeClient& client, std::string ns, std::ostream& err)
      : client_(client), ns_(std::move(ns)), err_(err) {}

  std::string Path(const std::string& name) const {
    return "/api/v1/namespaces/" + ns_ + "/secrets" + (name.empty() ? "" : "/" + name);
  }

  bool Read(const std::string& name, SecretState* state) {
    state->name = name;
    kube::ApiResult got = client_.Get(Path(name));
    if (got.status.IsNotFound()) {
      return true;
    }
    if (!got.status.ok()) {
      err_ << kCommand << ": get Secret " << ns_ << "/" << name << ": " << got.status.ToString()
           << "\n";
      return false;
    }
    state->exists = true;
    state->resource_version = got.body["metadata"].value("resourceVersion", "");
    if (auto data = got.body.find("data"); data != got.body.end() && data->is_object()) {
      for (const auto& [key, value] : data->items()) {
        if (value.is_string()) {
          if (auto decoded = Unbase64(value.get<std::string>())) {
            state->data[key] = *decoded;
          }
        }
      }
    }
    return true;
  }

  // The key pair held under tls.crt/tls.key, when both parse and match.
  static std::optional<KeyPair> Held(const SecretState& state) {
    auto cert_it = state.data.find("tls.crt");
    auto key_it = state.data.find("tls.key");
    if (cert_it == state.data.end() || key_it == state.data.end()) {
      return std::nullopt;
    }
    KeyPair pair;
    pair.cert = ParseCert(cert_it->second);
    pair.key = ParseKey(key_it->second);
    if (!pair.cert || !pair.key || X509_check_private_key(pair.cert.get(), pair.key.get()) != 1) {
      ERR_clear_error();
      return std::nullopt;
    }
    pair.cert_pem = cert_it->second;
    pair.key_pem = key_it->second;
    return pair;
  }

  // Creates or replaces the Secret (PUT with the resourceVersion read).
  bool Write(const SecretState& state, const std::map<std::string, std::string>& data,
             const std::string& component, const std::string& what) {
    nlohmann::json encoded = nlohmann::json::object();
    for (const auto& [key, value] : data) {
      encoded[key] = Base64Encode(value);
    }
    nlohmann::json metadata = {
        {"name", state.name},
        {"namespace", ns_},
        {"labels",
         {{"app.kubernetes.io/part-of", "kwd"},
          {"app.kubernetes.io/managed-by", "kwd"},
          {"app.kubernetes.io/component", component}}},
        {"annotations",
         {{"dispatch.kwd.io/description", "gRPC mutual-TLS " + what +
                                              " of kwd; made and renewed by kwd-controller "
                                              "ensure-grpc-certs"}}}};
    if (state.exists) {
      metadata["resourceVersion"] = state.resource_version;
    }
    nlohmann::json body = {{"apiVersion", "v1"},
                           {"kind", "Secret"},
                           {"type", "kubernetes.io/tls"},
                           {"metadata", metadata},
                           {"data", encoded}};
    kube::ApiResult result =
        state.exists ? client_.Put(Path(state.name), body) : client_.Post(Path(""), body);
    if (!result.status.ok()) {
      err_ << kCommand << ": " << (state.exists ? "update" : "create") << " Secret " << ns_ << "/"
           << state.name << ": " << result.status.ToString()
           << (result.status.IsConflict() ? " (another run wrote it first; run again)" : "")
           << "\n";
      return false;
    }
    return true;
  }

 private:
  kube::KubeClient& client_;
  std::string ns_;
  std::ostream& err_;
};

}  // namespace

int RunEnsureGrpcCerts(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string ns;
  std::string ca_secret;
  std::string controller_secret;
  std::string proxy_secret;
  std::vector<std::string> dns_names;
  std::string kubeconfig;
  int64_t validity_ms = int64_t{8760} * 3600 * 1000;
  int64_t ca_validity_ms = int64_t{87600} * 3600 * 1000;
  int64_t renew_before_ms = int64_t{720} * 3600 * 1000;
  auto usage_error = [&](const std::string& message) {
    err << kCommand << ": " << message << "\n"
        << "Run 'kwd-controller ensure-grpc-certs --help' for usage.\n";
    return 2;
  };
  std::vector<FlagValue> flags;
  std::string flag_error;
  if (!SplitFlags(args, &flags, &flag_error)) {
    return usage_error(flag_error);
  }
  for (const auto& [name, value] : flags) {
    if (name == "--help") {
      out << kUsage;
      return 0;
    }
    auto duration = [&](int64_t* ms) {
      std::string error;
      if (!ParseDurationMs(value, ms, &error) || *ms < 60000) {
        return false;
      }
      return true;
    };
    if (name == "--namespace") {
      ns = value;
    } else if (name == "--ca-secret") {
      ca_secret = value;
    } else if (name == "--controller-secret") {
      controller_secret = value;
    } else if (name == "--proxy-secret") {
      proxy_secret = value;
    } else if (name == "--dns-name") {
      // Letters, digits, '-' and '.': the name goes into the certificate's
      // subjectAltName as is (a ',' would add entries of its own).
      bool valid =
          !value.empty() && value.size() <= 253 && value.front() != '.' && value.front() != '-' &&
          std::all_of(value.begin(), value.end(), [](char c) {
            return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
          });
      if (!valid) {
        return usage_error(
            "--dns-name: a DNS name of 1 to 253 lowercase letters, digits, '-' "
            "and '.' (got \"" +
            value + "\")");
      }
      dns_names.push_back(value);
    } else if (name == "--kubeconfig") {
      kubeconfig = value;
    } else if (name == "--validity") {
      if (!duration(&validity_ms)) {
        return usage_error("--validity: a duration of at least 1m such as 8760h");
      }
    } else if (name == "--ca-validity") {
      if (!duration(&ca_validity_ms)) {
        return usage_error("--ca-validity: a duration of at least 1m such as 87600h");
      }
    } else if (name == "--renew-before") {
      if (!duration(&renew_before_ms)) {
        return usage_error("--renew-before: a duration of at least 1m such as 720h");
      }
    } else {
      return usage_error("unknown flag " + name);
    }
  }
  if (ns.empty() || ca_secret.empty() || controller_secret.empty() || proxy_secret.empty()) {
    return usage_error(
        "--namespace, --ca-secret, --controller-secret and --proxy-secret need values");
  }
  if (dns_names.empty()) {
    return usage_error("--dns-name: the controller Service's DNS names (at least one)");
  }
  if (renew_before_ms >= validity_ms || renew_before_ms >= ca_validity_ms) {
    return usage_error("--renew-before must be shorter than --validity and --ca-validity");
  }
  const auto validity = std::chrono::seconds(validity_ms / 1000);
  const auto ca_validity = std::chrono::seconds(ca_validity_ms / 1000);
  const int64_t renew_before = renew_before_ms / 1000;

  kube::KubeConfigSource source;
  source.kubeconfig_path = kubeconfig;
  kube::KubeConfig config;
  std::string error;
  if (!kube::LoadKubeConfig(source, &config, &error)) {
    err << kCommand << ": " << error << "\n";
    return 1;
  }
  kube::KubeClient client(config);
  Run run(client, ns, err);
  SecretState ca_state;
  SecretState controller_state;
  SecretState proxy_state;
  if (!run.Read(ca_secret, &ca_state) || !run.Read(controller_secret, &controller_state) ||
      !run.Read(proxy_secret, &proxy_state)) {
    return 1;
  }

  // The CA: kept while it is complete and not about to expire.
  std::optional<KeyPair> ca = Run::Held(ca_state);
  std::string ca_reason;
  if (!ca) {
    ca_reason = ca_state.exists ? "unreadable" : "missing";
  } else if (SecondsLeft(ca->cert.get()) <= renew_before) {
    ca_reason = "expires within --renew-before";
  }
  std::string previous_ca_pem;  // still trusted while valid
  if (!ca_reason.empty()) {
    if (ca && SecondsLeft(ca->cert.get()) > 0) {
      previous_ca_pem = ca->cert_pem;
    }
    ca =
        MakeCertificate(Role::kCa, ns + "/" + ca_secret + " kwd gRPC CA", {}, ca_validity, nullptr);
    if (!ca) {
      err << kCommand << ": cannot make a CA certificate (OpenSSL)\n";
      return 1;
    }
    if (!run.Write(ca_state, {{"tls.crt", ca->cert_pem}, {"tls.key", ca->key_pem}}, "grpc-ca",
                   "CA")) {
      return 1;
    }
    out << "Secret " << ns << "/" << ca_secret << ": new CA (" << ca_reason << ")\n";
  } else {
    out << "Secret " << ns << "/" << ca_secret << ": CA kept\n";
  }
  const std::string trust = ca->cert_pem + previous_ca_pem;

  // A leaf is kept while it is complete, signed by this CA, names what it
  // must and does not expire soon; ca.crt must be the current trust bundle.
  auto ensure_leaf = [&](SecretState& state, Role role, const std::string& component) {
    std::optional<KeyPair> held = Run::Held(state);
    std::string reason;
    if (!held) {
      reason = state.exists ? "unreadable or incomplete" : "missing";
    } else if (X509_verify(held->cert.get(), ca->key.get()) != 1) {
      ERR_clear_error();
      reason = "not signed by the CA";
    } else if (SecondsLeft(held->cert.get()) <= renew_before) {
      reason = "expires within --renew-before";
    } else if (role == Role::kServer && !NamesEveryDnsName(held->cert.get(), dns_names)) {
      reason = "does not name every --dns-name";
    }
    std::string where = "Secret " + ns + "/" + state.name;
    if (reason.empty()) {
      auto ca_it = state.data.find("ca.crt");
      if (ca_it != state.data.end() && ca_it->second == trust) {
        out << where << ": certificate kept\n";
        return true;
      }
      // Only the trust bundle changes (the old CA expired or was replaced).
      if (!run.Write(state,
                     {{"tls.crt", held->cert_pem}, {"tls.key", held->key_pem}, {"ca.crt", trust}},
                     component, "certificate")) {
        return false;
      }
      out << where << ": certificate kept, ca.crt updated\n";
      return true;
    }
    std::string common_name = role == Role::kServer ? dns_names.front() : state.name;
    std::optional<KeyPair> made = MakeCertificate(role, common_name, dns_names, validity, &*ca);
    if (!made) {
      err << kCommand << ": cannot make a certificate (OpenSSL)\n";
      return false;
    }
    if (!run.Write(state,
                   {{"tls.crt", made->cert_pem}, {"tls.key", made->key_pem}, {"ca.crt", trust}},
                   component, "certificate")) {
      return false;
    }
    out << where << ": new certificate (" << reason << ")\n";
    return true;
  };
  if (!ensure_leaf(controller_state, Role::kServer, "controller") ||
      !ensure_leaf(proxy_state, Role::kClient, "proxy")) {
    return 1;
  }
  return 0;
}

}  // namespace kwd::cli
