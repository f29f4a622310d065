#include "dataplane/admin/admin_server.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/snapshot_io.h"
#include "dataplane/health/health_checker.h"
#include "dataplane/proxy/proxy.h"
#include "dataplane/routing/clock.h"
#include "dataplane/session/session_table.h"
#include "tests/dataplane/health/test_backend.h"
#include "tests/support/http_client.h"
#include "tests/support/process.h"
#include "tests/support/temp_path.h"

namespace kwd::admin {
namespace {

using kwd::testing::ReserveFreePort;
using kwd::testing::TestBackend;
using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr auto kDeadline = std::chrono::seconds(10);

struct HttpResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // lowercase names
  std::string body;
};

// One HTTP/1.1 exchange over a fresh loopback connection, bounded by a
// deadline: write the request, read until the server closes.
// `extra_headers`: more header lines, each ending in CRLF.
HttpResponse Fetch(uint16_t port, const std::string& method, const std::string& target,
                   const std::string& extra_headers = "") {
  HttpResponse response;
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    ADD_FAILURE() << "connect to port " << port << " failed";
    return response;
  }
  std::string request = method + " " + target +
                        " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + extra_headers +
                        "Content-Length: 0\r\n\r\n";
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string raw;
  auto deadline = std::chrono::steady_clock::now() + kDeadline;
  char buffer[8192];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) {
      continue;
    }
    ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) {
      break;
    }
    raw.append(buffer, static_cast<size_t>(n));
    // Stop once the body is complete, whether or not the server closes.
    size_t head_end = raw.find("\r\n\r\n");
    if (head_end != std::string::npos) {
      std::string lower = raw.substr(0, head_end);
      for (char& c : lower) {
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      }
      size_t cl = lower.find("content-length:");
      if (cl != std::string::npos &&
          raw.size() - head_end - 4 >= std::stoul(lower.substr(cl + 15))) {
        break;
      }
    }
  }
  ::close(fd);
  size_t head_end = raw.find("\r\n\r\n");
  if (raw.size() < 12 || head_end == std::string::npos) {
    ADD_FAILURE() << "no HTTP response: " << raw;
    return response;
  }
  response.status = std::stoi(raw.substr(9, 3));
  size_t line_start = raw.find("\r\n") + 2;
  while (line_start < head_end) {
    size_t line_end = raw.find("\r\n", line_start);
    std::string line = raw.substr(line_start, line_end - line_start);
    size_t colon = line.find(':');
    std::string name = line.substr(0, colon);
    for (char& c : name) {
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    size_t value_start = line.find_first_not_of(' ', colon + 1);
    response.headers[name] = value_start == std::string::npos ? "" : line.substr(value_start);
    line_start = line_end + 2;
  }
  response.body = raw.substr(head_end + 4);
  return response;
}

// Snapshot: erp/diag (abap, weighted_round_robin: app1 c=6, app2 c=3,
// app3 c=1 draining), erp/j2ee (java: j1); rules /sap/ -> erp/diag, /irj/
// -> erp/j2ee.
v1::Snapshot MakeSnapshot(uint16_t app1, uint16_t app2, uint16_t app3, uint16_t j1) {
  v1::Snapshot snapshot;
  auto add_server = [](v1::Group* group, const std::string& name, uint16_t port, uint32_t capacity,
                       v1::ServerState state) {
    v1::Server* server = group->add_servers();
    server->set_name(name);
    server->set_address("127.0.0.1");
    server->set_port(port);
    server->set_capacity(capacity);
    server->set_state(state);
  };
  auto add_group = [&](const std::string& key, v1::Kind kind) {
    v1::Group* group = snapshot.add_groups();
    group->set_key(key);
    group->set_kind(kind);
    group->set_strategy(v1::STRATEGY_WEIGHTED_ROUND_ROBIN);
    group->set_load_reset_interval_seconds(0);
    v1::HealthCheck* check = group->mutable_health_check();
    check->set_path("/ping");
    check->set_interval_seconds(1);
    check->set_timeout_seconds(1);
    check->set_unhealthy_threshold(1);
    check->set_healthy_threshold(1);
    auto* affinity = group->mutable_session_affinity();
    affinity->add_identifiers(v1::SESSION_IDENTIFIER_SAP_CONTEXTID);
    affinity->add_identifiers(v1::SESSION_IDENTIFIER_SAPLB);
    affinity->add_identifiers(v1::SESSION_IDENTIFIER_JSESSIONID);
    affinity->add_identifiers(v1::SESSION_IDENTIFIER_SAP_EXT_SID);
    return group;
  };
  v1::Group* diag = add_group("erp/diag", v1::KIND_ABAP);
  add_server(diag, "app1", app1, 6, v1::SERVER_STATE_READY);
  add_server(diag, "app2", app2, 3, v1::SERVER_STATE_READY);
  add_server(diag, "app3", app3, 1, v1::SERVER_STATE_DRAINING);
  v1::Group* j2ee = add_group("erp/j2ee", v1::KIND_JAVA);
  add_server(j2ee, "j1", j1, 1, v1::SERVER_STATE_READY);

  v1::VirtualHost* any = snapshot.add_virtual_hosts();
  any->set_default_root_handler(v1::KIND_ABAP);
  any->set_default_abap_group("erp/diag");
  any->set_default_java_group("erp/j2ee");
  for (auto [prefix, kind, group] :
       {std::tuple{"/irj/", v1::KIND_JAVA, "erp/j2ee"}, {"/sap/", v1::KIND_ABAP, "erp/diag"}}) {
    v1::Rule* rule = any->add_rules();
    rule->set_prefix(prefix);
    rule->set_kind(kind);
    rule->set_group(group);
  }
  for (auto [action, pattern] : {std::pair{v1::PERMISSION_ACTION_PERMIT, "/sap/public/*"},
                                 {v1::PERMISSION_ACTION_DENY, "*.cgi"}}) {
    v1::Permission* permission = any->add_permissions();
    permission->set_action(action);
    permission->set_pattern(pattern);
  }
  StampSnapshotVersion(&snapshot);
  return snapshot;
}

class AdminServerTest : public ::testing::Test {
 protected:
  AdminServerTest()
      : app1_(TestBackend::Mode::kOk),
        app2_(TestBackend::Mode::kOk),
        app3_(TestBackend::Mode::kOk),
        j1_(TestBackend::Mode::kOk) {}

  void SetUp() override {
    proxy::ProxyOptions options;
    std::string error;
    ASSERT_TRUE(net::ParseEndpoint("127.0.0.1:0", &options.listen, &error)) << error;
    options.workers = 2;
    options.access_log = "off";
    options.affinity_key = "test-affinity-key";
    admin_port_ = ReserveFreePort();
    ASSERT_TRUE(net::ParseEndpoint("127.0.0.1:" + std::to_string(admin_port_),
                                   &options.admin_listen, &error))
        << error;
    proxy_ = std::make_unique<proxy::Proxy>(options);
    ASSERT_TRUE(proxy_->Start(&error)) << error;
    AdminOptions admin_options;
    admin_options.listen = options.admin_listen;
    admin_options.token = admin_token_;
    admin_ = std::make_unique<AdminServer>(proxy_.get(), admin_options);
    ASSERT_TRUE(admin_->Start(&error)) << error;
  }

