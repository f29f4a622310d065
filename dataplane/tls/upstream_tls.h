#pragma once

// Re-encryption to a LogonGroup's servers (upstreamTLS mode reencrypt): one
// UpstreamTls per group and snapshot, built when the snapshot is applied and
// swapped in with the routing table, never per request.
//
// - Verification: the server's chain against the group's ca_bundle_pem, or
//   the system store (OpenSSL's default paths) when it is empty; the name is
//   server_name, else the server's address (host name, or IP address SAN).
//   TLS 1.2 and 1.3 only.
// - Client certificate: `--upstream-cert-dir DIR/<client_cert_secret>/tls.crt
//   + tls.key` (a Kubernetes TLS Secret mount). Looked at again at most every
//   `reload_interval_ms` when a connection is made: a changed pair is used for
//   new handshakes; a pair that does not load keeps the previous one (logged).
//   A group whose settings cannot be honoured (no such Secret, bad PEM) gets an
//   UpstreamTls with error() set: the proxy answers 502 and never connects in
//   clear.
// - Session resumption: the last session of each server (address:port) is
//   kept and offered on the next connection (TLS 1.2 session ids and tickets,
//   TLS 1.3 tickets).
//
// Thread-safe: workers and the health checker share one instance.

#include <openssl/ssl.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "kwd/v1/snapshot.pb.h"

namespace kwd::tls {

struct UpstreamTlsOptions {
  std::string cert_dir;  // --upstream-cert-dir; empty: no client certificates
  int64_t reload_interval_ms = 2'000;
  size_t max_sessions = 1024;  // servers whose last session is kept
  // False: the server's certificate is not verified (no CA is loaded). Only
  // for the health checks of TLS passthrough groups, whose connections kwd
  // does not terminate (the client verifies the server, not kwd); never for
  // re-encryption.
  bool verify_server = true;
};

class UpstreamTls {
 public:
  // Never null; check error().
  static std::shared_ptr<const UpstreamTls> Build(const v1::Group& group,
                                                  const UpstreamTlsOptions& options);
  ~UpstreamTls();
  UpstreamTls(const UpstreamTls&) = delete;
  UpstreamTls& operator=(const UpstreamTls&) = delete;

  // Why the group's TLS cannot be set up ("" when it can).
  const std::string& error() const { return error_; }
  // Identifies the settings (CA, name, client certificate): pooled
  // connections are shared only between equal keys.
  const std::string& key() const { return key_; }
  // The name to send as SNI and verify for a server at `address`.
  std::string_view ServerName(std::string_view address) const {
    return server_name_.empty() ? address : std::string_view(server_name_);
  }

  // The context for a new connection (client certificate reloaded when
  // due); null when error() is set.
  std::shared_ptr<SSL_CTX> Context() const;
  // Offers the last session of address:port on `ssl` (before the handshake);
  // new sessions OpenSSL hands out for `ssl` are kept for address:port.
  void OfferSession(SSL* ssl, std::string_view address, uint32_t port) const;

  // Counts for tests and the admin page.
  uint64_t sessions_stored() const;

 private:
  UpstreamTls() = default;
  bool LoadContext(std::string* error) const;  // with mu_ held
  static int OnNewSession(SSL* ssl, SSL_SESSION* session);

  std::string error_;
  std::string key_;
  std::string server_name_;
  std::string ca_bundle_pem_;
  std::string cert_path_;  // empty: no client certificate
  std::string key_path_;
  UpstreamTlsOptions options_;

  mutable std::mutex mu_;
  mutable std::shared_ptr<SSL_CTX> ctx_;
  mutable int64_t next_check_ms_ = 0;
  mutable std::string cert_stamp_;  // what the files looked like when loaded
  mutable std::map<std::string, SSL_SESSION*, std::less<>> sessions_;
  mutable uint64_t sessions_stored_ = 0;
};

}  // namespace kwd::tls
