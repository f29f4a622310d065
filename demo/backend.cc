#include "demo/backend.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <thread>

#include "common/admin_http.h"
#include "dataplane/http/chunked.h"
#include "dataplane/http/framing.h"
#include "dataplane/http/parser.h"

namespace kwd::demo {

bool ParseBackendArgs(int argc, char** argv, BackendOptions* options, std::string* error) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (i + 1 >= argc) {
      *error = "missing value for " + std::string(arg);
      return false;
    }
    std::string_view value = argv[++i];
    if (arg == "--listen") {
      size_t colon = value.rfind(':');
      if (colon == std::string_view::npos) {
        *error = "--listen wants HOST:PORT";
        return false;
      }
      options->listen_host = std::string(value.substr(0, colon));
      unsigned long port = std::strtoul(std::string(value.substr(colon + 1)).c_str(), nullptr, 10);
      if (port > 65535) {
        *error = "bad port";
        return false;
      }
      options->listen_port = static_cast<uint16_t>(port);
    } else if (arg == "--instance") {
      options->instance = std::string(value);
    } else if (arg == "--kind") {
      if (value != "abap" && value != "java") {
        *error = "--kind is abap or java";
        return false;
      }
      options->kind = std::string(value);
    } else {
      *error = "unknown argument " + std::string(arg);
      return false;
    }
  }
  if (options->instance.empty()) {
    *error = "--instance is required";
    return false;
  }
  return true;
}

namespace {

using http::Header;

bool SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Appends what the socket has; false on EOF or error.
bool ReadMore(int fd, std::string& buffer) {
  char chunk[16 * 1024];
  while (true) {
    ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return false;
    }
    buffer.append(chunk, static_cast<size_t>(n));
    return true;
  }
}

std::string RandomToken(std::mt19937_64& rng, size_t length) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string out(length, 'x');
  for (char& c : out) {
    c = kAlphabet[rng() % (sizeof(kAlphabet) - 1)];
  }
  return out;
}

// What a handler needs from the request, copied out of the connection buffer
// because reading the body may move that buffer.
struct Request {
  std::string method;
  std::string path;
  std::string query;
  std::string target;
  std::string cookie;
  std::string websocket_key;
  bool upgrade_websocket = false;
  bool keep_alive = true;
  std::string body;
};

struct Response {
  int status = 200;
  std::string content_type = "text/plain";
  std::string extra_headers;  // complete "Name: value\r\n" lines
  std::string body;
};

std::string QueryParameter(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    size_t eq = pair.find('=');
    if (pair.substr(0, eq) == name) {
      return eq == std::string_view::npos ? std::string() : std::string(pair.substr(eq + 1));
    }
    if (amp == std::string_view::npos) {
      break;
    }
    query.remove_prefix(amp + 1);
  }
  return {};
}

std::string WebSocketAccept(std::string_view key) {
  std::string input(key);
  input += "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
  unsigned char digest[SHA_DIGEST_LENGTH];
  SHA1(reinterpret_cast<const unsigned char*>(input.data()), input.size(), digest);
  unsigned char encoded[64];
  int n = EVP_EncodeBlock(encoded, digest, SHA_DIGEST_LENGTH);
  return std::string(reinterpret_cast<char*>(encoded), static_cast<size_t>(n));
}

class Connection {
 public:
  Connection(int fd, const BackendOptions& options)
      : fd_(fd), options_(options), rng_(std::random_device{}()) {}
  ~Connection() { ::close(fd_); }

  void Serve() {
    while (true) {
      Request request;
      int error_status = 0;
      if (!ReadRequest(&request, &error_status)) {
        if (error_status != 0) {
          Response response;
          response.status = error_status;
          response.body = std::string(HttpReasonPhrase(error_status)) + "\n";
          Send(response, /*keep_alive=*/false, request.method == "HEAD");
        }
        return;
      }
      if (request.upgrade_websocket && request.path == "/ws") {
        WebSocketEcho(request);
        return;
      }
      Response response = Handle(request);
      if (!Send(response, request.keep_alive, request.method == "HEAD") || !request.keep_alive) {
        return;
      }
    }
  }

