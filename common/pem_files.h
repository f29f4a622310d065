#pragma once

// Checks certificate and key files before they are handed to gRPC, which
// would otherwise take unreadable or mismatched files and fail every TLS
// handshake later without saying which file is wrong. Errors name the flag
// and the file: "--grpc-tls-key /etc/kwd/tls.key: no PEM private key".

#include <string>
#include <string_view>

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

}  // namespace kwd
