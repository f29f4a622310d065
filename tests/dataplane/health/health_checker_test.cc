#include "dataplane/health/health_checker.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "common/snapshot_io.h"
#include "dataplane/routing/routing_table.h"
#include "tests/dataplane/health/test_backend.h"

namespace kwd::health {
namespace {

using kwd::testing::ClosedPort;
using kwd::testing::TestBackend;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr auto kDeadline = std::chrono::seconds(10);

struct Backend {
  std::string name;
  uint16_t port;
};

v1::Snapshot MakeSnapshot(const std::vector<Backend>& backends, uint32_t unhealthy_threshold,
                          uint32_t healthy_threshold, const std::string& path = "/ping") {
  v1::Snapshot snapshot;
  v1::Group* group = snapshot.add_groups();
  group->set_key("erp/diag");
  group->set_kind(v1::KIND_ABAP);
  group->set_strategy(v1::STRATEGY_ADAPTIVE);
  v1::HealthCheck* check = group->mutable_health_check();
  check->set_path(path);
  check->set_interval_seconds(1);
  check->set_timeout_seconds(1);
  check->set_unhealthy_threshold(unhealthy_threshold);
  check->set_healthy_threshold(healthy_threshold);
  for (const Backend& backend : backends) {
    v1::Server* server = group->add_servers();
    server->set_name(backend.name);
    server->set_address("127.0.0.1");
    server->set_port(backend.port);
    server->set_capacity(1);
    server->set_state(v1::SERVER_STATE_READY);
  }
  StampSnapshotVersion(&snapshot);
  return snapshot;
}

// Transitions the checker reported, awaitable with a deadline.
class Recorder {
 public:
  void Add(const Transition& transition, uint64_t failures_so_far) {
    std::lock_guard lock(mu_);
    transitions_.push_back(transition);
    failures_at_transition_.push_back(failures_so_far);
    cv_.notify_all();
  }
  // Waits until `count` transitions were reported; false on timeout.
  bool WaitFor(size_t count) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, kDeadline, [&] { return transitions_.size() >= count; });
  }
  std::vector<Transition> transitions() const {
    std::lock_guard lock(mu_);
    return transitions_;
  }
  std::vector<uint64_t> failures_at_transition() const {
    std::lock_guard lock(mu_);
    return failures_at_transition_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Transition> transitions_;
  std::vector<uint64_t> failures_at_transition_;
};

// A routing table built from a snapshot, health checked by a checker whose
// rounds are milliseconds apart.
class Fixture {
 public:
  explicit Fixture(const v1::Snapshot& snapshot, int64_t interval_ms = 30,
                   int64_t timeout_ms = 300, int64_t table_poll_ms = 20) {
    Apply(snapshot);
    HealthCheckerOptions options;
    options.interval_override_ms = interval_ms;
    options.timeout_override_ms = timeout_ms;
    options.table_poll_ms = table_poll_ms;
    options.on_transition = [this](const Transition& t) {
      recorder.Add(t, checker->checks_failed());
    };
    checker = std::make_unique<HealthChecker>(
        [this] {
          std::lock_guard lock(mu_);
          return table_;
        },
        &registry, options);
  }
  ~Fixture() { checker->Stop(); }

  void Apply(const v1::Snapshot& snapshot) {
    std::string error;
    auto table = routing::RoutingTable::Build(snapshot, {&sessions, &health}, &error);
    ASSERT_NE(table, nullptr) << error;
    std::lock_guard lock(mu_);
    table_ = table;
  }
  void Start() {
    std::string error;
    ASSERT_TRUE(checker->Start(&error)) << error;
  }
  std::shared_ptr<balancer::ServerHealth> Health(const std::string& server) {
    return health.Find("erp/diag", server);
  }

  MetricsRegistry registry;
  session::SessionRegistry sessions;
  routing::ServerHealthRegistry health;
  Recorder recorder;
  std::unique_ptr<HealthChecker> checker;

