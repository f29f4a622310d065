#pragma once

// The small HTTP/1.1 server behind both admin ports (kwd-proxy --admin-listen,
// kwd-controller --admin-listen). One thread polls the listener and every
// connection (non-blocking sockets) and calls the handler for each complete
// request. Everything a client can make it hold is bounded:
//   - request head (request line and fields): max_head_bytes, else 431;
//   - request body: max_body_bytes by Content-Length, else 413; bodies are
//     read and discarded, never buffered (the admin endpoints take none);
//     Transfer-Encoding is refused (411), as is anything malformed (400);
//   - connections: max_connections at once; when all are taken, a new one
//     closes the oldest whose request has not fully arrived (so slow clients
//     cannot keep health probes out), else it waits in the listen backlog;
//   - time: the whole request must arrive within request_timeout_ms of the
//     accept (408), the answer must leave within write_timeout_ms.
// Every response closes the connection (Connection: close): there is no
// keep-alive or pipelining to account for. Every response, refusals
// included, forbids framing (X-Frame-Options, CSP frame-ancestors) and MIME
// sniffing; a request for a Host that is not this server's gets 421
// (AdminHostAllowed).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace kwd {

struct AdminHttpRequest {
  std::string method;
  std::string path;           // the target up to '?', as sent (percent-encoded)
  std::string query;          // after '?', without it
  std::string authorization;  // the Authorization field's value, "" when absent
  std::string host;           // the Host field's value, "" when absent
};

struct AdminHttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra fields
};

struct AdminHttpLimits {
  size_t max_head_bytes = 16 * 1024;
  size_t max_body_bytes = 1024 * 1024;
  size_t max_connections = 8;
  int64_t request_timeout_ms = 10'000;
  int64_t write_timeout_ms = 10'000;
  // Host names served besides the address the connection reached, loopback
  // addresses and "localhost" (--admin-allowed-hosts): exact names, case
  // insensitive, or "*.suffix". Any other Host gets 421, so that a page on
  // another site cannot read the admin port through DNS rebinding.
  std::vector<std::string> allowed_hosts;
};

// Whether a request whose Host field is `host` ("" when it sent none: HTTP/1.0
// tools; a browser always sends one) may be answered on a connection that
// reached `local_address` (numeric, as getsockname gives it). The port in
// Host is not compared: a Service or port-forward may change it.
bool AdminHostAllowed(std::string_view host, std::string_view local_address,
                      const std::vector<std::string>& allowed_hosts);

// Parses --admin-allowed-hosts: a comma-separated list of host names, IP
// addresses and "*.suffix" patterns, appended to `*out`. False with `*error`
// naming the bad entry.
bool ParseAdminAllowedHosts(std::string_view list, std::vector<std::string>* out,
                            std::string* error);

// The --help lines of --admin-allowed-hosts, the same in both binaries (a
// macro: the usage texts are string literals joined at compile time).
#define KWD_ADMIN_ALLOWED_HOSTS_HELP                                                      \
  "  --admin-allowed-hosts NAME,...   Host names the admin port answers besides its\n"    \
  "                                   own address, loopback and localhost (a name\n"      \
  "                                   \"*.example.com\" matches its subdomains); other\n" \
  "                                   Hosts get 421 (DNS rebinding). Repeatable\n"        \
  "                                   (default: none)\n"

// What the bytes received so far on a connection make of the request head.
// Pure (no sockets): the server calls it after every read, the fuzz target
// (tests/fuzz/admin_http_fuzz.cc) with arbitrary bytes.
struct AdminHttpHead {
  enum class Verdict {
    kNeedMore,  // no blank line yet and within max_head_bytes
    kRequest,   // a complete, well-formed head within every limit
    kRefuse,    // answer `status` with `reason` and close
  };
  Verdict verdict = Verdict::kNeedMore;
  int status = 0;               // kRefuse: 400, 411, 413, 431 or 505
  std::string reason;           // kRefuse: the answer's body text
  size_t head_size = 0;         // kRequest: bytes up to and with the blank line
  uint64_t content_length = 0;  // kRequest: body bytes after the head
  AdminHttpRequest request;     // kRequest
};

// `received`: every byte read so far (bytes after the head are the body or
// ignored). `searched`: how many of them an earlier call that answered
// kNeedMore had; it only saves searching them again.
AdminHttpHead ParseAdminHttpHead(std::string_view received, const AdminHttpLimits& limits,
                                 size_t searched = 0);

using AdminHttpHandler = std::function<AdminHttpResponse(const AdminHttpRequest&)>;

class AdminHttpServer {
 public:
  AdminHttpServer(AdminHttpLimits limits, AdminHttpHandler handler);
  ~AdminHttpServer();
  AdminHttpServer(const AdminHttpServer&) = delete;
  AdminHttpServer& operator=(const AdminHttpServer&) = delete;

  // Binds `host` (a numeric IPv4 or IPv6 address) and `port` (0: any free
  // one) and starts the thread. False with `error` set (strerror text) when
  // the address cannot be bound.
  bool Start(const std::string& host, uint16_t port, std::string* error);
  // Stops the thread and closes every connection. Idempotent.
  void Stop();
  uint16_t port() const { return port_; }

 private:
  struct Connection;
  void Run();

  AdminHttpLimits limits_;
  AdminHttpHandler handler_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: Stop() wakes the thread
  uint16_t port_ = 0;
  std::thread thread_;
};

// The reason phrase kwd writes for an HTTP status code ("Unknown" for codes it never sends).
std::string_view HttpReasonPhrase(int status);

}  // namespace kwd
