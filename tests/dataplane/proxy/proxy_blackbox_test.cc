// Black-box tests of `kwd-proxy serve`: real proxy and demo-backend processes
// on loopback, real HTTP. The snapshot is written by the test (the controller
// has its own tests); the proxy reads it like `kwd-controller compile` output.
#include <gtest/gtest.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/snapshot_io.h"
#include "tests/support/http_client.h"
#include "tests/support/process.h"
#include "tests/support/tcp_backend.h"

namespace kwd {
namespace {

using testing::HttpClient;
using testing::HttpGet;
using testing::HttpReply;
using testing::Process;

std::unique_ptr<Process> StartBackend(const std::string& instance, const std::string& kind) {
  return std::make_unique<Process>(std::vector<std::string>{
      testing::BinaryPath("kwd-demo-backend"), "--listen", "127.0.0.1:0", "--instance", instance,
      "--kind", kind});
}

struct ServerSpec {
  std::string name;
  uint16_t port;
  uint32_t capacity;
  v1::ServerState state = v1::SERVER_STATE_READY;
};

v1::Group* AddGroup(v1::Snapshot* s, const std::string& key, v1::Kind kind,
                    const std::vector<ServerSpec>& servers,
                    v1::Strategy strategy = v1::STRATEGY_WEIGHTED_ROUND_ROBIN) {
  auto* g = s->add_groups();
  g->set_key(key);
  g->set_kind(kind);
  g->set_strategy(strategy);
  g->set_load_reset_interval_seconds(25);
  auto* hc = g->mutable_health_check();
  hc->set_path(kind == v1::KIND_ABAP ? "/sap/public/icman/ping" : "/index.html");
  hc->set_interval_seconds(1);
  hc->set_timeout_seconds(1);
  hc->set_unhealthy_threshold(1);
  hc->set_healthy_threshold(1);
  auto* sa = g->mutable_session_affinity();
  for (auto id : {v1::SESSION_IDENTIFIER_SAP_CONTEXTID, v1::SESSION_IDENTIFIER_SAPLB,
                  v1::SESSION_IDENTIFIER_JSESSIONID, v1::SESSION_IDENTIFIER_SAP_EXT_SID}) {
    sa->add_identifiers(id);
  }
  sa->set_session_table_max_entries(1000);
  sa->set_session_table_idle_timeout_seconds(3600);
  sa->set_affinity_cookie_enabled(true);
  sa->set_affinity_cookie_name("kwd_affinity");
  for (const auto& spec : servers) {
    auto* server = g->add_servers();
    server->set_name(spec.name);
    server->set_address("127.0.0.1");
    server->set_port(spec.port);
    server->set_capacity(spec.capacity);
    server->set_state(spec.state);
  }
  return g;
}

// ABAP group "erp/public" (A, B), Java group "erp/portal" (J1, J2), rules
// /sap/ -> public, /irj/ -> portal, a deny and a secure permission.
v1::Snapshot SapSnapshot(const std::vector<ServerSpec>& abap, const std::vector<ServerSpec>& java) {
  v1::Snapshot s;
  AddGroup(&s, "erp/portal", v1::KIND_JAVA, java);
  AddGroup(&s, "erp/public", v1::KIND_ABAP, abap);
  auto* vh = s.add_virtual_hosts();
  vh->set_default_root_handler(v1::KIND_JAVA);
  vh->set_default_abap_group("erp/public");
  vh->set_default_java_group("erp/portal");
  auto* irj = vh->add_rules();
  irj->set_prefix("/irj/");
  irj->set_kind(v1::KIND_JAVA);
  irj->set_group("erp/portal");
  auto* nogroup = vh->add_rules();
  nogroup->set_prefix("/nogroup/");
  nogroup->set_kind(v1::KIND_ABAP);
  auto* sap = vh->add_rules();
  sap->set_prefix("/sap/");
  sap->set_kind(v1::KIND_ABAP);
  sap->set_group("erp/public");
  auto* deny = vh->add_permissions();
  deny->set_action(v1::PERMISSION_ACTION_DENY);
  deny->set_pattern("*.cgi");
  auto* secure = vh->add_permissions();
  secure->set_action(v1::PERMISSION_ACTION_SECURE);
  secure->set_pattern("/sap/bc/secure/*");
  StampSnapshotVersion(&s);
  return s;
}

void WriteSnapshot(const std::string& path, const v1::Snapshot& snapshot) {
  std::string tmp = path + ".tmp";
  std::ofstream(tmp) << SnapshotToJson(snapshot);
  std::rename(tmp.c_str(), path.c_str());
}

class ProxyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/kwd_proxy_" + std::to_string(::getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::create_directories(dir_);
    a_ = StartBackend("A", "abap");
    b_ = StartBackend("B", "abap");
    j1_ = StartBackend("J1", "java");
    j2_ = StartBackend("J2", "java");
    ASSERT_TRUE(a_->started() && b_->started() && j1_->started() && j2_->started());
    snapshot_path_ = dir_ + "/snapshot.json";
    WriteSnapshot(snapshot_path_, DefaultSnapshot());
  }

  v1::Snapshot DefaultSnapshot() {
    return SapSnapshot({{"A", a_->port(), 2}, {"B", b_->port(), 1}},
                       {{"J1", j1_->port(), 1}, {"J2", j2_->port(), 1}});
  }

