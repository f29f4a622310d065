#include "controller/kube/kube_client.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "controller/kube/leader_elector.h"
#include "tests/controller/kube/exec_plugin.h"
#include "tests/fake_apiserver/fake_apiserver_process.h"

namespace kwd::kube {
namespace {

using nlohmann::json;
using testing::FakeApiServer;

constexpr char kLogonGroups[] = "/apis/dispatch.kwd.io/v1alpha1/logongroups";
constexpr char kErpLogonGroups[] = "/apis/dispatch.kwd.io/v1alpha1/namespaces/erp/logongroups";
constexpr char kSlices[] = "/apis/discovery.k8s.io/v1/endpointslices";

json LogonGroup(const std::string& name, const std::string& ns = "erp") {
  return {{"apiVersion", "dispatch.kwd.io/v1alpha1"},
          {"kind", "LogonGroup"},
          {"metadata", {{"name", name}, {"namespace", ns}}},
          {"spec", {{"kind", "abap"}, {"strategy", "weighted_round_robin"}}}};
}

json Slice(const std::string& name, const std::string& service) {
  return {{"apiVersion", "discovery.k8s.io/v1"},
          {"kind", "EndpointSlice"},
          {"metadata",
           {{"name", name},
            {"namespace", "erp"},
            {"labels", {{"kubernetes.io/service-name", service}}}}},
          {"addressType", "IPv4"},
          {"endpoints", json::array()}};
}

std::string Rv(const json& object) {
  return object["metadata"]["resourceVersion"];
}

TEST(KubeClientTest, CreateGetAndNotFoundStatus) {
  FakeApiServer server;
  KubeClient client(server.Config());
  ApiResult created = client.Post(kErpLogonGroups, LogonGroup("public"));
  ASSERT_TRUE(created.status.ok()) << created.status.ToString();
  EXPECT_EQ(created.status.http_code, 201);
  EXPECT_EQ(created.body["metadata"]["generation"], 1);
  EXPECT_FALSE(Rv(created.body).empty());

  ApiResult got = client.Get(std::string(kErpLogonGroups) + "/public");
  ASSERT_TRUE(got.status.ok());
  EXPECT_EQ(got.body["spec"]["kind"], "abap");

  ApiResult missing = client.Get(std::string(kErpLogonGroups) + "/nope");
  EXPECT_TRUE(missing.status.IsNotFound());
  EXPECT_EQ(missing.status.reason, "NotFound");
  EXPECT_EQ(missing.status.message, "logongroups.dispatch.kwd.io \"nope\" not found");

  ApiResult again = client.Post(kErpLogonGroups, LogonGroup("public"));
  EXPECT_EQ(again.status.http_code, 409);
  EXPECT_EQ(again.status.reason, "AlreadyExists");
}

TEST(KubeClientTest, ListFollowsContinueTokensOverThreePages) {
  FakeApiServer server;
  for (int i = 0; i < 7; ++i) {
    server.Upsert(Slice("abap-" + std::to_string(i), "erp-abap"));
  }
  server.Upsert(Slice("java-0", "erp-java"));
  ClientOptions options;
  options.page_size = 3;
  KubeClient client(server.Config(), options);

  ListResult list = client.List(kSlices, "kubernetes.io/service-name=erp-abap");
  ASSERT_TRUE(list.status.ok()) << list.status.ToString();
  EXPECT_EQ(list.pages, 3);
  ASSERT_EQ(list.items.size(), 7u);
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(list.items[i]["metadata"]["name"], "abap-" + std::to_string(i));
    EXPECT_FALSE(list.items[i].contains("kind")) << "typed list items carry no kind";
  }
  EXPECT_EQ(list.resource_version, server.State()["resourceVersion"]);

