// Black-box tests of `kwd-proxy serve`'s command line and of the affinity-key
// rotation: the real kwd-proxy and kwd-demo-backend processes on loopback.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "common/snapshot_io.h"
#include "dataplane/session/affinity_cookie.h"
#include "tests/support/http_client.h"
#include "tests/support/process.h"

namespace kwd {
namespace {

using testing::HttpGet;
using testing::HttpReply;
using testing::Process;

struct RunResult {
  int code = -1;
  std::string out;  // stdout and stderr
};

RunResult RunProxy(const std::string& args) {
  std::string command = testing::BinaryPath("kwd-proxy") + " " + args + " 2>&1 </dev/null";
  RunResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    return result;
  }
  char buffer[4096];
  size_t n = 0;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) {
    result.out.append(buffer, n);
  }
  int status = pclose(pipe);
  result.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

TEST(ProxyVersionTest, VersionCommandAndFlagPrintTheVersionAndRevision) {
  std::regex line(R"(kwd-proxy [0-9]+\.[0-9]+\.[0-9]+\S* \(revision ([0-9a-f]+|unknown)\)\n)");
  for (const char* args : {"version", "--version", "serve --version"}) {
    RunResult r = RunProxy(args);
    EXPECT_EQ(r.code, 0) << args;
    EXPECT_TRUE(std::regex_match(r.out, line)) << args << ": " << r.out;
  }
  EXPECT_NE(RunProxy("--help").out.find("version"), std::string::npos);
}

// Every flag is in --help with its default, and every flag --help names is
// one the parser knows.
TEST(ProxyServeHelpTest, ListsEveryFlagWithItsDefault) {
  RunResult help = RunProxy("serve --help");
  ASSERT_EQ(help.code, 0);
  for (const char* flag : {"--snapshot",         "--controller",        "--controller-ca",
                           "--controller-cert",  "--controller-key",    "--controller-server-name",
                           "--listen",           "--admin-listen",      "--admin-allowed-hosts",
                           "--public-ports",     "--workers",           "--node-id",
                           "--access-log",       "--affinity-key-file", "--affinity-key-grace",
                           "--header-timeout",   "--idle-timeout",      "--connect-timeout",
                           "--response-timeout", "--max-body-size",     "--max-header-size",
                           "--drain-timeout",    "--log-level"}) {
    EXPECT_NE(help.out.find(std::string("  ") + flag + " "), std::string::npos) << flag;
  }
  for (const char* shown :
       {"(default 0.0.0.0:8080)", "(default 127.0.0.1:9901: loopback only)", "(default 1)",
        "(default 10s)", "(default 1m)", "(default 5s)", "(default 1h)", "(default 104857600)",
        "(default 65536)", "(default info)", "(default -)"}) {
    EXPECT_NE(help.out.find(shown), std::string::npos) << shown;
  }
  // Each flag in the help text is one the parser knows (a value it refuses
  // is a usage error naming the flag, never "unknown flag").
  std::regex flag_re(R"(\n  (--[a-z-]+) )");
  int flags = 0;
  for (auto it = std::sregex_iterator(help.out.begin(), help.out.end(), flag_re);
       it != std::sregex_iterator(); ++it) {
    std::string flag = (*it)[1];
    RunResult r = RunProxy("serve " + flag + "=");
    EXPECT_EQ(r.out.find("unknown flag"), std::string::npos) << flag << ": " << r.out;
    ++flags;
  }
  EXPECT_GE(flags, 21);
}

TEST(ProxyServeFlagsTest, DurationsNeedAUnit) {
  for (const char* flag : {"--header-timeout", "--idle-timeout", "--connect-timeout",
                           "--response-timeout", "--drain-timeout", "--affinity-key-grace"}) {
    RunResult r = RunProxy(std::string("serve --snapshot /nonexistent ") + flag + " 10");
    EXPECT_EQ(r.code, 2) << flag << ": " << r.out;
    EXPECT_NE(r.out.find(std::string(flag) + ": \"10\" needs a unit"), std::string::npos) << r.out;
    r = RunProxy(std::string("serve --snapshot /nonexistent ") + flag + " 10x");
    EXPECT_EQ(r.code, 2) << flag;
    EXPECT_NE(r.out.find("unknown unit \"x\""), std::string::npos) << r.out;
  }
  // With a unit the flags parse; the missing snapshot is then a runtime error (1).
  RunResult r = RunProxy(
      "serve --snapshot /nonexistent --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 "
      "--header-timeout 500ms --idle-timeout 2m --connect-timeout 5s --response-timeout 1h "
      "--drain-timeout 10s --affinity-key-grace 30m");
  EXPECT_EQ(r.code, 1) << r.out;
}

// What the Helm chart renders for the proxy container parses (the rendered
// args are checked against the chart in tests/deploy/helm_chart_test.py).
TEST(ProxyServeFlagsTest, ChartStyleArgumentsParse) {
  RunResult r = RunProxy(
      "serve --controller kwd-controller.kwd.svc:18000 --node-id pod-1 --listen 0.0.0.0:0 "
      "--admin-listen 127.0.0.1:0 --workers 2 --drain-timeout 10s --affinity-key-file "
      "/nonexistent/affinity.key --affinity-key-grace 1h --access-log - --log-level info");
  // The key file is missing: a runtime error (1), not a usage error (2).
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("affinity key file"), std::string::npos) << r.out;
}