  void StartProxy(std::vector<std::string> extra = {}) {
    std::vector<std::string> argv{testing::BinaryPath("kwd-proxy"),
                                  "serve",
                                  "--snapshot",
                                  snapshot_path_,
                                  "--listen",
                                  "127.0.0.1:0",
                                  "--admin-listen",
                                  "127.0.0.1:0",
                                  "--access-log",
                                  dir_ + "/access.log"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    proxy_ = std::make_unique<Process>(argv, dir_ + "/proxy.log");
    ASSERT_TRUE(proxy_->started()) << proxy_->Log();
  }

  uint16_t port() const { return proxy_->port(); }

  std::string dir_;
  std::string snapshot_path_;
  std::unique_ptr<Process> a_, b_, j1_, j2_;
  std::unique_ptr<Process> proxy_;
};

// kwd's listeners use SO_REUSEPORT (one per worker). Without a check a
// second kwd-proxy given the same --listen (or 0.0.0.0 over 127.0.0.1) bound
// it too and took part of the first one's connections without a word; it
// must refuse to start instead, and the first one keep every connection.
TEST_F(ProxyTest, SecondProxyOnTheSamePortRefusesToStart) {
  StartProxy();
  const std::string taken = std::to_string(port());
  for (const std::string& listen : {"127.0.0.1:" + taken, "0.0.0.0:" + taken}) {
    SCOPED_TRACE(listen);
    Process second({testing::BinaryPath("kwd-proxy"), "serve", "--snapshot", snapshot_path_,
                    "--listen", listen, "--admin-listen", "127.0.0.1:0", "--access-log", "off"},
                   dir_ + "/second.log", /*wait_for_listening=*/false);
    ASSERT_TRUE(testing::WaitFor([&] { return !second.Alive(); })) << second.Log();
    EXPECT_NE(second.Log().find("--listen: bind " + listen + ": Address already in use"),
              std::string::npos)
        << second.Log();
  }
  // Every connection reaches the first proxy (a second listener in the
  // SO_REUSEPORT group would have taken about half of them).
  for (int i = 0; i < 20; ++i) {
    HttpClient client(port());
    EXPECT_EQ(client.Get("/sap/bc/ping").status, 200) << i;
  }
  EXPECT_TRUE(proxy_->Alive());
}

// Two of the proxy's own listeners on one port would join one SO_REUSEPORT
// group too: HTTP and passthrough connections split between them. Refused;
// the same port on another address (IPv6 loopback) is not the same.
TEST_F(ProxyTest, TwoListenersOnOneAddressAndPortAreRefused) {
  const std::string port = std::to_string(testing::ReserveFreePort());
  int started = 0;
  auto start = [&](const std::string& passthrough) {
    // A log of its own: the previous proxy's lines must not satisfy a wait.
    return std::make_unique<Process>(
        std::vector<std::string>{testing::BinaryPath("kwd-proxy"), "serve", "--snapshot",
                                 snapshot_path_, "--listen", "127.0.0.1:" + port,
                                 "--passthrough-listen", passthrough, "--admin-listen",
                                 "127.0.0.1:0", "--access-log", "off"},
        dir_ + "/proxy-" + std::to_string(++started) + ".log", /*wait_for_listening=*/false);
  };
  for (const std::string& passthrough : {"127.0.0.1:" + port, "[::ffff:127.0.0.1]:" + port}) {
    SCOPED_TRACE(passthrough);
    auto proxy = start(passthrough);
    ASSERT_TRUE(testing::WaitFor([&] { return !proxy->Alive(); })) << proxy->Log();
    EXPECT_NE(proxy->Log().find("--passthrough-listen " + passthrough +
                                ": the same address and port as --listen 127.0.0.1:" + port),
              std::string::npos)
        << proxy->Log();
  }
  // Another address, or a wildcard beside the specific address (the kernel
  // gives each connection to the most specific listener): both start, and a
  // connection to 127.0.0.1 reaches the HTTP listener.
  for (const std::string& passthrough : {"127.0.0.2:" + port, "0.0.0.0:" + port}) {
    SCOPED_TRACE(passthrough);
    auto proxy = start(passthrough);
    ASSERT_TRUE(testing::WaitFor([&] { return proxy->Log().find("listening for TLS passthrough") !=
                                              std::string::npos; }))
        << proxy->Log();
    HttpClient client(static_cast<uint16_t>(std::stoi(port)));
    HttpReply reply = client.Get("/sap/bc/ping");
    EXPECT_EQ(reply.status, 200) << proxy->Log();
    EXPECT_TRUE(proxy->Alive()) << proxy->Log();
  }
}

TEST_F(ProxyTest, BalancesByCapacityTwoToOne) {
  StartProxy();
  HttpClient client(port());
  std::map<std::string, int> served;
  std::string sequence;
  for (int i = 0; i < 300; ++i) {
    HttpReply r = client.Get("/sap/bc/ping_" + std::to_string(i),
                             {"Cookie: sap-contextid=none"});
    ASSERT_EQ(r.status, 200) << i;
    std::string by = r.Header("x-served-by");
    served[by]++;
    if (i < 6) {
      sequence += by;
    }
  }
  // weighted_round_robin with capacities 2 and 1, one request at a time.
  EXPECT_EQ(sequence, "AABAAB");
  EXPECT_EQ(served["A"], 200);
  EXPECT_EQ(served["B"], 100);
}

TEST_F(ProxyTest, SapContextIdCookieIssuedByTheBackendKeepsTheSessionOnItsServer) {
  StartProxy();
  HttpReply first = HttpGet(port(), "/sap/bc/gui/start");
  ASSERT_EQ(first.status, 200);
  std::string server = first.Header("x-served-by");
  std::string cookie;
  for (const auto& [name, value] : testing::SetCookies(first)) {
    if (name == "sap-contextid") {
      cookie = "sap-contextid=" + value;
    }
  }
  ASSERT_FALSE(cookie.empty());
  for (int i = 0; i < 10; ++i) {
    HttpReply r = HttpGet(port(), "/sap/bc/gui/step", {"Cookie: " + cookie});
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(r.Header("x-served-by"), server) << i;
  }
  // The same identifier in the query and as a path parameter.
  std::string value = cookie.substr(cookie.find('=') + 1);
  EXPECT_EQ(HttpGet(port(), "/sap/bc/x?sap-contextid=" + value).Header("x-served-by"), server);
  EXPECT_EQ(HttpGet(port(), "/sap/bc/x;sap-contextid=" + value + "/y").Header("x-served-by"),
            server);
}

TEST_F(ProxyTest, SaplbCookieRoutesToTheNamedJavaInstance) {
  StartProxy();
  for (const char* instance : {"J1", "J2"}) {
    for (int i = 0; i < 5; ++i) {
      HttpReply r = HttpGet(port(), "/irj/portal",
                            {std::string("Cookie: saplb_*=(") + instance + ")12345"});
      ASSERT_EQ(r.status, 200);
      EXPECT_EQ(r.Header("x-served-by"), instance);
    }
  }
}

TEST_F(ProxyTest, LearnsJsessionidFromSetCookieAndSetsTheAffinityCookie) {
  StartProxy();
  HttpReply first = HttpGet(port(), "/irj/portal/start");
  ASSERT_EQ(first.status, 200);
  std::string server = first.Header("x-served-by");
  std::string jsessionid;
  std::string affinity;
  for (const auto& [name, value] : testing::SetCookies(first)) {
    if (name == "JSESSIONID") {
      jsessionid = value;
    }
    if (name == "kwd_affinity") {
      affinity = value;
    }
  }
  ASSERT_FALSE(jsessionid.empty());
  ASSERT_FALSE(affinity.empty()) << "the proxy sets its affinity cookie when it learns a session";
  for (int i = 0; i < 8; ++i) {
    HttpReply r = HttpGet(port(), "/irj/portal/next", {"Cookie: JSESSIONID=" + jsessionid});
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(r.Header("x-served-by"), server) << "by JSESSIONID, request " << i;
  }
  for (int i = 0; i < 8; ++i) {
    HttpReply r = HttpGet(port(), "/irj/portal/next",
                          {"Cookie: kwd_affinity=" + affinity + "; JSESSIONID=unknown-id"});
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(r.Header("x-served-by"), server) << "by affinity cookie, request " << i;
  }
  // A forged affinity cookie is ignored, not trusted: the requests are
  // balanced, and after 17 sticky requests to `server` the balancer sends the
  // next ones to the other server of equal capacity.
  std::string forged = affinity;
  forged[0] = forged[0] == 'A' ? 'B' : 'A';
  for (int i = 0; i < 6; ++i) {
    HttpReply r = HttpGet(port(), "/irj/x", {"Cookie: kwd_affinity=" + forged});
    EXPECT_NE(r.Header("x-served-by"), server) << i;
  }
}

TEST_F(ProxyTest, SapExtSidIsRecordedWhenFirstBalanced) {
  StartProxy();
  std::string first = HttpGet(port(), "/sap/;sap-ext-sid=PORTAL42/bc/x").Header("x-served-by");
  ASSERT_FALSE(first.empty());
  for (int i = 0; i < 9; ++i) {
    EXPECT_EQ(HttpGet(port(), "/sap/;sap-ext-sid=PORTAL42/bc/y").Header("x-served-by"), first);
  }
}

TEST_F(ProxyTest, AnswersDeniedUnknownAndSecureWithSapErrorPages) {
  StartProxy();
  HttpReply denied = HttpGet(port(), "/sap/bc/run.cgi");
  EXPECT_EQ(denied.status, 403);
  EXPECT_EQ(denied.Header("x-kwd-error"), "EPERM");
  EXPECT_NE(denied.body.find("<html>"), std::string::npos);
  HttpReply secure = HttpGet(port(), "/sap/bc/secure/x");
  EXPECT_EQ(secure.status, 403);
  HttpReply nogroup = HttpGet(port(), "/nogroup/x", {"Accept: application/json"});
  EXPECT_EQ(nogroup.status, 503);
  EXPECT_EQ(nogroup.Header("content-type"), "application/json");
  EXPECT_NE(nogroup.body.find("\"error\":\"EDISPATCHERR\""), std::string::npos) << nogroup.body;
  // The connection stays usable after an answer the proxy made itself.
  HttpClient client(port());
  EXPECT_EQ(client.Get("/sap/bc/run.cgi").status, 403);
  EXPECT_EQ(client.Get("/sap/bc/ok").status, 200);
}

TEST_F(ProxyTest, PipelinedRequestsAreAnsweredInOrder) {
  StartProxy();
  HttpClient client(port());
  std::string batch;
  for (int i = 0; i < 5; ++i) {
    batch += "GET /sap/bc/p" + std::to_string(i) + " HTTP/1.1\r\nHost: x\r\n\r\n";
  }
  batch += "HEAD /sap/bc/head HTTP/1.1\r\nHost: x\r\n\r\n";
  batch += "GET /sap/bc/last HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_TRUE(client.Send(batch));
  for (int i = 0; i < 5; ++i) {
    HttpReply r = client.Read();
    ASSERT_EQ(r.status, 200);
    EXPECT_NE(r.body.find("/sap/bc/p" + std::to_string(i)), std::string::npos) << r.body;
  }
  HttpReply head = client.Read("HEAD");
  EXPECT_EQ(head.status, 200);
  EXPECT_TRUE(head.body.empty());
  HttpReply last = client.Read();
  EXPECT_NE(last.body.find("/sap/bc/last"), std::string::npos);
}

TEST_F(ProxyTest, StreamsContentLengthAndChunkedBodies) {
  StartProxy();
  std::string payload;
  for (int i = 0; i < 20000; ++i) {
    payload += "line " + std::to_string(i) + "\n";
  }
  HttpClient client(port());
  HttpReply plain = client.Request("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                                   std::to_string(payload.size()) + "\r\n\r\n" + payload);
  ASSERT_EQ(plain.status, 200);
  EXPECT_EQ(plain.body, payload);
  std::string chunked = "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (size_t off = 0; off < payload.size(); off += 7000) {
    std::string part = payload.substr(off, 7000);
    char size[16];
    std::snprintf(size, sizeof size, "%zx", part.size());
    chunked += std::string(size) + ";ext=1\r\n" + part + "\r\n";
  }
  chunked += "0\r\nX-Trailer: t\r\n\r\n";
  HttpReply echoed = client.Request(chunked);
  ASSERT_EQ(echoed.status, 200);
  EXPECT_EQ(echoed.body, payload);
}

// A backend that answers every request with one canned raw response (to send
// what the demo backend never does). A thread per connection.
class CannedBackend {
 public:
  explicit CannedBackend(std::string response)
      : response_(std::move(response)), server_([this](int fd) { Serve(fd); }) {}
  uint16_t port() const { return server_.port(); }