  int list_requests = 0;
  for (const json& request : server.Requests()) {
    if (request["path"] == kSlices) {
      ++list_requests;
      EXPECT_EQ(request["query"]["limit"], "3");
      EXPECT_EQ(request["query"]["labelSelector"], "kubernetes.io/service-name=erp-abap");
      EXPECT_EQ(request["query"].contains("continue"), list_requests > 1);
    }
  }
  EXPECT_EQ(list_requests, 3);
}

TEST(KubeClientTest, CustomResourceListItemsKeepKind) {
  FakeApiServer server;
  server.Upsert(LogonGroup("a"));
  server.Upsert(LogonGroup("b", "other"));
  KubeClient client(server.Config());
  ListResult all = client.List(kLogonGroups);
  ASSERT_EQ(all.items.size(), 2u);
  EXPECT_EQ(all.items[0]["kind"], "LogonGroup");
  ListResult erp = client.List(kErpLogonGroups);
  ASSERT_EQ(erp.items.size(), 1u);
  EXPECT_EQ(erp.items[0]["metadata"]["name"], "a");
}

TEST(KubeClientTest, ExpiredContinueTokenRestartsTheList) {
  FakeApiServer server;
  for (int i = 0; i < 5; ++i) {
    server.Upsert(LogonGroup("g" + std::to_string(i)));
  }
  server.Control("fail", {{"count", 1}, {"code", 410}, {"match", "continue="}});
  ClientOptions options;
  options.page_size = 2;
  KubeClient client(server.Config(), options);
  ListResult list = client.List(kLogonGroups);
  ASSERT_TRUE(list.status.ok()) << list.status.ToString();
  EXPECT_EQ(list.restarts, 1);
  EXPECT_EQ(list.items.size(), 5u) << "no duplicates from the abandoned pages";
}

TEST(KubeClientTest, WatchDeliversEveryEventTypeAndBookmarksAdvanceTheVersion) {
  FakeApiServer server;
  json first = server.Upsert(LogonGroup("public"));
  KubeClient client(server.Config());
  ListResult list = client.List(kLogonGroups);
  ASSERT_TRUE(list.status.ok());

  std::vector<std::pair<WatchEventType, json>> events;
  std::mutex mutex;
  std::condition_variable changed;
  std::stop_source stop;
  WatchResult result;
  std::thread watcher([&] {
    WatchOptions options;
    options.resource_version = list.resource_version;
    result = client.Watch(
        kLogonGroups, options,
        [&](WatchEventType type, const json& object) {
          std::lock_guard lock(mutex);
          events.emplace_back(type, object);
          changed.notify_all();
        },
        stop.get_token());
  });
  auto wait_for_events = [&](size_t count) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, std::chrono::seconds(10), [&] { return events.size() >= count; });
  };

  json second = server.Upsert(LogonGroup("second"));
  json modified = LogonGroup("public");
  modified["spec"]["strategy"] = "adaptive";
  modified = server.Upsert(modified);
  json deleted = server.Remove(LogonGroup("second"));
  ASSERT_TRUE(wait_for_events(3));
  // A change elsewhere moves the global resourceVersion past this watch's last event.
  server.Upsert(
      {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", {{"name", "p"}, {"namespace", "erp"}}}});
  json bookmark_rv = server.Control("bookmark")["resourceVersion"];
  ASSERT_TRUE(wait_for_events(4));
  stop.request_stop();
  watcher.join();

  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].first, WatchEventType::kAdded);
  EXPECT_EQ(events[0].second["metadata"]["name"], "second");
  EXPECT_EQ(events[1].first, WatchEventType::kModified);
  EXPECT_EQ(events[1].second["metadata"]["generation"], 2) << "spec changed";
  EXPECT_EQ(events[2].first, WatchEventType::kDeleted);
  EXPECT_EQ(Rv(events[2].second), Rv(deleted));
  EXPECT_EQ(events[3].first, WatchEventType::kBookmark);
  EXPECT_EQ(Rv(events[3].second), bookmark_rv);
  EXPECT_EQ(result.end, WatchEnd::kStopped);
  EXPECT_EQ(result.events, 4);
  EXPECT_EQ(result.last_resource_version, bookmark_rv) << "the bookmark advanced it";
  EXPECT_NE(result.last_resource_version, Rv(deleted));
}

// Collects watch events for tests that only need the final picture.
WatchResult WatchUntilEnd(KubeClient& client, const WatchOptions& options,
                          std::vector<std::pair<WatchEventType, json>>* events,
                          std::stop_token stop = {}) {
  return client.Watch(
      kLogonGroups, options,
      [&](WatchEventType type, const json& object) { events->emplace_back(type, object); }, stop);
}

