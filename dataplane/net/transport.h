#pragma once

// The byte stream under the HTTP codec: plain TCP or TLS, on the server side
// (client connections) and the client side (upstream connections). The
// connection code reads and writes through a Transport and never asks which
// kind it has; what only TLS knows (cipher, peer certificate, SNI) is in
// TlsInfo, null for plain.
//
// All calls are non-blocking and run on the owning event loop's thread. The
// socket is registered edge-triggered for EPOLLIN | EPOLLOUT by its owner; a
// handshake that wants either direction just waits for the next event.

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dataplane/net/event_loop.h"
#include "dataplane/proxy/buffer.h"

namespace kwd::net {

// What a finished TLS handshake established. Filled once, when the handshake
// completes.
struct TlsInfo {
  std::string version;      // "TLSv1.3"
  std::string cipher;       // OpenSSL name, "TLS_AES_128_GCM_SHA256"
  int cipher_bits = 0;      // symmetric key size in bits
  std::string server_name;  // SNI the client sent (server side) or we sent (client side)
  std::string alpn;         // negotiated protocol, "" when none
  bool resumed = false;     // session resumption (ticket) was used
  // The peer's certificate, verified against the configured CA (server side:
  // --tls-client-ca; client side: the upstream CA). Empty when the peer sent
  // none. `peer_verified` is false when a certificate came but did not verify
  // (only possible with optional verification).
  bool peer_certificate = false;
  bool peer_verified = false;
  std::string verify_error;  // OpenSSL's reason when verification failed
  std::string peer_subject;  // RFC 2253 subject of the peer's certificate
  // PEM of the peer certificate and of its verified chain up to (without)
  // the root, each on one line (SAP ICM's SSL_CLIENT_CERT form): base64 body only, the PEM
  // armour kept, line breaks replaced by spaces.
  std::string peer_pem_line;
  std::vector<std::string> peer_chain_pem_lines;
};

class Transport {
 public:
  // Results of Read/Write besides a positive byte count.
  static constexpr ssize_t kEof = 0;
  static constexpr ssize_t kWouldBlock = -1;
  static constexpr ssize_t kError = -2;

  enum class HandshakeStatus { kDone, kWantIo, kFailed };

  virtual ~Transport() = default;

  int fd() const { return fd_; }
  // True once the handshake completed (always for plain).
  virtual bool established() const = 0;
  // Advances the handshake; kDone once established (at once for plain). On
  // kFailed `error()` says why; the caller closes.
  virtual HandshakeStatus Handshake() = 0;
  // Up to `size` bytes of application data: n > 0, kEof, kWouldBlock or
  // kError. `*drained` is set true when the socket is known to be read empty
  // (a short read of plain TCP, or TLS wanting more bytes from the socket): no
  // read is worth trying before the next EPOLLIN edge. Never blocks.
  virtual ssize_t Read(char* data, size_t size, bool* drained) = 0;
  // n > 0 bytes taken, kWouldBlock or kError.
  virtual ssize_t Write(const char* data, size_t size) = 0;
  // Orderly end of the stream towards the peer (TLS close_notify, best
  // effort, never blocks). The owner still closes the descriptor.
  virtual void Shutdown() = 0;
  // Batched sends (a plain transport on a loop with io_uring): Write may take
  // bytes into the transport's queue, handed to the kernel at the end of the
  // loop's batch together with other connections' sends.
  // Bytes taken but not handed to the kernel yet.
  virtual size_t queued() const { return 0; }
  // Hands the queued bytes to the kernel now (never blocks); true when none
  // are left, or when the connection failed and none ever will go. The owner
  // checks it before a close that must not lose a response.
  virtual bool FlushQueued() { return true; }
  // The owner got EPOLLOUT for the socket: queued bytes may go again. Owners
  // forward every EPOLLOUT, also when they wait for nothing themselves.
  virtual void OnWritable() {}
  // The owner closes the descriptor next: queued bytes go to the kernel now
  // (best effort, never blocks) and the transport does no I/O after it.
  // `dropped`: bytes for the peer the owner still had and drops. When bytes
  // are lost so (those, or queued ones the kernel has no room for), the
  // close is made a reset (SO_LINGER 0) and false returned: the peer sees
  // the stream cut short, not a clean end (the owner sends no TLS
  // close_notify then either).
  virtual bool BeforeClose(size_t dropped = 0);
  // The receive the loop may make ahead of the owner's next Read, together
  // with other sockets' in one kernel entry (IoHandler::ReadAhead): a plain
  // transport on a loop with io_uring that holds no earlier read-ahead bytes.
  // Null otherwise (TLS).
  virtual BatchedRecv* ReadAhead() { return nullptr; }
  // Whether CloseBatched() would take the close over now.
  virtual bool CanCloseBatched() const { return false; }
  // Instead of BeforeClose() and close(2), when CanCloseBatched(): the loop
  // sends the queued bytes and closes the descriptor after them in its
  // batched submit at the end of the batch (a failed send makes that close a
  // reset); the owner neither uses nor closes the descriptor any more.
  virtual void CloseBatched() {}
  // Null for plain TCP; set once established for TLS.
  virtual const TlsInfo* tls() const { return nullptr; }
  // Why the handshake or the last I/O failed, for logs ("" when unknown).
  virtual std::string_view error() const { return {}; }

