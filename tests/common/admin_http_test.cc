// The admin ports' HTTP server (common/admin_http): which Host it answers
// (issue 23 item 11, DNS rebinding) and the headers every answer carries.
// In-process server on a loopback port, spoken to over a real socket.
#include "common/admin_http.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/http_client.h"

namespace kwd {
namespace {

using testing::HttpClient;
using testing::HttpReply;

TEST(AdminHostAllowed, OwnAddressLoopbackLocalhostAndConfiguredNames) {
  const std::vector<std::string> none;
  const std::vector<std::string> names = {"kwd-admin.kwd.svc", "*.admin.example"};
  // No Host (HTTP/1.0 tools): nothing to rebind.
  EXPECT_TRUE(AdminHostAllowed("", "10.1.2.3", none));
  // The address the connection reached, with or without port, any spelling.
  EXPECT_TRUE(AdminHostAllowed("10.1.2.3:9901", "10.1.2.3", none));
  EXPECT_TRUE(AdminHostAllowed("10.1.2.3", "::ffff:10.1.2.3", none));
  EXPECT_TRUE(AdminHostAllowed("[fd00::7]:9901", "fd00:0::7", none));
  EXPECT_FALSE(AdminHostAllowed("10.1.2.4:9901", "10.1.2.3", none));
  // Loopback and localhost.
  for (const char* host : {"localhost", "LOCALHOST:9901", "localhost.", "127.0.0.1", "127.3.4.5:80",
                           "[::1]", "[::1]:9901", "[::ffff:127.0.0.1]"}) {
    EXPECT_TRUE(AdminHostAllowed(host, "10.1.2.3", none)) << host;
  }
  // A rebinding page's Host: its own name.
  for (const char* host :
       {"evil.example", "evil.example:9901", "localhost.evil.example", "kwd-admin.kwd.svc",
        "admin.example", "10.1.2.3.evil.example", "[::1", ":9901", "127.0.0.1.nip.io",
        // Only a port may follow the host (attack review).
        "localhost:evil", "[::1]evil.com", "127.0.0.1:27191.evil.com", "localhost:27191@evil.com",
        "localhost:", "localhost:1234567", "[::1]:", "localhost.:x"}) {
    EXPECT_FALSE(AdminHostAllowed(host, "10.1.2.3", none)) << host;
  }
  EXPECT_TRUE(AdminHostAllowed("kwd-admin.kwd.svc:9901", "10.1.2.3", names));
  EXPECT_TRUE(AdminHostAllowed("KWD-ADMIN.kwd.svc.", "10.1.2.3", names));
  EXPECT_TRUE(AdminHostAllowed("a.admin.example", "10.1.2.3", names));
  EXPECT_TRUE(AdminHostAllowed("a.b.admin.example:1", "10.1.2.3", names));
  EXPECT_FALSE(AdminHostAllowed("admin.example", "10.1.2.3", names));
  EXPECT_FALSE(AdminHostAllowed("xadmin.example", "10.1.2.3", names));
  EXPECT_FALSE(AdminHostAllowed("kwd-admin.kwd.svc.evil.example", "10.1.2.3", names));
}

TEST(ParseAdminAllowedHosts, NamesAddressesAndWildcardsElseAClearError) {
  std::vector<std::string> hosts;
  std::string error;
  ASSERT_TRUE(ParseAdminAllowedHosts("a.example, *.b.example,10.0.0.1,fd00::1", &hosts, &error))
      << error;
  EXPECT_EQ(hosts, (std::vector<std::string>{"a.example", "*.b.example", "10.0.0.1", "fd00::1"}));
  for (const char* bad : {"", ",", "a b", "*.", "*", ".a", "a.", "a/b", "*.fd00::1", "a:80",
                          "[::1]", "evil\r\nX: y"}) {
    error.clear();
    std::vector<std::string> out;
    EXPECT_FALSE(ParseAdminAllowedHosts(bad, &out, &error)) << bad;
    EXPECT_FALSE(error.empty()) << bad;
  }
}

TEST(ParseAdminHttpHead, OneHostWithAValue) {
  AdminHttpLimits limits;
  AdminHttpHead head = ParseAdminHttpHead("GET / HTTP/1.1\r\nHost: a:1\r\n\r\n", limits);
  ASSERT_EQ(head.verdict, AdminHttpHead::Verdict::kRequest);
  EXPECT_EQ(head.request.host, "a:1");
  head = ParseAdminHttpHead("GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n", limits);
  EXPECT_EQ(head.verdict, AdminHttpHead::Verdict::kRefuse);
  EXPECT_EQ(head.status, 400);
  head = ParseAdminHttpHead("GET / HTTP/1.1\r\nHost:\r\n\r\n", limits);
  EXPECT_EQ(head.status, 400);
}

class AdminHttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    AdminHttpLimits limits;
    limits.allowed_hosts = {"kwd-admin.example"};
    server_ = std::make_unique<AdminHttpServer>(limits, [](const AdminHttpRequest& request) {
      AdminHttpResponse response;
      if (request.path == "/page") {
        response.content_type = "text/html; charset=utf-8";
        response.headers.emplace_back("Content-Security-Policy", "default-src 'self'");
        response.body = "<p>page</p>";
      } else if (request.path == "/framed") {
        response.headers.emplace_back("Content-Security-Policy", "frame-ancestors 'self'");
      } else {
        response.status = 404;
        response.body = "not found\n";
      }
      return response;
    });
    std::string error;
    ASSERT_TRUE(server_->Start("127.0.0.1", 0, &error)) << error;
  }

