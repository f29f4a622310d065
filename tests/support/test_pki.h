#pragma once

// Certificates for TLS tests, made at test time by the openssl command line
// (EC P-256: quick). In `dir`:
//   ca.pem ca.key                the test CA
//   server.pem server.key        signed by ca; SAN DNS:localhost, DNS:<server_name>, IP:127.0.0.1
//   client.pem client.key        signed by ca (clientAuth)
//   other-ca.pem other-ca.key    an unrelated CA
//   other-client.pem other-client.key  signed by other-ca
//   other-server.pem other-server.key  signed by other-ca, same names as server.pem
//   named-server.pem named-server.key  signed by ca; SAN DNS:<server_name> only

#include <string>

namespace kwd::testing {

inline constexpr const char kTestServerName[] = "kwd-controller.kwd.svc";

// False (and `error` holds the command's output) when openssl failed.
bool MakeTestPki(const std::string& dir, std::string* error);

// A self-signed server certificate DIR/NAME.pem with key DIR/NAME.key whose
// SAN lists `dns_names` (comma-separated, e.g. "a.example,*.b.example"),
// valid for `days` (EC P-256).
bool MakeSelfSignedPair(const std::string& dir, const std::string& name,
                        const std::string& dns_names, std::string* error, int days = 2);

// A self-signed EC P-256 certificate for DNS name `dns_name` valid from a
// minute ago until `valid_seconds` from now (the openssl command line counts
// in days), as PEM.
bool MakeShortLivedPair(const std::string& dns_name, long valid_seconds, std::string* cert_pem,
                        std::string* key_pem);

}  // namespace kwd::testing
