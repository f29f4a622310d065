#pragma once

// A tiny HTTP backend on 127.0.0.1 for health-check and admin tests: answers
// every request with 200 or 500, or accepts and never answers. A
// tests/support TcpBackend: a thread per connection.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "tests/support/process.h"
#include "tests/support/tcp_backend.h"

namespace kwd::testing {

// A loopback port nothing listens on (ReserveFreePort: not one a parallel
// test or an outgoing connection is likely to take meanwhile).
inline uint16_t ClosedPort() { return kwd::testing::ReserveFreePort(); }

class TestBackend {
 public:
  enum class Mode { kOk, kError, kSilent };

  explicit TestBackend(Mode mode)
      : mode_(mode),
        server_([this](int fd) { Serve(fd); },
                {.backlog = 128, .max_connections = 100000, .close_when_done = true}) {}

  uint16_t port() const { return server_.port(); }
  void set_mode(Mode mode) { mode_.store(mode); }
  int requests() const { return requests_.load(); }
  std::string last_request() const {
    std::lock_guard lock(mu_);
    return last_request_;
  }

 private:
  // Answers the first request head, then the connection is closed; a silent
  // backend keeps reading (never answers) until the client closes.
  void Serve(int fd) {
    std::string received;
    char buffer[4096];
    for (int i = 0; i < 100000; ++i) {  // bounded
      ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
      if (n <= 0) {
        return;
      }
      received.append(buffer, static_cast<size_t>(n));
      if (received.find("\r\n\r\n") == std::string::npos) {
        continue;
      }
      {
        std::lock_guard lock(mu_);
        last_request_ = received;
      }
      ++requests_;
      Mode mode = mode_.load();
      if (mode == Mode::kSilent) {
        Drain(fd);  // keep the connection open, never answer
        return;
      }
      std::string response =
          mode == Mode::kOk ? "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
                            : "HTTP/1.1 500 Internal Server Error\r\nContent-Length: "
                              "0\r\nConnection: close\r\n\r\n";
      ssize_t ignored = ::send(fd, response.data(), response.size(), MSG_NOSIGNAL);
      (void)ignored;
      return;
    }
  }
  static void Drain(int fd) {
    char buffer[4096];
    for (int i = 0; i < 100000; ++i) {  // bounded
      if (::recv(fd, buffer, sizeof buffer, 0) <= 0) {
        return;
      }
    }
  }

  std::atomic<Mode> mode_;
  std::atomic<int> requests_{0};
  mutable std::mutex mu_;
  std::string last_request_;
  TcpBackend server_;  // last: stopped before what its handler uses
};

}  // namespace kwd::testing
