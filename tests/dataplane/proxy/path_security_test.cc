// Black-box tests of what the proxy decides on and what it forwards (issue 10
// items 1 and 7): a real kwd-proxy in front of backends that record every
// request head they receive, so a test sees the exact request line and
// X-Forwarded-Host the backend got.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
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

// Answers every request with 200 "ok" and keeps the heads it received.
class RecordingBackend {
 public:
  RecordingBackend() : server_([this](int fd) { Serve(fd); }) {}
  uint16_t port() const { return server_.port(); }

  // Every head received so far whose request line contains `marker`.
  std::vector<std::string> HeadsWith(const std::string& marker) {
    std::lock_guard lock(mu_);
    std::vector<std::string> found;
    for (const std::string& head : heads_) {
      if (head.substr(0, head.find("\r\n")).find(marker) != std::string::npos) {
        found.push_back(head);
      }
    }
    return found;
  }
  // Request lines of every head received so far.
  std::string RequestLines() {
    std::lock_guard lock(mu_);
    std::string lines;
    for (const std::string& head : heads_) {
      lines += head.substr(0, head.find("\r\n")) + "\n";
    }
    return lines;
  }

 private:
  void Serve(int fd) {
    static constexpr char kResponse[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    std::string in;
    char buf[4096];
    for (int i = 0; i < 1000; ++i) {  // bounded: requests on one connection (GETs only)
      size_t end;
      while ((end = in.find("\r\n\r\n")) == std::string::npos) {
        ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) {
          return;
        }
        in.append(buf, n);
      }
      {
        std::lock_guard lock(mu_);
        heads_.push_back(in.substr(0, end + 4));
      }
      in.erase(0, end + 4);
      ::send(fd, kResponse, sizeof kResponse - 1, MSG_NOSIGNAL);
    }
  }

  std::mutex mu_;
  std::vector<std::string> heads_;
  testing::TcpBackend server_;  // last: stopped before heads_ goes
};

void AddGroup(v1::Snapshot* s, const std::string& key, v1::Kind kind, const std::string& server,
              uint16_t port) {
  auto* g = s->add_groups();
  g->set_key(key);
  g->set_kind(kind);
  g->set_strategy(v1::STRATEGY_WEIGHTED_ROUND_ROBIN);
  g->set_load_reset_interval_seconds(25);
  auto* hc = g->mutable_health_check();
  hc->set_path("/ping");
  hc->set_interval_seconds(60);
  hc->set_timeout_seconds(1);
  hc->set_unhealthy_threshold(3);
  hc->set_healthy_threshold(1);
  auto* sa = g->mutable_session_affinity();
  sa->add_identifiers(v1::SESSION_IDENTIFIER_SAP_CONTEXTID);
  sa->set_session_table_max_entries(100);
  sa->set_session_table_idle_timeout_seconds(60);
  auto* sv = g->add_servers();
  sv->set_name(server);
  sv->set_address("127.0.0.1");
  sv->set_port(port);
  sv->set_capacity(1);
  sv->set_state(v1::SERVER_STATE_READY);
}

class PathSecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/kwd_path_" + std::to_string(::getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::create_directories(dir_);
    // "/sap/" -> erp/abap (server A), root and everything else -> erp/java
    // (server J); deny /sap/admin/*, secure /sap/bc/secure/*.
    v1::Snapshot s;
    AddGroup(&s, "erp/abap", v1::KIND_ABAP, "A", abap_.port());
    AddGroup(&s, "erp/java", v1::KIND_JAVA, "J", java_.port());
    auto* vh = s.add_virtual_hosts();
    vh->set_default_root_handler(v1::KIND_JAVA);
    vh->set_default_abap_group("erp/abap");
    vh->set_default_java_group("erp/java");
    auto* sap = vh->add_rules();
    sap->set_prefix("/sap/");
    sap->set_kind(v1::KIND_ABAP);
    sap->set_group("erp/abap");
    auto* deny = vh->add_permissions();
    deny->set_action(v1::PERMISSION_ACTION_DENY);
    deny->set_pattern("/sap/admin/*");
    auto* secure = vh->add_permissions();
    secure->set_action(v1::PERMISSION_ACTION_SECURE);
    secure->set_pattern("/sap/bc/secure/*");
    StampSnapshotVersion(&s);
    snapshot_path_ = dir_ + "/snapshot.json";
    std::ofstream(snapshot_path_) << SnapshotToJson(s);
    admin_port_ = testing::ReserveFreePort();
    proxy_ = std::make_unique<Process>(
        std::vector<std::string>{testing::BinaryPath("kwd-proxy"), "serve", "--snapshot",
                                 snapshot_path_, "--listen", "127.0.0.1:0", "--admin-listen",
                                 "127.0.0.1:" + std::to_string(admin_port_)},
        dir_ + "/proxy.log");
    ASSERT_TRUE(proxy_->started()) << proxy_->Log();
  }

  HttpReply Send(const std::string& target, const std::string& host = "erp.example") {
    HttpClient client(proxy_->port());
    return client.Request("GET " + target + " HTTP/1.1\r\nHost: " + host +
                          "\r\nConnection: close\r\n\r\n");
  }

  // `kwd-proxy explain` on the same snapshot: its stdout.
  std::string ExplainCli(const std::string& url) {
    std::string command = testing::BinaryPath("kwd-proxy") + " explain --snapshot '" +
                          snapshot_path_ + "' --url '" + url + "' 2>&1";
    std::string out;
    FILE* pipe = ::popen(command.c_str(), "r");
    if (pipe == nullptr) {
      return out;
    }
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) {
      out.append(buf, n);
    }
    ::pclose(pipe);
    return out;
  }

  std::string dir_;
  std::string snapshot_path_;
  RecordingBackend abap_;
  RecordingBackend java_;
  uint16_t admin_port_ = 0;
  std::unique_ptr<Process> proxy_;
};

// Issue 10 item 1: "(/a)" hid a segment from the permission check while
// every backend normaliser resolves it. Each of these must be answered by the
// proxy (403 or 400) and reach no backend.
TEST_F(PathSecurityTest, PathTricksAgainstADenyRuleReachNoBackend) {
  const char* targets[] = {
      "/sap/admin/q(/a)/../../x",  // /sap/admin/x to RFC 3986, WHATWG, Java
      "/sap/admin/q(%2Fa)/../x",   //
      "/sap/admin//../x",          // RFC 3986: the empty segment goes, not "admin"
      "/sap/admin/.%2e/admin/x",   //
      "/sap/adm%69n/x",            //
      "/sap/admin;p=1/x",          //
      "/sap/admin/..;/admin/x",    // Tomcat strips ";" before resolving
      "/sap/x/..%2Fadmin/x",       // backends that decode %2F
      "/sap/x/..%5cadmin/x",       // backends that take "\" for "/"
      "/sap%2Fadmin/x",            //
      "/sap/bc/secure/q(/a)/../../x",
      "/sap/bc/secure//../x",
      "http://erp.example/sap/admin/q(/a)/../../x",
  };
  for (const char* target : targets) {
    SCOPED_TRACE(target);
    HttpReply reply = Send(target);
    EXPECT_TRUE(reply.status == 403 || reply.status == 400) << reply.status;
  }
  EXPECT_TRUE(abap_.HeadsWith("admin").empty()) << abap_.RequestLines();
  EXPECT_TRUE(abap_.HeadsWith("secure").empty()) << abap_.RequestLines();
  EXPECT_TRUE(java_.HeadsWith("admin").empty()) << java_.RequestLines();
}

