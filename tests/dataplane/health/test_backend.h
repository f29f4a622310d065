#pragma once

// A tiny HTTP backend on 127.0.0.1 for health-check and admin tests: answers
// every request with 200 or 500, or accepts and never answers. Its own
// thread, one poll() over the listener and the clients.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kwd::testing {

// A loopback port nothing listens on: bound, read, closed.
inline uint16_t ClosedPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

class TestBackend {
 public:
  enum class Mode { kOk, kError, kSilent };

  explicit TestBackend(Mode mode) : mode_(mode) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::listen(listen_fd_, 128);
    socklen_t len = sizeof addr;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    if (::pipe2(wake_, O_NONBLOCK | O_CLOEXEC) != 0) {
      wake_[0] = wake_[1] = -1;
    }
    thread_ = std::thread([this] { Run(); });
  }

  ~TestBackend() {
    stop_.store(true);
    char c = 1;
    ssize_t ignored = ::write(wake_[1], &c, 1);
    (void)ignored;
    thread_.join();
    for (const Client& client : clients_) {
      ::close(client.fd);
    }
    ::close(listen_fd_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }

  uint16_t port() const { return port_; }
  void set_mode(Mode mode) { mode_.store(mode); }
  int requests() const { return requests_.load(); }
  std::string last_request() const {
    std::lock_guard lock(mu_);
    return last_request_;
  }

 private:
  struct Client {
    int fd;
    std::string received;
    bool answered;
  };

  void Run() {
    std::vector<pollfd> fds;
    while (!stop_.load()) {
      fds.clear();
      fds.push_back({wake_[0], POLLIN, 0});
      fds.push_back({listen_fd_, POLLIN, 0});
      for (const Client& client : clients_) {
        fds.push_back({client.fd, POLLIN, 0});
      }
      if (::poll(fds.data(), fds.size(), 1000) <= 0) {
        continue;
      }
      for (size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents != 0) {
          Read(clients_[i - 2]);
        }
      }
      std::erase_if(clients_, [](const Client& client) { return client.fd < 0; });
      if ((fds[1].revents & POLLIN) != 0) {
        int fd;
        while ((fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
          clients_.push_back({fd, "", false});
        }
      }
    }
  }

  void Read(Client& client) {
    char buffer[4096];
    ssize_t n = ::recv(client.fd, buffer, sizeof buffer, 0);
    if (n <= 0) {
      ::close(client.fd);
      client.fd = -1;
      return;
    }
    client.received.append(buffer, static_cast<size_t>(n));
    if (client.answered || client.received.find("\r\n\r\n") == std::string::npos) {
      return;
    }
    client.answered = true;
    {
      std::lock_guard lock(mu_);
      last_request_ = client.received;
    }
    ++requests_;
    Mode mode = mode_.load();
    if (mode == Mode::kSilent) {
      return;  // keep the connection open, never answer
    }
    std::string response =
        mode == Mode::kOk ? "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
                          : "HTTP/1.1 500 Internal Server Error\r\nContent-Length: "
                            "0\r\nConnection: close\r\n\r\n";
    ssize_t ignored = ::send(client.fd, response.data(), response.size(), MSG_NOSIGNAL);
    (void)ignored;
    ::close(client.fd);
    client.fd = -1;
  }

  std::atomic<Mode> mode_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  mutable std::mutex mu_;
  std::string last_request_;
  std::vector<Client> clients_;
  std::thread thread_;
};

}  // namespace kwd::testing