  void TearDown() override {
    if (admin_ != nullptr) {
      admin_->Stop();
    }
    if (proxy_ != nullptr) {
      proxy_->Shutdown(0);
    }
  }

  void ApplySnapshot() {
    std::string error;
    ASSERT_TRUE(proxy_->ApplySnapshot(
        MakeSnapshot(app1_.port(), app2_.port(), app3_.port(), j1_.port()), &error))
        << error;
  }

  HttpResponse Get(const std::string& target) { return Fetch(admin_port_, "GET", target); }

  json State() {
    HttpResponse response = Get("/admin/api/state");
    EXPECT_EQ(response.status, 200);
    return json::parse(response.body);
  }

  std::string admin_token_;  // set before SetUp: actions enabled
  TestBackend app1_;
  TestBackend app2_;
  TestBackend app3_;
  TestBackend j1_;
  uint16_t admin_port_ = 0;
  std::unique_ptr<proxy::Proxy> proxy_;
  std::unique_ptr<AdminServer> admin_;
};

TEST_F(AdminServerTest, HealthzAndReadyzFollowTheSnapshot) {
  HttpResponse healthz = Get("/healthz");
  EXPECT_EQ(healthz.status, 200);
  EXPECT_EQ(healthz.body, "ok\n");
  EXPECT_THAT(healthz.headers["content-type"], StartsWith("text/plain"));

  HttpResponse before = Get("/readyz");
  EXPECT_EQ(before.status, 503);
  EXPECT_THAT(before.body, HasSubstr("not ready"));

  ApplySnapshot();
  HttpResponse after = Get("/readyz");
  EXPECT_EQ(after.status, 200);
  EXPECT_EQ(after.body, "ready\n");
}

TEST_F(AdminServerTest, UnknownPathIsJson404AndOnlyGetIsAllowed) {
  HttpResponse missing = Get("/nope");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(missing.headers["content-type"], "application/json");
  json body = json::parse(missing.body);
  EXPECT_EQ(body["error"], "not found");
  EXPECT_EQ(body["path"], "/nope");

  HttpResponse post = Fetch(admin_port_, "POST", "/metrics");
  EXPECT_EQ(post.status, 405);
  EXPECT_EQ(post.headers["allow"], "GET, HEAD");
}

TEST_F(AdminServerTest, MetricsPassPromtool) {
  ApplySnapshot();
  // The health checker registers its families in the same registry.
  health::HealthCheckerOptions options;
  options.interval_override_ms = 20;
  options.timeout_override_ms = 500;
  health::HealthChecker checker([this] { return proxy_->table(); }, &proxy_->metrics().registry(),
                                options);
  std::string error;
  ASSERT_TRUE(checker.Start(&error)) << error;
  auto deadline = std::chrono::steady_clock::now() + kDeadline;
  while (checker.checks_succeeded() < 4 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_GE(checker.checks_succeeded(), 4u);

  HttpResponse metrics = Get("/metrics");
  checker.Stop();
  EXPECT_EQ(metrics.status, 200);
  EXPECT_EQ(metrics.headers["content-type"], "text/plain; version=0.0.4");
  EXPECT_THAT(metrics.body, HasSubstr("kwd_proxy_ready 1"));
  EXPECT_THAT(metrics.body, HasSubstr("kwd_proxy_server_up{group=\"erp/diag\",server=\"app1\"} 1"));
  EXPECT_THAT(metrics.body, HasSubstr("kwd_proxy_health_checks_total{result=\"success\"}"));

  std::string path = testing::UniqueTempPath("admin_metrics.txt");
  {
    std::ofstream out(path, std::ios::binary);
    out << metrics.body;
  }
  std::string command = "promtool check metrics < " + path + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[512];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) {
    output.append(buffer, n);
  }
  int status = ::pclose(pipe);
  std::remove(path.c_str());
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(output, "");
  std::remove(path.c_str());
}

TEST_F(AdminServerTest, AdminPortRunsOnOneThread) {
  ASSERT_EQ(Get("/healthz").status, 200);
  // main, 2 workers, the admin thread, backends; no library thread pool.
  size_t threads = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    (void)entry;
    ++threads;
  }
  RecordProperty("threads", static_cast<int>(threads));
  EXPECT_LT(threads, 20u);
  EXPECT_EQ(admin_->port(), admin_port_);
}

// A real kwd-proxy: an oversize request head on the admin port is answered
// 431 once it passes 16 KiB, and the process does not grow by what the
// client sent (before: 64 MiB of head grew it by more than 64 MiB).
TEST(AdminServerBlackBoxTest, OversizeHeadIsRefusedWithoutGrowing) {
  std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "kwd-proxy-admin";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  v1::Snapshot snapshot;
  StampSnapshotVersion(&snapshot);
  std::ofstream(dir / "snapshot.json") << SnapshotToJson(snapshot);
  uint16_t admin_port = ReserveFreePort();
  kwd::testing::Process proxy(
      {kwd::testing::BinaryPath("kwd-proxy"), "serve", "--snapshot",
       (dir / "snapshot.json").string(), "--listen", "127.0.0.1:0", "--admin-listen",
       "127.0.0.1:" + std::to_string(admin_port), "--access-log", "off"},
      (dir / "proxy.log").string());
  ASSERT_TRUE(proxy.started()) << proxy.Log();
  ASSERT_TRUE(kwd::testing::WaitFor([&] {
    return kwd::testing::HttpGet(admin_port, "/healthz").status == 200;
  })) << proxy.Log();
  long before_kib = proxy.PeakRssKiB();
  ASSERT_GT(before_kib, 0);

  size_t sent = 0;
  kwd::testing::HttpReply reply =
      kwd::testing::SendEndlessHead(admin_port, size_t{64} << 20, &sent);
  EXPECT_EQ(reply.status, 431) << "sent " << sent << " bytes";
  long grown_kib = proxy.PeakRssKiB() - before_kib;
  RecordProperty("peak_rss_growth_kib", static_cast<int>(grown_kib));
  EXPECT_LT(grown_kib, 8 * 1024) << "sent " << sent << " bytes";
  EXPECT_EQ(kwd::testing::HttpGet(admin_port, "/healthz").status, 200);
  EXPECT_EQ(proxy.Stop(), 0);
}

