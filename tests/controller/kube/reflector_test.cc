#include "controller/kube/reflector.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "tests/fake_apiserver/fake_apiserver_process.h"

namespace kwd::kube {
namespace {

using nlohmann::json;
using testing::FakeApiServer;

constexpr char kLogonGroups[] = "/apis/dispatch.kwd.io/v1alpha1/logongroups";
constexpr auto kWait = std::chrono::seconds(10);

json LogonGroup(const std::string& name, const std::string& strategy = "weighted_round_robin") {
  return {{"apiVersion", "dispatch.kwd.io/v1alpha1"},
          {"kind", "LogonGroup"},
          {"metadata", {{"name", name}, {"namespace", "erp"}}},
          {"spec", {{"kind", "abap"}, {"strategy", strategy}}}};
}

// Mirrors the objects the way a store would and lets tests await a state.
class RecordingSink : public ReflectorSink {
 public:
  void Replace(std::vector<json> objects, const std::string& resource_version) override {
    std::lock_guard lock(mutex_);
    objects_.clear();
    for (auto& object : objects) {
      objects_[Name(object)] = object;
    }
    ++replaces_;
    log_.push_back("replace:" + std::to_string(objects.size()));
    changed_.notify_all();
  }
  void Upsert(const json& object) override {
    std::lock_guard lock(mutex_);
    objects_[Name(object)] = object;
    log_.push_back("upsert:" + Name(object));
    changed_.notify_all();
  }
  void Delete(const json& object) override {
    std::lock_guard lock(mutex_);
    objects_.erase(Name(object));
    log_.push_back("delete:" + Name(object));
    changed_.notify_all();
  }

  // Waits until pred(objects, replaces) holds.
  template <typename Pred>
  bool WaitUntil(Pred pred) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, kWait, [&] { return pred(objects_, replaces_); });
  }
  std::vector<std::string> Log() {
    std::lock_guard lock(mutex_);
    return log_;
  }
  std::string Strategy(const std::string& name) {
    std::lock_guard lock(mutex_);
    auto it = objects_.find(name);
    return it == objects_.end() ? "" : it->second["spec"]["strategy"].get<std::string>();
  }

 private:
  static std::string Name(const json& object) { return object["metadata"]["name"]; }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, json> objects_;
  int replaces_ = 0;
  std::vector<std::string> log_;
};

// Records requested delays and returns at once (unless stopped).
class RecordingSleeper : public Sleeper {
 public:
  bool SleepFor(std::chrono::nanoseconds duration, std::stop_token stop) override {
    std::lock_guard lock(mutex_);
    delays.push_back(duration);
    return !stop.stop_requested();
  }
  std::vector<std::chrono::nanoseconds> Delays() {
    std::lock_guard lock(mutex_);
    return delays;
  }

 private:
  std::mutex mutex_;
  std::vector<std::chrono::nanoseconds> delays;
};

ReflectorOptions FastOptions() {
  ReflectorOptions options;
  options.path = kLogonGroups;
  options.backoff.initial = std::chrono::milliseconds(10);
  options.backoff.max = std::chrono::milliseconds(100);
  return options;
}