// What the proxy decided on is what it forwards: dot segments resolved, the
// rest (brackets, parameters, query) as received.
TEST_F(PathSecurityTest, ForwardsThePathItDecidedOn) {
  struct Case {
    std::string target;
    std::string forwarded;
    RecordingBackend* backend;
  };
  const Case cases[] = {
      {"/sap/bc/q(/a)/../../x1?y=1", "/sap/bc/x1?y=1", &abap_},
      {"/sap/bc/q(/a)/../x0", "/sap/bc/q(/x0", &abap_},
      {"/sap/bc//../x2", "/sap/bc/x2", &abap_},
      {"/sap(bD1lbiZjPTAwMQ==)/bc/x3;p=1/./y?q", "/sap(bD1lbiZjPTAwMQ==)/bc/x3;p=1/y?q", &abap_},
      {"/x4/../sap/bc/y", "/sap/bc/y", &abap_},
      {"/sap/bc/../../x5", "/x5", &java_},
      {"/sap/opu/E('x6%2Fb')", "/sap/opu/E('x6%2Fb')", &abap_},  // both readings agree
      {"http://erp.example/sap/x7/../bc?z", "/sap/bc?z", &abap_},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.target);
    HttpReply reply = Send(c.target);
    EXPECT_EQ(reply.status, 200);
    EXPECT_EQ(c.backend->HeadsWith(" " + c.forwarded + " HTTP/1.1").size(), 1u)
        << c.backend->RequestLines();
  }
  EXPECT_EQ(Send("/sap/bc/secure/x").status, 403);  // plain http
}

// Issue 10 item 7: "GET http://host?x=1" means "/?x=1" on that host, and
// X-Forwarded-Host names the authority the request was routed by.
TEST_F(PathSecurityTest, AbsoluteFormWithAQueryAndNoPath) {
  HttpReply reply = Send("http://vhost.example:8080?x=1", "other.example");
  EXPECT_EQ(reply.status, 200);
  std::vector<std::string> heads = java_.HeadsWith("GET /?x=1 HTTP/1.1");
  ASSERT_EQ(heads.size(), 1u) << java_.RequestLines();
  EXPECT_NE(heads[0].find("\r\nHost: vhost.example:8080\r\n"), std::string::npos) << heads[0];
  EXPECT_NE(heads[0].find("\r\nX-Forwarded-Host: vhost.example:8080\r\n"), std::string::npos)
      << heads[0];
  EXPECT_EQ(heads[0].find("other.example"), std::string::npos) << heads[0];

  reply = Send("HTTP://vhost.example/sap/bc/q?y", "other.example");
  EXPECT_EQ(reply.status, 200);
  heads = abap_.HeadsWith("GET /sap/bc/q?y HTTP/1.1");
  ASSERT_EQ(heads.size(), 1u) << abap_.RequestLines();
  EXPECT_NE(heads[0].find("\r\nX-Forwarded-Host: vhost.example\r\n"), std::string::npos)
      << heads[0];
}

// `kwd-proxy explain` and the admin port's explain give the decision the
// traffic port makes.
TEST_F(PathSecurityTest, ExplainShowsTheSameDecisions) {
  ASSERT_TRUE(testing::WaitFor([&] { return HttpGet(admin_port_, "/healthz").status == 200; }));
  struct Case {
    std::string url;          // as given to explain
    std::string url_encoded;  // as the admin API's url= parameter
    std::string reason;
  };
  const Case cases[] = {
      {"/sap/admin/q(/a)/../../x", "/sap/admin/q(/a)/../../x", "denied"},
      {"/sap/admin//../x", "/sap/admin//../x", "denied"},
      {"/sap/x/..%2Fadmin/x", "/sap/x/..%252Fadmin/x", "bad-request"},
      {"http://h?x=1", "http://h%3Fx=1", "balance"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.url);
    const std::string want = "\"reason\":\"" + c.reason + "\"";
    HttpReply admin = HttpGet(admin_port_, "/admin/api/explain?url=" + c.url_encoded);
    EXPECT_EQ(admin.status, 200);
    EXPECT_NE(admin.body.find(want), std::string::npos) << admin.body;
    const std::string cli = ExplainCli(c.url);
    EXPECT_NE(cli.find(want), std::string::npos) << cli;
  }
}

}  // namespace
}  // namespace kwd