// A real kwd-proxy: --admin-token-file turns the actions on; without it, or
// with a wrong token, they are refused; an empty token file stops the start.
TEST(AdminServerBlackBoxTest, TokenFileEnablesActions) {
  std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "kwd-proxy-token";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  TestBackend app(TestBackend::Mode::kOk);
  std::ofstream(dir / "snapshot.json")
      << SnapshotToJson(MakeSnapshot(app.port(), app.port(), app.port(), app.port()));
  std::ofstream(dir / "token") << "black-box-token\n";
  std::ofstream(dir / "empty") << "\n";
  auto args = [&](const std::string& token_file, uint16_t admin_port) {
    return std::vector<std::string>{kwd::testing::BinaryPath("kwd-proxy"),
                                    "serve",
                                    "--snapshot",
                                    (dir / "snapshot.json").string(),
                                    "--listen",
                                    "127.0.0.1:0",
                                    "--admin-listen",
                                    "127.0.0.1:" + std::to_string(admin_port),
                                    "--access-log",
                                    "off",
                                    "--admin-token-file",
                                    token_file};
  };
  {
    kwd::testing::Process refused(args((dir / "empty").string(), ReserveFreePort()),
                                  (dir / "empty.log").string(), /*wait_for_listening=*/false);
    ASSERT_TRUE(kwd::testing::WaitFor([&] { return !refused.Alive(); }));
    EXPECT_THAT(refused.Log(), HasSubstr("--admin-token-file: "));
    EXPECT_THAT(refused.Log(), HasSubstr("is empty"));
  }
  uint16_t admin_port = ReserveFreePort();
  kwd::testing::Process proxy(args((dir / "token").string(), admin_port),
                              (dir / "proxy.log").string());
  ASSERT_TRUE(proxy.started()) << proxy.Log();
  const std::string drain = "/admin/api/servers/drain?group=erp/diag&server=app2";
  EXPECT_EQ(Fetch(admin_port, "POST", drain).status, 401);
  EXPECT_EQ(Fetch(admin_port, "POST", drain, "Authorization: Bearer nope\r\n").status, 401);
  HttpResponse ok = Fetch(admin_port, "POST", drain, "Authorization: Bearer black-box-token\r\n");
  EXPECT_EQ(ok.status, 200) << ok.body;
  json state = json::parse(Fetch(admin_port, "GET", "/admin/api/state").body);
  EXPECT_EQ(state["actions_enabled"], true);
  EXPECT_EQ(state["groups"][0]["servers"][1]["local_drain"], true);
  EXPECT_EQ(state["snapshot_source"]["kind"], "file");
  EXPECT_TRUE(state["snapshot_source"]["connected"].is_null());
  EXPECT_EQ(state["snapshot_source"]["last_applied"]["version"], state["version"]);
  EXPECT_THAT(proxy.Log(), HasSubstr("server drained locally"));
  EXPECT_EQ(proxy.Stop(), 0);
}

TEST_F(AdminServerTest, AdminPageIsSelfContainedHtml) {
  HttpResponse page = Get("/admin");
  EXPECT_EQ(page.status, 200);
  EXPECT_EQ(page.headers["content-type"], "text/html; charset=utf-8");
  EXPECT_THAT(page.body, StartsWith("<!doctype html>"));
  EXPECT_THAT(page.body, HasSubstr("api/state"));
  EXPECT_THAT(page.body, HasSubstr("api/explain"));
  // No external assets: nothing is loaded from another origin.
  EXPECT_THAT(page.body, ::testing::Not(HasSubstr("http://")));
  EXPECT_THAT(page.body, ::testing::Not(HasSubstr("https://")));
  EXPECT_THAT(page.body, ::testing::Not(HasSubstr("src=")));
}

TEST_F(AdminServerTest, StateBeforeAnySnapshot) {
  json state = State();
  EXPECT_EQ(state["ready"], false);
  EXPECT_EQ(state["workers"], 2);
  EXPECT_EQ(state["workers_answered"], 2);
  EXPECT_TRUE(state["groups"].empty());
}

TEST_F(AdminServerTest, StateShowsGroupsServersLoadAndHealth) {
  ApplySnapshot();
  // Three requests through the proxy; each answered before the next.
  for (int i = 0; i < 3; ++i) {
    HttpResponse response = Fetch(proxy_->bound().port(), "GET", "/sap/bc/x");
    ASSERT_EQ(response.status, 200) << response.body;
  }
  HttpResponse raw = Get("/admin/api/state");
  EXPECT_EQ(raw.status, 200);
  EXPECT_EQ(raw.headers["content-type"], "application/json");
  json state = json::parse(raw.body);
  EXPECT_EQ(state["version"], proxy_->version());
  EXPECT_EQ(state["ready"], true);
  EXPECT_EQ(state["workers"], 2);
  EXPECT_EQ(state["workers_answered"], 2);
  ASSERT_EQ(state["groups"].size(), 2u);

  const json& diag = state["groups"][0];
  EXPECT_EQ(diag["key"], "erp/diag");
  EXPECT_EQ(diag["kind"], "abap");
  EXPECT_EQ(diag["strategy"], "weighted_round_robin");
  EXPECT_EQ(diag["session_table_entries"], 0);
  ASSERT_EQ(diag["servers"].size(), 3u);
  uint64_t assigned = 0;
  std::vector<std::string> names;
  for (const json& server : diag["servers"]) {
    names.push_back(server["name"]);
    EXPECT_EQ(server["address"], "127.0.0.1");
    EXPECT_EQ(server["outstanding"], 0) << server;  // every response arrived
    EXPECT_EQ(server["healthy"], true);
    EXPECT_TRUE(server["rtt_ms"].is_null());  // no health checker in this test
    assigned += server["assigned"].get<uint64_t>();
    double load = (server["assigned"].get<double>() + server["outstanding"].get<double>()) /
                  server["capacity"].get<double>();
    EXPECT_DOUBLE_EQ(server["load_factor"].get<double>(), load);
  }
  EXPECT_EQ(assigned, 3u);  // summed over both workers
  EXPECT_EQ(names, (std::vector<std::string>{"app1", "app2", "app3"}));
  EXPECT_EQ(diag["servers"][0]["port"], app1_.port());
  EXPECT_EQ(diag["servers"][0]["capacity"], 6);
  EXPECT_EQ(diag["servers"][0]["state"], "ready");
  EXPECT_EQ(diag["servers"][2]["state"], "draining");
  EXPECT_EQ(diag["servers"][2]["assigned"], 0);  // draining: no new traffic
  EXPECT_EQ(app1_.requests() + app2_.requests(), 3);

  const json& j2ee = state["groups"][1];
  EXPECT_EQ(j2ee["key"], "erp/j2ee");
  EXPECT_EQ(j2ee["kind"], "java");
  EXPECT_EQ(j2ee["next_preferred_server"], "j1");

  // app1 goes down: state reports it, and app2 becomes the next preferred.
  proxy_->health().Find("erp/diag", "app1")->healthy.store(false);
  proxy_->health().Find("erp/diag", "app2")->smoothed_rtt_us.store(1500);
  json later = State();
  EXPECT_EQ(later["groups"][0]["servers"][0]["healthy"], false);
  EXPECT_DOUBLE_EQ(later["groups"][0]["servers"][1]["rtt_ms"].get<double>(), 1.5);
  EXPECT_EQ(later["groups"][0]["next_preferred_server"], "app2");
}

