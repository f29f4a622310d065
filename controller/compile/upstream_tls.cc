// The TLS material processor: LogonGroup.spec.upstreamTLS (mode, the SNI
// and certificate name, the CA bundle, the client certificate's Secret).

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/crypto.h"
#include "controller/compile/internal.h"

namespace kwd::compile::internal {
namespace {

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

// Why the servers' addresses cannot serve as TLS names, or "" when they can.
std::string WhyServerNameIsNeeded(const std::optional<model::Backend>& backend) {
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

}  // namespace

void CompileUpstreamTls(const model::UpstreamTlsSpec& spec,
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

}  // namespace kwd::compile::internal
