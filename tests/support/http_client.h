#pragma once

// A blocking HTTP/1.1 test client over one TCP connection to 127.0.0.1,
// with receive timeouts so a broken server fails a test instead of hanging
// it. Responses are parsed with the project's own parser (dataplane/http).

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kwd::testing {

struct HttpReply {
  int status = 0;  // 0: no (complete) response
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  bool closed = false;  // the server closed the connection after this reply

  std::string Header(std::string_view name) const;  // first, or ""
  std::vector<std::string> All(std::string_view name) const;
};

class HttpClient {
 public:
  explicit HttpClient(uint16_t port, std::chrono::milliseconds timeout = std::chrono::seconds(10));
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  bool connected() const { return fd_ >= 0; }
  bool Send(std::string_view bytes);
  // Reads one response to a request with `method` (skips 1xx unless asked).
  HttpReply Read(std::string_view method = "GET", bool keep_interim = false);
  HttpReply Request(std::string_view raw, std::string_view method = "GET");
  // GET `target` with extra header lines ("Name: value").
  HttpReply Get(std::string_view target, const std::vector<std::string>& headers = {});
  // Whether the server closed the connection (reads until EOF or timeout).
  bool WaitClosed();
  // Raw bytes received and not consumed yet.
  std::string TakeBuffered();
  bool ReadMore();

 private:
  int fd_ = -1;
  std::string buffer_;
  bool eof_ = false;
};

// A blocking TCP connection to 127.0.0.1:`port`, or -1 when the connect
// fails. `receive_buffer` > 0 sets SO_RCVBUF first (a slow reader's small
// window); `receive_timeout` > 0 sets SO_RCVTIMEO.
int ConnectLoopback(uint16_t port, int receive_buffer = 0,
                    std::chrono::milliseconds receive_timeout = {});

// One request on a fresh connection.
HttpReply HttpGet(uint16_t port, std::string_view target,
                  const std::vector<std::string>& headers = {});

// Sends "GET /healthz" with a header field of `bytes` bytes that never ends,
// until the server answers or closes, everything is sent, or `timeout`
// passes; returns the answer (status 0 when none came) and `sent` bytes.
HttpReply SendEndlessHead(uint16_t port, size_t bytes, size_t* sent,
                          std::chrono::milliseconds timeout = std::chrono::seconds(5));

// Cookie "name=value" pairs from every Set-Cookie of a reply (attributes dropped).
std::vector<std::pair<std::string, std::string>> SetCookies(const HttpReply& reply);

}  // namespace kwd::testing