TEST_F(AdminServerTest, ExplainAnswersLikeTheCliWithoutMovingLiveBalancing) {
  ApplySnapshot();
  // The admin router balances on its own counters: A A B with capacities 6, 3.
  std::vector<std::string> picks;
  for (int i = 0; i < 3; ++i) {
    picks.push_back(admin_->Explain("/sap/x", std::nullopt, {})["server"]);
  }
  EXPECT_EQ(picks, (std::vector<std::string>{"app1", "app1", "app2"}));

  // Next by the same rule: app1 (3/6 beats 2/3).
  HttpResponse response =
      Get("/admin/api/explain?url=%2Fsap%2Fbc%2Fgui%2Fx%3Fa%3D1&host=erp.local");
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.headers["content-type"], "application/json");
  json decision = json::parse(response.body);
  EXPECT_EQ(decision["group"], "erp/diag");
  EXPECT_EQ(decision["server"], "app1");
  EXPECT_EQ(decision["address"], "127.0.0.1:" + std::to_string(app1_.port()));
  EXPECT_EQ(decision["rule"], "/sap/");
  EXPECT_EQ(decision["kind"], "abap");
  EXPECT_EQ(decision["reason"], "balance");
  EXPECT_TRUE(decision["status"].is_null());
  EXPECT_EQ(decision["path"], "/sap/bc/gui/x");

  // Sticky by saplb cookie (repeatable header= parameters).
  json sticky = json::parse(
      Get("/admin/api/explain?url=/sap/bc/x&header=Cookie:%20saplb_diag%3D(app2)00&header=X-A:+b")
          .body);
  EXPECT_EQ(sticky["server"], "app2");
  EXPECT_EQ(sticky["reason"], "sticky:saplb");

  // Java rule and root URL.
  EXPECT_EQ(json::parse(Get("/admin/api/explain?url=http://h/irj/portal").body)["group"],
            "erp/j2ee");
  EXPECT_EQ(json::parse(Get("/admin/api/explain?url=/index.html").body)["rule"], "root");

  // Explaining many times never touched the workers' counters.
  for (int i = 0; i < 5; ++i) {
    Get("/admin/api/explain?url=/sap/bc/x");
  }
  json state = State();
  for (const json& group : state["groups"]) {
    for (const json& server : group["servers"]) {
      EXPECT_EQ(server["assigned"], 0) << server;
    }
  }
  HttpResponse missing = Get("/admin/api/explain");
  EXPECT_EQ(missing.status, 400);
  EXPECT_THAT(json::parse(missing.body)["error"].get<std::string>(), HasSubstr("url"));
  EXPECT_EQ(Get("/admin/api/explain?url=%zz").status, 400);
  EXPECT_EQ(Get("/admin/api/explain?url=/x&header=nocolon").status, 400);
  // A decoded URL that is not UTF-8 is explained, its bad bytes replaced.
  HttpResponse latin = Get("/admin/api/explain?url=/sap/%FFx&host=%FE");
  EXPECT_EQ(latin.status, 200) << latin.body;
  EXPECT_EQ(json::parse(latin.body)["path"], "/sap/\xEF\xBF\xBDx");
}

// Explaining reads the live session tables but never writes them: no
// sap-ext-sid is recorded, no entry is refreshed, expired or erased, and no
// counter of the proxy moves.
TEST_F(AdminServerTest, ExplainDoesNotChangeLiveState) {
  ApplySnapshot();
  std::shared_ptr<const routing::RoutingTable> table = proxy_->table();
  ASSERT_NE(table, nullptr);
  session::SessionTable& sessions = *table->groups()[0].sessions;
  ASSERT_EQ(table->groups()[0].key, "erp/diag");
  // The kwd_* series (process_* CPU and memory move on their own).
  auto kwd_metrics = [&] {
    std::string body = Get("/metrics").body;
    std::string kept;
    size_t start = 0;
    while (start < body.size()) {
      size_t end = body.find('\n', start);
      end = end == std::string::npos ? body.size() : end + 1;
      std::string_view line(body.data() + start, end - start);
      if (line.find("process_") == std::string_view::npos) {
        kept.append(line);
      }
      start = end;
    }
    return kept;
  };
  const std::string metrics_before = kwd_metrics();

  // A first sap-ext-sid is balanced, and would be recorded by the proxy.
  json first = json::parse(Get("/admin/api/explain?url=/sap/bc/x;sap-ext-sid=abc").body);
  EXPECT_EQ(first["reason"], "balance");
  EXPECT_EQ(sessions.Stats().entries, 0u);
  EXPECT_EQ(sessions.Stats().inserts, 0u);
  EXPECT_EQ(State()["groups"][0]["session_table_entries"], 0);

  // A live entry idle for two hours (beyond the default hour) is not dropped
  // by explaining it, and one that names a server the group no longer has is
  // not erased.
  routing::SteadyClock clock;
  sessions.Record(session::TableKey::kSapExtSid, "old", "app2", clock.NowMs() - 7200 * 1000);
  sessions.Record(session::TableKey::kSapExtSid, "stale", "gone", clock.NowMs());
  ASSERT_EQ(sessions.Stats().entries, 2u);
  EXPECT_EQ(json::parse(Get("/admin/api/explain?url=/sap/bc/x;sap-ext-sid=old").body)["reason"],
            "balance");
  EXPECT_EQ(json::parse(Get("/admin/api/explain?url=/sap/bc/x;sap-ext-sid=stale").body)["reason"],
            "balance");
  session::SessionTableStats stats = sessions.Stats();
  EXPECT_EQ(stats.entries, 2u);
  EXPECT_EQ(stats.expirations, 0u);
  EXPECT_EQ(stats.inserts, 2u);

  // A live entry is used, as the proxy would use it.
  sessions.Record(session::TableKey::kSapExtSid, "live", "app2", clock.NowMs());
  json group = State()["groups"][0];
  EXPECT_EQ(group["session_table_entries"], 3);
  EXPECT_EQ(group["session_table_client_entries"], 3);
  EXPECT_EQ(group["session_table_refused"], 0);
  json sticky = json::parse(Get("/admin/api/explain?url=/sap/bc/x;sap-ext-sid=live").body);
  EXPECT_EQ(sticky["server"], "app2");
  EXPECT_EQ(sticky["reason"], "sticky:sap-ext-sid");

  // No worker counter, health state or metric moved.
  json final_state = State();  // kept: a range over a temporary's member would dangle
  for (const json& group : final_state["groups"]) {
    for (const json& server : group["servers"]) {
      EXPECT_EQ(server["assigned"], 0) << server;
      EXPECT_EQ(server["healthy"], true) << server;
    }
  }
  EXPECT_EQ(kwd_metrics(), metrics_before);
}

// Regression: at /admin (no slash) the page fetched "api/state" relative to
// "/" and showed "cannot read state". Every URL is absolute now, and both
// addresses serve the same page.
TEST_F(AdminServerTest, PageUsesAbsoluteApiUrlsAtBothAddresses) {
  HttpResponse bare = Get("/admin");
  HttpResponse slash = Get("/admin/");
  EXPECT_EQ(bare.status, 200);
  EXPECT_EQ(bare.body, slash.body);
  for (const char* url :
       {"\"/admin/api/state\"", "\"/admin/api/explain?\"", "\"/admin/api/servers/\""}) {
    EXPECT_THAT(bare.body, HasSubstr(url));
  }
  EXPECT_THAT(bare.body, ::testing::Not(HasSubstr("fetch(\"api/")));
  // The favicon is inline: the browser asks for nothing else.
  EXPECT_THAT(bare.body, HasSubstr("rel=\"icon\" type=\"image/svg+xml\" href=\"data:"));
  for (const char* part : {"<form id=\"explain\">", "name=\"url\"", "name=\"host\"",
                           "name=\"header\"", "id=\"explain-result\"", "id=\"token\""}) {
    EXPECT_THAT(bare.body, HasSubstr(part));
  }
  // Untrusted text is never parsed as HTML.
  EXPECT_THAT(bare.body, ::testing::Not(HasSubstr("innerHTML")));
  EXPECT_THAT(bare.body, ::testing::Not(HasSubstr("insertAdjacentHTML")));
}

