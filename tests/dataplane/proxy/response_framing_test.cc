// Black-box tests of how kwd-proxy frames a backend's response towards the
// client (RFC 9112 6): duplicate Content-Length, transfer codings before
// chunked, 1xx to HTTP/1.0 clients, and bodies the backend breaks after a
// good head. A scripted backend sends raw bytes and then closes, so the tests
// can send what no well-behaved server would.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/snapshot_io.h"
#include "tests/support/process.h"
#include "tests/support/tcp_backend.h"

namespace kwd {
namespace {

using testing::Process;

// Answers each connection's first request head with `response`, then closes
// the connection (health checks get a short 200). The responses say
// "Connection: close", so the proxy never reuses a connection it closes.
class ScriptedBackend {
 public:
  explicit ScriptedBackend(std::string response)
      : response_(std::move(response)),
        // One connection at a time: each answer is short.
        server_([this](int fd) { Serve(fd); },
                {.receive_timeout = std::chrono::seconds(5), .one_at_a_time = true}) {}
  uint16_t port() const { return server_.port(); }

 private:
  void Serve(int fd) {
    std::string in;
    char buf[4096];
    while (in.find("\r\n\r\n") == std::string::npos && in.size() < 65536) {
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) {
        return;
      }
      in.append(buf, static_cast<size_t>(n));
    }
    if (in.find("/health") != std::string::npos) {
      std::string_view ok = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
      ::send(fd, ok.data(), ok.size(), MSG_NOSIGNAL);
      return;
    }
    ::send(fd, response_.data(), response_.size(), MSG_NOSIGNAL);
    // The FIN on its own, after the proxy has read the data.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ::shutdown(fd, SHUT_WR);
    // Let the proxy read everything before the close (no reset from unread
    // bytes), but do not wait for a pooled connection to be closed.
    timeval drain{0, 300 * 1000};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &drain, sizeof drain);
    while (::recv(fd, buf, sizeof buf, 0) > 0) {
    }
  }
  std::string response_;
  testing::TcpBackend server_;  // last: stopped before response_ goes
};

// Everything the proxy sends on one connection, and how the connection ended.
struct Exchange {
  std::string bytes;
  bool clean_eof = false;  // FIN: a close-delimited body looks complete
  bool reset = false;      // RST: the client knows the response is broken
};

Exchange Send(uint16_t port, std::string_view request) {
  Exchange e;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return e;
  }
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  char buf[4096];
  for (int i = 0; i < 10000; ++i) {  // bounded
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      e.bytes.append(buf, static_cast<size_t>(n));
      continue;
    }
    e.clean_eof = n == 0;
    e.reset = n < 0 && errno == ECONNRESET;
    break;
  }
  ::close(fd);
  return e;
}

std::string Head(const std::string& bytes) {
  return bytes.substr(0, bytes.find("\r\n\r\n") + 2);
}
std::string Body(const std::string& bytes) {
  size_t end = bytes.find("\r\n\r\n");
  return end == std::string::npos ? "" : bytes.substr(end + 4);
}
int Count(const std::string& haystack, std::string_view needle) {
  int n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos;
       at = haystack.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

class ResponseFramingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/kwd_framing_" + std::to_string(::getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::create_directories(dir_);
  }

  // One Java group with the backend that every URL goes to.
  void StartProxy(const std::string& response) {
    backend_ = std::make_unique<ScriptedBackend>(response);
    StartProxyFor(backend_->port());
  }
  void StartProxyFor(uint16_t backend_port) {
    v1::Snapshot s;
    auto* g = s.add_groups();
    g->set_key("t/all");
    g->set_kind(v1::KIND_JAVA);
    g->set_strategy(v1::STRATEGY_WEIGHTED_ROUND_ROBIN);
    g->set_load_reset_interval_seconds(25);
    auto* hc = g->mutable_health_check();
    hc->set_path("/health");
    hc->set_interval_seconds(30);
    hc->set_timeout_seconds(1);
    hc->set_unhealthy_threshold(1);
    hc->set_healthy_threshold(1);
    auto* server = g->add_servers();
    server->set_name("S");
    server->set_address("127.0.0.1");
    server->set_port(backend_port);
    server->set_capacity(1);
    server->set_state(v1::SERVER_STATE_READY);
    auto* vh = s.add_virtual_hosts();
    vh->set_default_root_handler(v1::KIND_JAVA);
    vh->set_default_java_group("t/all");
    StampSnapshotVersion(&s);
    std::string path = dir_ + "/snapshot.json";
    std::ofstream(path) << SnapshotToJson(s);
    proxy_ = std::make_unique<Process>(
        std::vector<std::string>{testing::BinaryPath("kwd-proxy"), "serve", "--snapshot", path,
                                 "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"},
        dir_ + "/proxy.log");
    ASSERT_TRUE(proxy_->started()) << proxy_->Log();
  }
  uint16_t port() const { return proxy_->port(); }

  std::string dir_;
  std::unique_ptr<ScriptedBackend> backend_;
  std::unique_ptr<Process> proxy_;
};

