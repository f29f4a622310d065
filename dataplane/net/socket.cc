#include "dataplane/net/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

namespace kwd::net {

std::string AddressString(const Endpoint& endpoint) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (endpoint.addr.ss_family == AF_INET) {
    // Dotted quad by hand: inet_ntop goes through sprintf, ~1,700 instructions
    // for every accepted connection.
    auto* a = reinterpret_cast<const sockaddr_in*>(&endpoint.addr);
    uint32_t ip = ntohl(a->sin_addr.s_addr);
    char* p = buf;
    for (int shift = 24; shift >= 0; shift -= 8) {
      unsigned octet = (ip >> shift) & 0xff;
      if (octet >= 100) {
        *p++ = static_cast<char>('0' + octet / 100);
      }
      if (octet >= 10) {
        *p++ = static_cast<char>('0' + octet / 10 % 10);
      }
      *p++ = static_cast<char>('0' + octet % 10);
      *p++ = '.';
    }
    return std::string(buf, static_cast<size_t>(p - buf - 1));
  } else if (endpoint.addr.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<const sockaddr_in6*>(&endpoint.addr);
    inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf);
  }
  return buf;
}

uint16_t Endpoint::port() const {
  if (addr.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
  }
  if (addr.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  }
  return 0;
}

std::string Endpoint::ToString() const {
  std::string host = AddressString(*this);
  if (addr.ss_family == AF_INET6) {
    host = "[" + host + "]";
  }
  return host + ":" + std::to_string(port());
}

bool MakeEndpoint(std::string_view address, uint16_t port, Endpoint* out) {
  std::string host(address);
  if (host == "localhost") {
    host = "127.0.0.1";
  }
  *out = Endpoint{};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&out->addr);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    out->len = sizeof(sockaddr_in);
    return true;
  }
  *out = Endpoint{};
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&out->addr);
  if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    out->len = sizeof(sockaddr_in6);
    return true;
  }
  return false;
}

bool ParseEndpoint(std::string_view text, Endpoint* out, std::string* error) {
  std::string_view host;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      *error = "invalid address \"" + std::string(text) + "\": expected [v6]:port";
      return false;
    }
    host = text.substr(1, close - 1);
    port_text = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      *error = "invalid address \"" + std::string(text) + "\": expected host:port";
      return false;
    }
    host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
  }
  unsigned port = 0;
  auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || ptr != port_text.data() + port_text.size() || port > 65535) {
    *error = "invalid port in \"" + std::string(text) + "\"";
    return false;
  }
  if (host.empty()) {
    host = "0.0.0.0";
  }
  if (!MakeEndpoint(host, static_cast<uint16_t>(port), out)) {
    *error = "invalid address \"" + std::string(host) + "\": expected a numeric IP";
    return false;
  }
  return true;
}

bool PortFree(const Endpoint& endpoint, std::string* error) {
  if (endpoint.port() == 0) {
    return true;
  }
  int fd = socket(endpoint.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::string("socket: ") + std::strerror(errno);
    return false;
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // TIME_WAIT is no owner
  bool free = bind(fd, reinterpret_cast<const sockaddr*>(&endpoint.addr), endpoint.len) == 0;
  if (!free) {
    *error = "bind " + endpoint.ToString() + ": " + std::strerror(errno);
    if (errno == EADDRINUSE) {
      *error += " (another process listens there)";
    }
  }
  close(fd);
  return free;
}

int Listen(const Endpoint& endpoint, bool reuse_port, int backlog, std::string* error) {
  int fd = socket(endpoint.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::string("socket: ") + std::strerror(errno);
    return -1;
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (reuse_port) {
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  }
  if (bind(fd, reinterpret_cast<const sockaddr*>(&endpoint.addr), endpoint.len) != 0) {
    *error = "bind " + endpoint.ToString() + ": " + std::strerror(errno);
    close(fd);
    return -1;
  }
  if (listen(fd, backlog) != 0) {
    *error = "listen " + endpoint.ToString() + ": " + std::strerror(errno);
    close(fd);
    return -1;
  }
  return fd;
}

int ConnectNonBlocking(const Endpoint& endpoint, int* error_number) {
  int fd = socket(endpoint.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error_number = errno;
    return -1;
  }
  SetNoDelay(fd);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&endpoint.addr), endpoint.len) != 0 &&
      errno != EINPROGRESS) {
    *error_number = errno;
    close(fd);
    return -1;
  }
  *error_number = 0;
  return fd;
}

Endpoint LocalEndpoint(int fd) {
  Endpoint e;
  e.len = sizeof e.addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&e.addr), &e.len);
  return e;
}

Endpoint PeerEndpoint(int fd) {
  Endpoint e;
  e.len = sizeof e.addr;
  getpeername(fd, reinterpret_cast<sockaddr*>(&e.addr), &e.len);
  return e;
}

void SetNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void PrepareClientFirstListener(int fd, int defer_accept_seconds) {
  SetNoDelay(fd);
  if (defer_accept_seconds > 0) {
    setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer_accept_seconds,
               sizeof defer_accept_seconds);
  }
}

void AckWithTheAnswer(int fd) {
  int zero = 0;
  setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &zero, sizeof zero);
}

void AckAtOnce(int fd) {
  // Leaves delayed-ACK mode and sends an ACK that was held back.
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
}

void SetNotSentLowWater(int fd, int bytes) {
  setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &bytes, sizeof bytes);
}

void ResetOnClose(int fd) {
  linger reset{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
}

bool IsLocalResourceError(int error_number) {
  return error_number == EMFILE || error_number == ENFILE || error_number == ENOBUFS ||
         error_number == ENOMEM || error_number == EADDRNOTAVAIL;
}

int SocketError(int fd) {
  int err = 0;
  socklen_t len = sizeof err;
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  return err;
}

}  // namespace kwd::net