 private:
  bool ReadRequest(Request* request, int* error_status) {
    http::RequestParser parser;
    http::ParseResult parsed = parser.Parse(buffer_, head_.get());
    while (parsed.partial()) {
      if (!ReadMore(fd_, buffer_)) {
        return false;
      }
      parsed = parser.Parse(buffer_, head_.get());
    }
    if (parsed.failed()) {
      *error_status = parsed.http_status;
      return false;
    }
    http::RequestInfo info;
    http::FramingResult framing = http::AnalyzeRequest(*head_, {}, &info);
    if (!framing.ok()) {
      *error_status = framing.http_status;
      return false;
    }
    const http::RequestHead& head = *head_;
    request->method = std::string(head.method);
    request->target = std::string(head.target);
    std::string_view target = head.path_and_query.empty() ? head.target : head.path_and_query;
    size_t question = target.find('?');
    request->path = std::string(target.substr(0, question));
    if (question != std::string_view::npos) {
      request->query = std::string(target.substr(question + 1));
    }
    for (const Header& h : head.fields()) {
      if (http::EqualsIgnoreCase(h.name, "cookie")) {
        if (!request->cookie.empty()) {
          request->cookie += "; ";
        }
        request->cookie += h.value;
      } else if (http::EqualsIgnoreCase(h.name, "sec-websocket-key")) {
        request->websocket_key = std::string(h.value);
      }
    }
    request->upgrade_websocket = info.upgrade_websocket;
    request->keep_alive = info.keep_alive;
    buffer_.erase(0, parsed.consumed);

    if (info.expect_continue && !SendAll(fd_, "HTTP/1.1 100 Continue\r\n\r\n")) {
      return false;
    }
    if (info.body == http::BodyKind::kContentLength) {
      while (buffer_.size() < info.content_length) {
        if (!ReadMore(fd_, buffer_)) {
          return false;
        }
      }
      request->body = buffer_.substr(0, info.content_length);
      buffer_.erase(0, info.content_length);
    } else if (info.body == http::BodyKind::kChunked) {
      http::ChunkedDecoder decoder;
      size_t offset = 0;
      while (true) {
        http::ChunkedResult r = decoder.Decode(std::string_view(buffer_).substr(offset));
        offset += r.consumed;
        if (r.status == http::ChunkedStatus::kData) {
          request->body.append(r.data);
        } else if (r.status == http::ChunkedStatus::kDone) {
          break;
        } else if (r.status == http::ChunkedStatus::kError) {
          *error_status = r.http_status;
          return false;
        } else if (!ReadMore(fd_, buffer_)) {
          return false;
        }
      }
      buffer_.erase(0, offset);
    }
    return true;
  }

  bool HasSapContextId(const Request& request) const {
    return request.cookie.find("sap-contextid=") != std::string::npos ||
           request.target.find("sap-contextid=") != std::string::npos;
  }

  Response Handle(const Request& request) {
    Response response;
    const std::string& path = request.path;
    if (path == "/sap/public/icman/ping") {
      response.body = "pong " + options_.instance + "\n";
      return response;
    }
    if (request.method == "POST" && path == "/echo") {
      response.content_type = "application/octet-stream";
      response.body = request.body;
      return response;
    }
    if (path == "/slow") {
      long ms = std::strtol(QueryParameter(request.query, "ms").c_str(), nullptr, 10);
      ms = ms < 0 ? 0 : (ms > 60000 ? 60000 : ms);
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      response.body = "slept " + std::to_string(ms) + "ms on " + options_.instance + "\n";
      return response;
    }
    bool sap_path = path.rfind("/sap/", 0) == 0 || path.rfind("/sap(", 0) == 0;
    if (sap_path && !HasSapContextId(request)) {
      response.extra_headers += "Set-Cookie: sap-contextid=SID%3aANON%3a" + options_.instance +
                                "%3a" + RandomToken(rng_, 24) + "-NEW; path=/\r\n";
    }
    if (!sap_path && options_.kind == "java" && path != "/index.html" &&
        request.cookie.find("JSESSIONID=") == std::string::npos) {
      response.extra_headers +=
          "Set-Cookie: JSESSIONID=" + RandomToken(rng_, 32) + "; Path=/; HttpOnly\r\n";
      response.extra_headers += "Set-Cookie: saplb_*=(" + options_.instance + ")" +
                                std::to_string(rng_() % 90000 + 10000) + "; Path=/\r\n";
    }
    response.body = options_.instance + " " + options_.kind + " " + request.method + " " +
                    request.target + "\n";
    return response;
  }

  bool Send(const Response& response, bool keep_alive, bool head_only) {
    std::string out = "HTTP/1.1 " + std::to_string(response.status) + " " +
                      std::string(HttpReasonPhrase(response.status)) + "\r\n";
    out += "X-Served-By: " + options_.instance + "\r\n";
    out += "Content-Type: " + response.content_type + "\r\n";
    out += "Content-Length: " + std::to_string(response.body.size()) + "\r\n";
    out += response.extra_headers;
    if (!keep_alive) {
      out += "Connection: close\r\n";
    }
    out += "\r\n";
    if (!head_only) {
      out += response.body;
    }
    return SendAll(fd_, out);
  }