constexpr std::string_view kGet11 = "GET /x HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n";
constexpr std::string_view kGet10 = "GET /x HTTP/1.0\r\nHost: h\r\n\r\n";

TEST_F(ResponseFramingTest, DuplicateContentLengthFieldsBecomeOne) {
  StartProxy(
      "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5\r\nX-A: 1\r\nContent-Length: "
      "5\r\n\r\nhello");
  Exchange e = Send(port(), kGet11);
  std::string head = Head(e.bytes);
  EXPECT_EQ(head.substr(0, 15), "HTTP/1.1 200 OK") << e.bytes;
  EXPECT_EQ(Count(head, "Content-Length"), 1) << head;
  EXPECT_NE(head.find("Content-Length: 5\r\n"), std::string::npos) << head;
  EXPECT_EQ(Body(e.bytes), "hello");
}

TEST_F(ResponseFramingTest, ContentLengthListOfIdenticalValuesBecomesOneValue) {
  StartProxy("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5, 5\r\n\r\nhello");
  Exchange e = Send(port(), kGet11);
  std::string head = Head(e.bytes);
  EXPECT_EQ(Count(head, "Content-Length"), 1) << head;
  EXPECT_NE(head.find("Content-Length: 5\r\n"), std::string::npos) << head;
  EXPECT_EQ(head.find("5, 5"), std::string::npos) << head;
  EXPECT_EQ(Body(e.bytes), "hello");
}

TEST_F(ResponseFramingTest, DifferingContentLengthsAre502) {
  StartProxy("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5, 6\r\n\r\nhello!");
  Exchange e = Send(port(), kGet11);
  EXPECT_EQ(e.bytes.substr(0, 12), "HTTP/1.1 502") << e.bytes;
  EXPECT_EQ(e.bytes.find("hello"), std::string::npos);
}

TEST_F(ResponseFramingTest, GzipBeforeChunkedIsKeptTowardsTheClient) {
  // The gzip bytes are opaque to the proxy: it re-chunks them and keeps the coding.
  StartProxy(
      "HTTP/1.1 200 OK\r\nConnection: close\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
      "4\r\nGZ01\r\n3\r\nGZ2\r\n0\r\n\r\n");
  Exchange e = Send(port(), kGet11);
  std::string head = Head(e.bytes);
  EXPECT_EQ(head.substr(0, 15), "HTTP/1.1 200 OK") << e.bytes;
  EXPECT_NE(head.find("Transfer-Encoding: gzip, chunked\r\n"), std::string::npos) << head;
  EXPECT_EQ(Count(head, "Transfer-Encoding"), 1) << head;
  std::string body = Body(e.bytes);
  EXPECT_NE(body.find("GZ01"), std::string::npos) << body;
  EXPECT_NE(body.find("GZ2"), std::string::npos) << body;
  EXPECT_EQ(body.substr(body.size() - 5), "0\r\n\r\n") << body;
}

