#include "tests/support/http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <memory>

#include "dataplane/http/chunked.h"
#include "dataplane/http/framing.h"
#include "dataplane/http/parser.h"

namespace kwd::testing {

std::string HttpReply::Header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (http::EqualsIgnoreCase(n, name)) {
      return v;
    }
  }
  return {};
}

std::vector<std::string> HttpReply::All(std::string_view name) const {
  std::vector<std::string> out;
  for (const auto& [n, v] : headers) {
    if (http::EqualsIgnoreCase(n, name)) {
      out.push_back(v);
    }
  }
  return out;
}

HttpClient::HttpClient(uint16_t port, std::chrono::milliseconds timeout) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
    fd_ = fd;
  } else {
    ::close(fd);
  }
}

HttpClient::~HttpClient() {
  if (fd_ >= 0) {
    ::close(fd_);
  }
}

bool HttpClient::Send(std::string_view bytes) {
  while (!bytes.empty() && fd_ >= 0) {
    ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) {
      return false;
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return fd_ >= 0;
}

bool HttpClient::ReadMore() {
  if (fd_ < 0 || eof_) {
    return false;
  }
  char chunk[16384];
  ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
  if (n <= 0) {
    eof_ = n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
    return false;
  }
  buffer_.append(chunk, static_cast<size_t>(n));
  return true;
}

HttpReply HttpClient::Read(std::string_view method, bool keep_interim) {
  HttpReply reply;
  for (;;) {
    http::ResponseParser parser;
    auto head = std::make_unique<http::ResponseHead>();
    http::ParseResult r = parser.Parse(buffer_, head.get());
    while (r.partial() && ReadMore()) {
      r = parser.Parse(buffer_, head.get());
    }
    if (!r.complete()) {
      reply.closed = eof_;
      return reply;
    }
    http::ResponseInfo info;
    if (!http::AnalyzeResponse(*head, method, &info).ok()) {
      return reply;
    }
    reply.status = head->status_code;
    reply.headers.clear();
    for (const http::Header& h : head->fields()) {
      reply.headers.emplace_back(std::string(h.name), std::string(h.value));
    }
    buffer_.erase(0, r.consumed);
    if (info.interim && !keep_interim) {
      continue;
    }
    if (info.body == http::BodyKind::kContentLength) {
      while (buffer_.size() < info.content_length && ReadMore()) {
      }
      if (buffer_.size() < info.content_length) {
        reply.status = 0;
        return reply;
      }
      reply.body = buffer_.substr(0, static_cast<size_t>(info.content_length));
      buffer_.erase(0, reply.body.size());
    } else if (info.body == http::BodyKind::kChunked) {
      http::ChunkedDecoder decoder;
      size_t offset = 0;
      for (;;) {
        http::ChunkedResult c = decoder.Decode(std::string_view(buffer_).substr(offset));
        if (c.status == http::ChunkedStatus::kError) {
          reply.status = 0;
          return reply;
        }
        if (c.status == http::ChunkedStatus::kData) {
          reply.body.append(c.data);
        }
        offset += c.consumed;
        if (c.status == http::ChunkedStatus::kDone) {
          break;
        }
        if (c.status == http::ChunkedStatus::kNeedMore) {
          buffer_.erase(0, offset);
          offset = 0;
          if (!ReadMore()) {
            reply.status = 0;
            return reply;
          }
        }
      }
      buffer_.erase(0, offset);
    } else if (info.body == http::BodyKind::kUntilClose) {
      while (ReadMore()) {
      }
      reply.body = std::move(buffer_);
      buffer_.clear();
    }
    std::string connection = reply.Header("connection");
    reply.closed = http::HasToken(connection, "close");
    return reply;
  }
}

HttpReply HttpClient::Request(std::string_view raw, std::string_view method) {
  if (!Send(raw)) {
    return {};
  }
  return Read(method);
}

HttpReply HttpClient::Get(std::string_view target, const std::vector<std::string>& headers) {
  std::string raw = "GET " + std::string(target) + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  for (const auto& h : headers) {
    raw += h + "\r\n";
  }
  raw += "\r\n";
  return Request(raw);
}

bool HttpClient::WaitClosed() {
  while (ReadMore()) {
  }
  return eof_;
}

std::string HttpClient::TakeBuffered() {
  std::string out = std::move(buffer_);
  buffer_.clear();
  return out;
}

int ConnectLoopback(uint16_t port, int receive_buffer, std::chrono::milliseconds receive_timeout) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (receive_buffer > 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
  }
  if (receive_timeout.count() > 0) {
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(receive_timeout.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>((receive_timeout.count() % 1000) * 1000);
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

HttpReply HttpGet(uint16_t port, std::string_view target, const std::vector<std::string>& headers) {
  HttpClient client(port);
  return client.Get(target, headers);
}

HttpReply SendEndlessHead(uint16_t port, size_t bytes, size_t* sent,
                          std::chrono::milliseconds timeout) {
  HttpReply reply;
  *sent = 0;
  int fd = ConnectLoopback(port);
  if (fd < 0) {
    return reply;
  }
  const std::string start = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ";
  const std::string filler(64 * 1024, 'a');
  std::string received;
  bool sending = true;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, static_cast<short>(POLLIN | (sending ? POLLOUT : 0)), 0};
    if (::poll(&p, 1, 100) <= 0) {
      continue;
    }
    if ((p.revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      char buffer[4096];
      ssize_t n = ::recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
      if (n <= 0) {
        break;
      }
      received.append(buffer, static_cast<size_t>(n));
      sending = false;  // answered: stop feeding the head
      continue;
    }
    if (sending && (p.revents & POLLOUT) != 0) {
      const std::string& piece = *sent == 0 ? start : filler;
      ssize_t n = ::send(fd, piece.data(), piece.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n < 0) {
        sending = false;
        continue;
      }
      *sent += static_cast<size_t>(n);
      sending = *sent < bytes;
    }
  }
  ::close(fd);
  size_t head_end = received.find("\r\n\r\n");
  if (received.starts_with("HTTP/1.") && received.size() >= 12 && head_end != std::string::npos) {
    reply.status = std::stoi(received.substr(9, 3));
    reply.body = received.substr(head_end + 4);
  }
  return reply;
}

std::vector<std::pair<std::string, std::string>> SetCookies(const HttpReply& reply) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& value : reply.All("set-cookie")) {
    std::string pair = value.substr(0, value.find(';'));
    auto eq = pair.find('=');
    if (eq != std::string::npos) {
      out.emplace_back(pair.substr(0, eq), pair.substr(eq + 1));
    }
  }
  return out;
}

}  // namespace kwd::testing
