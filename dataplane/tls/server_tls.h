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
// - Certificates from the snapshot (UrlMapping.spec.tls, from Secrets; see
//   SetSnapshotCertificates) join the files' pairs. Each serves only the
//   hosts its UrlMappings list, not every name it holds. For one host a
//   snapshot certificate wins over a file pair (exact names first, then
//   wildcards, in both); a server name nothing matches gets the first file
//   pair, as before.

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
#include "kwd/v1/snapshot.pb.h"

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
  std::string name;         // file pairs: NAME; snapshot ones: "namespace/secret"
  bool from_snapshot = false;
  std::string fingerprint;  // of the files (or the snapshot's bytes and hosts) it was loaded from
  std::string cert_path;
  std::string key_path;
  SSL_CTX* ctx = nullptr;
  // Lower-case DNS names, wildcards as "*.rest": what SNI selects it by (a
  // snapshot certificate: its listed hosts, not the certificate's names).
  std::vector<std::string> names;
  int64_t not_after = 0;           // seconds since the epoch
};

// The pairs serving new handshakes; immutable once published.
struct CertSet {
  // File pairs in name order, then snapshot ones in name order.
  std::vector<std::shared_ptr<const CertPair>> pairs;
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
  // The snapshot's certificates, replacing the previous snapshot's: an
  // unchanged one keeps its loaded pair; one that does not load (which the
  // controller checked, so rare) is logged and counted, and its previous
  // version, if any, keeps serving. Called where a snapshot is applied (not
  // on the request path); new handshakes see the result, open connections
  // keep theirs.
  void SetSnapshotCertificates(const google::protobuf::RepeatedPtrField<v1::Certificate>& certs);

  // A server-side TLS transport over an accepted socket, with the
  // certificates current now. Thread-safe. With `loop` (the worker's, whose
  // thread then owns the transport), its records are sent and received
  // through the loop's batched I/O (TlsTransport).
  std::unique_ptr<net::Transport> NewTransport(int fd, net::EventLoop* loop = nullptr);

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
  // An SSL_CTX with kwd's settings (versions, ciphers, callbacks, client
  // verification) and no certificate yet; owned by `pair`.
  bool NewContext(CertPair* pair, std::string* error);
  std::shared_ptr<const CertPair> LoadPair(const Candidate& candidate, std::string* error);
  std::shared_ptr<const CertPair> LoadSnapshotPair(const v1::Certificate& certificate,
                                                   const std::string& fingerprint,
                                                   std::string* error);
  // Publishes file_pairs_ + snapshot_pairs_ as the serving set (publish_mu_ held).
  void PublishLocked();
  // Adds a refresh's reloads and refusals to the metrics: after the set is
  // published and the log lines are written, so a reader that sees a count
  // go up also sees the new certificate served and the line in the log.
  void CountOutcome(uint64_t reloads, uint64_t errors);
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
  std::mutex publish_mu_;
  std::vector<std::shared_ptr<const CertPair>> file_pairs_;      // in name order
  std::vector<std::shared_ptr<const CertPair>> snapshot_pairs_;  // in name order
  // Snapshot certificates refused, by name: the fingerprint tried (logged once).
  std::map<std::string, std::string> snapshot_refused_;
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