 private:
  std::mutex mu_;
  std::shared_ptr<const routing::RoutingTable> table_;
};

// Polls `condition` until it holds or the deadline passes.
template <typename F>
bool Eventually(F condition) {
  auto deadline = steady_clock::now() + kDeadline;
  while (steady_clock::now() < deadline) {
    if (condition()) {
      return true;
    }
    std::this_thread::sleep_for(milliseconds(5));
  }
  return condition();
}

TEST(ParseStatusLineTest, Table) {
  struct Case {
    std::string response;
    int want;
  };
  std::vector<Case> cases = {
      {"HTTP/1.1 200 OK\r\n", 200},
      {"HTTP/1.0 200\r\n", 200},
      {"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n", 500},
      {"HTTP/1.1 204 No Content\r\n", 204},
      {"HTTP/1.1 200 OK", 0},  // incomplete line
      {"HTTP/1.", 0},
      {"HT", 0},
      {"", 0},
      {"SSH-2.0-OpenSSH\r\n", -1},
      {"HTTP/1.1 2x0 OK\r\n", -1},
      {"HTTP/1.1 2000 OK\r\n", -1},
      {"HTTP/1.1 099 Odd\r\n", -1},
      {"garbage", -1},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ParseStatusLine(c.response), c.want) << c.response;
  }
  EXPECT_EQ(ParseStatusLine(std::string(9000, 'H')), -1);
}

TEST(HealthCheckerTest, SendsTheConfiguredRequest) {
  TestBackend ok(TestBackend::Mode::kOk);
  Fixture f(MakeSnapshot({{"app1", ok.port()}}, 2, 1, "/sap/public/icman/ping"));
  f.Start();
  ASSERT_TRUE(Eventually([&] { return f.checker->checks_succeeded() >= 1; }));
  std::string request = ok.last_request();
  EXPECT_EQ(request.rfind("GET /sap/public/icman/ping HTTP/1.1\r\n", 0), 0u) << request;
  EXPECT_NE(request.find("\r\nHost: 127.0.0.1:" + std::to_string(ok.port()) + "\r\n"),
            std::string::npos)
      << request;
  EXPECT_NE(request.find("\r\nConnection: close\r\n"), std::string::npos) << request;
  EXPECT_TRUE(f.Health("app1")->healthy.load());
  EXPECT_EQ(f.checker->checks_failed(), 0u);
  EXPECT_TRUE(f.recorder.transitions().empty());
}

TEST(HealthCheckerTest, EachFailureModeTakesTheServerDownAfterTheThreshold) {
  TestBackend error_backend(TestBackend::Mode::kError);
  TestBackend silent(TestBackend::Mode::kSilent);
  uint16_t closed = ClosedPort();
  struct Case {
    std::string name;
    uint16_t port;
    std::string reason_prefix;
  };
  std::vector<Case> cases = {
      {"status500", error_backend.port(), "status 500"},
      {"silent", silent.port(), "timeout after 100 ms"},
      {"closed", closed, "connect: "},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Fixture f(MakeSnapshot({{"app1", c.port}}, 3, 1), 20, 100);
    f.Start();
    ASSERT_TRUE(f.recorder.WaitFor(1));
    f.checker->Stop();
    auto transitions = f.recorder.transitions();
    ASSERT_EQ(transitions.size(), 1u);
    EXPECT_EQ(transitions[0].group, "erp/diag");
    EXPECT_EQ(transitions[0].server, "app1");
    EXPECT_FALSE(transitions[0].up);
    EXPECT_EQ(transitions[0].reason.rfind(c.reason_prefix, 0), 0u) << transitions[0].reason;
    // Exactly at the third consecutive failure, not before.
    EXPECT_EQ(f.recorder.failures_at_transition()[0], 3u);
    EXPECT_FALSE(f.Health("app1")->healthy.load());
    EXPECT_EQ(f.checker->checks_succeeded(), 0u);
    EXPECT_EQ(f.Health("app1")->smoothed_rtt_us.load(), 0);
  }
}

