#pragma once

// TLS termination for --tls-listen: the certificate pairs of --tls-cert-dir,
// SNI selection, client-certificate verification, session tickets and hot
// reload.
//
// - Pairs: DIR/NAME.crt + DIR/NAME.key, or Secret mounts DIR/<secret>/tls.crt
//   + tls.key (entries starting with '.' are skipped: Secret mounts keep their
//   versions in ..data and ..<timestamp>). Ordered by NAME.
// - SNI: a pair whose certificate names the host exactly (SAN DNS entries, the
//   CN when there is none), else one whose wildcard "*.rest" matches one label
//   in front of "rest", else the first pair in name order.
// - TLS 1.2 and 1.3 only; Mozilla "intermediate" ciphers (AEAD with forward
//   secrecy); ALPN http/1.1; no renegotiation (an attempt closes the
//   connection); no compression.
// - Session tickets: stateless, encrypted with a key every worker shares,
//   rotated every `ticket_rotation_ms` (tickets made with the previous key
//   are still accepted, and renewed).
// - Reload: a thread looks at the files every `reload_interval_ms`; a changed
//   pair is loaded and used for new handshakes (open connections keep theirs);
//   a pair that does not load (bad PEM, key not matching) is refused with a log
//   line and kwd_proxy_tls_certificate_errors_total while the pair it would
//   have replaced keeps serving.

#include <openssl/ssl.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/metrics.h"
#include "dataplane/net/transport.h"

namespace kwd::tls {

enum class VerifyClient { kNone, kOptional, kRequired };
// "none" | "optional" | "required".
bool ParseVerifyClient(std::string_view text, VerifyClient* out);

struct ServerTlsOptions {
  std::string cert_dir;                              // --tls-cert-dir
  std::string client_ca_file;                        // --tls-client-ca
  VerifyClient verify_client = VerifyClient::kNone;  // --tls-verify-client
  int64_t reload_interval_ms = 2'000;
  int64_t ticket_rotation_ms = 3'600'000;
};

// Handshake failure reasons, the `reason` label of
// kwd_proxy_tls_handshake_errors_total ("timeout" is counted by the proxy).
enum class HandshakeError {
  kProtocolVersion,    // TLS 1.1 or older offered
  kNoSharedCipher,     // no cipher or group in common
  kClientCertificate,  // required certificate missing, or it did not verify
  kHttpRequest,        // plain HTTP sent to the TLS port
  kEof,                // the client closed during the handshake
  kProtocol,           // anything else: garbage, malformed or oversized messages
  kRenegotiation,      // a renegotiation attempt after the handshake (closed)
  kCount
};

struct TlsMetrics {
  explicit TlsMetrics(MetricsRegistry& registry);
  Counter& handshakes;          // full handshakes
  Counter& handshakes_resumed;  // resumed from a session ticket
  Counter* errors[static_cast<size_t>(HandshakeError::kCount)];
  Counter& certificate_reloads;
  Counter& certificate_errors;
  Gauge& certificates;
  Gauge& earliest_expiry;                   // Unix time the first serving certificate expires
  Counter& client_certificates_unverified;  // optional verification: sent but not verified
};

// One certificate pair, loaded and checked.
struct CertPair {
  ~CertPair();
  std::string name;
  std::string fingerprint;  // of the files it was loaded from
  std::string cert_path;
  std::string key_path;
  SSL_CTX* ctx = nullptr;
  std::vector<std::string> names;  // lower-case DNS names, wildcards as "*.rest"
  int64_t not_after = 0;           // seconds since the epoch
};

// The pairs serving new handshakes; immutable once published.
struct CertSet {
  std::vector<std::shared_ptr<const CertPair>> pairs;  // in name order
  std::unordered_map<std::string, const CertPair*> exact;
  std::unordered_map<std::string, const CertPair*> wildcard;  // by "rest"
  const CertPair* Select(std::string_view server_name) const;
};

class ServerTls {
 public:
  ServerTls(ServerTlsOptions options, MetricsRegistry& registry);
  ~ServerTls();
  ServerTls(const ServerTls&) = delete;
  ServerTls& operator=(const ServerTls&) = delete;

  // Loads every pair. False with `error` naming the flag when the client CA
  // does not load or no pair does (pairs that do not load are logged).
  bool Load(std::string* error);
  // Starts the reload thread (after Load).
  void StartWatching();
  void Stop();
  // Looks at the files once (the reload thread's step); for tests.
  void CheckForChanges();

  // A server-side TLS transport over an accepted socket, with the
  // certificates current now. Thread-safe.
  std::unique_ptr<net::Transport> NewTransport(int fd);

  std::shared_ptr<const CertSet> certificates() const { return certs_.load(); }
  TlsMetrics& metrics() { return metrics_; }
  const ServerTlsOptions& options() const { return options_; }

 private:
  friend class TlsTransport;
  struct TicketKey {
    unsigned char name[16];
    unsigned char aes[32];
    unsigned char hmac[32];
  };
  struct Candidate {
    std::string name;
    std::string cert_path;
    std::string key_path;
    std::string fingerprint;
  };

  std::vector<Candidate> ScanDirectory(std::string* error) const;
  std::shared_ptr<const CertPair> LoadPair(const Candidate& candidate, std::string* error);
  // Loads what changed; returns whether a new set was published.
  bool Refresh(bool initial, std::string* error);
  void RotateTicketKeyIfDue(int64_t now_ms);
  int TicketKeyCallback(unsigned char* key_name, unsigned char* iv, EVP_CIPHER_CTX* cipher,
                        EVP_MAC_CTX* mac, int encrypt);
  static int OnServerName(SSL* ssl, int* alert, void* arg);
  static int OnAlpn(SSL* ssl, const unsigned char** out, unsigned char* out_len,
                    const unsigned char* in, unsigned int in_len, void* arg);
  static int OnTicketKey(SSL* ssl, unsigned char* key_name, unsigned char* iv,
                         EVP_CIPHER_CTX* cipher, EVP_MAC_CTX* mac, int encrypt);

  ServerTlsOptions options_;
  TlsMetrics metrics_;
  std::atomic<std::shared_ptr<const CertSet>> certs_;
  // Reload thread only: the fingerprint last tried per pair name (a refused
  // pair is not tried again until its files change).
  std::map<std::string, std::string> tried_;

  std::mutex ticket_mu_;
  TicketKey ticket_current_{};
  TicketKey ticket_previous_{};
  bool has_previous_ticket_ = false;
  int64_t ticket_rotated_ms_ = 0;

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace kwd::tls