TEST_F(AdminServerTest, StateShowsTrafficMappingPermissionsAndRecentErrors) {
  ApplySnapshot();
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(Fetch(proxy_->bound().port(), "GET", "/sap/bc/x").status, 200);
  }
  // Denied: the proxy answers itself and remembers it, without the URL or the session id.
  ASSERT_EQ(Fetch(proxy_->bound().port(), "GET",
                  "/sap/bc/secret.cgi?sap-contextid=SID%3aANON%3aapp1%3aSECRET")
                .status,
            403);
  json state = State();
  EXPECT_EQ(state["actions_enabled"], false);
  EXPECT_TRUE(state["started_at"].is_string());
  EXPECT_GE(state["uptime_seconds"].get<double>(), 0.0);
  EXPECT_GT(state["rate_window_seconds"].get<double>(), 0.0);
  EXPECT_TRUE(state["snapshot_source"].is_null());  // not given in this test

  const json& diag = state["groups"][0];
  uint64_t requests = 0;
  double rate = 0;
  for (const json& server : diag["servers"]) {
    requests += server["requests"].get<uint64_t>();
    EXPECT_EQ(server["requests"], server["responses"]["2xx"]) << server;
    EXPECT_EQ(server["errors"], 0) << server;
    rate += server["requests_per_second"].get<double>();
    EXPECT_EQ(server["local_drain"], false);
  }
  EXPECT_EQ(requests, 3u);  // summed over both workers
  EXPECT_GT(rate, 0.0);
  EXPECT_EQ(diag["sticky_routed"], 0);

  ASSERT_EQ(state["url_mapping"].size(), 1u);
  const json& mapping = state["url_mapping"][0];
  EXPECT_TRUE(mapping["host"].is_null());  // any host
  EXPECT_EQ(mapping["default_root_handler"], "abap");
  EXPECT_EQ(mapping["default_groups"]["abap"], "erp/diag");
  ASSERT_EQ(mapping["rules"].size(), 2u);
  EXPECT_EQ(mapping["rules"][0]["prefix"], "/irj/");
  EXPECT_EQ(mapping["rules"][0]["group"], "erp/j2ee");
  EXPECT_EQ(mapping["rules"][1]["kind"], "abap");
  ASSERT_EQ(mapping["permissions"].size(), 2u);
  EXPECT_EQ(mapping["permissions"][0], (json{{"action", "permit"}, {"pattern", "/sap/public/*"}}));
  EXPECT_EQ(mapping["permissions"][1], (json{{"action", "deny"}, {"pattern", "*.cgi"}}));

  ASSERT_EQ(state["recent_errors"].size(), 1u);
  const json& error = state["recent_errors"][0];
  EXPECT_EQ(error["status"], 403);
  EXPECT_EQ(error["code"], "EPERM");
  EXPECT_EQ(error["reason"], "denied");
  EXPECT_EQ(error["group"], "erp/diag");
  EXPECT_TRUE(error["at"].is_string());
  std::string errors = state["recent_errors"].dump();
  EXPECT_THAT(errors, ::testing::Not(HasSubstr("SECRET")));
  EXPECT_THAT(errors, ::testing::Not(HasSubstr("secret.cgi")));
}

// The rules of a host in evaluation order: the longest prefix first.
TEST_F(AdminServerTest, UrlMappingRulesAreListedLongestPrefixFirst) {
  v1::Snapshot snapshot = MakeSnapshot(app1_.port(), app2_.port(), app3_.port(), j1_.port());
  v1::Rule* rule = snapshot.mutable_virtual_hosts(0)->add_rules();
  rule->set_prefix("/sap/bc/gui/");
  rule->set_kind(v1::KIND_ABAP);
  rule->set_group("erp/diag");
  StampSnapshotVersion(&snapshot);
  std::string error;
  ASSERT_TRUE(proxy_->ApplySnapshot(snapshot, &error)) << error;
  std::vector<std::string> prefixes;
  json state = State();
  for (const json& r : state["url_mapping"][0]["rules"]) {
    prefixes.push_back(r["prefix"]);
  }
  EXPECT_EQ(prefixes, (std::vector<std::string>{"/sap/bc/gui/", "/irj/", "/sap/"}));
}

// Groups by key and virtual hosts by host, as CheckSnapshot wants them,
// then a new version.
void SortAndStamp(v1::Snapshot* snapshot) {
  std::sort(snapshot->mutable_groups()->pointer_begin(), snapshot->mutable_groups()->pointer_end(),
            [](const v1::Group* a, const v1::Group* b) { return a->key() < b->key(); });
  std::sort(
      snapshot->mutable_virtual_hosts()->pointer_begin(),
      snapshot->mutable_virtual_hosts()->pointer_end(),
      [](const v1::VirtualHost* a, const v1::VirtualHost* b) { return a->host() < b->host(); });
  StampSnapshotVersion(snapshot);
}

// TLS passthrough: each host's passthrough group, the group's hosts and
// counters, and how its servers are health-checked (TLS for a passthrough
// group only; plain HTTP for a group that also serves HTTP requests).
TEST_F(AdminServerTest, StateShowsPassthroughGroupsAndHealthCheckProtocols) {
  v1::Snapshot snapshot = MakeSnapshot(app1_.port(), app2_.port(), app3_.port(), j1_.port());
  v1::Group* https = snapshot.add_groups();
  *https = snapshot.groups(1);
  https->set_key("erp/https");
  https->mutable_servers(0)->set_name("s1");
  v1::VirtualHost* erp = snapshot.add_virtual_hosts();
  erp->set_host("erp.example.com");
  erp->set_passthrough_group("erp/https");
  v1::VirtualHost* wild = snapshot.add_virtual_hosts();
  wild->set_host("*.erp.example.com");
  wild->set_passthrough_group("erp/https");
  // The any host: erp/diag is its HTTP default and its passthrough default.
  snapshot.mutable_virtual_hosts(0)->set_passthrough_group("erp/diag");
  SortAndStamp(&snapshot);
  std::string error;
  ASSERT_TRUE(proxy_->ApplySnapshot(snapshot, &error)) << error;

  json state = State();
  std::map<std::string, json> groups;
  for (const json& g : state["groups"]) {
    groups[g["key"]] = g;
  }
  const json& pt = groups["erp/https"]["passthrough"];
  ASSERT_TRUE(pt.is_object()) << groups["erp/https"];
  EXPECT_THAT(pt["hosts"].get<std::vector<std::string>>(),
              ::testing::UnorderedElementsAre("erp.example.com", "*.erp.example.com"));
  EXPECT_EQ(pt["connections"], 0);
  EXPECT_EQ(pt["bytes_in"], 0);
  EXPECT_EQ(pt["bytes_out"], 0);
  EXPECT_EQ(pt["errors"], 0);
  // One exact host: the health check's SNI and Host.
  EXPECT_EQ(groups["erp/https"]["health_check"],
            (json{{"path", "/ping"}, {"protocol", "tls"}, {"server_name", "erp.example.com"}}));
  // Used for HTTP too: checked the way its HTTP requests are sent.
  EXPECT_EQ(groups["erp/diag"]["passthrough"]["hosts"], json::array({nullptr}));
  EXPECT_EQ(groups["erp/diag"]["health_check"]["protocol"], "http");
  EXPECT_TRUE(groups["erp/j2ee"]["passthrough"].is_null());
  EXPECT_EQ(groups["erp/j2ee"]["health_check"]["protocol"], "http");

  std::map<std::string, json> hosts;
  for (const json& h : state["url_mapping"]) {
    hosts[h["host"].is_null() ? "" : h["host"].get<std::string>()] = h;
  }
  EXPECT_EQ(hosts["erp.example.com"]["passthrough_group"], "erp/https");
  EXPECT_EQ(hosts["*.erp.example.com"]["passthrough_group"], "erp/https");
  EXPECT_EQ(hosts[""]["passthrough_group"], "erp/diag");

  // Two exact hosts: no obvious name, the check goes to the address.
  erp = snapshot.add_virtual_hosts();
  erp->set_host("erp2.example.com");
  erp->set_passthrough_group("erp/https");
  SortAndStamp(&snapshot);
  ASSERT_TRUE(proxy_->ApplySnapshot(snapshot, &error)) << error;
  state = State();
  for (const json& g : state["groups"]) {
    if (g["key"] == "erp/https") {
      EXPECT_EQ(g["health_check"]["protocol"], "tls");
      EXPECT_TRUE(g["health_check"]["server_name"].is_null()) << g;
    }
  }
}