TEST(HealthCheckerTest, ComesBackAfterHealthyThresholdAndMeasuresRtt) {
  TestBackend backend(TestBackend::Mode::kError);
  Fixture f(MakeSnapshot({{"app1", backend.port()}}, 2, 3));
  f.Start();
  ASSERT_TRUE(f.recorder.WaitFor(1));
  EXPECT_FALSE(f.recorder.transitions()[0].up);
  uint64_t successes_before = f.checker->checks_succeeded();
  EXPECT_EQ(successes_before, 0u);

  backend.set_mode(TestBackend::Mode::kOk);
  ASSERT_TRUE(f.recorder.WaitFor(2));
  auto transitions = f.recorder.transitions();
  ASSERT_EQ(transitions.size(), 2u);
  EXPECT_TRUE(transitions[1].up);
  EXPECT_EQ(transitions[1].reason, "3 consecutive successful checks");
  EXPECT_TRUE(f.Health("app1")->healthy.load());
  EXPECT_GE(f.checker->checks_succeeded(), 3u);
  int64_t rtt = f.Health("app1")->smoothed_rtt_us.load();
  EXPECT_GT(rtt, 0);
  EXPECT_LT(rtt, 300'000);  // below the timeout: it is a measured round trip
}

TEST(HealthCheckerTest, ReadmitsAServerThePassiveMarkingTookDown) {
  TestBackend ok(TestBackend::Mode::kOk);
  Fixture f(MakeSnapshot({{"app1", ok.port()}}, 2, 1));
  f.Start();
  ASSERT_TRUE(Eventually([&] { return f.checker->checks_succeeded() >= 2; }));
  // What the proxy does on a failed connect.
  f.Health("app1")->healthy.store(false);
  ASSERT_TRUE(f.recorder.WaitFor(1));
  EXPECT_TRUE(f.recorder.transitions()[0].up);
  EXPECT_TRUE(f.Health("app1")->healthy.load());
}

// Out of descriptors, a check cannot even open its socket: that says nothing
// about the server, which must stay up. In a child process (EXPECT_EXIT), as
// the descriptor limit is the whole process's.
TEST(HealthCheckerTest, RunningOutOfDescriptorsDoesNotTakeAServerDown) {
  EXPECT_EXIT(
      {
        TestBackend ok(TestBackend::Mode::kOk);
        Fixture f(MakeSnapshot({{"app1", ok.port()}}, 1, 1), 20, 300);
        f.Start();
        if (!Eventually([&] { return f.checker->checks_succeeded() >= 1; })) {
          std::_Exit(2);
        }
        // Every descriptor below the limit is in use: the next socket() fails.
        rlimit original{};
        ::getrlimit(RLIMIT_NOFILE, &original);
        int lowest_free = ::dup(0);
        ::close(lowest_free);
        rlimit exhausted = original;
        exhausted.rlim_cur = static_cast<rlim_t>(lowest_free);
        ::setrlimit(RLIMIT_NOFILE, &exhausted);
        std::this_thread::sleep_for(milliseconds(300));  // about 15 check rounds
        bool stayed_up = f.Health("app1")->healthy.load() && f.recorder.transitions().empty();
        ::setrlimit(RLIMIT_NOFILE, &original);
        uint64_t succeeded = f.checker->checks_succeeded();
        bool checks_again = Eventually([&] { return f.checker->checks_succeeded() > succeeded; });
        f.checker->Stop();
        std::_Exit(!stayed_up ? 3 : !checks_again ? 4 : 0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(HealthCheckerTest, ChecksServersInParallel) {
  // 20 silent servers, 400 ms timeout, threshold 1: checked one after the
  // other this would take 8 s; in parallel about one timeout.
  std::vector<std::unique_ptr<TestBackend>> backends;
  std::vector<Backend> servers;
  for (int i = 0; i < 20; ++i) {
    backends.push_back(std::make_unique<TestBackend>(TestBackend::Mode::kSilent));
    servers.push_back({"app" + std::to_string(100 + i), backends.back()->port()});
  }
  Fixture f(MakeSnapshot(servers, 1, 1), 60'000, 400);
  auto start = steady_clock::now();
  f.Start();
  ASSERT_TRUE(f.recorder.WaitFor(20));
  auto elapsed = steady_clock::now() - start;
  EXPECT_LT(elapsed, milliseconds(3000));
  EXPECT_GE(elapsed, milliseconds(400));
  for (const Backend& server : servers) {
    EXPECT_FALSE(f.Health(server.name)->healthy.load()) << server.name;
  }
}

TEST(HealthCheckerTest, StopsPromptlyWithChecksInFlight) {
  TestBackend silent(TestBackend::Mode::kSilent);
  Fixture f(MakeSnapshot({{"app1", silent.port()}}, 2, 1), 60'000, 60'000);
  f.Start();
  ASSERT_TRUE(Eventually([&] { return silent.requests() >= 1; }));
  auto start = steady_clock::now();
  f.checker->Stop();
  EXPECT_LT(steady_clock::now() - start, milliseconds(1000));
}

TEST(HealthCheckerTest, ExportsMetricsAndLogsTransitions) {
  TestBackend ok(TestBackend::Mode::kOk);
  TestBackend error_backend(TestBackend::Mode::kError);
  ::testing::internal::CaptureStderr();
  std::string metrics;
  {
    Fixture f(MakeSnapshot({{"app1", ok.port()}, {"app2", error_backend.port()}}, 1, 1));
    f.Start();
    bool down = f.recorder.WaitFor(1);
    bool succeeded = Eventually([&] { return f.checker->checks_succeeded() >= 1; });
    f.checker->Stop();
    metrics = f.registry.Render();
    ASSERT_TRUE(down);
    ASSERT_TRUE(succeeded);
  }
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(metrics.find("kwd_proxy_server_up{group=\"erp/diag\",server=\"app1\"} 1"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("kwd_proxy_server_up{group=\"erp/diag\",server=\"app2\"} 0"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("kwd_proxy_health_checks_total{result=\"success\"}"), std::string::npos);
  EXPECT_NE(metrics.find("kwd_proxy_health_checks_total{result=\"failure\"}"), std::string::npos);
  EXPECT_NE(metrics.find("kwd_proxy_health_check_rtt_seconds_count"), std::string::npos);
  EXPECT_EQ(metrics.find("kwd_proxy_health_check_rtt_seconds_count 0\n"), std::string::npos)
      << metrics;
  EXPECT_NE(log.find("msg=\"server down\""), std::string::npos) << log;
  EXPECT_NE(log.find("group=erp/diag server=app2"), std::string::npos) << log;
  EXPECT_NE(log.find("reason=\"status 500\""), std::string::npos) << log;
}

TEST(HealthCheckerTest, FollowsSnapshotChanges) {
  TestBackend ok(TestBackend::Mode::kOk);
  TestBackend error_backend(TestBackend::Mode::kError);
  Fixture f(MakeSnapshot({{"app1", ok.port()}}, 1, 1));
  f.Start();
  ASSERT_TRUE(Eventually([&] { return ok.requests() >= 1; }));
  // app1 leaves, app2 (failing) arrives: app2 goes down, app1 is no longer
  // checked or exported.
  f.Apply(MakeSnapshot({{"app2", error_backend.port()}}, 1, 1));
  ASSERT_TRUE(f.recorder.WaitFor(1));
  EXPECT_EQ(f.recorder.transitions()[0].server, "app2");
  int requests = ok.requests();
  ASSERT_TRUE(Eventually([&] { return error_backend.requests() >= 3; }));
  EXPECT_LE(ok.requests(), requests + 1);  // at most one check that was already running
  std::string metrics = f.registry.Render();
  EXPECT_EQ(metrics.find("server=\"app1\""), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("server=\"app2\"} 0"), std::string::npos) << metrics;
}

// kwd-proxy polls the table only every few seconds: a new snapshot wakes the
// checker (TablesChanged), which reads it at once.
TEST(HealthCheckerTest, TablesChangedReadsTheNewTableAtOnce) {
  TestBackend first(TestBackend::Mode::kOk);
  TestBackend second(TestBackend::Mode::kOk);
  Fixture f(MakeSnapshot({{"app1", first.port()}}, 1, 1), 30, 300, /*table_poll_ms=*/60'000);
  f.Start();
  ASSERT_TRUE(Eventually([&] { return first.requests() >= 1; }));
  f.Apply(MakeSnapshot({{"app1", first.port()}, {"app2", second.port()}}, 1, 1));
  // Not woken: the new server waits for the table poll, a minute away.
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_EQ(second.requests(), 0);
  const auto woken = steady_clock::now();
  f.checker->TablesChanged();
  ASSERT_TRUE(Eventually([&] { return second.requests() >= 1; }));
  EXPECT_LT(steady_clock::now() - woken, std::chrono::seconds(5));
}

// TablesChanged before Start and after Stop does nothing (kwd-proxy's
// snapshot source may apply one at any time).
TEST(HealthCheckerTest, TablesChangedWhenNotRunningIsHarmless) {
  TestBackend ok(TestBackend::Mode::kOk);
  Fixture f(MakeSnapshot({{"app1", ok.port()}}, 1, 1), 30, 300, 60'000);
  f.checker->TablesChanged();
  f.Start();
  ASSERT_TRUE(Eventually([&] { return ok.requests() >= 1; }));
  f.checker->Stop();
  f.checker->TablesChanged();
}

}  // namespace
}  // namespace kwd::health