TEST(KubeClientTest, WatchFromZeroStartsWithSyntheticAddedAndEndsAtTimeout) {
  FakeApiServer server;
  server.Upsert(LogonGroup("a"));
  server.Upsert(LogonGroup("b"));
  KubeClient client(server.Config());
  WatchOptions options;
  options.resource_version = "0";
  options.timeout_seconds = 1;
  std::vector<std::pair<WatchEventType, json>> events;
  WatchResult result = WatchUntilEnd(client, options, &events);
  EXPECT_EQ(result.end, WatchEnd::kClosed) << result.status.ToString();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].first, WatchEventType::kAdded);
  EXPECT_EQ(events[1].second["metadata"]["name"], "b");
  EXPECT_EQ(result.last_resource_version, Rv(events[1].second));
}

TEST(KubeClientTest, TooOldVersionNeedsARelistAsErrorEventOrHttp410) {
  FakeApiServer server;
  std::string old_rv = Rv(server.Upsert(LogonGroup("a")));
  server.Upsert(LogonGroup("b"));
  server.Control("compact");
  KubeClient client(server.Config());
  WatchOptions options;
  options.resource_version = old_rv;
  std::vector<std::pair<WatchEventType, json>> events;

  WatchResult in_stream = WatchUntilEnd(client, options, &events);
  EXPECT_EQ(in_stream.end, WatchEnd::kRelistNeeded);
  EXPECT_EQ(in_stream.status.http_code, 410);
  EXPECT_EQ(in_stream.status.reason, "Expired");
  EXPECT_NE(in_stream.status.message.find("too old resource version"), std::string::npos);

  server.Control("config", {{"watchGoneMode", "http"}});
  WatchResult plain = WatchUntilEnd(client, options, &events);
  EXPECT_EQ(plain.end, WatchEnd::kRelistNeeded);
  EXPECT_EQ(plain.status.http_code, 410);
  EXPECT_TRUE(events.empty());
}

// A hung server (the connection stays, the stream never ends) is abandoned
// once timeoutSeconds plus the grace have passed.
TEST(KubeClientTest, StalledWatchIsDetectedAfterItsTimeoutAndGrace) {
  FakeApiServer server;
  KubeClient client(server.Config());
  server.Control("stall-watches", {{"stalled", true}});
  WatchOptions options;
  options.resource_version = "0";
  options.timeout_seconds = 1;
  options.deadline_grace = std::chrono::seconds(1);
  std::vector<std::pair<WatchEventType, json>> events;
  auto started = std::chrono::steady_clock::now();
  WatchResult result = WatchUntilEnd(client, options, &events);
  auto took = std::chrono::steady_clock::now() - started;
  EXPECT_EQ(result.end, WatchEnd::kFailed);
  EXPECT_EQ(result.status.reason, "Stalled") << result.status.ToString();
  EXPECT_NE(result.status.message.find("timeoutSeconds=1"), std::string::npos)
      << result.status.message;
  EXPECT_GE(took, std::chrono::milliseconds(1900));
  EXPECT_LT(took, std::chrono::seconds(6));
}

// Issue 27: a 1.28 API server sends a watch of a quiet resource type not a
// single byte (no event, no bookmark) until timeoutSeconds ends it. That
// silence, however much longer than the grace, is a healthy watch: it ends
// closed, not stalled.
TEST(KubeClientTest, QuietWatchIsHealthyUntilTheServerEndsIt) {
  FakeApiServer server;
  server.Upsert(LogonGroup("a"));
  server.Control("config", {{"bookmarkMode", "progress"}, {"bookmarkIntervalSeconds", 0.2}});
  KubeClient client(server.Config());
  std::string rv = server.State()["resourceVersion"];
  WatchOptions options;
  options.resource_version = rv;
  options.timeout_seconds = 3;
  options.deadline_grace = std::chrono::seconds(1);
  std::vector<std::pair<WatchEventType, json>> events;
  auto started = std::chrono::steady_clock::now();
  WatchResult result = WatchUntilEnd(client, options, &events);
  auto took = std::chrono::steady_clock::now() - started;
  EXPECT_EQ(result.end, WatchEnd::kClosed) << result.status.ToString();
  EXPECT_TRUE(result.status.ok()) << result.status.ToString();
  EXPECT_TRUE(events.empty()) << "the fake sent something: not a quiet watch";
  EXPECT_GE(took, std::chrono::milliseconds(2900)) << "silent for longer than the grace";
  EXPECT_EQ(result.last_resource_version, rv);
  json requests = server.Requests();
  ASSERT_FALSE(requests.empty());
  EXPECT_EQ(requests.back()["query"]["timeoutSeconds"], "3");
}