// The health checker's rule, without a proxy: re-encryption wins (verified
// TLS), passthrough-only is unverified TLS, anything else plain HTTP.
TEST(GroupChecksTest, ReencryptPassthroughAndMixedGroups) {
  v1::Snapshot snapshot = MakeSnapshot(1001, 1002, 1003, 1004);
  snapshot.mutable_virtual_hosts(0)->set_passthrough_group("erp/j2ee");
  v1::Group* tls = snapshot.add_groups();
  *tls = snapshot.groups(1);
  tls->set_key("erp/tls");
  v1::VirtualHost* host = snapshot.add_virtual_hosts();
  host->set_host("tls.example.com");
  host->set_passthrough_group("erp/tls");
  SortAndStamp(&snapshot);
  session::SessionRegistry sessions;
  routing::ServerHealthRegistry health;
  routing::TableContext context{&sessions, &health};
  std::string error;
  auto table = routing::RoutingTable::Build(snapshot, context, &error);
  ASSERT_NE(table, nullptr) << error;
  std::vector<health::GroupCheck> checks = health::GroupChecks(*table);
  ASSERT_EQ(checks.size(), 3u);
  std::map<std::string, health::GroupCheck> by_key;
  for (size_t g = 0; g < checks.size(); ++g) {
    by_key[table->groups()[g].key] = checks[g];
  }
  EXPECT_EQ(by_key["erp/diag"].transport, health::CheckTransport::kHttp);
  EXPECT_FALSE(by_key["erp/diag"].passthrough);
  EXPECT_EQ(by_key["erp/j2ee"].transport, health::CheckTransport::kHttp);  // mixed
  EXPECT_TRUE(by_key["erp/j2ee"].passthrough);
  EXPECT_TRUE(by_key["erp/j2ee"].http);
  EXPECT_EQ(by_key["erp/tls"].transport, health::CheckTransport::kTls);
  EXPECT_EQ(by_key["erp/tls"].server_name, "tls.example.com");
  EXPECT_EQ(health::GroupCheckFor(*table, 2).transport, by_key[table->groups()[2].key].transport);
  EXPECT_EQ(health::CheckTransportName(health::CheckTransport::kTlsVerified), "tls-verified");
}

TEST_F(AdminServerTest, ExplainNamesEveryStep) {
  ApplySnapshot();
  auto steps_of = [](const json& body) {
    std::map<std::string, json> steps;
    for (const json& step : body["steps"]) {
      steps[step["step"].get<std::string>()] = step;
    }
    return steps;
  };
  // Denied by the second permission rule.
  json denied = json::parse(Get("/admin/api/explain?url=/sap/bc/x.cgi").body);
  auto steps = steps_of(denied);
  EXPECT_EQ(steps["permission"]["rule"]["index"], 2);
  EXPECT_EQ(steps["permission"]["rule"]["pattern"], "*.cgi");
  EXPECT_THAT(steps["permission"]["text"].get<std::string>(), HasSubstr("403"));
  EXPECT_EQ(steps["classification"]["rule"], "/sap/");
  EXPECT_THAT(steps["result"]["text"].get<std::string>(), HasSubstr("403"));
  EXPECT_EQ(steps.count("balancing"), 0u);

  // sap-contextid names a server the group lacks, saplb names app2: saplb is honoured.
  json sticky = json::parse(
      Get("/admin/api/explain?url=/sap/bc/x&header=Cookie:%20sap-contextid%3DSID%253aANON%253agone"
          "%253a1%3B%20saplb_diag%3D(app2)00")
          .body);
  EXPECT_EQ(sticky["server"], "app2");
  steps = steps_of(sticky);
  EXPECT_TRUE(steps["permission"]["rule"].is_null());
  EXPECT_THAT(steps["permission"]["text"].get<std::string>(), HasSubstr("permitted"));
  std::map<std::string, json> ids;
  for (const json& id : steps["session identifiers"]["identifiers"]) {
    ids[id["identifier"].get<std::string>()] = id;
  }
  EXPECT_EQ(ids["sap-contextid"]["found"], true);
  EXPECT_EQ(ids["sap-contextid"]["names_server"], "gone");
  EXPECT_EQ(ids["sap-contextid"]["honoured"], false);
  EXPECT_THAT(ids["sap-contextid"]["why_not"].get<std::string>(),
              HasSubstr("not a server of this group"));
  EXPECT_EQ(ids["saplb"]["honoured"], true);
  EXPECT_EQ(ids["jsessionid"]["found"], false);
  EXPECT_THAT(steps["balancing"]["text"].get<std::string>(), HasSubstr("skipped"));

  // Balanced: the candidates with their live load and why a server is not usable.
  json balanced = json::parse(Get("/admin/api/explain?url=/sap/bc/x").body);
  steps = steps_of(balanced);
  EXPECT_EQ(steps["balancing"]["strategy"], "weighted_round_robin");
  ASSERT_EQ(steps["balancing"]["candidates"].size(), 3u);
  EXPECT_EQ(steps["balancing"]["candidates"][0]["usable"], true);
  EXPECT_THAT(steps["balancing"]["candidates"][2]["why_not"].get<std::string>(),
              HasSubstr("draining"));
  EXPECT_THAT(steps["result"]["text"].get<std::string>(), HasSubstr("balance"));
  json root = json::parse(Get("/admin/api/explain?url=/index.html").body);
  EXPECT_EQ(steps_of(root)["classification"]["rule"], "root");

  // Hostile text comes back as data.
  json hostile = json::parse(
      Get("/admin/api/explain?url=%2Fsap%2F%3Cscript%3Ealert(1)%3C%2Fscript%3E&host=%3Cb%3E").body);
  EXPECT_EQ(steps_of(hostile)["virtual host"]["text"],
            "Host \"<b>\" uses the URL mapping for any host");
}