TEST_F(ResponseFramingTest, GzipTransferCodingCannotReachAnHttp10Client) {
  // HTTP/1.0 has no Transfer-Encoding (RFC 9112 6.1), and dropping the field
  // would hand the client gzip bytes as the content: 502.
  StartProxy(
      "HTTP/1.1 200 OK\r\nConnection: close\r\nTransfer-Encoding: gzip, "
      "chunked\r\n\r\n4\r\nGZ01\r\n0\r\n\r\n");
  Exchange e = Send(port(), kGet10);
  EXPECT_EQ(e.bytes.substr(0, 12), "HTTP/1.1 502") << e.bytes;
  EXPECT_EQ(e.bytes.find("GZ01"), std::string::npos) << e.bytes;
  EXPECT_EQ(e.bytes.find("Transfer-Encoding"), std::string::npos) << e.bytes;
}

TEST_F(ResponseFramingTest, NoTransferEncodingFieldReachesAnHttp10Client) {
  // A response without a body (here to HEAD) may still name its codings.
  StartProxy("HTTP/1.1 200 OK\r\nConnection: close\r\nTransfer-Encoding: gzip, chunked\r\n\r\n");
  Exchange e = Send(port(), "HEAD /x HTTP/1.0\r\nHost: h\r\n\r\n");
  EXPECT_EQ(e.bytes.substr(0, 15), "HTTP/1.1 200 OK") << e.bytes;
  EXPECT_EQ(e.bytes.find("Transfer-Encoding"), std::string::npos) << e.bytes;
}

TEST_F(ResponseFramingTest, InterimResponsesAreNotSentToHttp10Clients) {
  StartProxy(
      "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n"
      "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok");
  Exchange old = Send(port(), kGet10);
  EXPECT_EQ(old.bytes.substr(0, 15), "HTTP/1.1 200 OK") << old.bytes;
  EXPECT_EQ(Count(old.bytes, "HTTP/1.1 "), 1) << old.bytes;
  EXPECT_EQ(Body(old.bytes), "ok");
  // An HTTP/1.1 client gets them.
  Exchange current = Send(port(), kGet11);
  EXPECT_EQ(current.bytes.substr(0, 12), "HTTP/1.1 100") << current.bytes;
  EXPECT_EQ(Count(current.bytes, "HTTP/1.1 "), 3) << current.bytes;
}

TEST_F(ResponseFramingTest, MalformedChunkAfterAGoodHeadIsNoCleanEndForAnHttp10Client) {
  // The body towards an HTTP/1.0 client is close-delimited: a FIN would make
  // the truncated body look complete, so the connection is reset.
  StartProxy(
      "HTTP/1.1 200 OK\r\nConnection: close\r\nTransfer-Encoding: "
      "chunked\r\n\r\n5\r\nhello\r\n3;=x\r\nabc\r\n0\r\n\r\n");
  Exchange e = Send(port(), kGet10);
  EXPECT_FALSE(e.clean_eof) << e.bytes;
  EXPECT_TRUE(e.reset) << e.bytes;
  EXPECT_EQ(e.bytes.find("abc"), std::string::npos) << e.bytes;
}

TEST_F(ResponseFramingTest, MalformedChunkAfterAGoodHeadEndsAnHttp11ResponseWithoutLastChunk) {
  StartProxy(
      "HTTP/1.1 200 OK\r\nConnection: close\r\nTransfer-Encoding: "
      "chunked\r\n\r\n5\r\nhello\r\nzz\r\nabc\r\n0\r\n\r\n");
  Exchange e = Send(port(), kGet11);
  EXPECT_FALSE(e.clean_eof) << e.bytes;
  EXPECT_EQ(e.bytes.find("0\r\n\r\n"), std::string::npos) << e.bytes;
  EXPECT_EQ(e.bytes.find("abc"), std::string::npos) << e.bytes;
}

TEST_F(ResponseFramingTest, ChunkedBodyClosedBeforeTheLastChunkIsNoCleanEnd) {
  StartProxy(
      "HTTP/1.1 200 OK\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n");
  Exchange old = Send(port(), kGet10);
  EXPECT_FALSE(old.clean_eof) << old.bytes;
  EXPECT_TRUE(old.reset) << old.bytes;
  Exchange current = Send(port(), kGet11);
  EXPECT_FALSE(current.clean_eof) << current.bytes;
  EXPECT_TRUE(current.reset) << current.bytes;
  EXPECT_EQ(current.bytes.find("0\r\n\r\n"), std::string::npos) << current.bytes;
}