// The fake's "progress" mode (a 1.28 API server): periodic bookmarks reach a
// watch only after its resource type moved on, or after a progress
// notification.
TEST(KubeClientTest, FakeSendsBookmarksToAQuietWatchOnlyAfterProgress) {
  FakeApiServer server;
  server.Upsert(LogonGroup("a"));
  server.Control("config", {{"bookmarkMode", "progress"}, {"bookmarkIntervalSeconds", 0.2}});
  KubeClient client(server.Config());
  std::string start_rv = server.State()["resourceVersion"];
  server.Upsert(Slice("erp-abap-1", "erp-abap"));  // another type moves the global version
  WatchOptions options;
  options.resource_version = start_rv;
  std::stop_source stop;
  std::mutex mutex;
  std::vector<std::pair<WatchEventType, json>> events;
  std::thread watcher([&] {
    client.Watch(
        kLogonGroups, options,
        [&](WatchEventType type, const json& object) {
          std::lock_guard lock(mutex);
          events.emplace_back(type, object);
        },
        stop.get_token());
  });
  for (int i = 0; i < 200 && server.State()["openWatches"] != 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(800));  // 4 bookmark intervals pass
  {
    std::lock_guard lock(mutex);
    EXPECT_TRUE(events.empty()) << "a bookmark before the type moved";
  }
  server.Control("progress-notify");
  bool bookmarked = false;
  for (int i = 0; i < 300 && !bookmarked; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::lock_guard lock(mutex);
    bookmarked = !events.empty();
  }
  stop.request_stop();
  watcher.join();
  ASSERT_TRUE(bookmarked);
  EXPECT_EQ(events[0].first, WatchEventType::kBookmark);
  EXPECT_NE(Rv(events[0].second), start_rv) << "the bookmark carries the progressed version";
}

// The fake's EndpointSlice controller shape for a Service scaled to 0.
TEST(KubeClientTest, FakeScaleToZeroWritesNullEndpointsAndPorts) {
  FakeApiServer server;
  json slice = Slice("erp-abap-1", "erp-abap");
  slice["endpoints"] = json::array({{{"addresses", {"10.0.0.1"}}}});
  slice["ports"] = json::array({{{"name", "http"}, {"port", 8000}}});
  server.Upsert(slice);
  server.Upsert(Slice("other-1", "other"));
  json changed = server.Control("scale-to-zero", {{"namespace", "erp"}, {"service", "erp-abap"}});
  ASSERT_EQ(changed.size(), 1u);
  KubeClient client(server.Config());
  ListResult list = client.List(kSlices);
  ASSERT_TRUE(list.status.ok());
  ASSERT_EQ(list.items.size(), 2u);
  EXPECT_TRUE(list.items[0]["endpoints"].is_null());
  EXPECT_TRUE(list.items[0]["ports"].is_null());
  EXPECT_TRUE(list.items[0].contains("ports")) << "present as null, not absent";
}

TEST(KubeClientTest, DroppedWatchIsReportedAsFailure) {
  FakeApiServer server;
  KubeClient client(server.Config());
  std::vector<std::pair<WatchEventType, json>> events;
  WatchResult result;
  std::thread watcher([&] {
    WatchOptions options;
    options.resource_version = "0";
    result = WatchUntilEnd(client, options, &events);
  });
  for (int i = 0; i < 200 && server.State()["openWatches"] != 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // the server has no push
  }
  server.Control("drop-watches");
  watcher.join();
  EXPECT_EQ(result.end, WatchEnd::kFailed);
  EXPECT_EQ(result.status.reason, "Transport") << result.status.ToString();
}

TEST(KubeClientTest, StopCancelsAWatchPromptly) {
  FakeApiServer server;
  KubeClient client(server.Config());
  std::stop_source stop;
  std::vector<std::pair<WatchEventType, json>> events;
  WatchResult result;
  std::thread watcher([&] {
    WatchOptions options;
    options.resource_version = "0";
    result = WatchUntilEnd(client, options, &events, stop.get_token());
  });
  for (int i = 0; i < 200 && server.State()["openWatches"] != 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto started = std::chrono::steady_clock::now();
  stop.request_stop();
  watcher.join();
  EXPECT_EQ(result.end, WatchEnd::kStopped);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(300));
}

