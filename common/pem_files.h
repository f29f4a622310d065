#pragma once

// Checks certificate and key files before they are handed to gRPC, which
// would otherwise take unreadable or mismatched files and fail every TLS
// handshake later without saying which file is wrong. Errors name the flag
// and the file: "--grpc-tls-key /etc/kwd/tls.key: no PEM private key".

#include <openssl/x509.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kwd {

// The file is readable and holds at least one PEM certificate; its contents
// go to `pem` when given.
bool CheckCertificateFile(std::string_view flag, const std::string& path, std::string* error,
                          std::string* pem = nullptr);

// Both files are readable, the first holds a PEM certificate (chain) and the
// second a PEM private key that belongs to the chain's first certificate.
bool CheckKeyPairFiles(std::string_view cert_flag, const std::string& cert_path,
                       std::string_view key_flag, const std::string& key_path, std::string* error,
                       std::string* cert_pem = nullptr, std::string* key_pem = nullptr);

// What a server certificate says about itself.
struct CertificateInfo {
  std::vector<std::string> names;  // lower-case SAN DNS names ("*.rest" kept), else the CN
  std::int64_t not_before = 0;     // Unix seconds; 0: unreadable
  std::int64_t not_after = 0;
  // CheckKeyPairPem: the pair written out again by OpenSSL (the certificates
  // in order, the key as PKCS#8), plain ASCII PEM without whatever else the
  // input held around the blocks (comments, "Bag Attributes", stray bytes):
  // what may travel in a snapshot's string fields and JSON.
  std::string cert_pem;
  std::string key_pem;
};

// The names a server certificate is valid for: SAN DNS entries, else the
// CN, lower-cased; names with bytes other than visible ASCII are left out
// (no SNI host name can match them).
std::vector<std::string> CertificateNames(X509* cert);
// notBefore / notAfter as Unix seconds (0 when unreadable).
std::int64_t CertificateNotBefore(X509* cert);
std::int64_t CertificateNotAfter(X509* cert);

// Checks bytes that claim to be a TLS key pair (a kubernetes.io/tls Secret's
// tls.crt and tls.key): `cert_pem` holds PEM certificates (the server's
// first), `key_pem` an unencrypted PEM private key that belongs to the
// first. On failure `error` says what is wrong ("tls.key: no PEM private
// key"), never quoting the key's bytes. Bounded: at most 100 certificates
// and 1 MiB each.
bool CheckKeyPairPem(std::string_view cert_pem, std::string_view key_pem, CertificateInfo* info,
                     std::string* error);

}  // namespace kwd
