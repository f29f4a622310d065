// Fuzzes what the controller does with a Secret's bytes (UrlMapping.spec.tls):
// the v1 Secret decoder (base64 data, stringData) and the key-pair check
// (common/pem_files.h CheckKeyPairPem). Input: a JSON Secret when it starts
// with '{', else the certificate and the key separated by the first NUL.
// Arbitrary bytes must give a verdict, never a crash, and a refusal's
// message never quotes the key.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/pem_files.h"
#include "controller/model/model.h"

namespace {

void Check(std::string_view cert, std::string_view key) {
  kwd::CertificateInfo info;
  std::string error;
  if (kwd::CheckKeyPairPem(cert, key, &info, &error)) {
    if (!error.empty()) {
      std::abort();
    }
    for (const std::string& name : info.names) {
      for (char c : name) {
        if ((c >= 'A' && c <= 'Z') || c <= 0x20 || c >= 0x7f) {
          std::abort();  // names are lower-cased visible ASCII
        }
      }
    }
    for (const std::string* pem : {&info.cert_pem, &info.key_pem}) {
      if (pem->empty()) {
        std::abort();
      }
      for (char c : *pem) {
        if (c != '\n' && (c < 0x20 || c >= 0x7f)) {
          std::abort();  // what goes into the snapshot is plain ASCII PEM
        }
      }
    }
    return;
  }
  // The messages are fixed texts with numbers: a key found in one must be a
  // piece of those texts (a "key" of "-----BEGIN CERTIFICATE-----"), never
  // bytes the message copied from the input.
  static constexpr std::string_view kFixedTexts =
      "tls.crt holds no PEM certificate (-----BEGIN CERTIFICATE-----) "
      "tls.key holds no PEM private key (or it is encrypted) "
      "tls.key does not belong to the certificate in tls.crt "
      "tls.crt or tls.key is larger than 1 MiB tls.crt holds more than 100 certificates";
  if (error.empty() || (key.size() >= 16 && error.find(key) != std::string::npos &&
                        kFixedTexts.find(key) == std::string_view::npos)) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (!text.empty() && text.front() == '{') {
    nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (json.is_discarded()) {
      return 0;
    }
    kwd::model::DecodeResult decoded = kwd::model::DecodeObjectOfKind("Secret", json);
    if (decoded.ok()) {
      const auto& secret = std::get<kwd::model::Secret>(*decoded.object);
      Check(secret.tls_crt, secret.tls_key);
    } else if (decoded.error.empty()) {
      std::abort();
    }
    return 0;
  }
  const size_t nul = text.find('\0');
  if (nul == std::string_view::npos) {
    Check(text, {});
    return 0;
  }
  Check(text.substr(0, nul), text.substr(nul + 1));
  return 0;
}