TEST(KubeClientTest, MergePatchStatusIsVisibleAndLeavesGenerationAlone) {
  FakeApiServer server;
  server.Upsert(LogonGroup("public"));
  KubeClient client(server.Config());
  std::string path = std::string(kErpLogonGroups) + "/public";
  json patch = {
      {"status",
       {{"observedGeneration", 1},
        {"readyServers", 2},
        {"conditions", {{{"type", "Accepted"}, {"status", "True"}, {"reason", "Accepted"}}}}}},
      {"spec", {{"kind", "java"}}}};
  ApiResult patched = client.MergePatchStatus(path, patch);
  ASSERT_TRUE(patched.status.ok()) << patched.status.ToString();

  ApiResult got = client.Get(path);
  ASSERT_TRUE(got.status.ok());
  EXPECT_EQ(got.body["status"]["readyServers"], 2);
  EXPECT_EQ(got.body["status"]["conditions"][0]["type"], "Accepted");
  EXPECT_EQ(got.body["spec"]["kind"], "abap") << "/status ignores spec";
  EXPECT_EQ(got.body["metadata"]["generation"], 1);

  json last = server.Requests().back();
  EXPECT_EQ(last["method"], "GET");
  bool saw_patch = false;
  for (const json& request : server.Requests()) {
    if (request["method"] == "PATCH") {
      saw_patch = true;
      EXPECT_EQ(request["path"], path + "/status");
      EXPECT_EQ(request["contentType"], "application/merge-patch+json");
    }
  }
  EXPECT_TRUE(saw_patch);

  ApiResult strategic =
      client.Patch(path, json::object(), "application/strategic-merge-patch+json");
  EXPECT_EQ(strategic.status.http_code, 415);
  ApiResult missing = client.MergePatchStatus(std::string(kErpLogonGroups) + "/nope", patch);
  EXPECT_TRUE(missing.status.IsNotFound());
}

TEST(KubeClientTest, StaleLeaseUpdateIsAConflict) {
  FakeApiServer server;
  KubeClient client(server.Config());
  json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                {"kind", "Lease"},
                {"metadata", {{"name", "kwd"}, {"namespace", "kwd-system"}}},
                {"spec", {{"holderIdentity", "a"}, {"leaseDurationSeconds", 15}}}};
  ApiResult created = client.CreateLease("kwd-system", lease);
  ASSERT_TRUE(created.status.ok()) << created.status.ToString();
  json read = client.GetLease("kwd-system", "kwd").body;

  json first = read;
  first["spec"]["holderIdentity"] = "b";
  ApiResult won = client.UpdateLease("kwd-system", "kwd", first);
  ASSERT_TRUE(won.status.ok()) << won.status.ToString();
  EXPECT_NE(Rv(won.body), Rv(read));

  json second = read;  // still carries the old resourceVersion
  second["spec"]["holderIdentity"] = "c";
  ApiResult lost = client.UpdateLease("kwd-system", "kwd", second);
  EXPECT_TRUE(lost.status.IsConflict());
  EXPECT_EQ(lost.status.reason, "Conflict");
  EXPECT_EQ(client.GetLease("kwd-system", "kwd").body["spec"]["holderIdentity"], "b");
  EXPECT_TRUE(client.GetLease("kwd-system", "other").status.IsNotFound());
}

TEST(KubeClientTest, WrongTokenIsUnauthorized) {
  FakeApiServer server({"--token", "right"});
  KubeClient wrong(server.Config("wrong"));
  ApiResult denied = wrong.Get(std::string(kErpLogonGroups) + "/x");
  EXPECT_EQ(denied.status.http_code, 401);
  EXPECT_EQ(denied.status.reason, "Unauthorized");
  ListResult list = wrong.List(kLogonGroups);
  EXPECT_EQ(list.status.http_code, 401);

  KubeClient right(server.Config("right"));
  EXPECT_TRUE(right.List(kLogonGroups).status.ok());
  EXPECT_EQ(server.Requests().back()["authorization"], "Bearer right");
}

TEST(KubeClientTest, RotatedTokenFileIsRereadOn401) {
  FakeApiServer server({"--token", "first"});
  std::string dir = std::filesystem::temp_directory_path() / "kwd-kube-token-XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  std::string token_file = dir + "/token";
  std::ofstream(token_file) << "first\n";
  KubeConfig config = server.Config();
  config.token_file = token_file;
  KubeClient client(config);
  ASSERT_TRUE(client.List(kLogonGroups).status.ok());

  // The kubelet rotates the projected token; the server stops accepting the old one.
  std::ofstream(token_file) << "second\n";
  server.Control("config", {{"token", "second"}});
  ListResult list = client.List(kLogonGroups);
  EXPECT_TRUE(list.status.ok()) << list.status.ToString();
  json requests = server.Requests();
  ASSERT_GE(requests.size(), 2u);
  EXPECT_EQ(requests[requests.size() - 2]["authorization"], "Bearer first");
  EXPECT_EQ(requests.back()["authorization"], "Bearer second");
  std::filesystem::remove_all(dir);
}