 protected:
  explicit Transport(int fd) : fd_(fd) {}
  int fd_;
};

// Plain TCP: recv/send on the descriptor. Given a loop whose io_uring is up
// (EventLoop::batching_sends()), small writes are queued and sent at the end
// of the loop's batch with every other queued send in one kernel entry; Write
// still reports them taken at once. A send the socket could not take whole
// leaves the rest queued and the transport blocked: Write then tries the
// queue first and reports kWouldBlock until it is gone, and OnWritable()
// resumes it.
//
// Receives: Read returns the bytes (or end of stream, or error) the loop's
// read-ahead received for the socket in this iteration first. Bytes the owner
// did not take by the end of the iteration are copied into the transport and
// returned by the next Reads (the socket is not read ahead again meanwhile).
class PlainTransport final : public Transport {
 public:
  explicit PlainTransport(int fd, EventLoop* loop = nullptr)
      : Transport(fd),
        loop_(loop),
        send_(this, &PlainTransport::OnSent),
        recv_(this, fd, &PlainTransport::KeepReadAhead) {}
  // One a connection: from the thread's PerThreadBlocks (buffer.h).
  static void* operator new(size_t size);
  static void operator delete(void* block, size_t size);
  bool established() const override { return true; }
  HandshakeStatus Handshake() override { return HandshakeStatus::kDone; }
  ssize_t Read(char* data, size_t size, bool* drained) override;
  ssize_t Write(const char* data, size_t size) override;
  void Shutdown() override {}
  size_t queued() const override { return queue_.size(); }
  bool FlushQueued() override;
  void OnWritable() override;
  bool BeforeClose(size_t dropped = 0) override;
  BatchedRecv* ReadAhead() override;
  bool CanCloseBatched() const override;
  void CloseBatched() override;
  EventLoop* loop() const { return loop_; }

  // Writes that would make the queue larger go to the socket directly.
  static constexpr size_t kMaxQueued = 64 * 1024;
  // CloseBatched() only for a connection that gave the kernel no more than
  // this in all: a send buffer (16 KiB at first with Linux's default
  // tcp_wmem) takes it whole, so the send linked before the close is never
  // short (a short send would not stop the close).
  static constexpr uint64_t kMaxBytesForBatchedClose = 4096;

 private:
  static void OnSent(void* self, int result);
  static void KeepReadAhead(void* self);
  // Read's answer from the read-ahead or the bytes kept from it.
  ssize_t TakeReadAhead(char* data, size_t size, bool* drained);
  ssize_t SendDirect(const char* data, size_t size);
  // Queues the send of the queue for the end of the batch (or cancels it).
  void Rearm();

  EventLoop* loop_;  // null: direct sends only
  BatchedSend send_;
  proxy::Buffer queue_;
  bool blocked_ = false;  // the socket had no room for the queue
  bool failed_ = false;   // a queued send failed: the peer is gone
  BatchedRecv recv_;
  proxy::Buffer kept_;  // read-ahead bytes of an earlier iteration, not read yet
  int kept_end_ = 1;    // its end of stream (0) or error (-errno) not read yet; 1: none
  uint64_t sent_ = 0;     // bytes the kernel took
};

}  // namespace kwd::net