// A secure entry of a mapping with secureAction: redirect: the state names
// its secure_action, explain says why this proxy (without an https listener
// or public https port) answers 403 instead of redirecting.
TEST_F(AdminServerTest, SecureRedirectInStateAndExplain) {
  v1::Snapshot snapshot = MakeSnapshot(app1_.port(), app2_.port(), app3_.port(), j1_.port());
  v1::VirtualHost* any = snapshot.mutable_virtual_hosts(0);
  for (auto [pattern, redirect] : {std::pair{"/sap/gui/*", true}, {"/sap/forbid/*", false}}) {
    v1::Permission* permission = any->add_permissions();
    permission->set_action(v1::PERMISSION_ACTION_SECURE);
    permission->set_pattern(pattern);
    permission->set_redirect_to_https(redirect);
  }
  StampSnapshotVersion(&snapshot);
  std::string error;
  ASSERT_TRUE(proxy_->ApplySnapshot(snapshot, &error)) << error;

  const json state = State();
  const json& permissions = state["url_mapping"][0]["permissions"];
  ASSERT_EQ(permissions.size(), 4u);
  EXPECT_EQ(permissions[2], (json{{"action", "secure"}, {"pattern", "/sap/gui/*"},
                                  {"secure_action", "redirect"}}));
  EXPECT_EQ(permissions[3]["secure_action"], "forbid");
  EXPECT_FALSE(permissions[0].contains("secure_action"));

  json body = json::parse(Get("/admin/api/explain?url=/sap/gui/x&host=erp.example.com").body);
  EXPECT_EQ(body["status"], 403);
  EXPECT_TRUE(body["location"].is_null());
  std::string text;
  for (const json& step : body["steps"]) {
    if (step["step"] == "permission") {
      text = step["text"];
      EXPECT_EQ(step["rule"]["secure_action"], "redirect");
    }
  }
  EXPECT_THAT(text, HasSubstr("secureAction: redirect, but the proxy has no https port"));
  // Over https the entry permits, and the proxy would forward.
  body = json::parse(Get("/admin/api/explain?url=https://erp.example.com/sap/gui/x").body);
  EXPECT_TRUE(body["status"].is_null());
  EXPECT_FALSE(body["server"].is_null());
}

TEST_F(AdminServerTest, HugeExplainInputIsRefused) {
  ApplySnapshot();
  HttpResponse huge = Get("/admin/api/explain?url=/" + std::string(kMaxExplainInputBytes, 'a'));
  EXPECT_EQ(huge.status, 413);
  EXPECT_EQ(json::parse(huge.body)["limit_bytes"], kMaxExplainInputBytes);
  HttpResponse headers =
      Get("/admin/api/explain?url=/x&header=X-A:" + std::string(kMaxExplainInputBytes, 'b'));
  EXPECT_EQ(headers.status, 413);
  // Beyond the admin port's head bound the port itself refuses (431).
  EXPECT_EQ(Get("/admin/api/explain?url=/" + std::string(20000, 'a')).status, 431);
  EXPECT_EQ(Get("/admin/api/explain?url=/" + std::string(1000, 'a')).status, 200);
}

TEST_F(AdminServerTest, HealthCheckTimesResultsAndChangesAreShown) {
  ApplySnapshot();
  health::HealthCheckerOptions options;
  options.interval_override_ms = 20;
  options.timeout_override_ms = 500;
  health::HealthChecker checker([this] { return proxy_->table(); }, &proxy_->metrics().registry(),
                                options);
  std::string error;
  ASSERT_TRUE(checker.Start(&error)) << error;
  app2_.set_mode(TestBackend::Mode::kError);
  json server1;
  json server2;
  auto deadline = std::chrono::steady_clock::now() + kDeadline;
  while (std::chrono::steady_clock::now() < deadline) {
    json state = State();
    server1 = state["groups"][0]["servers"][0];
    server2 = state["groups"][0]["servers"][1];
    if (server1["last_check_result"] == "passed" && server2["healthy"] == false) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  checker.Stop();
  EXPECT_EQ(server1["last_check_result"], "passed") << server1;
  EXPECT_TRUE(server1["last_check"].is_string()) << server1;
  EXPECT_TRUE(server1["last_state_change"].is_null()) << server1;  // never changed
  EXPECT_EQ(server2["healthy"], false) << server2;
  EXPECT_EQ(server2["last_check_result"], "failed") << server2;
  EXPECT_TRUE(server2["last_state_change"].is_string()) << server2;
}

TEST_F(AdminServerTest, ActionsAreRefusedWithoutATokenFile) {
  ApplySnapshot();
  HttpResponse refused =
      Fetch(admin_port_, "POST", "/admin/api/servers/drain?group=erp/diag&server=app2",
            "Authorization: Bearer anything\r\n");
  EXPECT_EQ(refused.status, 403);
  EXPECT_THAT(json::parse(refused.body)["hint"].get<std::string>(),
              HasSubstr("--admin-token-file"));
  EXPECT_EQ(
      Fetch(admin_port_, "POST", "/admin/api/servers/undrain?group=erp/diag&server=app2").status,
      403);
  EXPECT_EQ(State()["groups"][0]["servers"][1]["state"], "ready");
}

class AdminActionsTest : public AdminServerTest {
 protected:
  static constexpr const char* kToken = "s3cret-Token_0123";

  AdminActionsTest() { admin_token_ = kToken; }

  HttpResponse Post(const std::string& target, const std::string& authorization = "") {
    return Fetch(admin_port_, "POST", target,
                 authorization.empty() ? "" : "Authorization: " + authorization + "\r\n");
  }
  HttpResponse Action(const std::string& action, const std::string& server) {
    return Post("/admin/api/servers/" + action + "?group=erp%2Fdiag&server=" + server,
                std::string("Bearer ") + kToken);
  }
  json Server(const std::string& name) {
    json state = State();
    for (const json& server : state["groups"][0]["servers"]) {
      if (server["name"] == name) {
        return server;
      }
    }
    return json();
  }
};

TEST_F(AdminActionsTest, TokenRules) {
  ApplySnapshot();
  const std::string drain = "/admin/api/servers/drain?group=erp%2Fdiag&server=app2";
  HttpResponse missing = Post(drain);
  EXPECT_EQ(missing.status, 401);
  EXPECT_EQ(missing.headers["www-authenticate"], "Bearer realm=\"kwd-proxy admin\"");
  EXPECT_EQ(json::parse(missing.body)["error"], "missing token");
  EXPECT_EQ(Post(drain, "Bearer wrong").status, 401);
  EXPECT_EQ(Post(drain, std::string("Bearer ") + kToken + "x").status, 401);
  EXPECT_EQ(Post(drain, std::string("Basic ") + kToken).status, 401);
  EXPECT_EQ(Post(drain, "Bearer").status, 401);
  HttpResponse get = Get(drain);
  EXPECT_EQ(get.status, 405);
  EXPECT_EQ(get.headers["allow"], "POST");
  // Refused calls changed nothing.
  EXPECT_EQ(Server("app2")["local_drain"], false);

  std::string bearer = std::string("Bearer ") + kToken;
  EXPECT_EQ(Post("/admin/api/servers/drain?group=erp%2Fnope&server=app2", bearer).status, 404);
  EXPECT_EQ(Post("/admin/api/servers/drain?group=erp%2Fdiag&server=nope", bearer).status, 404);
  EXPECT_EQ(Post("/admin/api/servers/drain?group=erp%2Fdiag", bearer).status, 400);

  HttpResponse ok = Post(drain, bearer);
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(json::parse(ok.body), (json{{"group", "erp/diag"},
                                        {"server", "app2"},
                                        {"state", "draining"},
                                        {"snapshot_state", "ready"},
                                        {"local_drain", true},
                                        {"changed", true}}));
  EXPECT_EQ(State()["actions_enabled"], true);
  // The scheme is case-insensitive; undrain answers the new state.
  HttpResponse undrain = Post("/admin/api/servers/undrain?group=erp/diag&server=app2",
                              std::string("bearer ") + kToken);
  EXPECT_EQ(undrain.status, 200);
  EXPECT_EQ(json::parse(undrain.body)["state"], "ready");
  EXPECT_EQ(json::parse(Action("undrain", "app2").body)["changed"], false);
}

// A local drain is a terminating pod: sticky traffic stays, no new balanced
// traffic; it holds across snapshots until undrained or the server leaves.
TEST_F(AdminActionsTest, LocalDrainKeepsStickyTrafficAndTakesNoNewBalancedTraffic) {
  ApplySnapshot();
  ASSERT_EQ(Action("drain", "app2").status, 200);
  json drained = Server("app2");
  EXPECT_EQ(drained["state"], "draining");
  EXPECT_EQ(drained["snapshot_state"], "ready");
  EXPECT_EQ(drained["local_drain"], true);
  const uint16_t port = proxy_->bound().port();
  for (int i = 0; i < 9; ++i) {
    ASSERT_EQ(Fetch(port, "GET", "/sap/bc/x").status, 200);
  }
  EXPECT_EQ(app2_.requests(), 0);
  EXPECT_EQ(app1_.requests(), 9);
  ASSERT_EQ(Fetch(port, "GET", "/sap/bc/x", "Cookie: saplb_diag=(app2)00\r\n").status, 200);
  EXPECT_EQ(app2_.requests(), 1);  // sticky traffic still arrives
  EXPECT_EQ(State()["groups"][0]["next_preferred_server"], "app1");
  json explain = json::parse(Get("/admin/api/explain?url=/sap/bc/x").body);
  bool shown = false;
  for (const json& step : explain["steps"]) {
    if (step["step"] == "balancing") {
      shown = step["candidates"][1]["why_not"] == "drained on this proxy: sticky traffic only";
    }
  }
  EXPECT_TRUE(shown) << explain.dump(1);

  // A new snapshot with the server keeps the drain.
  v1::Snapshot changed = MakeSnapshot(app1_.port(), app2_.port(), app3_.port(), j1_.port());
  changed.mutable_groups(0)->mutable_servers(0)->set_capacity(7);
  StampSnapshotVersion(&changed);
  std::string error;
  ASSERT_TRUE(proxy_->ApplySnapshot(changed, &error)) << error;
  EXPECT_EQ(Server("app2")["local_drain"], true);

  // Undrained: balanced traffic reaches it again.
  ASSERT_EQ(Action("undrain", "app2").status, 200);
  EXPECT_EQ(Server("app2")["state"], "ready");
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(Fetch(port, "GET", "/sap/bc/x").status, 200);
  }
  EXPECT_GT(app2_.requests(), 1);

  // Drained, then gone from the snapshot and back: the drain is forgotten.
  ASSERT_EQ(Action("drain", "app2").status, 200);
  v1::Snapshot without = MakeSnapshot(app1_.port(), app2_.port(), app3_.port(), j1_.port());
  without.mutable_groups(0)->mutable_servers()->DeleteSubrange(1, 1);
  StampSnapshotVersion(&without);
  ASSERT_TRUE(proxy_->ApplySnapshot(without, &error)) << error;
  EXPECT_EQ(Action("undrain", "app2").status, 404);
  ApplySnapshot();
  EXPECT_EQ(Server("app2")["local_drain"], false);
  EXPECT_EQ(Server("app2")["state"], "ready");
}