// The exec part of a kubeconfig user running ./get-token (relative to the
// kubeconfig's directory) with two arguments and one environment variable.
constexpr char kExecLines[] =
    "      apiVersion: client.authentication.k8s.io/v1\n"
    "      command: ./get-token\n"
    "      args: [--cluster, erp one]\n"
    "      env: [{name: KWD_TEST_REGION, value: eu-central-1}]\n"
    "      interactiveMode: Never\n";

KubeConfig ExecConfigFor(const FakeApiServer& server, const testing::PluginDir& dir,
                         const std::string& exec_lines = kExecLines) {
  KubeConfig config;
  std::string error;
  EXPECT_TRUE(ParseKubeConfig(testing::ExecKubeConfig(server.address(), exec_lines), dir.path(), "",
                              &config, &error))
      << error;
  return config;
}

TEST(KubeClientTest, ExecPluginTokenIsSentAndCached) {
  FakeApiServer server({"--token", "from-plugin"});
  testing::PluginDir dir;
  dir.WritePlugin("get-token",
                  "echo \"region=$KWD_TEST_REGION\" > \"$0.env\"\n" + testing::TokenFromFileBody());
  dir.Write("get-token.token", "from-plugin");
  KubeClient client(ExecConfigFor(server, dir));
  ListResult first = client.List(kLogonGroups);
  ASSERT_TRUE(first.status.ok()) << first.status.ToString();
  ASSERT_TRUE(client.Get(std::string(kErpLogonGroups) + "/x").status.IsNotFound());
  EXPECT_EQ(server.Requests().back()["authorization"], "Bearer from-plugin");
  // No expirationTimestamp: the credential is kept until the server refuses it.
  EXPECT_EQ(dir.Runs("get-token"), 1);
  EXPECT_EQ(dir.Read("get-token.calls"), "run --cluster erp one\n");
  EXPECT_EQ(dir.Read("get-token.env"), "region=eu-central-1\n");
  json info = json::parse(dir.Read("get-token.info"));
  EXPECT_EQ(info["apiVersion"], "client.authentication.k8s.io/v1");
  EXPECT_EQ(info["kind"], "ExecCredential");
  EXPECT_EQ(info["spec"]["interactive"], false);
  EXPECT_FALSE(info["spec"].contains("cluster")) << "only with provideClusterInfo";
}

TEST(KubeClientTest, ExecPluginIsRerunOnceOn401) {
  FakeApiServer server({"--token", "first"});
  testing::PluginDir dir;
  dir.WritePlugin("get-token", testing::TokenFromFileBody());
  dir.Write("get-token.token", "first");
  KubeClient client(ExecConfigFor(server, dir));
  ASSERT_TRUE(client.List(kLogonGroups).status.ok());
  ASSERT_EQ(dir.Runs("get-token"), 1);

  // The server stops accepting the token before its expiry (revoked, or an
  // expiry the plugin did not report): one 401, the plugin runs again.
  server.Control("config", {{"token", "second"}});
  dir.Write("get-token.token", "second");
  ListResult list = client.List(kLogonGroups);
  EXPECT_TRUE(list.status.ok()) << list.status.ToString();
  EXPECT_EQ(dir.Runs("get-token"), 2);
  json requests = server.Requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[requests.size() - 2]["authorization"], "Bearer first");
  EXPECT_EQ(requests.back()["authorization"], "Bearer second");

  // A plugin that keeps handing out a refused token: one re-run per request, no loop.
  server.Control("config", {{"token", "third"}});
  ApiResult denied = client.Get(std::string(kErpLogonGroups) + "/x");
  EXPECT_EQ(denied.status.http_code, 401);
  EXPECT_EQ(dir.Runs("get-token"), 3);
}

class SteppedClock : public Clock {
 public:
  std::chrono::steady_clock::time_point Now() const override {
    return std::chrono::steady_clock::time_point(wall.time_since_epoch());
  }
  std::chrono::system_clock::time_point WallNow() const override { return wall; }
  std::chrono::system_clock::time_point wall = std::chrono::system_clock::now();
};