  HttpReply Send(std::string_view host, std::string_view path = "/page") {
    HttpClient client(server_->port());
    std::string raw = "GET " + std::string(path) + " HTTP/1.1\r\n";
    if (!host.empty()) {
      raw += "Host: " + std::string(host) + "\r\n";
    }
    return client.Request(raw + "\r\n");
  }

  static void ExpectHardened(const HttpReply& reply) {
    EXPECT_EQ(reply.Header("X-Frame-Options"), "DENY");
    EXPECT_EQ(reply.Header("X-Content-Type-Options"), "nosniff");
    std::vector<std::string> csp = reply.All("Content-Security-Policy");
    ASSERT_EQ(csp.size(), 1u);
    EXPECT_NE(csp[0].find("frame-ancestors"), std::string::npos) << csp[0];
  }

  std::unique_ptr<AdminHttpServer> server_;
};

// Times the process's threads other than this one went to sleep.
long OtherThreadsSleeps() {
  long total = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    if (task.path().filename() == std::to_string(::gettid())) {
      continue;
    }
    std::ifstream status(task.path() / "status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0) {
        total += std::stol(line.substr(line.find(':') + 1));
      }
    }
  }
  return total;
}

// With no connection the server's thread sleeps until one comes (it woke
// once a second): an idle admin port costs no CPU.
TEST_F(AdminHttpServerTest, IdleServerDoesNotWake) {
  EXPECT_EQ(Send("").status, 200);  // served, then idle
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const long before = OtherThreadsSleeps();
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  EXPECT_LE(OtherThreadsSleeps() - before, 1);
  EXPECT_EQ(Send("").status, 200);  // and still answers
}

TEST_F(AdminHttpServerTest, ForeignHostIsMisdirectedAndNotEchoed) {
  HttpReply reply = Send("rebind.evil.example:" + std::to_string(server_->port()));
  EXPECT_EQ(reply.status, 421);
  EXPECT_EQ(reply.body.find("<p>page</p>"), std::string::npos);
  EXPECT_EQ(reply.body.find("evil"), std::string::npos);
  EXPECT_NE(reply.body.find("--admin-allowed-hosts"), std::string::npos) << reply.body;
  ExpectHardened(reply);
}

TEST_F(AdminHttpServerTest, OwnAddressLocalhostConfiguredNameAndNoHostAreServed) {
  const std::string port = std::to_string(server_->port());
  for (const std::string& host : {"127.0.0.1:" + port, "localhost:" + port,
                                  std::string("kwd-admin.example"), std::string("")}) {
    HttpReply reply = Send(host);
    EXPECT_EQ(reply.status, 200) << host;
    EXPECT_EQ(reply.body, "<p>page</p>") << host;
    ExpectHardened(reply);
  }
}

TEST_F(AdminHttpServerTest, EveryAnswerForbidsFramingAndSniffing) {
  // The page's own policy gains frame-ancestors; one that sets it keeps it.
  HttpReply page = Send("localhost");
  ExpectHardened(page);
  EXPECT_EQ(page.Header("Content-Security-Policy"), "default-src 'self'; frame-ancestors 'none'");
  HttpReply framed = Send("localhost", "/framed");
  EXPECT_EQ(framed.Header("Content-Security-Policy"), "frame-ancestors 'self'");
  ExpectHardened(Send("localhost", "/missing"));
  // Refusals from the server itself too.
  HttpClient client(server_->port());
  HttpReply bad = client.Request("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n");
  EXPECT_EQ(bad.status, 400);
  ExpectHardened(bad);
}

}  // namespace
}  // namespace kwd
