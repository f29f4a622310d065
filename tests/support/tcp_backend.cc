#include "tests/support/tcp_backend.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace kwd::testing {

int ListenOnLoopback(uint16_t* port, int backlog, int type_flags) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | type_flags, 0);
  if (fd < 0) {
    return -1;
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, backlog) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    return -1;
  }
  *port = ntohs(a.sin_port);
  return fd;
}

TcpBackend::TcpBackend(Handler handler, Options options)
    : handler_(std::move(handler)), options_(options) {
  listener_ = ListenOnLoopback(&port_, options_.backlog);
  if (listener_ >= 0) {
    acceptor_ = std::thread([this] { Accept(); });
  }
}

TcpBackend::~TcpBackend() {
  if (listener_ >= 0) {
    ::shutdown(listener_, SHUT_RDWR);  // wakes the acceptor
    acceptor_.join();
    ::close(listener_);
  }
  std::list<Connection> connections;
  {
    std::lock_guard lock(mu_);
    for (const Connection& c : connections_) {
      if (c.fd >= 0) {
        ::shutdown(c.fd, SHUT_RDWR);  // wakes a handler blocked on it
      }
    }
    connections.swap(connections_);  // the nodes (and what threads point at) stay
  }
  for (Connection& c : connections) {
    if (c.thread.joinable()) {
      c.thread.join();
    }
    if (c.fd >= 0) {
      ::close(c.fd);
    }
  }
}

void TcpBackend::Accept() {
  for (int i = 0; i < options_.max_connections; ++i) {  // bounded
    int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) {
        continue;
      }
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors (a test may cause that on purpose): try again.
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      return;  // the listener was shut down
    }
    if (options_.receive_timeout.count() > 0) {
      auto us = std::chrono::duration_cast<std::chrono::microseconds>(options_.receive_timeout);
      timeval tv{static_cast<time_t>(us.count() / 1000000),
                 static_cast<suseconds_t>(us.count() % 1000000)};
      ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    }
    if (options_.one_at_a_time) {
      handler_(fd);
      ::close(fd);
      continue;
    }
    std::lock_guard lock(mu_);
    // Join the threads of connections already closed, so a long test does
    // not keep a finished thread per connection.
    std::erase_if(connections_, [](Connection& c) {
      if (!c.done || c.fd >= 0) {
        return false;
      }
      c.thread.join();  // it has nothing left to do but return
      return true;
    });
    Connection& c = connections_.emplace_back();
    c.fd = fd;
    c.thread = std::thread([this, &c] { Serve(&c); });
  }
}

void TcpBackend::Serve(Connection* connection) {
  handler_(connection->fd);
  std::lock_guard lock(mu_);
  if (options_.close_when_done) {
    ::close(connection->fd);
    connection->fd = -1;
  }
  connection->done = true;
}

}  // namespace kwd::testing
