#pragma once

// A raw-socket TCP server on 127.0.0.1 for black-box tests that need a
// backend to send what no well-behaved server would: it listens on a free
// loopback port and hands each accepted connection to a handler, by default
// on a thread of its own. Bounded (a number of connections, then it stops
// accepting) and cleaned up in the destructor: the listener is shut down,
// connections still open are shut down, every thread is joined and every
// descriptor closed.

#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <thread>

namespace kwd::testing {

// A listening TCP socket on 127.0.0.1 at a free port (*port), with
// SOCK_CLOEXEC and `type_flags` (SOCK_NONBLOCK...); -1 on failure.
int ListenOnLoopback(uint16_t* port, int backlog = 16, int type_flags = 0);

class TcpBackend {
 public:
  // Runs with the accepted (blocking) socket; the backend owns the descriptor.
  using Handler = std::function<void(int fd)>;

  struct Options {
    int backlog = 16;
    int max_connections = 1000;  // accepts this many, then stops accepting
    // SO_RCVTIMEO of each accepted socket; zero: none.
    std::chrono::milliseconds receive_timeout{0};
    // Close a connection as soon as its handler returns (a FIN the test can
    // see); otherwise it stays open until the destructor.
    bool close_when_done = false;
    // One connection at a time, on the accepting thread, closed when the
    // handler returns (for short scripted answers).
    bool one_at_a_time = false;
  };

  explicit TcpBackend(Handler handler) : TcpBackend(std::move(handler), Options()) {}
  TcpBackend(Handler handler, Options options);
  ~TcpBackend();
  TcpBackend(const TcpBackend&) = delete;
  TcpBackend& operator=(const TcpBackend&) = delete;

  uint16_t port() const { return port_; }

 private:
  struct Connection {
    int fd = -1;
    std::thread thread;
    bool done = false;
  };

  void Accept();
  void Serve(Connection* connection);

  Handler handler_;
  Options options_;
  int listener_ = -1;
  uint16_t port_ = 0;
  std::thread acceptor_;
  std::mutex mu_;
  std::list<Connection> connections_;  // stable addresses for the threads
};

}  // namespace kwd::testing