// A 101 (or any switch to a tunnel) for a request that asked for no upgrade:
// passing it on would make the connection a raw tunnel to the backend, and
// the client's next requests on it would skip routing and permissions (a
// backend whose status an attacker can choose is enough).
TEST_F(ResponseFramingTest, SwitchingProtocolsNobodyAskedForIs502) {
  StartProxy(
      "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
      "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecret");
  Exchange e = Send(port(), kGet11);
  EXPECT_EQ(e.bytes.substr(0, 12), "HTTP/1.1 502") << e.bytes;
  EXPECT_EQ(e.bytes.find("101"), std::string::npos) << e.bytes;
  EXPECT_EQ(e.bytes.find("secret"), std::string::npos) << e.bytes;
  // An upgrade the proxy passed on was not asked for either.
  e = Send(port(), "GET /x HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n");
  EXPECT_EQ(e.bytes.substr(0, 12), "HTTP/1.1 502") << e.bytes;
}

// Keeps each connection open and answers every request head: "/first?N"
// with a response of exactly N bytes followed at once by a second, unasked
// response ("POISON"); anything else with "ok".
class OverAnsweringBackend {
 public:
  OverAnsweringBackend() {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(listener_, 16);
    socklen_t len = sizeof a;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] {
      for (int i = 0; i < 100; ++i) {  // bounded
        int fd = ::accept(listener_, nullptr, nullptr);
        if (fd < 0) {
          return;
        }
        std::lock_guard lock(mu_);
        fds_.push_back(fd);
        threads_.emplace_back([fd] { Serve(fd); });
      }
    });
  }
  ~OverAnsweringBackend() {
    ::shutdown(listener_, SHUT_RDWR);
    acceptor_.join();
    std::lock_guard lock(mu_);
    for (int fd : fds_) {
      ::shutdown(fd, SHUT_RDWR);
    }
    for (std::thread& t : threads_) {
      t.join();
    }
    for (int fd : fds_) {
      ::close(fd);
    }
    ::close(listener_);
  }
  uint16_t port() const { return port_; }

 private:
  static void Serve(int fd) {
    std::string in;
    char buf[4096];
    for (int requests = 0; requests < 100; ++requests) {
      size_t end;
      while ((end = in.find("\r\n\r\n")) == std::string::npos) {
        ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) {
          return;
        }
        in.append(buf, static_cast<size_t>(n));
      }
      std::string head = in.substr(0, end);
      in.erase(0, end + 4);
      std::string out;
      if (size_t at = head.find("/first?"); at != std::string::npos) {
        size_t total = std::stoul(head.substr(at + 7));
        size_t body = total;
        std::string prefix;
        do {
          prefix = "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(--body) + "\r\n\r\n";
        } while (prefix.size() + body > total);
        out = prefix + std::string(body, 'a');
        out += "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nPOISON";
      } else {
        out = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
      }
      ::send(fd, out.data(), out.size(), MSG_NOSIGNAL);
    }
  }
  int listener_ = -1;
  uint16_t port_ = 0;
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<int> fds_;
  std::vector<std::thread> threads_;
};

// A server that sends more than the response asked for must not leave the
// surplus on a pooled connection, where the next request (of any client)
// would read it as its answer. The surplus may still be in the socket when
// the response ends at the exact end of a read.
TEST_F(ResponseFramingTest, SurplusBytesAfterAResponseNeverReachTheNextClient) {
  OverAnsweringBackend backend;
  StartProxyFor(backend.port());
  for (int size : {4096, 8192, 16384, 32768, 65536}) {
    SCOPED_TRACE(size);
    Exchange first = Send(port(), "GET /first?" + std::to_string(size) +
                                      " HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
    EXPECT_EQ(first.bytes.find("POISON"), std::string::npos);
    Exchange next = Send(port(), kGet11);
    EXPECT_EQ(Body(next.bytes), "ok") << next.bytes;
  }
}

}  // namespace
}  // namespace kwd
