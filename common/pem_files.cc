#include "common/pem_files.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <memory>

#include "common/file.h"
#include "common/openssl_ptr.h"

namespace kwd {
namespace {

std::string Where(std::string_view flag, const std::string& path) {
  return std::string(flag) + " " + path;
}

bool ReadFile(std::string_view flag, const std::string& path, std::string* out,
              std::string* error) {
  if (path.empty()) {
    *error = std::string(flag) + " needs a file";
    return false;
  }
  std::string reason;
  if (!ReadWholeFile(path, out, &reason)) {
    *error = std::string(flag) + ": " + reason;
    return false;
  }
  return true;
}

// The first certificate of `pem` (null when there is none).
std::unique_ptr<X509, X509Free> FirstCertificate(const std::string& pem) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  std::unique_ptr<X509, X509Free> cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  return cert;
}

}  // namespace

bool CheckCertificateFile(std::string_view flag, const std::string& path, std::string* error,
                          std::string* pem) {
  std::string contents;
  if (!ReadFile(flag, path, &contents, error)) {
    return false;
  }
  if (!FirstCertificate(contents)) {
    *error = Where(flag, path) + ": no PEM certificate (-----BEGIN CERTIFICATE-----)";
    return false;
  }
  if (pem != nullptr) {
    *pem = std::move(contents);
  }
  return true;
}

bool CheckKeyPairFiles(std::string_view cert_flag, const std::string& cert_path,
                       std::string_view key_flag, const std::string& key_path, std::string* error,
                       std::string* cert_pem, std::string* key_pem) {
  std::string cert_text;
  std::string key_text;
  if (!CheckCertificateFile(cert_flag, cert_path, error, &cert_text) ||
      !ReadFile(key_flag, key_path, &key_text, error)) {
    return false;
  }
  std::unique_ptr<BIO, BioFree> bio(
      BIO_new_mem_buf(key_text.data(), static_cast<int>(key_text.size())));
  std::unique_ptr<EVP_PKEY, KeyFree> key(
      PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (!key) {
    *error = Where(key_flag, key_path) + ": no PEM private key (or it is encrypted)";
    return false;
  }
  auto cert = FirstCertificate(cert_text);
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    *error = Where(key_flag, key_path) + " does not belong to the certificate in " +
             Where(cert_flag, cert_path);
    return false;
  }
  if (cert_pem != nullptr) {
    *cert_pem = std::move(cert_text);
  }
  if (key_pem != nullptr) {
    *key_pem = std::move(key_text);
  }
  return true;
}

}  // namespace kwd
