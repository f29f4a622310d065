#include "controller/kube/leader_elector.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "tests/fake_apiserver/fake_apiserver_process.h"

namespace kwd::kube {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using testing::FakeApiServer;

constexpr char kNamespace[] = "kwd-system";
constexpr char kLeaseName[] = "kwd-controller";

TEST(MicroTimeTest, FormatsUtcWithMicroseconds) {
  std::chrono::system_clock::time_point t{std::chrono::seconds(1796032800)};  // 2026-11-30T10:00Z
  EXPECT_EQ(FormatMicroTime(t), "2026-11-30T10:00:00.000000Z");
  EXPECT_EQ(FormatMicroTime(t + std::chrono::microseconds(8000123)), "2026-11-30T10:00:08.000123Z");
}

TEST(MicroTimeTest, Parses) {
  std::chrono::system_clock::time_point t{std::chrono::seconds(1796032800)};
  struct Case {
    std::string text;
    std::optional<std::chrono::system_clock::time_point> want;
  };
  const std::vector<Case> cases = {
      {"2026-11-30T10:00:00.000000Z", t},
      {"2026-11-30T10:00:08.000123Z", t + std::chrono::microseconds(8000123)},
      {"2026-11-30T10:00:00Z", t},
      {"2026-11-30T10:00:00.5Z", t + milliseconds(500)},
      {"2026-11-30T10:00:00.123456789Z", t + std::chrono::microseconds(123456)},
      {"2026-11-30T10:00:00+01:00", std::nullopt},
      {"2026-11-30 10:00:00Z", std::nullopt},
      {"", std::nullopt},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ParseMicroTime(c.text), c.want) << c.text;
  }
}

// One elector on its own thread, with its leadership transitions recorded.
class Candidate {
 public:
  Candidate(KubeClient& client, std::string identity, bool release_on_cancel = true) {
    LeaderElectionConfig config;
    config.lease_namespace = kNamespace;
    config.lease_name = kLeaseName;
    config.identity = std::move(identity);
    config.lease_duration = milliseconds(1000);
    config.renew_deadline = milliseconds(700);
    config.retry_period = milliseconds(100);
    config.release_on_cancel = release_on_cancel;
    LeaderCallbacks callbacks;
    callbacks.on_started_leading = [this] { Note(+1); };
    callbacks.on_stopped_leading = [this] { Note(-1); };
    elector_ = std::make_unique<LeaderElector>(client, config, callbacks);
    thread_ = std::jthread([this](std::stop_token stop) { elector_->Run(stop); });
  }

  // Waits until the elector has started leading `count` times in total.
  bool AwaitStarted(int count, std::chrono::milliseconds timeout = milliseconds(5000)) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return started_ >= count; });
  }
  bool AwaitStopped(int count, std::chrono::milliseconds timeout = milliseconds(5000)) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return stopped_ >= count; });
  }
  int started() {
    std::lock_guard lock(mutex_);
    return started_;
  }
  void Stop() {
    thread_.request_stop();
    thread_.join();
  }
  LeaderElector& elector() { return *elector_; }

 private:
  void Note(int delta) {
    std::lock_guard lock(mutex_);
    (delta > 0 ? started_ : stopped_) += 1;
    changed_.notify_all();
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  int started_ = 0;
  int stopped_ = 0;
  std::unique_ptr<LeaderElector> elector_;
  std::jthread thread_;
};

json ReadLease(KubeClient& client) {
  ApiResult lease = client.GetLease(kNamespace, kLeaseName);
  EXPECT_TRUE(lease.status.ok()) << lease.status.ToString();
  return lease.body;
}

TEST(LeaderElectorTest, OneLeaderThenTakeoverWhenItStopsRenewing) {
  FakeApiServer server;
  KubeClient client(server.Config());
  auto first = std::make_unique<Candidate>(client, "replica-a", /*release_on_cancel=*/false);
  ASSERT_TRUE(first->AwaitStarted(1));
  Candidate second(client, "replica-b");

  // Well past a lease duration of renewals: the second never leads.
  EXPECT_FALSE(second.AwaitStarted(1, milliseconds(1500)));
  EXPECT_TRUE(first->elector().IsLeader());
  EXPECT_FALSE(second.elector().IsLeader());
  EXPECT_EQ(second.elector().ObservedLeader(), "replica-a");
  json lease = ReadLease(client);
  EXPECT_EQ(lease["spec"]["holderIdentity"], "replica-a");
  EXPECT_EQ(lease["spec"]["leaseDurationSeconds"], 1);
  EXPECT_EQ(lease["spec"]["leaseTransitions"], 0);
  std::string renew_time = lease["spec"]["renewTime"];
  auto parsed = ParseMicroTime(renew_time);
  ASSERT_TRUE(parsed.has_value()) << renew_time;
  EXPECT_EQ(FormatMicroTime(*parsed), renew_time) << "MicroTime with six fraction digits";
  EXPECT_NE(lease["spec"]["renewTime"], lease["spec"]["acquireTime"]) << "renewed";

  // The leader dies without handing the lease back: the second waits out the
  // lease duration on its own clock, then takes over.
  auto stopped_at = std::chrono::steady_clock::now();
  first->Stop();
  ASSERT_TRUE(second.AwaitStarted(1));
  EXPECT_GE(std::chrono::steady_clock::now() - stopped_at, milliseconds(800));
  lease = ReadLease(client);
  EXPECT_EQ(lease["spec"]["holderIdentity"], "replica-b");
  EXPECT_EQ(lease["spec"]["leaseTransitions"], 1);
  EXPECT_EQ(lease["spec"]["acquireTime"], lease["spec"]["renewTime"]);
}