 private:
  void Serve(int fd) {
    std::string in;
    char buf[4096];
    for (int i = 0; i < 100; ++i) {  // bounded: requests on one connection
      while (in.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) {
          return;
        }
        in.append(buf, n);
      }
      in.erase(0, in.find("\r\n\r\n") + 4);
      ::send(fd, response_.data(), response_.size(), MSG_NOSIGNAL);
    }
  }
  std::string response_;
  testing::TcpBackend server_;  // last: stopped before response_ goes
};

TEST_F(ProxyTest, ReframesChunkedResponsesAndDropsTrailers) {
  CannedBackend chunked(
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Checksum\r\n"
      "X-Served-By: canned\r\n\r\n"
      "5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nX-Checksum: 42\r\n\r\n");
  WriteSnapshot(snapshot_path_,
                SapSnapshot({{"C", chunked.port(), 1}}, {{"J1", j1_->port(), 1}}));
  StartProxy();
  HttpClient client(port());
  for (int i = 0; i < 3; ++i) {  // keep-alive across re-framed responses
    HttpReply r = client.Get("/sap/bc/chunked");
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(r.body, "hello, world");
    EXPECT_EQ(r.Header("transfer-encoding"), "chunked");
    EXPECT_EQ(r.Header("trailer"), "");
  }
  // An HTTP/1.0 client cannot take chunks: the body ends with the connection.
  HttpClient old(port());
  ASSERT_TRUE(old.Send("GET /sap/bc/chunked HTTP/1.0\r\nHost: x\r\n\r\n"));
  HttpReply r = old.Read();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "hello, world");
}

TEST_F(ProxyTest, ExpectContinueIsPassedThrough) {
  StartProxy();
  HttpClient client(port());
  ASSERT_TRUE(client.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                          "Expect: 100-continue\r\n\r\n"));
  HttpReply interim = client.Read("POST", /*keep_interim=*/true);
  EXPECT_EQ(interim.status, 100);
  ASSERT_TRUE(client.Send("hello"));
  HttpReply r = client.Read("POST");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "hello");
}

TEST_F(ProxyTest, LargeUploadStreamsWithFlatMemory) {
  StartProxy();
  long before = proxy_->RssKiB();
  const size_t total = 48u << 20;  // 48 MiB up and 48 MiB back
  HttpClient client(port(), std::chrono::seconds(60));
  ASSERT_TRUE(client.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                          std::to_string(total) + "\r\n\r\n"));
  std::thread reader_thread;
  std::string block(1 << 20, 'k');
  HttpReply reply;
  std::thread sender([&] {
    for (size_t sent = 0; sent < total; sent += block.size()) {
      if (!client.Send(block)) {
        return;
      }
    }
  });
  sender.join();  // the demo backend reads the whole body before answering
  reply = client.Read("POST");
  ASSERT_EQ(reply.status, 200);
  EXPECT_EQ(reply.body.size(), total);
  long peak = proxy_->PeakRssKiB();
  // Bodies stream through bounded buffers: nowhere near the 96 MiB that passed.
  EXPECT_LT(peak - before, 8 * 1024) << "before " << before << " KiB, peak " << peak << " KiB";
}

