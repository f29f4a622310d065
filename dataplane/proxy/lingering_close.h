#pragma once

// The lingering close of a client connection (nginx's lingering_close): the
// connection has handed its last bytes (an error answer, a GOAWAY) to the
// kernel, but the client may still be sending (a request body the proxy did
// not read, pipelined requests, HTTP/2 frames in flight). Closing a socket
// with unread input makes Linux send a reset instead of a FIN, and a reset
// makes the client's kernel drop what it received and its application had
// not read yet: the answer. So the connection's write side is shut down (the
// FIN follows the last bytes), what the client still sends is read and
// dropped for a bounded time and byte count, and only then is the socket
// closed.
//
// A lingering connection is this small object, the descriptor and a timer:
// the HTTP/1.1 or HTTP/2 connection it came from, its buffers and its TLS
// state are freed when it starts (a TLS connection's close_notify is sent
// before; what follows is dropped without being decrypted). It stays counted
// in the worker's connections (--max-connections) until it closes, and a
// drain waits for it no longer than its bounds and the drain deadline.

#include <cstdint>

#include "dataplane/net/event_loop.h"
#include "dataplane/proxy/worker.h"

namespace kwd::proxy {

// At most this long in all after the write side is shut down...
inline constexpr int64_t kLingerTotalMs = 5000;
// ...and this long without a byte from the client (its FIN or a reset ends
// it at once)...
inline constexpr int64_t kLingerIdleMs = 1000;
// ...and this many bytes dropped. Generous: bytes a client sent before it
// saw the answer sit in its socket's send buffer and the proxy's receive
// buffer (several MiB each with Linux's autotuning) and arrive whatever it
// does; closing while they come resets the connection.
inline constexpr uint64_t kLingerMaxBytes = 16 * 1024 * 1024;

class LingeringClose final : public WorkerConnection {
 public:
  // Takes over `fd`, whose write side the caller shut down. `registered`:
  // the descriptor is in the worker's epoll set already (for another handler).
  LingeringClose(Worker* worker, int fd, bool registered);
  ~LingeringClose() override;

  void Start() override;
  // Its bounds are short (kLingerTotalMs); the drain deadline ends it too.
  void BeginDrain() override {}
  void OnIo(uint32_t events) override;

 private:
  // Reads and drops what the socket holds; closes at the client's end, an
  // error or the byte cap.
  void Discard();
  void Close();

  Worker* worker_;
  int fd_;
  bool registered_;
  bool closed_ = false;
  int64_t deadline_ms_ = 0;
  uint64_t dropped_bytes_ = 0;
  net::Timer timer_;
};

}  // namespace kwd::proxy