TEST(AdminServerStartTest, ReportsBindFailures) {
  // Port taken by a listener.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  uint16_t taken = ntohs(addr.sin_port);

  proxy::ProxyOptions options;
  options.access_log = "off";
  proxy::Proxy proxy(options);
  struct Case {
    std::string endpoint;
    std::string want;
  };
  for (const Case& c : std::vector<Case>{
           {"127.0.0.1:" + std::to_string(taken), "127.0.0.1:" + std::to_string(taken)},
           {"192.0.2.1:" + std::to_string(ReserveFreePort()), "192.0.2.1"},  // not local
       }) {
    AdminOptions admin_options;
    std::string error;
    ASSERT_TRUE(net::ParseEndpoint(c.endpoint, &admin_options.listen, &error)) << error;
    AdminServer admin(&proxy, admin_options);
    EXPECT_FALSE(admin.Start(&error)) << c.endpoint;
    EXPECT_THAT(error, HasSubstr("cannot listen on http://" + c.want)) << error;
  }
  ::close(fd);
}

TEST(NextPreferredServerTest, FollowsTheBalancingRules) {
  struct Case {
    std::string name;
    v1::Strategy strategy;
    std::vector<uint32_t> capacities;
    std::vector<bool> usable;
    std::vector<int64_t> rtt_us;
    std::vector<uint64_t> assigned;
    std::vector<uint64_t> outstanding;
    int want;
  };
  using S = v1::Strategy;
  std::vector<Case> cases = {
      {"idle: first",
       S::STRATEGY_WEIGHTED_ROUND_ROBIN,
       {6, 3},
       {true, true},
       {0, 0},
       {0, 0},
       {0, 0},
       0},
      {"A A then B",
       S::STRATEGY_WEIGHTED_ROUND_ROBIN,
       {6, 3},
       {true, true},
       {0, 0},
       {2, 0},
       {0, 0},
       1},
      {"tie to earlier",
       S::STRATEGY_WEIGHTED_ROUND_ROBIN,
       {2, 1},
       {true, true},
       {0, 0},
       {1, 0},
       {0, 0},
       0},
      {"outstanding counts",
       S::STRATEGY_WEIGHTED_ROUND_ROBIN,
       {1, 1},
       {true, true},
       {0, 0},
       {0, 0},
       {3, 0},
       1},
      {"unusable skipped",
       S::STRATEGY_WEIGHTED_ROUND_ROBIN,
       {6, 3},
       {false, true},
       {0, 0},
       {0, 9},
       {0, 0},
       1},
      {"none usable",
       S::STRATEGY_WEIGHTED_ROUND_ROBIN,
       {6, 3},
       {false, false},
       {0, 0},
       {0, 0},
       {0, 0},
       -1},
      {"adaptive: faster wins",
       S::STRATEGY_ADAPTIVE,
       {1, 1},
       {true, true},
       {9000, 1000},
       {0, 0},
       {0, 0},
       1},
      {"adaptive: load times rtt",
       S::STRATEGY_ADAPTIVE,
       {1, 1},
       {true, true},
       {1000, 3000},
       {3, 0},
       {0, 0},
       1},
      {"adaptive without rtt: weighted",
       S::STRATEGY_ADAPTIVE,
       {6, 3},
       {true, true},
       {0, 0},
       {2, 0},
       {0, 0},
       1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    routing::GroupEntry group;
    group.strategy = c.strategy;
    std::vector<balancer::ServerHealth> health(c.capacities.size());
    for (size_t i = 0; i < c.capacities.size(); ++i) {
      health[i].smoothed_rtt_us.store(c.rtt_us[i]);
      health[i].healthy.store(c.usable[i]);
      group.inputs.push_back(balancer::ServerInput{c.capacities[i], true, &health[i]});
    }
    EXPECT_EQ(NextPreferredServer(group, c.assigned, c.outstanding), c.want);
  }
}

}  // namespace
}  // namespace kwd::admin
