// Black-box tests: start kwd-demo-backend on port 0 and talk HTTP to it.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "dataplane/http/chunked.h"
#include "dataplane/http/framing.h"
#include "dataplane/http/parser.h"

namespace kwd::demo {
namespace {

class BackendProcess {
 public:
  BackendProcess(const std::string& instance, const std::string& kind) {
    int out[2];
    if (::pipe(out) != 0) {
      return;
    }
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      ::close(out[0]);
      ::close(out[1]);
      std::string binary = std::string(KWD_BINARY_DIR) + "/kwd-demo-backend";
      ::execl(binary.c_str(), binary.c_str(), "--listen", "127.0.0.1:0", "--instance",
              instance.c_str(), "--kind", kind.c_str(), static_cast<char*>(nullptr));
      std::_Exit(127);
    }
    ::close(out[1]);
    // The first line names the port; reading it waits for the bind.
    std::string line;
    char c;
    while (::read(out[0], &c, 1) == 1 && c != '\n') {
      line.push_back(c);
    }
    ::close(out[0]);
    const std::string prefix = "listening 127.0.0.1:";
    if (line.rfind(prefix, 0) == 0) {
      port_ = static_cast<uint16_t>(std::stoi(line.substr(prefix.size())));
    }
  }
  ~BackendProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  uint16_t port() const { return port_; }

 private:
  pid_t pid_ = -1;
  uint16_t port_ = 0;
};

struct Reply {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string Header(std::string_view name) const {
    for (const auto& [n, v] : headers) {
      if (http::EqualsIgnoreCase(n, name)) {
        return v;
      }
    }
    return {};
  }
  std::vector<std::string> All(std::string_view name) const {
    std::vector<std::string> out;
    for (const auto& [n, v] : headers) {
      if (http::EqualsIgnoreCase(n, name)) {
        out.push_back(v);
      }
    }
    return out;
  }
};

class Client {
 public:
  explicit Client(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  }
  ~Client() { ::close(fd_); }
  bool connected() const { return connected_; }

  bool Send(std::string_view data) {
    return ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(data.size());
  }
  bool ReadMore() {
    char chunk[8192];
    ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
    if (n <= 0) {
      return false;
    }
    buffer_.append(chunk, static_cast<size_t>(n));
    return true;
  }
  std::string TakeBytes(size_t n) {
    while (buffer_.size() < n) {
      if (!ReadMore()) {
        break;
      }
    }
    std::string out = buffer_.substr(0, n);
    buffer_.erase(0, out.size());
    return out;
  }

  // Reads one response (skipping 100 Continue unless asked for it).
  Reply Read(std::string_view method = "GET", bool keep_interim = false) {
    Reply reply;
    while (true) {
      http::ResponseParser parser;
      auto head = std::make_unique<http::ResponseHead>();
      http::ParseResult r = parser.Parse(buffer_, head.get());
      while (r.partial() && ReadMore()) {
        r = parser.Parse(buffer_, head.get());
      }
      if (!r.complete()) {
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
        reply.body = TakeBytes(static_cast<size_t>(info.content_length));
      } else if (info.body == http::BodyKind::kUntilClose) {
        while (ReadMore()) {
        }
        reply.body = std::move(buffer_);
        buffer_.clear();
      }
      return reply;
    }
  }

  Reply Request(std::string_view raw, std::string_view method = "GET") {
    if (!Send(raw)) {
      return {};
    }
    return Read(method);
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  std::string buffer_;
};

class DemoBackendTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    abap_ = new BackendProcess("erp1_ERP_00", "abap");
    java_ = new BackendProcess("j2ee1_JVA_01", "java");
  }
  static void TearDownTestSuite() {
    delete abap_;
    delete java_;
  }
  static BackendProcess* abap_;
  static BackendProcess* java_;
};
BackendProcess* DemoBackendTest::abap_ = nullptr;
BackendProcess* DemoBackendTest::java_ = nullptr;

