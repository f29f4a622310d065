#include "common/pem_files.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <ctime>
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

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
  }
  return out;
}

bool IsVisibleAscii(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

// Appends `write`'s PEM output to `out`; false when OpenSSL fails.
template <typename Write>
bool AppendPem(std::string* out, Write write) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || write(bio.get()) != 1) {
    ERR_clear_error();
    return false;
  }
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  out->append(data, static_cast<size_t>(size));
  return true;
}

std::int64_t AsUnixSeconds(const ASN1_TIME* time) {
  std::tm tm{};
  if (time == nullptr || ASN1_TIME_to_tm(time, &tm) != 1) {
    return 0;
  }
  return static_cast<std::int64_t>(timegm(&tm));
}

}  // namespace

std::vector<std::string> CertificateNames(X509* cert) {
  std::vector<std::string> names;
  auto* sans =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (sans != nullptr) {
    for (int i = 0; i < sk_GENERAL_NAME_num(sans); ++i) {
      const GENERAL_NAME* name = sk_GENERAL_NAME_value(sans, i);
      if (name->type == GEN_DNS) {
        const unsigned char* data = ASN1_STRING_get0_data(name->d.dNSName);
        int length = ASN1_STRING_length(name->d.dNSName);
        std::string_view text(reinterpret_cast<const char*>(data),
                              static_cast<size_t>(std::max(length, 0)));
        if (data != nullptr && length > 0 && IsVisibleAscii(text)) {
          names.push_back(Lower(text));
        }
      }
    }
    GENERAL_NAMES_free(sans);
  }
  if (names.empty()) {
    X509_NAME* subject = X509_get_subject_name(cert);
    int index = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
    if (index >= 0) {
      ASN1_STRING* cn = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, index));
      unsigned char* utf8 = nullptr;
      int length = ASN1_STRING_to_UTF8(&utf8, cn);
      std::string_view text(reinterpret_cast<char*>(utf8), static_cast<size_t>(std::max(length, 0)));
      if (length > 0 && IsVisibleAscii(text)) {
        names.push_back(Lower(text));
      }
      OPENSSL_free(utf8);
    }
  }
  ERR_clear_error();
  return names;
}

std::int64_t CertificateNotBefore(X509* cert) {
  return AsUnixSeconds(X509_get0_notBefore(cert));
}

std::int64_t CertificateNotAfter(X509* cert) {
  return AsUnixSeconds(X509_get0_notAfter(cert));
}

bool CheckKeyPairPem(std::string_view cert_pem, std::string_view key_pem, CertificateInfo* info,
                     std::string* error) {
  constexpr std::size_t kMaxPemBytes = 1 << 20;
  if (cert_pem.empty()) {
    *error = "tls.crt is missing or empty";
    return false;
  }
  if (key_pem.empty()) {
    *error = "tls.key is missing or empty";
    return false;
  }
  if (cert_pem.size() > kMaxPemBytes || key_pem.size() > kMaxPemBytes) {
    *error = "tls.crt or tls.key is larger than 1 MiB";
    return false;
  }
  BioPtr cert_bio(BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size())));
  std::unique_ptr<X509, X509Free> leaf(
      PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr));
  if (!leaf) {
    ERR_clear_error();
    *error = "tls.crt holds no PEM certificate (-----BEGIN CERTIFICATE-----)";
    return false;
  }
  std::string cert_out;
  if (!AppendPem(&cert_out, [&](BIO* bio) { return PEM_write_bio_X509(bio, leaf.get()); })) {
    *error = "tls.crt: the certificate cannot be written out again";
    return false;
  }
  // The rest of the chain must read too: the proxy loads all of it.
  for (int count = 1;; ++count) {
    std::unique_ptr<X509, X509Free> next(
        PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr));
    if (next) {
      if (count >= 100) {
        ERR_clear_error();
        *error = "tls.crt holds more than 100 certificates";
        return false;
      }
      if (!AppendPem(&cert_out, [&](BIO* bio) { return PEM_write_bio_X509(bio, next.get()); })) {
        *error = "tls.crt: certificate " + std::to_string(count + 1) +
                 " of the chain cannot be written out again";
        return false;
      }
      continue;
    }
    unsigned long last = ERR_peek_last_error();
    ERR_clear_error();
    if (last != 0 &&
        !(ERR_GET_LIB(last) == ERR_LIB_PEM && ERR_GET_REASON(last) == PEM_R_NO_START_LINE)) {
      *error = "tls.crt: certificate " + std::to_string(count + 1) + " of the chain cannot be read";
      return false;
    }
    break;
  }
  BioPtr key_bio(BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())));
  // A null passphrase callback that refuses: an encrypted key fails here
  // instead of prompting on the terminal.
  std::unique_ptr<EVP_PKEY, KeyFree> key(PEM_read_bio_PrivateKey(
      key_bio.get(), nullptr, [](char*, int, int, void*) { return 0; }, nullptr));
  if (!key) {
    ERR_clear_error();
    *error = "tls.key holds no PEM private key (or it is encrypted)";
    return false;
  }
  if (X509_check_private_key(leaf.get(), key.get()) != 1) {
    ERR_clear_error();
    *error = "tls.key does not belong to the certificate in tls.crt";
    return false;
  }
  std::string key_out;
  if (!AppendPem(&key_out, [&](BIO* bio) {
        return PEM_write_bio_PrivateKey(bio, key.get(), nullptr, nullptr, 0, nullptr, nullptr);
      })) {
    *error = "tls.key: the key cannot be written out again";
    return false;
  }
  info->names = CertificateNames(leaf.get());
  info->not_before = CertificateNotBefore(leaf.get());
  info->not_after = CertificateNotAfter(leaf.get());
  info->cert_pem = std::move(cert_out);
  info->key_pem = std::move(key_out);
  return true;
}

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