// Sends batched through io_uring (--io-uring auto) and plain sends (off)
// deliver the same bytes: keep-alive answers and, on Connection: close, the
// whole body before the close (queued bytes go before the descriptor closes).
TEST_F(ProxyTest, IoUringAutoAndOffDeliverWholeBodiesAlsoBeforeAClose) {
  std::string payload;
  for (int i = 0; payload.size() < 40'000; ++i) {
    payload += "row " + std::to_string(i) + "\n";
  }
  for (const char* mode : {"auto", "off"}) {
    SCOPED_TRACE(mode);
    StartProxy({"--io-uring", mode});
    HttpClient keep(port());
    for (int i = 0; i < 20; ++i) {
      HttpReply r = keep.Request("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                                 std::to_string(payload.size()) + "\r\n\r\n" + payload);
      ASSERT_EQ(r.status, 200) << i;
      ASSERT_EQ(r.body, payload) << i;
    }
    for (int i = 0; i < 20; ++i) {
      HttpClient once(port());
      HttpReply r = once.Request("POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                 "Content-Length: " +
                                 std::to_string(payload.size()) + "\r\n\r\n" + payload);
      ASSERT_EQ(r.status, 200) << i;
      ASSERT_EQ(r.body, payload) << i;
      EXPECT_EQ(r.Header("connection"), "close");
    }
    HttpReply bad = HttpGet(port(), "/sap/bc/run.cgi");  // a local answer (error page)
    EXPECT_EQ(bad.status, 403);
    proxy_.reset();
  }
}

// Reads `fd` until the peer ends the stream; false when it was not an orderly
// end (a reset or the receive timeout).
bool ReadToEnd(int fd, std::string* got) {
  char buf[4096];
  ssize_t n = 0;
  for (int reads = 0; reads < 10'000 && (n = ::recv(fd, buf, sizeof buf, 0)) > 0; ++reads) {
    got->append(buf, static_cast<size_t>(n));
  }
  return n == 0;
}

// A new connection per request (Connection: close) with a small answer: with
// --io-uring auto the answer and the close go in the worker's batched submit.
// Either way every answer arrives whole and ends in an orderly end of the
// stream (no reset), no descriptor stays open, the access log has every
// request and the active-connections gauge goes back to 0.
TEST_F(ProxyTest, ConnectionCloseAnswersEndInAFinAndLeaveNoDescriptorOpen) {
  for (const char* mode : {"auto", "off"}) {
    SCOPED_TRACE(mode);
    std::filesystem::remove(dir_ + "/access.log");
    uint16_t admin = testing::ReserveFreePort();
    StartProxy({"--io-uring", mode, "--admin-listen", "127.0.0.1:" + std::to_string(admin)});
    const std::string fd_dir = "/proc/" + std::to_string(proxy_->pid()) + "/fd";
    auto open_fds = [&] {
      return std::distance(std::filesystem::directory_iterator(fd_dir),
                           std::filesystem::directory_iterator());
    };
    ASSERT_EQ(HttpGet(port(), "/sap/bc/warm-up").status, 200);  // pooled upstream connections
    const auto baseline = open_fds();
    constexpr int kRequests = 150;
    for (int i = 0; i < kRequests; ++i) {
      std::string payload(static_cast<size_t>(100 + i), static_cast<char>('a' + i % 26));
      int fd = testing::ConnectLoopback(port(), 0, std::chrono::seconds(10));
      ASSERT_GE(fd, 0);
      std::string request = "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                            "Content-Length: " +
                            std::to_string(payload.size()) + "\r\n\r\n" + payload;
      ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL),
                static_cast<ssize_t>(request.size()));
      std::string got;
      const bool orderly = ReadToEnd(fd, &got);
      int error = errno;
      ::close(fd);
      ASSERT_TRUE(orderly) << i << ": not an orderly end: " << std::strerror(error);
      ASSERT_EQ(got.rfind("HTTP/1.1 200 ", 0), 0u) << i << ": " << got;
      ASSERT_GE(got.size(), payload.size());
      EXPECT_EQ(got.substr(got.size() - payload.size()), payload) << i;
      EXPECT_NE(got.find("\r\nConnection: close\r\n"), std::string::npos) << i;
    }
    EXPECT_TRUE(testing::WaitFor([&] { return open_fds() <= baseline + 2; }))
        << open_fds() << " descriptors open, " << baseline << " before";
    EXPECT_TRUE(testing::WaitFor([&] {
      HttpReply metrics = HttpGet(admin, "/metrics");
      return metrics.body.find("\nkwd_proxy_connections_active 0\n") != std::string::npos;
    })) << HttpGet(admin, "/metrics").body;
    EXPECT_TRUE(testing::WaitFor([&] {
      std::ifstream log(dir_ + "/access.log");
      std::string line;
      int lines = 0;
      while (std::getline(log, line)) {
        lines += line.find("/echo") != std::string::npos ? 1 : 0;
      }
      return lines == kRequests;
    }));
    proxy_.reset();
  }
}

size_t CountOf(const std::string& text, std::string_view what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++count;
  }
  return count;
}

// The first read of a new plain connection: with --io-uring auto the proxy
// accepts every pending connection, then reads all their first bytes in one
// io_uring submit (off: a recv each). Either way a pipelined second request
// in the first bytes is answered after the first, a client that sends
// nothing and closes or resets (also right after its request) leaves nothing
// open, and a burst of more connections than the ring has entries, all
// waiting while the proxy is stopped, gets every answer whole.
TEST_F(ProxyTest, FirstBytesOfNewConnectionsPipelinedEndsResetsAndBurstsAreServed) {
  for (const char* mode : {"auto", "off"}) {
    SCOPED_TRACE(mode);
    uint16_t admin = testing::ReserveFreePort();
    StartProxy({"--io-uring", mode, "--admin-listen", "127.0.0.1:" + std::to_string(admin)});
    ASSERT_EQ(HttpGet(port(), "/sap/bc/warm-up").status, 200);
    {
      int fd = testing::ConnectLoopback(port(), 0, std::chrono::seconds(10));
      ASSERT_GE(fd, 0);
      const std::string payload = "second request's body";
      std::string requests = "GET /sap/bc/first HTTP/1.1\r\nHost: x\r\n\r\n"
                             "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                             "Content-Length: " +
                             std::to_string(payload.size()) + "\r\n\r\n" + payload;
      ASSERT_EQ(::send(fd, requests.data(), requests.size(), MSG_NOSIGNAL),
                static_cast<ssize_t>(requests.size()));
      std::string got;
      EXPECT_TRUE(ReadToEnd(fd, &got));
      ::close(fd);
      EXPECT_EQ(got.rfind("HTTP/1.1 200 ", 0), 0u) << got;
      EXPECT_EQ(CountOf(got, "HTTP/1.1 200 "), 2u) << got;
      EXPECT_EQ(got.substr(got.size() - std::min(got.size(), payload.size())), payload) << got;
    }
    for (int i = 0; i < 5; ++i) {
      // Silent, then a FIN; a reset at once; a request, then a reset.
      int silent = testing::ConnectLoopback(port());
      int reset = testing::ConnectLoopback(port());
      int asked = testing::ConnectLoopback(port());
      ASSERT_TRUE(silent >= 0 && reset >= 0 && asked >= 0);
      std::string_view request = "GET /sap/bc/gone HTTP/1.1\r\nHost: x\r\n\r\n";
      ASSERT_EQ(::send(asked, request.data(), request.size(), MSG_NOSIGNAL),
                static_cast<ssize_t>(request.size()));
      linger abort{1, 0};
      ASSERT_EQ(::setsockopt(reset, SOL_SOCKET, SO_LINGER, &abort, sizeof abort), 0);
      ASSERT_EQ(::setsockopt(asked, SOL_SOCKET, SO_LINGER, &abort, sizeof abort), 0);
      ::close(silent);
      ::close(reset);
      ::close(asked);
    }
    {
      constexpr int kBurst = 300;  // more than the worker's ring has entries (256)
      std::vector<int> fds;
      struct Resume {
        pid_t pid;
        ~Resume() { ::kill(pid, SIGCONT); }
      } resume{proxy_->pid()};
      ASSERT_EQ(::kill(proxy_->pid(), SIGSTOP), 0);
      for (int i = 0; i < kBurst; ++i) {
        int fd = testing::ConnectLoopback(port(), 0, std::chrono::seconds(20));
        ASSERT_GE(fd, 0) << i;
        fds.push_back(fd);
        std::string payload = "burst " + std::to_string(i);
        std::string request = "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                              "Content-Length: " +
                              std::to_string(payload.size()) + "\r\n\r\n" + payload;
        ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL),
                  static_cast<ssize_t>(request.size()));
      }
      ASSERT_EQ(::kill(proxy_->pid(), SIGCONT), 0);
      for (int i = 0; i < kBurst; ++i) {
        std::string got;
        EXPECT_TRUE(ReadToEnd(fds[i], &got)) << i;
        ::close(fds[i]);
        const std::string payload = "burst " + std::to_string(i);
        EXPECT_EQ(got.rfind("HTTP/1.1 200 ", 0), 0u) << i << ": " << got;
        EXPECT_EQ(got.substr(got.size() - std::min(got.size(), payload.size())), payload) << i;
      }
    }
    EXPECT_EQ(HttpGet(port(), "/sap/bc/after").status, 200);
    EXPECT_TRUE(testing::WaitFor([&] {
      HttpReply metrics = HttpGet(admin, "/metrics");
      return metrics.body.find("\nkwd_proxy_connections_active 0\n") != std::string::npos;
    })) << HttpGet(admin, "/metrics").body;
    EXPECT_TRUE(proxy_->Alive());
    proxy_.reset();
  }
}