  // RFC 6455: echo every data frame back unmasked, answer ping with pong,
  // close after echoing a close frame.
  void WebSocketEcho(const Request& request) {
    std::string handshake =
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "X-Served-By: " +
        options_.instance + "\r\nSec-WebSocket-Accept: " + WebSocketAccept(request.websocket_key) +
        "\r\n\r\n";
    if (!SendAll(fd_, handshake)) {
      return;
    }
    constexpr uint64_t kMaxPayload = 16u << 20;
    while (true) {
      // Header: 2 bytes, extended length, 4-byte mask (client frames are masked).
      while (buffer_.size() < 2) {
        if (!ReadMore(fd_, buffer_)) {
          return;
        }
      }
      auto byte = [&](size_t i) { return static_cast<uint8_t>(buffer_[i]); };
      uint8_t first = byte(0);
      bool masked = (byte(1) & 0x80) != 0;
      uint64_t length = byte(1) & 0x7f;
      size_t header = 2;
      size_t extended = length == 126 ? 2 : (length == 127 ? 8 : 0);
      while (buffer_.size() < header + extended + (masked ? 4 : 0)) {
        if (!ReadMore(fd_, buffer_)) {
          return;
        }
      }
      if (extended != 0) {
        length = 0;
        for (size_t i = 0; i < extended; ++i) {
          length = (length << 8) | byte(header + i);
        }
        header += extended;
      }
      if (length > kMaxPayload) {
        return;
      }
      uint8_t mask[4] = {0, 0, 0, 0};
      if (masked) {
        for (size_t i = 0; i < 4; ++i) {
          mask[i] = byte(header + i);
        }
        header += 4;
      }
      while (buffer_.size() < header + length) {
        if (!ReadMore(fd_, buffer_)) {
          return;
        }
      }
      std::string payload = buffer_.substr(header, static_cast<size_t>(length));
      buffer_.erase(0, header + static_cast<size_t>(length));
      for (size_t i = 0; i < payload.size(); ++i) {
        payload[i] = static_cast<char>(payload[i] ^ mask[i % 4]);
      }
      uint8_t opcode = first & 0x0f;
      uint8_t reply_first = opcode == 0x9 ? static_cast<uint8_t>((first & 0xf0) | 0xA) : first;
      std::string frame;
      frame.push_back(static_cast<char>(reply_first));
      if (payload.size() < 126) {
        frame.push_back(static_cast<char>(payload.size()));
      } else if (payload.size() <= 0xffff) {
        frame.push_back(static_cast<char>(126));
        frame.push_back(static_cast<char>(payload.size() >> 8));
        frame.push_back(static_cast<char>(payload.size() & 0xff));
      } else {
        frame.push_back(static_cast<char>(127));
        for (int shift = 56; shift >= 0; shift -= 8) {
          frame.push_back(
              static_cast<char>((static_cast<uint64_t>(payload.size()) >> shift) & 0xff));
        }
      }
      frame += payload;
      if (opcode == 0xA) {
        continue;  // unsolicited pong: ignore
      }
      if (!SendAll(fd_, frame) || opcode == 0x8) {
        return;
      }
    }
  }

  int fd_;
  const BackendOptions& options_;
  std::mt19937_64 rng_;
  std::string buffer_;
  std::unique_ptr<http::RequestHead> head_ = std::make_unique<http::RequestHead>();
};

}  // namespace

int RunBackend(const BackendOptions& options) {
  ::signal(SIGPIPE, SIG_IGN);
  int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0) {
    std::perror("socket");
    return 1;
  }
  int one = 1;
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(options.listen_port);
  if (::inet_pton(AF_INET, options.listen_host.c_str(), &address.sin_addr) != 1) {
    std::fprintf(stderr, "bad listen address %s\n", options.listen_host.c_str());
    return 1;
  }
  if (::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::listen(listener, 128) != 0) {
    std::perror("bind/listen");
    return 1;
  }
  socklen_t length = sizeof(address);
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length);
  std::printf("listening %s:%u\n", options.listen_host.c_str(), ntohs(address.sin_port));
  std::fflush(stdout);
  while (true) {
    int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE) {
        continue;
      }
      std::perror("accept");
      return 1;
    }
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    std::thread([fd, &options] {
      Connection connection(fd, options);
      connection.Serve();
    }).detach();
  }
}

}  // namespace kwd::demo
