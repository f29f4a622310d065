#pragma once

// TLS over a non-blocking socket with OpenSSL 3, as a net::Transport: the
// handshake and every read and write return at once and are driven again by
// the owner's next epoll event. Server side (client connections on
// --tls-listen, made by ServerTls::NewTransport) and client side (upstream
// re-encryption, made by TlsTransport::Client).
//
// Given the worker's loop (server side), the TLS records travel through a
// net::PlainTransport on the same socket: on a loop with io_uring, the
// records written in a batch go to the kernel with every other connection's
// sends in one kernel entry, and a connection waiting for a request has its
// records received by the loop's read-ahead, as plain HTTP's are. Without a
// loop (client side, tests) the socket is read and written directly.

#include <openssl/ssl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "dataplane/net/transport.h"

namespace kwd::tls {

class ServerTls;
struct CertSet;

class TlsTransport final : public net::Transport {
 public:
  // How long a server-side connection keeps OpenSSL's record buffers after
  // its last read (see KeepBuffers).
  static constexpr int64_t kKeepBuffersMs = 200;

  // Client side: `ctx` says what to verify (SSL_VERIFY_PEER and its CA);
  // `server_name` is sent as SNI (unless it is an IP address) and checked
  // against the server's certificate (host name or IP) when not empty. Null
  // with `error` set when OpenSSL cannot make the connection object.
  static std::unique_ptr<TlsTransport> Client(SSL_CTX* ctx, int fd, std::string_view server_name,
                                              std::string* error);

  ~TlsTransport() override;

  bool established() const override { return established_; }
  HandshakeStatus Handshake() override;
  ssize_t Read(char* data, size_t size, bool* drained) override;
  ssize_t Write(const char* data, size_t size) override;
  // close_notify (best effort, never blocks): handed to the kernel at once,
  // not queued, since the owner closes or shuts the socket down next.
  void Shutdown() override;
  // The record queue of the plain transport under it (none without a loop).
  size_t queued() const override { return plain_ ? plain_->queued() : 0; }
  bool FlushQueued() override { return plain_ ? plain_->FlushQueued() : true; }
  void OnWritable() override {
    if (plain_) {
      plain_->OnWritable();
    }
  }
  bool BeforeClose(size_t dropped = 0) override;
  // Only while no record is half read: the read-ahead's bytes reach OpenSSL
  // through its reads, which the owner makes in the same event.
  net::BatchedRecv* ReadAhead() override { return plain_ ? plain_->ReadAhead() : nullptr; }
  bool CanCloseBatched() const override { return plain_ && established_ && plain_->CanCloseBatched(); }
  // close_notify joins the queued records; the close follows them.
  void CloseBatched() override;
  const net::TlsInfo* tls() const override { return established_ ? &info_ : nullptr; }
  std::string_view error() const override { return error_; }

  // The OpenSSL connection (client side: to offer a session before the
  // handshake, SSL_set_session, and to keep SSL_get1_session after it).
  SSL* ssl() { return ssl_; }

 private:
  friend class ServerTls;
  TlsTransport(int fd, SSL* ssl, ServerTls* server, std::shared_ptr<const CertSet> certs,
               net::EventLoop* loop = nullptr);
  void FillInfo();
  // Sends the held ticket bytes (best effort; what the socket does not take
  // goes with the next write).
  void FlushHeld();
  // close_notify (SSL_shutdown) once established and not failed.
  void WriteCloseNotify();
  // Records why the handshake failed: a reason label and OpenSSL's text.
  void HandshakeFailed(int ssl_error);
  static void OnMessage(int write_p, int version, int content_type, const void* buf, size_t len,
                        SSL* ssl, void* arg);

  // Server side: OpenSSL's record buffers (about 16 KiB each way) stay while
  // the connection is busy (SSL_MODE_RELEASE_BUFFERS off: no malloc and free
  // of both around every record) and go once it has read nothing for
  // kKeepBuffersMs.
  struct BusyBuffers;
  static void OnBuffersTimer(void* self);
  void KeepBuffers();

  // The socket's I/O when the transport has a loop (see the top); declared
  // before ssl_ so that it outlives SSL_free's last BIO call.
  std::unique_ptr<net::PlainTransport> plain_;
  SSL* ssl_;
  ServerTls* server_;                     // null on the client side
  std::shared_ptr<const CertSet> certs_;  // the certificates this handshake chooses from
  bool established_ = false;
  bool fatal_ = false;  // no close_notify after a fatal error
  bool want_read_ = false;
  bool renegotiation_ = false;
  bool bio_short_read_ = false;  // the socket BIO's last read emptied the socket
  bool app_data_read_ = false;   // SSL_read has returned application data
  // The loop's time of the last SSL_read that brought data (server side;
  // long ago before the first).
  int64_t last_read_ms_ = INT64_MIN / 2;
  // While the connection keeps OpenSSL's buffers (KeepBuffers): its timer,
  // allocated once a busy spell.
  std::unique_ptr<BusyBuffers> busy_;
  // Server side: the TLS 1.3 NewSessionTicket written when the handshake
  // completed, held to leave with the first response (see SocketBio).
  std::string held_;
  net::TlsInfo info_;
  std::string error_;
};

}  // namespace kwd::tls