// A small answer to a Connection: close request takes the fewest segments
// the exchange allows: the ACK of the request rides on the answer (the HTTP
// listener starts connections in delayed-ACK mode) and, with --io-uring auto,
// the FIN rides on the answer's last bytes (MSG_MORE on the send the batched
// close follows). The client's TCP_INFO counts the segments it received:
// SYN-ACK and the answer with its FIN (off: and a FIN of its own); before, the
// ACK of the request and the FIN came as segments of their own (4). The
// fewest over 20 connections: a delayed ACK that fires on a loaded box adds one.
TEST_F(ProxyTest, ConnectionCloseAnswerCarriesTheAckOfTheRequestAndItsFin) {
  for (const char* mode : {"auto", "off"}) {
    SCOPED_TRACE(mode);
    StartProxy({"--io-uring", mode});
    ASSERT_EQ(HttpGet(port(), "/sap/bc/warm-up").status, 200);  // pooled upstream connections
    uint32_t fewest = 100;
    for (int i = 0; i < 20; ++i) {
      int fd = testing::ConnectLoopback(port(), 0, std::chrono::seconds(10));
      ASSERT_GE(fd, 0);
      const std::string request =
          "GET /sap/bc/x" + std::to_string(i) + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
      ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL),
                static_cast<ssize_t>(request.size()));
      std::string got;
      const bool orderly = ReadToEnd(fd, &got);
      tcp_info info{};
      socklen_t len = sizeof info;
      ASSERT_EQ(::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len), 0);
      ::close(fd);
      ASSERT_TRUE(orderly) << i << ": not an orderly end";
      ASSERT_EQ(got.rfind("HTTP/1.1 200 ", 0), 0u) << i << ": " << got;
      ASSERT_NE(got.find("\r\nConnection: close\r\n"), std::string::npos) << i;
      fewest = std::min(fewest, info.tcpi_segs_in);
    }
    EXPECT_EQ(fewest, std::string_view(mode) == "auto" ? 2u : 3u);
    proxy_.reset();
  }
}