// ---- Affinity-key rotation with a real kwd-proxy ----

constexpr const char kKeyA[] = "key-A-0123456789abcdef";
constexpr const char kKeyB[] = "key-B-fedcba9876543210";

std::unique_ptr<Process> StartBackend(const std::string& instance) {
  return std::make_unique<Process>(std::vector<std::string>{testing::BinaryPath("kwd-demo-backend"),
                                                            "--listen", "127.0.0.1:0", "--instance",
                                                            instance, "--kind", "java"});
}

// One Java group "erp/portal" (J1, J2, equal capacity) under /irj/.
v1::Snapshot JavaSnapshot(uint16_t j1, uint16_t j2) {
  v1::Snapshot s;
  auto* g = s.add_groups();
  g->set_key("erp/portal");
  g->set_kind(v1::KIND_JAVA);
  g->set_strategy(v1::STRATEGY_WEIGHTED_ROUND_ROBIN);
  g->set_load_reset_interval_seconds(25);
  auto* sa = g->mutable_session_affinity();
  sa->add_identifiers(v1::SESSION_IDENTIFIER_JSESSIONID);
  sa->set_session_table_max_entries(1000);
  sa->set_session_table_idle_timeout_seconds(3600);
  sa->set_affinity_cookie_enabled(true);
  sa->set_affinity_cookie_name("kwd_affinity");
  for (auto [name, port] : {std::pair<const char*, uint16_t>{"J1", j1}, {"J2", j2}}) {
    auto* server = g->add_servers();
    server->set_name(name);
    server->set_address("127.0.0.1");
    server->set_port(port);
    server->set_capacity(1);
    server->set_state(v1::SERVER_STATE_READY);
  }
  auto* vh = s.add_virtual_hosts();
  vh->set_default_root_handler(v1::KIND_JAVA);
  vh->set_default_java_group("erp/portal");
  auto* rule = vh->add_rules();
  rule->set_prefix("/irj/");
  rule->set_kind(v1::KIND_JAVA);
  rule->set_group("erp/portal");
  StampSnapshotVersion(&s);
  return s;
}

void WriteFile(const std::string& path, const std::string& contents) {
  std::string tmp = path + ".tmp";
  std::ofstream(tmp) << contents;
  std::rename(tmp.c_str(), path.c_str());  // atomic, like a Secret volume update
}

class AffinityKeyRotationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/kwd_key_rotation_" + std::to_string(::getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::create_directories(dir_);
    j1_ = StartBackend("J1");
    j2_ = StartBackend("J2");
    ASSERT_TRUE(j1_->started() && j2_->started());
    snapshot_ = dir_ + "/snapshot.json";
    WriteFile(snapshot_, SnapshotToJson(JavaSnapshot(j1_->port(), j2_->port())));
    key_file_ = dir_ + "/affinity.key";
    WriteFile(key_file_, std::string(kKeyA) + "\n");
  }

  void StartProxy(const std::string& grace) {
    proxy_ = std::make_unique<Process>(
        std::vector<std::string>{testing::BinaryPath("kwd-proxy"), "serve", "--snapshot", snapshot_,
                                 "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
                                 "--access-log", "off", "--affinity-key-file", key_file_,
                                 "--affinity-key-grace", grace},
        dir_ + "/proxy.log");
    ASSERT_TRUE(proxy_->started()) << proxy_->Log();
  }

  // A new Java session: the server it went to and the affinity cookie set.
  std::pair<std::string, std::string> NewSession() {
    HttpReply first = HttpGet(proxy_->port(), "/irj/portal/start");
    std::string affinity;
    for (const auto& [name, value] : testing::SetCookies(first)) {
      if (name == "kwd_affinity") {
        affinity = value;
      }
    }
    return {first.Header("x-served-by"), affinity};
  }

  // The servers 6 requests carrying `cookie` went to.
  std::set<std::string> ServersFor(const std::string& cookie) {
    std::set<std::string> servers;
    for (int i = 0; i < 6; ++i) {
      HttpReply r = HttpGet(proxy_->port(), "/irj/portal/next",
                            {"Cookie: kwd_affinity=" + cookie + "; JSESSIONID=unknown-id"});
      EXPECT_EQ(r.status, 200);
      servers.insert(r.Header("x-served-by"));
    }
    return servers;
  }

  void RotateToKeyB() {
    WriteFile(key_file_, std::string(kKeyB) + "\n");
    ASSERT_TRUE(testing::WaitFor(
        [&] { return proxy_->Log().find("affinity key changed") != std::string::npos; },
        std::chrono::seconds(15)))
        << proxy_->Log();
  }

  std::string dir_, snapshot_, key_file_;
  std::unique_ptr<Process> j1_, j2_, proxy_;
};

TEST_F(AffinityKeyRotationTest, CookieSignedWithTheOldKeyStaysStickyAfterTheKeyFileChanges) {
  StartProxy("1h");
  auto [server_a, cookie_a] = NewSession();
  ASSERT_FALSE(cookie_a.empty()) << proxy_->Log();
  ASSERT_EQ(ServersFor(cookie_a), std::set<std::string>{server_a});

  RotateToKeyB();
  // Key A is still accepted (grace 1h): the old session stays on its server.
  EXPECT_EQ(ServersFor(cookie_a), std::set<std::string>{server_a});
  // New cookies are signed with key B and route sticky too.
  auto [server_b, cookie_b] = NewSession();
  ASSERT_FALSE(cookie_b.empty());
  EXPECT_EQ(ServersFor(cookie_b), std::set<std::string>{server_b});
  // Signed with key A before, with key B after the change.
  EXPECT_EQ(cookie_a, session::AffinityCookieCodec(kKeyA).Encode("erp/portal", server_a));
  EXPECT_EQ(cookie_b, session::AffinityCookieCodec(kKeyB).Encode("erp/portal", server_b));
  // The file going away (or empty) keeps the current key.
  WriteFile(key_file_, "\n");
  EXPECT_TRUE(testing::WaitFor(
      [&] { return proxy_->Log().find("affinity key file unreadable") != std::string::npos; },
      std::chrono::seconds(15)));
  EXPECT_EQ(ServersFor(cookie_b), std::set<std::string>{server_b});
}

TEST_F(AffinityKeyRotationTest, WithoutGraceTheOldKeyIsRefusedAtOnce) {
  StartProxy("0s");
  auto [server_a, cookie_a] = NewSession();
  ASSERT_FALSE(cookie_a.empty()) << proxy_->Log();
  ASSERT_EQ(ServersFor(cookie_a), std::set<std::string>{server_a});
  RotateToKeyB();
  // Not verified any more: balanced like a request without it (the balancer
  // now prefers the other server, which got none of the sticky requests).
  EXPECT_NE(ServersFor(cookie_a), std::set<std::string>{server_a});
}

}  // namespace
}  // namespace kwd