TEST(LeaderElectorTest, ReleasedLeaseIsTakenWithoutWaiting) {
  FakeApiServer server;
  KubeClient client(server.Config());
  auto first = std::make_unique<Candidate>(client, "replica-a");
  ASSERT_TRUE(first->AwaitStarted(1));
  auto stopped_at = std::chrono::steady_clock::now();
  first->Stop();
  // Read before the second candidate exists: once it runs it may take the
  // released lease at any moment.
  EXPECT_EQ(ReadLease(client)["spec"]["holderIdentity"], "");
  // A lease still held would make it wait out the 1 s lease duration.
  Candidate second(client, "replica-b");
  ASSERT_TRUE(second.AwaitStarted(1));
  EXPECT_LT(std::chrono::steady_clock::now() - stopped_at, milliseconds(700));
}

TEST(LeaderElectorTest, StopsLeadingAtOnceWhenAnotherHolderAppears) {
  FakeApiServer server;
  KubeClient client(server.Config());
  Candidate candidate(client, "replica-a");
  ASSERT_TRUE(candidate.AwaitStarted(1));
  json lease = ReadLease(client);
  lease["spec"]["holderIdentity"] = "intruder";
  lease["spec"]["leaseDurationSeconds"] = 60;  // keeps the candidate out afterwards
  server.Upsert(lease);
  auto changed_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(candidate.AwaitStopped(1));
  EXPECT_LT(std::chrono::steady_clock::now() - changed_at, milliseconds(500));
  EXPECT_FALSE(candidate.elector().IsLeader());
  EXPECT_EQ(candidate.elector().ObservedLeader(), "intruder");
  EXPECT_EQ(candidate.started(), 1);
}

TEST(LeaderElectorTest, StopsLeadingWhenRenewalsFailPastTheDeadline) {
  FakeApiServer server;
  KubeClient client(server.Config());
  Candidate candidate(client, "replica-a");
  ASSERT_TRUE(candidate.AwaitStarted(1));
  server.Control("fail", {{"count", 1000}, {"code", 500}, {"match", "/leases/"}});
  auto failing_since = std::chrono::steady_clock::now();
  ASSERT_TRUE(candidate.AwaitStopped(1));
  auto took = std::chrono::steady_clock::now() - failing_since;
  EXPECT_GE(took, milliseconds(500));   // renew deadline 700 ms after the last renewal
  EXPECT_LT(took, milliseconds(1500));  // and not much later
  EXPECT_FALSE(candidate.elector().IsLeader());

  // Once the API answers again it campaigns and leads again.
  server.Control("fail", {{"clear", true}});
  ASSERT_TRUE(candidate.AwaitStarted(2));
  EXPECT_TRUE(candidate.elector().IsLeader());
}

TEST(LeaderElectorTest, ConcurrentCandidatesElectExactlyOne) {
  FakeApiServer server;
  KubeClient client(server.Config());
  std::vector<std::unique_ptr<Candidate>> candidates;
  for (int i = 0; i < 3; ++i) {
    candidates.push_back(std::make_unique<Candidate>(client, "replica-" + std::to_string(i)));
  }
  bool someone_leads = false;
  for (int i = 0; i < 500 && !someone_leads; ++i) {  // bounded poll over three electors
    for (auto& candidate : candidates) {
      someone_leads = someone_leads || candidate->elector().IsLeader();
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  ASSERT_TRUE(someone_leads);
  // Give the others a lease duration to (wrongly) take over.
  std::this_thread::sleep_for(milliseconds(1200));
  int leaders = 0;
  int ever_started = 0;
  for (auto& candidate : candidates) {
    leaders += candidate->elector().IsLeader() ? 1 : 0;
    ever_started += candidate->started();
  }
  EXPECT_EQ(leaders, 1);
  EXPECT_EQ(ever_started, 1);
}

}  // namespace
}  // namespace kwd::kube