// Five exchanges on new connections with Nagle on (no TCP_NODELAY), each
// sending `first` and `second` as two writes and reading the answer to its
// end (into `answers`); the fastest exchange's time.
std::chrono::steady_clock::duration FastestTwoWriteExchange(int port, const std::string& first,
                                                            const std::string& second,
                                                            std::vector<std::string>* answers) {
  auto fastest = std::chrono::steady_clock::duration::max();
  for (int i = 0; i < 5; ++i) {
    int fd = testing::ConnectLoopback(port, 0, std::chrono::seconds(10));  // Nagle on
    if (fd < 0) {
      ADD_FAILURE() << "connect";
      break;
    }
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(::send(fd, first.data(), first.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(first.size()));
    EXPECT_EQ(::send(fd, second.data(), second.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(second.size()));
    std::string got;
    ReadToEnd(fd, &got);
    fastest = std::min(fastest, std::chrono::steady_clock::now() - start);
    ::close(fd);
    answers->push_back(std::move(got));
  }
  return fastest;
}

// A client with Nagle on that writes a request in two parts, head then body,
// sends the body only once the head is acknowledged: the proxy ACKs a request
// it waits for the rest of at once, rather than after the 40 ms of the
// delayed ACK its connections start with. The fastest of 5 exchanges.
TEST_F(ProxyTest, RequestInTwoWritesFromANagleClientIsNotHeldByADelayedAck) {
  StartProxy();
  std::vector<std::string> answers;
  const auto fastest = FastestTwoWriteExchange(
      port(), "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 5\r\n\r\n",
      "hello", &answers);
  ASSERT_EQ(answers.size(), 5u);
  for (const std::string& got : answers) {
    ASSERT_EQ(got.rfind("HTTP/1.1 200 ", 0), 0u) << got;
    EXPECT_EQ(got.substr(got.size() - 5), "hello");
  }
  EXPECT_LT(fastest, std::chrono::milliseconds(30))
      << std::chrono::duration_cast<std::chrono::microseconds>(fastest).count() << " us";
}

// The same for a PROXY protocol header written on its own: the request after
// it is not held back until the header's delayed ACK.
TEST_F(ProxyTest, RequestAfterAProxyHeaderFromANagleClientIsNotHeldByADelayedAck) {
  StartProxy({"--proxy-protocol", "http"});
  std::vector<std::string> answers;
  const auto fastest = FastestTwoWriteExchange(
      port(), "PROXY TCP4 198.51.100.4 127.0.0.1 5555 80\r\n",
      "GET /sap/bc/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", &answers);
  ASSERT_EQ(answers.size(), 5u);
  for (const std::string& got : answers) {
    ASSERT_EQ(got.rfind("HTTP/1.1 200 ", 0), 0u) << got;
  }
  EXPECT_LT(fastest, std::chrono::milliseconds(30))
      << std::chrono::duration_cast<std::chrono::microseconds>(fastest).count() << " us";
}

TEST_F(ProxyTest, IoUringFlagTakesAutoOrOff) {
  Process p({testing::BinaryPath("kwd-proxy"), "serve", "--snapshot", snapshot_path_, "--listen",
             "127.0.0.1:0", "--io-uring", "sometimes"},
            dir_ + "/bad.log", /*wait_for_listening=*/false);
  EXPECT_TRUE(testing::WaitFor([&] { return !p.Alive(); }));
  EXPECT_NE(p.Log().find("--io-uring takes auto or off"), std::string::npos) << p.Log();
}

TEST_F(ProxyTest, TunnelsWebSocketEcho) {
  StartProxy();
  HttpClient client(port());
  HttpReply upgrade = client.Request(
      "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n");
  ASSERT_EQ(upgrade.status, 101);
  EXPECT_EQ(upgrade.Header("sec-websocket-accept"), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
  // A masked text frame "hello" (RFC 6455 5.7 example).
  const unsigned char frame[] = {0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58};
  ASSERT_TRUE(client.Send(std::string_view(reinterpret_cast<const char*>(frame), sizeof frame)));
  std::string echoed;
  testing::WaitFor([&] {
    client.ReadMore();
    echoed = client.TakeBuffered();
    return !echoed.empty();
  });
  ASSERT_GE(echoed.size(), 7u);
  EXPECT_EQ(static_cast<unsigned char>(echoed[0]), 0x81);
  EXPECT_EQ(echoed.substr(2, 5), "Hello");
}

TEST_F(ProxyTest, SlowClientGets408AndIsDisconnected) {
  StartProxy({"--header-timeout", "300ms"});
  HttpClient client(port());
  ASSERT_TRUE(client.Send("GET /sap/bc/x HTTP/1.1\r\nHost: x\r\n"));  // never finished
  HttpReply r = client.Read();
  EXPECT_EQ(r.status, 408);
  EXPECT_TRUE(client.WaitClosed());
  EXPECT_EQ(HttpGet(port(), "/sap/bc/x").status, 200);
}

struct BadRequest {
  const char* name;
  std::string raw;
  int status;
};

std::vector<BadRequest> BadRequests() {
  const std::string big_header = "X-Big: " + std::string(70 * 1024, 'a') + "\r\n";
  return {
      {"cl_and_te", "POST /sap/x HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
      {"te_and_cl", "POST /sap/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n", 400},
      {"differing_cl", "POST /sap/x HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 400},
      {"cl_list_differs", "POST /sap/x HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 6\r\n\r\nhello!", 400},
      {"cl_plus_sign", "POST /sap/x HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\nhello", 400},
      {"cl_negative", "POST /sap/x HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400},
      {"cl_hex", "POST /sap/x HTTP/1.1\r\nHost: x\r\nContent-Length: 0x5\r\n\r\nhello", 400},
      {"cl_overflow", "POST /sap/x HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n", 400},
      {"te_chunked_identity", "POST /sap/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n", 400},
      {"te_xchunked", "POST /sap/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n", 400},
      {"te_on_http10", "POST /sap/x HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
      {"te_chunked_twice", "POST /sap/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n", 400},
      {"obs_fold", "GET /sap/x HTTP/1.1\r\nHost: x\r\nX-A: a\r\n  folded\r\n\r\n", 400},
      {"bare_cr_in_value", "GET /sap/x HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n", 400},
      {"bare_lf_line", "GET /sap/x HTTP/1.1\nHost: x\n\n", 400},
      {"nul_in_value", std::string("GET /sap/x HTTP/1.1\r\nHost: x\r\nX-A: a\0b\r\n\r\n", 42), 400},
      {"space_before_colon", "GET /sap/x HTTP/1.1\r\nHost : x\r\n\r\n", 400},
      {"empty_header_name", "GET /sap/x HTTP/1.1\r\nHost: x\r\n: v\r\n\r\n", 400},
      {"bad_method", "G(T /sap/x HTTP/1.1\r\nHost: x\r\n\r\n", 400},
      {"bad_target_space", "GET /sap/a b HTTP/1.1\r\nHost: x\r\n\r\n", 400},
      {"target_not_slash", "GET sap/x HTTP/1.1\r\nHost: x\r\n\r\n", 400},
      {"unsupported_version", "GET /sap/x HTTP/2.0\r\nHost: x\r\n\r\n", 505},
      {"bad_version", "GET /sap/x HTTQ/1.1\r\nHost: x\r\n\r\n", 400},
      {"missing_host", "GET /sap/x HTTP/1.1\r\nX-A: b\r\n\r\n", 400},
      {"duplicate_host", "GET /sap/x HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400},
      {"chunk_size_hex_prefix", "POST /sap/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n", 400},
      {"chunk_size_negative", "POST /sap/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\nhello\r\n0\r\n\r\n", 400},
      {"chunk_size_huge", "POST /sap/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffffffff\r\nhello\r\n0\r\n\r\n", 400},
      {"chunk_missing_crlf", "POST /sap/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n", 400},
      {"header_section_too_large", "GET /sap/x HTTP/1.1\r\nHost: x\r\n" + big_header + "\r\n", 431},
      {"body_too_large", "POST /sap/x HTTP/1.1\r\nHost: x\r\nContent-Length: 104857601\r\n\r\n", 413},
      {"dot_segments_above_root", "GET /../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n", 400},
      {"control_char_in_target", "GET /sap/\x01x HTTP/1.1\r\nHost: x\r\n\r\n", 400},
  };
}

TEST_F(ProxyTest, RejectsMalformedAndSmugglingRequestsAndKeepsServing) {
  StartProxy();
  auto cases = BadRequests();
  ASSERT_GE(cases.size(), 30u);
  for (const auto& c : cases) {
    HttpClient client(port());
    ASSERT_TRUE(client.Send(c.raw)) << c.name;
    HttpReply r = client.Read();
    EXPECT_EQ(r.status, c.status) << c.name;
    EXPECT_TRUE(client.WaitClosed()) << c.name << ": the connection must be closed";
    EXPECT_EQ(HttpGet(port(), "/sap/bc/x").status, 200) << "after " << c.name;
  }
  EXPECT_TRUE(proxy_->Alive());
}

TEST_F(ProxyTest, FailsOverWhenABackendIsKilled) {
  StartProxy();
  b_->Kill();
  // A balanced GET to the dead server is retried once on another server.
  for (int i = 0; i < 30; ++i) {
    HttpReply r = HttpGet(port(), "/sap/bc/x" + std::to_string(i));
    ASSERT_EQ(r.status, 200) << i;
    EXPECT_EQ(r.Header("x-served-by"), "A");
  }
  // A session stuck to the dead server is balanced anew (and counted).
  HttpReply lost = HttpGet(port(), "/sap/bc/x", {"Cookie: sap-contextid=SID%3aANON%3aB%3aold"});
  EXPECT_EQ(lost.status, 200);
  EXPECT_EQ(lost.Header("x-served-by"), "A");
}

TEST_F(ProxyTest, ReadmitsABackendWhenItReturns) {
  StartProxy();
  uint16_t b_port = b_->port();
  b_->Kill();
  // Passive marking (failed connect) and the active checks take B out.
  for (int i = 0; i < 6; ++i) {
    ASSERT_EQ(HttpGet(port(), "/sap/bc/x").Header("x-served-by"), "A");
  }
  b_ = std::make_unique<Process>(std::vector<std::string>{
      testing::BinaryPath("kwd-demo-backend"), "--listen", "127.0.0.1:" + std::to_string(b_port),
      "--instance", "B", "--kind", "abap"});
  ASSERT_TRUE(b_->started());
  // The health checker pings every second (intervalSeconds: 1 in the snapshot).
  EXPECT_TRUE(testing::WaitFor(
      [&] { return HttpGet(port(), "/sap/bc/x").Header("x-served-by") == "B"; },
      std::chrono::seconds(10)));
  EXPECT_NE(proxy_->Log().find("server up"), std::string::npos) << proxy_->Log();
}

// kwd-proxy's health checker reads the table on its own only every 5 s: a
// new snapshot wakes it, so a server the reload adds is checked at once
// (here one on a closed port, marked down by its first check).
TEST_F(ProxyTest, ServersANewSnapshotAddsAreHealthCheckedAtOnce) {
  StartProxy();
  std::this_thread::sleep_for(std::chrono::seconds(1));  // past the checker's first read
  const uint16_t closed = testing::ReserveFreePort();
  WriteSnapshot(snapshot_path_, SapSnapshot({{"A", a_->port(), 2}, {"B", b_->port(), 1},
                                             {"C", closed, 1}},
                                            {{"J1", j1_->port(), 1}, {"J2", j2_->port(), 1}}));
  const auto reloaded = std::chrono::steady_clock::now();
  proxy_->Signal(SIGHUP);
  ASSERT_TRUE(testing::WaitFor([&] {
    return proxy_->Log().find("msg=\"server down\" group=erp/public server=C") != std::string::npos;
  })) << proxy_->Log();
  // Without the wake-up the table poll would find C about 4 s after the reload.
  EXPECT_LT(std::chrono::steady_clock::now() - reloaded, std::chrono::milliseconds(2500))
      << proxy_->Log();
}

TEST_F(ProxyTest, AdminPortServesHealthMetricsStateAndExplain) {
  uint16_t admin = testing::ReserveFreePort();
  StartProxy({"--admin-listen", "127.0.0.1:" + std::to_string(admin)});
  ASSERT_TRUE(testing::WaitFor([&] { return HttpGet(admin, "/healthz").status == 200; }));
  EXPECT_EQ(HttpGet(admin, "/readyz").status, 200);
  EXPECT_EQ(HttpGet(port(), "/sap/bc/x").status, 200);
  // The request is counted right after its response is written.
  HttpReply metrics;
  EXPECT_TRUE(testing::WaitFor([&] {
    metrics = HttpGet(admin, "/metrics");
    return metrics.body.find("kwd_proxy_requests_total{group=\"erp/public\",code=\"2xx\"} 1") !=
           std::string::npos;
  })) << metrics.body;
  EXPECT_EQ(metrics.status, 200);
  HttpReply state = HttpGet(admin, "/admin/api/state");
  EXPECT_EQ(state.status, 200);
  EXPECT_NE(state.body.find("\"erp/public\""), std::string::npos) << state.body;
  HttpReply explain = HttpGet(admin, "/admin/api/explain?url=/irj/portal");
  EXPECT_EQ(explain.status, 200);
  EXPECT_NE(explain.body.find("\"group\":\"erp/portal\""), std::string::npos) << explain.body;
  // The traffic port never serves admin paths.
  EXPECT_NE(HttpGet(port(), "/metrics").body.find("kwd_proxy_"), 0u);
  EXPECT_EQ(HttpGet(port(), "/metrics").body.find("# TYPE"), std::string::npos);
}

TEST_F(ProxyTest, SighupSwapsSnapshotsUnderLoadWithoutFailedRequests) {
  StartProxy();
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0};
  std::atomic<int> failed{0};
  std::vector<std::thread> load;
  for (int t = 0; t < 4; ++t) {
    load.emplace_back([&] {
      HttpClient client(port());
      for (int i = 0; i < 100000 && !stop.load(); ++i) {
        HttpReply r = client.Get("/sap/bc/load");
        if (r.status == 200) {
          ok++;
        } else {
          failed++;
          return;
        }
      }
    });
  }
  // Alternate between two snapshots: B's capacity changes, then A drains.
  for (int i = 0; i < 10; ++i) {
    v1::Snapshot s = i % 2 == 0 ? SapSnapshot({{"A", a_->port(), 1}, {"B", b_->port(), 5}},
                                              {{"J1", j1_->port(), 1}})
                                : DefaultSnapshot();
    WriteSnapshot(snapshot_path_, s);
    proxy_->Signal(SIGHUP);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  stop = true;
  for (auto& t : load) {
    t.join();
  }
  EXPECT_EQ(failed.load(), 0);
  EXPECT_GT(ok.load(), 100);
  // An invalid snapshot is rejected and the previous one keeps serving.
  std::ofstream(snapshot_path_) << "{\"groups\": 42}";
  proxy_->Signal(SIGHUP);
  EXPECT_TRUE(testing::WaitFor(
      [&] { return proxy_->Log().find("snapshot rejected") != std::string::npos; }));
  EXPECT_EQ(HttpGet(port(), "/sap/bc/after").status, 200);
}

TEST_F(ProxyTest, SigtermLetsInFlightRequestsFinish) {
  StartProxy({"--drain-timeout", "5s"});
  HttpClient client(port());
  ASSERT_TRUE(client.Send("GET /slow?ms=400 HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  proxy_->Signal(SIGTERM);
  HttpReply r = client.Read();
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("slept 400ms"), std::string::npos);
  int status = proxy_->Stop();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST_F(ProxyTest, AccessLogMasksSessionIdentifiers) {
  StartProxy();
  EXPECT_EQ(HttpGet(port(), "/sap/bc/x?sap-contextid=SID%3aANON%3aA%3asecret&a=1").status, 200);
  std::string log;
  ASSERT_TRUE(testing::WaitFor([&] {
    std::ifstream in(dir_ + "/access.log");
    log.assign(std::istreambuf_iterator<char>(in), {});
    return !log.empty();
  }));
  EXPECT_EQ(log.find("secret"), std::string::npos) << log;
  EXPECT_NE(log.find("sap-contextid=***&a=1"), std::string::npos) << log;
  EXPECT_NE(log.find("\"erp/public\" \"A\""), std::string::npos) << log;
}

TEST_F(ProxyTest, RefusesToStartWithAnInvalidSnapshot) {
  std::ofstream(snapshot_path_) << "not json";
  Process proxy({testing::BinaryPath("kwd-proxy"), "serve", "--snapshot", snapshot_path_,
                 "--listen", "127.0.0.1:0"},
                dir_ + "/bad.log", /*wait_for_listening=*/false);
  EXPECT_TRUE(testing::WaitFor([&] { return !proxy.Alive(); }));
  EXPECT_NE(proxy.Log().find("snapshot.json"), std::string::npos) << proxy.Log();
}

// ---- Names from objects never reach a header or a metric line raw ----

// Every Set-Cookie of `reply`, and no header anywhere that a CR/LF in a name
// could have forged.
void ExpectCleanHeaders(const HttpReply& reply) {
  for (const auto& [name, value] : reply.headers) {
    EXPECT_EQ(name.find_first_of("\r\n"), std::string::npos) << name;
    EXPECT_EQ(value.find_first_of("\r\n"), std::string::npos) << name << ": " << value;
    EXPECT_EQ(value.find("evil"), std::string::npos) << name << ": " << value;
    EXPECT_EQ(name.find("evil"), std::string::npos) << name << ": " << value;
  }
}

// The proxy's affinity cookies among the Set-Cookie headers of `reply`.
int AffinityCookies(const HttpReply& reply) {
  int count = 0;
  for (const auto& [name, value] : testing::SetCookies(reply)) {
    count += name == "kwd_affinity" ? 1 : 0;
  }
  return count;
}

void ExpectCleanMetrics(uint16_t admin) {
  HttpReply metrics = HttpGet(admin, "/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("kwd_proxy_"), std::string::npos);
  EXPECT_EQ(metrics.body.find('\r'), std::string::npos);
  EXPECT_EQ(metrics.body.find("evil"), std::string::npos) << metrics.body;
}

// A snapshot file whose server name holds CR/LF: refused at start and on
// reload (CheckSnapshot); the running snapshot keeps serving with clean
// Set-Cookie headers and metrics.
TEST_F(ProxyTest, ServerNameWithCrLfInASnapshotFileIsRefused) {
  v1::Snapshot bad =
      SapSnapshot({{"A", a_->port(), 1}, {"B", b_->port(), 1}},
                  {{"J1\r\nSet-Cookie: evil=1", j1_->port(), 1}, {"J2", j2_->port(), 1}});
  const std::string bad_path = dir_ + "/bad-snapshot.json";
  WriteSnapshot(bad_path, bad);
  {
    Process refused({testing::BinaryPath("kwd-proxy"), "serve", "--snapshot", bad_path, "--listen",
                     "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"},
                    dir_ + "/refused.log", /*wait_for_listening=*/false);
    EXPECT_TRUE(testing::WaitFor([&] { return !refused.Alive(); })) << refused.Log();
    EXPECT_NE(refused.Log().find("invalid server name"), std::string::npos) << refused.Log();
    EXPECT_EQ(refused.Log().find('\r'), std::string::npos) << refused.Log();
  }

  uint16_t admin = testing::ReserveFreePort();
  StartProxy({"--admin-listen", "127.0.0.1:" + std::to_string(admin)});
  WriteSnapshot(snapshot_path_, bad);
  proxy_->Signal(SIGHUP);
  ASSERT_TRUE(testing::WaitFor([&] {
    return proxy_->Log().find("snapshot rejected") != std::string::npos;
  })) << proxy_->Log();
  std::string log = proxy_->Log();
  EXPECT_NE(log.find("invalid server name"), std::string::npos) << log;
  // One line per log entry: the name's CR/LF is escaped.
  EXPECT_EQ(log.find('\r'), std::string::npos) << log;
  EXPECT_EQ(log.find("\nSet-Cookie"), std::string::npos) << log;
  // A Java session start (the backend sets JSESSIONID) sets the affinity
  // cookie naming the server.
  int cookies = 0;
  for (int i = 0; i < 4; ++i) {
    HttpReply reply = HttpGet(port(), "/irj/portal/start");
    EXPECT_EQ(reply.status, 200);
    ExpectCleanHeaders(reply);
    cookies += AffinityCookies(reply);
  }
  EXPECT_EQ(cookies, 4);
  ExpectCleanMetrics(admin);
}

// A snapshot without a version (`{}` parses as one that routes nothing) is
// refused at start and on SIGHUP like any other invalid one.
TEST_F(ProxyTest, SnapshotWithoutAVersionIsRefused) {
  const std::string empty_path = dir_ + "/empty.json";
  std::ofstream(empty_path) << "{}";
  {
    Process refused({testing::BinaryPath("kwd-proxy"), "serve", "--snapshot", empty_path,
                     "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"},
                    dir_ + "/refused.log", /*wait_for_listening=*/false);
    EXPECT_TRUE(testing::WaitFor([&] { return !refused.Alive(); })) << refused.Log();
    EXPECT_NE(refused.Log().find("has no version"), std::string::npos) << refused.Log();
  }
  StartProxy();
  EXPECT_EQ(HttpGet(port(), "/sap/bc/before").status, 200);
  std::ofstream(snapshot_path_) << "{}";
  proxy_->Signal(SIGHUP);
  ASSERT_TRUE(testing::WaitFor([&] {
    return proxy_->Log().find("snapshot rejected") != std::string::npos;
  })) << proxy_->Log();
  EXPECT_NE(proxy_->Log().find("has no version"), std::string::npos) << proxy_->Log();
  EXPECT_EQ(HttpGet(port(), "/sap/bc/after").status, 200);
  EXPECT_EQ(HttpGet(port(), "/irj/portal").status, 200);
}

// Dir mode end to end: a pod annotation dispatch.kwd.io/instance-name holding
// CR/LF, compiled by `kwd-controller compile` and served by the proxy. The
// endpoint is left out (with a warning naming it) and the other server
// serves; no response header and no metric line carries the name.
TEST_F(ProxyTest, InstanceNameWithCrLfFromDirModeNeverReachesAHeaderOrMetric) {
  const std::string objects = dir_ + "/objects";
  std::filesystem::create_directories(objects);
  auto slice = [](const std::string& name, const std::string& pod, uint16_t port) {
    return "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: " + name +
           "\n  namespace: erp\n  labels: {kubernetes.io/service-name: erp-java}\n"
           "addressType: IPv4\nendpoints:\n  - addresses: [127.0.0.1]\n"
           "    conditions: {ready: true}\n    targetRef: {kind: Pod, namespace: erp, name: " +
           pod + "}\nports: [{name: http, port: " + std::to_string(port) + ", protocol: TCP}]\n";
  };
  auto pod = [](const std::string& name, const std::string& instance) {
    return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
           "\n  namespace: erp\n  annotations: {dispatch.kwd.io/instance-name: \"" + instance +
           "\"}\n";
  };
  std::ofstream(objects + "/objects.yaml")
      << "apiVersion: dispatch.kwd.io/v1alpha1\nkind: LogonGroup\n"
         "metadata: {name: portal, namespace: erp}\nspec:\n  kind: java\n"
         "  backend:\n    service: {name: erp-java, port: http}\n---\n"
      << slice("erp-java-a", "erp-java-0", j1_->port()) << "---\n"
      << slice("erp-java-b", "erp-java-1", j2_->port())
      << "---\n"
      // YAML double-quoted escapes: the annotation holds a real CR LF.
      << pod("erp-java-0", "J1\\r\\nSet-Cookie: evil=1") << "---\n"
      << pod("erp-java-1", "J2") << "---\n"
      << "apiVersion: dispatch.kwd.io/v1alpha1\nkind: UrlMapping\n"
         "metadata: {name: erp, namespace: erp}\nspec:\n"
         "  rules:\n    - {prefix: /irj/, kind: java, logonGroup: portal}\n";
  const std::string compiled = dir_ + "/compiled.json";
  const std::string warnings = dir_ + "/compile.err";
  int status =
      std::system((testing::BinaryPath("kwd-controller") + " compile --source=dir:" + objects +
                   " > " + compiled + " 2> " + warnings)
                      .c_str());
  std::ifstream warnings_in(warnings);
  std::string warning_text(std::istreambuf_iterator<char>(warnings_in), {});
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << warning_text;
  EXPECT_NE(warning_text.find("InvalidServerName"), std::string::npos) << warning_text;
  EXPECT_NE(warning_text.find("pod erp/erp-java-0"), std::string::npos) << warning_text;
  EXPECT_EQ(warning_text.find('\r'), std::string::npos) << warning_text;

  std::filesystem::copy_file(compiled, snapshot_path_,
                             std::filesystem::copy_options::overwrite_existing);
  uint16_t admin = testing::ReserveFreePort();
  StartProxy({"--admin-listen", "127.0.0.1:" + std::to_string(admin)});
  // Java session starts: the proxy learns JSESSIONID and sets its affinity
  // cookie naming the server.
  int cookies = 0;
  for (int i = 0; i < 4; ++i) {
    HttpReply reply = HttpGet(port(), "/irj/portal/start");
    EXPECT_EQ(reply.status, 200);
    EXPECT_EQ(reply.Header("x-served-by"), "J2");
    ExpectCleanHeaders(reply);
    cookies += AffinityCookies(reply);
  }
  EXPECT_EQ(cookies, 4);
  ExpectCleanMetrics(admin);
}

}  // namespace
}  // namespace kwd