TEST(KubeClientTest, ExecPluginRunsAgainShortlyBeforeExpiry) {
  FakeApiServer server({"--token", "first"});
  testing::PluginDir dir;
  dir.WritePlugin("get-token", testing::TokenFromFileBody());
  dir.Write("get-token.token", "first");
  auto clock = std::make_shared<SteppedClock>();
  dir.Write("get-token.expiry", FormatMicroTime(clock->wall + std::chrono::minutes(10)));
  ClientOptions options;
  options.clock = clock;
  options.exec_refresh_margin = std::chrono::seconds(30);
  KubeClient client(ExecConfigFor(server, dir), options);
  ASSERT_TRUE(client.List(kLogonGroups).status.ok());
  clock->wall += std::chrono::minutes(9);
  ASSERT_TRUE(client.List(kLogonGroups).status.ok());
  EXPECT_EQ(dir.Runs("get-token"), 1) << "cached until shortly before expiry";

  server.Control("config", {{"token", "second"}});
  dir.Write("get-token.token", "second");
  clock->wall += std::chrono::seconds(31);  // 29 s left: inside the refresh margin
  ListResult list = client.List(kLogonGroups);
  EXPECT_TRUE(list.status.ok()) << list.status.ToString();
  EXPECT_EQ(dir.Runs("get-token"), 2);
  json requests = server.Requests();
  ASSERT_EQ(requests.size(), 3u) << "refreshed before the request, not after a 401";
  EXPECT_EQ(requests[2]["authorization"], "Bearer second");
}

TEST(KubeClientTest, FailingExecPluginIsAClearErrorNamingTheUser) {
  FakeApiServer server({"--token", "t"});
  testing::PluginDir dir;
  dir.WritePlugin("get-token", "echo 'AccessDenied: sts:GetCallerIdentity' >&2\nexit 3\n");
  KubeClient client(ExecConfigFor(server, dir));
  ListResult list = client.List(kLogonGroups);
  EXPECT_FALSE(list.status.ok());
  EXPECT_EQ(list.status.reason, "ExecPlugin");
  EXPECT_NE(list.status.message.find("user \"eks-admin\""), std::string::npos)
      << list.status.message;
  EXPECT_NE(list.status.message.find("exit status 3"), std::string::npos) << list.status.message;
  EXPECT_NE(list.status.message.find("AccessDenied"), std::string::npos) << list.status.message;
  EXPECT_TRUE(server.Requests().empty()) << "no request without a credential";
}

TEST(KubeClientTest, TooManyRequestsHonoursRetryAfter) {
  FakeApiServer server;
  server.Control("fail", {{"count", 1}, {"code", 429}, {"retryAfter", 1}, {"match", "GET /apis"}});
  KubeClient client(server.Config());
  auto started = std::chrono::steady_clock::now();
  ListResult list = client.List(kLogonGroups);
  EXPECT_TRUE(list.status.ok()) << list.status.ToString();
  EXPECT_GE(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(950));

  ClientOptions no_retries;
  no_retries.max_throttle_retries = 0;
  KubeClient impatient(server.Config(), no_retries);
  server.Control("fail", {{"count", 1}, {"code", 429}, {"retryAfter", 1}, {"match", "GET /apis"}});
  ApiResult throttled = impatient.Get(std::string(kErpLogonGroups) + "/x");
  EXPECT_EQ(throttled.status.http_code, 429);
  EXPECT_EQ(throttled.status.reason, "TooManyRequests");
}

TEST(KubeClientTest, UnreachableServerIsATransportError) {
  KubeConfig config;
  config.server = "http://127.0.0.1:1";
  KubeClient client(config);
  ApiResult result = client.Get("/api/v1/pods");
  EXPECT_EQ(result.status.http_code, 0);
  EXPECT_EQ(result.status.reason, "Transport");
  EXPECT_FALSE(result.status.message.empty());
}

TEST(EscapeQueryValueTest, EncodesReservedCharacters) {
  EXPECT_EQ(EscapeQueryValue("kubernetes.io/service-name=erp abap"),
            "kubernetes.io%2Fservice-name%3Derp%20abap");
  EXPECT_EQ(EscapeQueryValue("a-b_c.d~"), "a-b_c.d~");
}

}  // namespace
}  // namespace kwd::kube