// Polls the fake's state: the server has no way to push "a watch is open".
bool AwaitOpenWatches(FakeApiServer& server, int count) {
  for (int i = 0; i < 500; ++i) {
    if (server.State()["openWatches"] == count) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(BackoffTest, GrowsExponentiallyWithJitterUpToTheCap) {
  BackoffPolicy policy;
  policy.initial = std::chrono::milliseconds(100);
  policy.max = std::chrono::milliseconds(1000);
  policy.factor = 2;
  policy.jitter = 0.5;
  double next_random = 0;
  Backoff backoff(policy, [&] { return next_random; });
  using std::chrono::milliseconds;
  EXPECT_EQ(backoff.Next(), milliseconds(100));
  EXPECT_EQ(backoff.Next(), milliseconds(200));
  next_random = 0.5;
  EXPECT_EQ(backoff.Next(), milliseconds(500));  // 400 * 1.25
  next_random = 0;
  EXPECT_EQ(backoff.Next(), milliseconds(800));
  EXPECT_EQ(backoff.Next(), milliseconds(1000));
  for (int i = 0; i < 100; ++i) {
    backoff.Next();
  }
  next_random = 0.999;
  EXPECT_LT(backoff.Next(), milliseconds(1500));
  backoff.Reset();
  next_random = 0;
  EXPECT_EQ(backoff.Next(), milliseconds(100));
}

TEST(ReflectorTest, ListsThenWatchesUpsertsAndDeletes) {
  FakeApiServer server;
  server.Upsert(LogonGroup("a"));
  server.Upsert(LogonGroup("b"));
  KubeClient client(server.Config());
  RecordingSink sink;
  Reflector reflector(client, FastOptions(), sink);
  std::jthread thread([&](std::stop_token stop) { reflector.Run(stop); });

  ASSERT_TRUE(sink.WaitUntil([](auto& objects, int replaces) { return replaces == 1; }));
  server.Upsert(LogonGroup("c"));
  server.Upsert(LogonGroup("a", "adaptive"));
  server.Remove(LogonGroup("b"));
  ASSERT_TRUE(sink.WaitUntil([](auto& objects, int) {
    return objects.size() == 2 && objects.count("c") && !objects.count("b");
  }));
  EXPECT_EQ(sink.Strategy("a"), "adaptive");
  EXPECT_TRUE(reflector.HasSynced()) << "set once Replace returned, before any event";
  EXPECT_EQ(sink.Log(),
            (std::vector<std::string>{"replace:2", "upsert:c", "upsert:a", "delete:b"}));
  ReflectorStats stats = reflector.Stats();
  EXPECT_EQ(stats.added, 1u);
  EXPECT_EQ(stats.modified, 1u);
  EXPECT_EQ(stats.deleted, 1u);
  EXPECT_EQ(stats.lists, 1u);
  EXPECT_EQ(stats.relists, 0u);
  EXPECT_EQ(stats.errors, 0u);
  EXPECT_EQ(reflector.LastResourceVersion(), server.State()["resourceVersion"]);
  thread.request_stop();
}

TEST(ReflectorTest, CompactionMeans410ThenRelistWithReplace) {
  FakeApiServer server;
  server.Upsert(LogonGroup("a"));
  KubeClient client(server.Config());
  RecordingSink sink;
  Reflector reflector(client, FastOptions(), sink);
  std::jthread thread([&](std::stop_token stop) { reflector.Run(stop); });
  ASSERT_TRUE(sink.WaitUntil([](auto&, int replaces) { return replaces == 1; }));
  ASSERT_TRUE(AwaitOpenWatches(server, 1));

  // While the watch hangs, history moves on and is compacted; the watch is
  // then cut, and resuming from the old version gets ERROR 410.
  server.Control("stall-watches", {{"stalled", true}});
  server.Upsert(LogonGroup("b"));
  server.Remove(LogonGroup("a"));
  server.Control("compact");
  server.Control("drop-watches");
  server.Control("stall-watches", {{"stalled", false}});

  ASSERT_TRUE(sink.WaitUntil([](auto& objects, int replaces) {
    return replaces == 2 && objects.size() == 1 && objects.count("b");
  }));
  ReflectorStats stats = reflector.Stats();
  EXPECT_EQ(stats.relists, 1u);
  EXPECT_EQ(stats.lists, 2u);
  EXPECT_EQ(sink.Log(), (std::vector<std::string>{"replace:1", "replace:1"}))
      << "the missed changes arrive in the Replace, not as events";

  // And the watch after the relist works.
  server.Upsert(LogonGroup("c"));
  ASSERT_TRUE(sink.WaitUntil([](auto& objects, int) { return objects.count("c") == 1; }));
  thread.request_stop();
}

TEST(ReflectorTest, ExpiredWatchesRelist) {
  FakeApiServer server;
  server.Upsert(LogonGroup("a"));
  KubeClient client(server.Config());
  RecordingSink sink;
  Reflector reflector(client, FastOptions(), sink);
  std::jthread thread([&](std::stop_token stop) { reflector.Run(stop); });
  ASSERT_TRUE(sink.WaitUntil([](auto&, int replaces) { return replaces == 1; }));
  ASSERT_TRUE(AwaitOpenWatches(server, 1));
  server.Control("compact", {{"expireWatches", true}});
  ASSERT_TRUE(sink.WaitUntil([](auto&, int replaces) { return replaces == 2; }));
  EXPECT_EQ(reflector.Stats().relists, 1u);
  thread.request_stop();
}

TEST(ReflectorTest, DroppedWatchResumesWithoutRelistAndWithoutMissingAnEvent) {
  FakeApiServer server;
  server.Upsert(LogonGroup("a"));
  KubeClient client(server.Config());
  RecordingSink sink;
  Reflector reflector(client, FastOptions(), sink);
  std::jthread thread([&](std::stop_token stop) { reflector.Run(stop); });
  ASSERT_TRUE(sink.WaitUntil([](auto&, int replaces) { return replaces == 1; }));
  ASSERT_TRUE(AwaitOpenWatches(server, 1));

  // Changes made while the stream is cut must still arrive, as events.
  server.Control("stall-watches", {{"stalled", true}});
  server.Upsert(LogonGroup("b"));
  server.Upsert(LogonGroup("a", "adaptive"));
  server.Control("drop-watches");
  server.Control("stall-watches", {{"stalled", false}});

  ASSERT_TRUE(sink.WaitUntil(
      [](auto& objects, int) { return objects.count("b") == 1 && objects.size() == 2; }));
  ASSERT_TRUE(sink.WaitUntil(
      [](auto& objects, int) { return objects.at("a")["spec"]["strategy"] == "adaptive"; }));
  EXPECT_EQ(sink.Log(), (std::vector<std::string>{"replace:1", "upsert:b", "upsert:a"}));
  ReflectorStats stats = reflector.Stats();
  EXPECT_EQ(stats.lists, 1u) << "no relist";
  EXPECT_EQ(stats.relists, 0u);
  EXPECT_EQ(stats.errors, 1u);
  EXPECT_EQ(stats.watches, 2u);

  // The resumed watch started from the version the first one had reached.
  std::vector<std::string> watch_versions;
  for (const json& request : server.Requests()) {
    if (request["path"] == kLogonGroups && request["query"].contains("watch")) {
      watch_versions.push_back(request["query"]["resourceVersion"]);
    }
  }
  ASSERT_EQ(watch_versions.size(), 2u);
  EXPECT_EQ(watch_versions[0], watch_versions[1]) << "nothing was delivered before the drop";
  thread.request_stop();
}

TEST(ReflectorTest, StalledWatchIsAbandonedAndResumed) {
  FakeApiServer server;
  KubeClient client(server.Config());
  RecordingSink sink;
  ReflectorOptions options = FastOptions();
  options.watch_timeout_seconds = 1;
  options.deadline_grace = std::chrono::seconds(1);
  Reflector reflector(client, options, sink);
  std::jthread thread([&](std::stop_token stop) { reflector.Run(stop); });
  ASSERT_TRUE(sink.WaitUntil([](auto&, int replaces) { return replaces == 1; }));
  ASSERT_TRUE(AwaitOpenWatches(server, 1));

  server.Control("stall-watches", {{"stalled", true}});
  server.Upsert(LogonGroup("during-stall"));
  // Bounded poll: the reflector gives up on the silent stream within ~1 s.
  for (int i = 0; i < 500 && reflector.Stats().errors == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GE(reflector.Stats().errors, 1u);
  server.Control("stall-watches", {{"stalled", false}});
  ASSERT_TRUE(
      sink.WaitUntil([](auto& objects, int) { return objects.count("during-stall") == 1; }));
  EXPECT_EQ(reflector.Stats().relists, 0u);
  thread.request_stop();
}

// Issue 27: on a real 1.28 cluster every quiet watch was torn down as
// stalled after 90 s of silence, counted as an error and followed by a
// backoff pause. Quiet watches that the server ends at timeoutSeconds are
// healthy: no error, no pause, resumed from the same version.
TEST(ReflectorTest, QuietWatchesEndByTheirTimeoutWithoutErrorsOrBackoff) {
  FakeApiServer server;
  server.Upsert(LogonGroup("a"));
  server.Control("config", {{"bookmarkMode", "progress"}, {"bookmarkIntervalSeconds", 0.2}});
  KubeClient client(server.Config());
  RecordingSink sink;
  auto sleeper = std::make_shared<RecordingSleeper>();
  ReflectorOptions options = FastOptions();
  options.watch_timeout_seconds = 1;
  options.deadline_grace = std::chrono::seconds(1);
  options.sleeper = sleeper;
  Reflector reflector(client, options, sink);
  std::jthread thread([&](std::stop_token stop) { reflector.Run(stop); });
  ASSERT_TRUE(sink.WaitUntil([](auto&, int replaces) { return replaces == 1; }));
  for (int i = 0; i < 600 && reflector.Stats().watches < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  thread.request_stop();
  thread.join();
  ReflectorStats stats = reflector.Stats();
  EXPECT_GE(stats.watches, 3u);
  EXPECT_EQ(stats.errors, 0u);
  EXPECT_EQ(stats.bookmarks, 0u) << "the fake was not quiet";
  EXPECT_EQ(stats.relists, 0u);
  EXPECT_TRUE(sleeper->Delays().empty()) << "a healthy quiet watch must not back off";
}

// client-go asks for a timeout between 5 and 10 minutes at random, so that
// watches do not all end together; so does the reflector.
TEST(ReflectorTest, WatchTimeoutIsRandomisedBetweenOnceAndTwiceTheMinimum) {
  FakeApiServer server;
  KubeClient client(server.Config());
  RecordingSink sink;
  ReflectorOptions options = FastOptions();
  options.watch_timeout_seconds = 300;
  options.random = [] { return 0.5; };
  Reflector reflector(client, options, sink);
  std::jthread thread([&](std::stop_token stop) { reflector.Run(stop); });
  ASSERT_TRUE(AwaitOpenWatches(server, 1));
  thread.request_stop();
  thread.join();
  std::vector<std::string> timeouts;
  for (const json& request : server.Requests()) {
    if (request["query"].contains("watch")) {
      timeouts.push_back(request["query"]["timeoutSeconds"]);
    }
  }
  EXPECT_EQ(timeouts, std::vector<std::string>{"450"});
}

TEST(ReflectorTest, FailedListsBackOffWithJitter) {
  FakeApiServer server;
  server.Control("fail", {{"count", 3}, {"code", 500}, {"match", "limit="}});
  KubeClient client(server.Config());
  RecordingSink sink;
  auto sleeper = std::make_shared<RecordingSleeper>();
  ReflectorOptions options = FastOptions();
  options.backoff.initial = std::chrono::milliseconds(100);
  options.backoff.max = std::chrono::milliseconds(10000);
  options.backoff.jitter = 0.5;
  options.random = [] { return 0.5; };
  options.sleeper = sleeper;
  Reflector reflector(client, options, sink);
  std::jthread thread([&](std::stop_token stop) { reflector.Run(stop); });
  ASSERT_TRUE(sink.WaitUntil([](auto&, int replaces) { return replaces == 1; }));
  using std::chrono::milliseconds;
  EXPECT_EQ(sleeper->Delays(), (std::vector<std::chrono::nanoseconds>{
                                   milliseconds(125), milliseconds(250), milliseconds(500)}));
  EXPECT_EQ(reflector.Stats().errors, 3u);
  EXPECT_EQ(reflector.Stats().lists, 1u);
  thread.request_stop();
}

// A scripted KubeApi: each Watch call plays the next scripted outcome; the
// last call requests stop so Run returns.
class ScriptedApi : public KubeApi {
 public:
  struct Step {
    WatchEnd end;
    std::vector<json> added;
  };
  explicit ScriptedApi(std::vector<Step> steps, std::stop_source& stop)
      : steps_(std::move(steps)), stop_(stop) {}

  ApiResult Get(std::string_view) override { return {}; }
  ApiResult Post(std::string_view, const json&) override { return {}; }
  ApiResult Put(std::string_view, const json&) override { return {}; }
  ApiResult Patch(std::string_view, const json&, std::string_view) override { return {}; }
  ApiResult Delete(std::string_view) override { return {}; }
  ApiResult MergePatchStatus(std::string_view, const json&) override { return {}; }
  ApiResult GetLease(std::string_view, std::string_view, std::chrono::milliseconds) override {
    return {};
  }
  ApiResult CreateLease(std::string_view, const json&, std::chrono::milliseconds) override {
    return {};
  }
  ApiResult UpdateLease(std::string_view, std::string_view, const json&,
                        std::chrono::milliseconds) override {
    return {};
  }
  ListResult List(std::string_view, std::string_view, std::stop_token) override {
    ++lists;
    ListResult result;
    result.status.http_code = 200;
    result.resource_version = "list-" + std::to_string(lists);
    return result;
  }
  WatchResult Watch(std::string_view, const WatchOptions& options, const WatchCallback& callback,
                    std::stop_token) override {
    watched_from.push_back(options.resource_version);
    WatchResult result;
    result.last_resource_version = options.resource_version;
    if (next_ >= steps_.size()) {
      stop_.request_stop();
      result.end = WatchEnd::kStopped;
      return result;
    }
    const Step& step = steps_[next_++];
    for (const json& object : step.added) {
      callback(WatchEventType::kAdded, object);
      result.last_resource_version = object["metadata"]["resourceVersion"];
      ++result.events;
    }
    result.end = step.end;
    return result;
  }

  int lists = 0;
  std::vector<std::string> watched_from;

 private:
  std::vector<Step> steps_;
  size_t next_ = 0;
  std::stop_source& stop_;
};

TEST(ReflectorTest, BackToBack410sAndEmptyClosesBackOffButHealthyOnesDoNot) {
  json a = LogonGroup("a");
  a["metadata"]["resourceVersion"] = "7";
  std::stop_source stop;
  ScriptedApi api({{WatchEnd::kClosed, {a}},       // timeoutSeconds after an event: resume now
                   {WatchEnd::kRelistNeeded, {}},  // 410 at once: pause, relist
                   {WatchEnd::kRelistNeeded, {}},  // again: longer pause
                   {WatchEnd::kFailed, {}},        // drop: pause, resume without relist
                   {WatchEnd::kClosed, {}}},       // closed at once, no events: pause
                  stop);
  RecordingSink sink;
  auto sleeper = std::make_shared<RecordingSleeper>();
  ReflectorOptions options = FastOptions();
  options.backoff.initial = std::chrono::milliseconds(100);
  options.backoff.max = std::chrono::milliseconds(10000);
  options.backoff.jitter = 0;
  options.sleeper = sleeper;
  Reflector reflector(api, options, sink);
  reflector.Run(stop.get_token());

  using std::chrono::milliseconds;
  EXPECT_EQ(sleeper->Delays(),
            (std::vector<std::chrono::nanoseconds>{milliseconds(100), milliseconds(200),
                                                   milliseconds(400), milliseconds(800)}));
  EXPECT_EQ(api.lists, 3);
  EXPECT_EQ(api.watched_from,
            (std::vector<std::string>{"list-1", "7", "list-2", "list-3", "list-3", "list-3"}));
  ReflectorStats stats = reflector.Stats();
  EXPECT_EQ(stats.relists, 2u);
  EXPECT_EQ(stats.errors, 1u);
  EXPECT_EQ(stats.added, 1u);
}

TEST(ReflectorTest, StopEndsRunPromptly) {
  FakeApiServer server;
  KubeClient client(server.Config());
  RecordingSink sink;
  Reflector reflector(client, FastOptions(), sink);
  std::jthread thread([&](std::stop_token stop) { reflector.Run(stop); });
  ASSERT_TRUE(sink.WaitUntil([](auto&, int replaces) { return replaces == 1; }));
  ASSERT_TRUE(AwaitOpenWatches(server, 1));
  auto started = std::chrono::steady_clock::now();
  thread.request_stop();
  thread.join();
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(300));
}

}  // namespace
}  // namespace kwd::kube