TEST_F(DemoBackendTest, PrintsPortAndAnswersPings) {
  ASSERT_NE(abap_->port(), 0);
  Client client(abap_->port());
  ASSERT_TRUE(client.connected());
  Reply ping = client.Request("GET /sap/public/icman/ping HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(ping.status, 200);
  EXPECT_EQ(ping.Header("X-Served-By"), "erp1_ERP_00");
  // Keep-alive: the same connection serves the next request.
  Reply index = client.Request("GET /index.html HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(index.status, 200);
  EXPECT_EQ(index.Header("X-Served-By"), "erp1_ERP_00");
}

TEST_F(DemoBackendTest, IssuesSapContextIdOnlyWhenMissing) {
  Client client(abap_->port());
  Reply first = client.Request("GET /sap/bc/gui/x HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(first.status, 200);
  std::string cookie = first.Header("Set-Cookie");
  EXPECT_EQ(cookie.rfind("sap-contextid=SID%3aANON%3aerp1_ERP_00%3a", 0), 0u) << cookie;
  Reply again = client.Request(
      "GET /sap/bc/gui/x HTTP/1.1\r\nHost: x\r\nCookie: "
      "sap-contextid=SID%3aANON%3aerp1_ERP_00%3aabc"
      "\r\n\r\n");
  EXPECT_TRUE(again.All("Set-Cookie").empty());
  Reply by_query = client.Request(
      "GET /sap/bc/x?sap-contextid=SID%3aANON%3aerp1%3aabc HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_TRUE(by_query.All("Set-Cookie").empty());
}

TEST_F(DemoBackendTest, JavaIssuesJsessionidAndSaplb) {
  Client client(java_->port());
  Reply reply = client.Request("GET /irj/portal HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.Header("X-Served-By"), "j2ee1_JVA_01");
  std::vector<std::string> cookies = reply.All("Set-Cookie");
  ASSERT_EQ(cookies.size(), 2u);
  EXPECT_EQ(cookies[0].rfind("JSESSIONID=", 0), 0u);
  EXPECT_EQ(cookies[1].rfind("saplb_*=(j2ee1_JVA_01)", 0), 0u);
  Reply sticky =
      client.Request("GET /irj/portal HTTP/1.1\r\nHost: x\r\nCookie: JSESSIONID=abc\r\n\r\n");
  EXPECT_TRUE(sticky.All("Set-Cookie").empty());
}

TEST_F(DemoBackendTest, EchoesContentLengthAndChunkedBodies) {
  Client client(abap_->port());
  Reply plain = client.Request(
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nhello world", "POST");
  EXPECT_EQ(plain.status, 200);
  EXPECT_EQ(plain.body, "hello world");
  Reply chunked = client.Request(
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5\r\nhello\r\n6;x=y\r\n world\r\n0\r\n\r\n",
      "POST");
  EXPECT_EQ(chunked.body, "hello world");
  // Expect: 100-continue gets the interim response first.
  ASSERT_TRUE(
      client.Send("POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                  "Content-Length: 2\r\n\r\n"));
  Reply interim = client.Read("POST", /*keep_interim=*/true);
  EXPECT_EQ(interim.status, 100);
  ASSERT_TRUE(client.Send("ok"));
  Reply final_reply = client.Read("POST");
  EXPECT_EQ(final_reply.body, "ok");
}

TEST_F(DemoBackendTest, PipelinedRequestsAnswerInOrder) {
  Client client(abap_->port());
  ASSERT_TRUE(client.Send("GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_NE(client.Read().body.find("GET /a"), std::string::npos);
  EXPECT_NE(client.Read().body.find("GET /b"), std::string::npos);
}

TEST_F(DemoBackendTest, SlowWaitsTheRequestedTime) {
  Client client(abap_->port());
  auto start = std::chrono::steady_clock::now();
  Reply reply = client.Request("GET /slow?ms=150 HTTP/1.1\r\nHost: x\r\n\r\n");
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(reply.status, 200);
  EXPECT_GE(elapsed, std::chrono::milliseconds(150));
}

TEST_F(DemoBackendTest, MalformedRequestGets400AndClose) {
  Client client(abap_->port());
  Reply reply = client.Request(
      "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n");
  EXPECT_EQ(reply.status, 400);
  EXPECT_EQ(reply.Header("Connection"), "close");
}

std::string MaskedFrame(uint8_t opcode, std::string_view payload) {
  std::string frame;
  frame.push_back(static_cast<char>(0x80 | opcode));
  frame.push_back(static_cast<char>(0x80 | payload.size()));  // short payloads only
  const char mask[4] = {0x11, 0x22, 0x33, 0x44};
  frame.append(mask, 4);
  for (size_t i = 0; i < payload.size(); ++i) {
    frame.push_back(static_cast<char>(payload[i] ^ mask[i % 4]));
  }
  return frame;
}

TEST_F(DemoBackendTest, WebSocketEcho) {
  Client client(abap_->port());
  Reply handshake = client.Request(
      "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
      "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n");
  EXPECT_EQ(handshake.status, 101);
  // RFC 6455 section 1.3's example key and accept value.
  EXPECT_EQ(handshake.Header("Sec-WebSocket-Accept"), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
  ASSERT_TRUE(client.Send(MaskedFrame(0x1, "hello ws")));
  EXPECT_EQ(client.TakeBytes(10), std::string("\x81\x08hello ws", 10));
  ASSERT_TRUE(client.Send(MaskedFrame(0x9, "p")));
  EXPECT_EQ(client.TakeBytes(3), std::string("\x8A\x01p", 3));
  ASSERT_TRUE(client.Send(MaskedFrame(0x8, "")));
  EXPECT_EQ(client.TakeBytes(2), std::string("\x88\x00", 2));
}

}  // namespace
}  // namespace kwd::demo
