#include "controller/pipeline/pipeline.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "common/crypto.h"
#include "controller/pipeline/dir_watcher.h"
#include "tests/support/process.h"
#include "tests/support/test_pki.h"

namespace kwd::pipeline {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

class RecordingSink final : public SnapshotSink {
 public:
  void Publish(std::shared_ptr<const compile::CompileResult> result) override {
    std::lock_guard lock(mu_);
    published_.push_back(std::move(result));
  }
  size_t count() {
    std::lock_guard lock(mu_);
    return published_.size();
  }
  std::shared_ptr<const compile::CompileResult> last() {
    std::lock_guard lock(mu_);
    return published_.empty() ? nullptr : published_.back();
  }

 private:
  std::mutex mu_;
  std::vector<std::shared_ptr<const compile::CompileResult>> published_;
};

ObservedObject Decode(const json& object) {
  auto decoded = model::DecodeObject(object);
  EXPECT_TRUE(decoded.ok()) << decoded.error;
  return ObservedObject{std::move(*decoded.object), nullptr};
}

json Group(const std::string& name, int capacity) {
  return {{"apiVersion", "dispatch.kwd.io/v1alpha1"},
          {"kind", "LogonGroup"},
          {"metadata", {{"name", name}, {"namespace", "erp"}, {"generation", 1}}},
          {"spec",
           {{"backend",
             {{"staticServers",
               {{{"name", "s1"},
                 {"address", "10.0.0.1"},
                 {"port", 8000},
                 {"capacity", capacity}}}}}}}}};
}

json UnrelatedSlice(int ready) {
  json endpoint = {{"addresses", {"10.1.1.1"}}, {"conditions", {{"ready", ready != 0}}}};
  json metadata = {
      {"name", "x-1"}, {"namespace", "erp"}, {"labels", {{"kubernetes.io/service-name", "x"}}}};
  return {{"apiVersion", "discovery.k8s.io/v1"},
          {"kind", "EndpointSlice"},
          {"metadata", metadata},
          {"addressType", "IPv4"},
          {"endpoints", json::array({endpoint})}};
}

struct Running {
  RecordingSink sink;
  MetricsRegistry metrics;
  std::unique_ptr<Pipeline> pipeline;
  std::jthread thread;

  explicit Running(milliseconds hold_off, int sources = 1) {
    pipeline = std::make_unique<Pipeline>(PipelineOptions{hold_off, milliseconds(100), nullptr, ""},
                                          sink, &metrics);
    for (int i = 0; i < sources; ++i) {
      pipeline->AddSource("s" + std::to_string(i));
    }
    thread = std::jthread([this](std::stop_token stop) { pipeline->Run(stop); });
  }
};

TEST(PipelineTest, WaitsForEverySourceBeforeTheFirstCompile) {
  Running run(milliseconds(0), 2);
  run.pipeline->Upsert(Decode(Group("g", 1)));
  run.pipeline->Replace(0, "LogonGroup", "", {});
  // Drain the queue: a resync event is processed in order after the Replace.
  run.pipeline->ResyncStatus();
  EXPECT_FALSE(testing::WaitFor([&] { return run.sink.count() > 0; }, milliseconds(100)));
  EXPECT_FALSE(run.pipeline->ready());
  std::vector<ObservedObject> groups;
  groups.push_back(Decode(Group("g", 1)));
  run.pipeline->Replace(1, "LogonGroup", "erp", std::move(groups));
  ASSERT_TRUE(testing::WaitFor([&] { return run.pipeline->ready(); }));
  ASSERT_EQ(run.sink.count(), 1u);
  EXPECT_EQ(run.sink.last()->snapshot.groups_size(), 1);
  EXPECT_NE(run.metrics.Render().find("kwd_controller_snapshot_info{version=\"" +
                                      run.sink.last()->snapshot.version() + "\"} 1"),
            std::string::npos);
}

TEST(PipelineTest, BurstsCoalesceAndIrrelevantChangesDoNotCompile) {
  Running run(milliseconds(50));
  run.pipeline->Replace(0, "LogonGroup", "", {});
  ASSERT_TRUE(testing::WaitFor([&] { return run.pipeline->ready(); }));
  uint64_t before = run.pipeline->compiles();
  for (int i = 1; i <= 20; ++i) {
    run.pipeline->Upsert(Decode(Group("g", i)));
  }
  ASSERT_TRUE(testing::WaitFor([&] {
    auto last = run.sink.last();
    return last && last->snapshot.groups_size() == 1 &&
           last->snapshot.groups(0).servers(0).capacity() == 20;
  }));
  EXPECT_LE(run.pipeline->compiles() - before, 2u);
  uint64_t after_burst = run.pipeline->compiles();
  for (int i = 0; i < 10; ++i) {
    run.pipeline->Upsert(Decode(UnrelatedSlice(i % 2)));
  }
  run.pipeline->Upsert(Decode(Group("g", 20)));  // equal: no change either
  EXPECT_FALSE(
      testing::WaitFor([&] { return run.pipeline->compiles() != after_burst; }, milliseconds(200)));
}

TEST(PipelineTest, DeleteRemovesFromTheSnapshot) {
  Running run(milliseconds(0));
  std::vector<ObservedObject> groups;
  groups.push_back(Decode(Group("a", 1)));
  groups.push_back(Decode(Group("b", 1)));
  run.pipeline->Replace(0, "LogonGroup", "", std::move(groups));
  ASSERT_TRUE(testing::WaitFor(
      [&] { return run.sink.last() && run.sink.last()->snapshot.groups_size() == 2; }));
  run.pipeline->Delete({"LogonGroup", "erp", "a"});
  ASSERT_TRUE(testing::WaitFor(
      [&] { return run.sink.last() && run.sink.last()->snapshot.groups_size() == 1; }));
}

// `serve --class`: only objects of the pipeline's class reach the snapshot,
// from lists (Replace, ReplaceAll: the directory source) and from single
// updates; an object whose className changes away leaves it; objects without
// a class (EndpointSlices) are kept.
TEST(PipelineTest, OnlyObjectsOfItsClassEnterTheStore) {
  RecordingSink sink;
  PipelineOptions options{milliseconds(0), milliseconds(0), nullptr, "prod"};
  Pipeline pipeline(options, sink, nullptr);
  pipeline.AddSource("dir");
  std::jthread thread([&](std::stop_token stop) { pipeline.Run(stop); });
  auto classed = [](const std::string& name, const std::string& class_name) {
    json group = Group(name, 1);
    if (!class_name.empty()) {
      group["spec"]["className"] = class_name;
    }
    return Decode(group);
  };
  auto keys = [&] {
    std::vector<std::string> out;
    if (auto last = sink.last()) {
      for (const auto& group : last->snapshot.groups()) {
        out.push_back(group.key());
      }
    }
    return out;
  };
  std::vector<ObservedObject> objects;
  objects.push_back(classed("mine", "prod"));
  objects.push_back(classed("theirs", "qa"));
  objects.push_back(classed("classless", ""));
  objects.push_back(Decode(UnrelatedSlice(1)));
  pipeline.ReplaceAll(0, std::move(objects));
  ASSERT_TRUE(testing::WaitFor([&] { return keys() == std::vector<std::string>{"erp/mine"}; }));
  ASSERT_EQ(sink.last()->statuses.size(), 1u) << "no status for other classes";
  pipeline.Upsert(classed("theirs", "prod"));  // moved to this class
  ASSERT_TRUE(testing::WaitFor([&] {
    return keys() == std::vector<std::string>{"erp/mine", "erp/theirs"};
  }));
  pipeline.Upsert(classed("mine", "qa"));  // moved away
  ASSERT_TRUE(testing::WaitFor([&] { return keys() == std::vector<std::string>{"erp/theirs"}; }));
}

TEST(DirWatcherTest, PicksUpChangesAndKeepsTheLastGoodObjectsOnErrors) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("kwd-dirwatch-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto write = [&](const std::string& text) { std::ofstream(dir / "groups.yaml") << text; };
  auto group_yaml = [](const std::string& name) {
    return "apiVersion: dispatch.kwd.io/v1alpha1\nkind: LogonGroup\nmetadata: {name: " + name +
           ", namespace: erp}\nspec:\n  backend:\n    staticServers:\n"
           "      - {name: s1, address: 10.0.0.1, port: 8000}\n";
  };
  write(group_yaml("first"));
  RecordingSink sink;
  Pipeline pipeline(PipelineOptions{milliseconds(0), milliseconds(0), nullptr, ""}, sink, nullptr);
  DirWatcher watcher(dir, pipeline, milliseconds(20));
  std::jthread pipeline_thread([&](std::stop_token stop) { pipeline.Run(stop); });
  EXPECT_TRUE(watcher.PollOnce());
  EXPECT_FALSE(watcher.PollOnce());  // nothing changed
  auto has_group = [&](const std::string& key) {
    auto last = sink.last();
    return last && last->snapshot.groups_size() == 1 && last->snapshot.groups(0).key() == key;
  };
  ASSERT_TRUE(testing::WaitFor([&] { return has_group("erp/first"); }));

  write(group_yaml("second") + "# a longer file\n");
  EXPECT_TRUE(watcher.PollOnce());
  ASSERT_TRUE(testing::WaitFor([&] { return has_group("erp/second"); }));

  write("apiVersion: [unterminated\n");
  watcher.PollOnce();
  EXPECT_EQ(watcher.failed_reloads(), 1u);
  EXPECT_TRUE(has_group("erp/second"));

  // A file with an error keeps its last good objects while another file's
  // change goes through.
  std::ofstream(dir / "other.yaml") << group_yaml("third");
  EXPECT_TRUE(watcher.PollOnce());
  EXPECT_EQ(watcher.failed_reloads(), 2u);
  ASSERT_TRUE(testing::WaitFor([&] {
    auto last = sink.last();
    return last && last->snapshot.groups_size() == 2 &&
           last->snapshot.groups(0).key() == "erp/second" &&
           last->snapshot.groups(1).key() == "erp/third";
  }));
  // An unknown field is such an error too.
  write(group_yaml("second") + "  strategee: adaptive\n");
  watcher.PollOnce();
  EXPECT_EQ(watcher.failed_reloads(), 3u);
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(sink.last()->snapshot.groups_size(), 2);
  fs::remove_all(dir);
}

// A file rewritten in place is empty for a moment; the watcher must not
// publish that moment (it would withdraw every group from the proxies).
TEST(DirWatcherTest, WaitsForAFileRewrittenInPlaceToSettle) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("kwd-dirsettle-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto group_yaml = [](const std::string& name) {
    return "apiVersion: dispatch.kwd.io/v1alpha1\nkind: LogonGroup\nmetadata: {name: " + name +
           ", namespace: erp}\nspec:\n  backend:\n    staticServers:\n"
           "      - {name: s1, address: 10.0.0.1, port: 8000}\n";
  };
  std::ofstream(dir / "groups.yaml") << group_yaml("first");
  RecordingSink sink;
  Pipeline pipeline(PipelineOptions{milliseconds(0), milliseconds(0), nullptr, ""}, sink, nullptr);
  DirWatcher watcher(dir, pipeline, milliseconds(20), milliseconds(300));
  std::jthread pipeline_thread([&](std::stop_token stop) { pipeline.Run(stop); });
  auto has_group = [&](const std::string& key) {
    auto last = sink.last();
    return last && last->snapshot.groups_size() == 1 && last->snapshot.groups(0).key() == key;
  };
  ASSERT_TRUE(watcher.PollOnce());
  ASSERT_TRUE(testing::WaitFor([&] { return has_group("erp/first"); }));

  std::ofstream(dir / "groups.yaml").close();  // truncated: what an in-place rewrite starts with
  ASSERT_EQ(fs::file_size(dir / "groups.yaml"), 0u);
  std::jthread writer([&] {
    std::this_thread::sleep_for(milliseconds(50));
    std::ofstream(dir / "groups.yaml", std::ios::app) << group_yaml("second");
  });
  auto started = std::chrono::steady_clock::now();
  EXPECT_TRUE(watcher.PollOnce());
  EXPECT_GE(std::chrono::steady_clock::now() - started, milliseconds(300));
  writer.join();
  // The one reload read the finished file: the empty moment never compiled.
  EXPECT_TRUE(testing::WaitFor([&] { return has_group("erp/second"); }));
  EXPECT_EQ(watcher.reloads(), 2u);
  EXPECT_FALSE(watcher.PollOnce());
  fs::remove_all(dir);
}

// A certificate in the snapshot that expires is taken out by a compile at
// its expiry, with no object changing (the compile takes "now" as an input).
TEST(PipelineTest, ACertificateLeavesTheSnapshotWhenItExpires) {
  std::string cert;
  std::string key;
  ASSERT_TRUE(testing::MakeShortLivedPair("a.example", 2, &cert, &key));
  Running running(milliseconds(1));
  json mapping = {{"apiVersion", "dispatch.kwd.io/v1alpha1"},
                  {"kind", "UrlMapping"},
                  {"metadata", {{"name", "erp"}, {"namespace", "erp"}, {"generation", 1}}},
                  {"spec",
                   {{"hosts", {"a.example"}},
                    {"tls", {{{"hosts", {"a.example"}}, {"secretName", "erp-tls"}}}}}}};
  json secret = {{"apiVersion", "v1"},
                 {"kind", "Secret"},
                 {"metadata", {{"name", "erp-tls"}, {"namespace", "erp"}}},
                 {"type", "kubernetes.io/tls"},
                 {"data", {{"tls.crt", Base64Encode(cert)}, {"tls.key", Base64Encode(key)}}}};
  std::vector<ObservedObject> objects;
  objects.push_back(Decode(mapping));
  objects.push_back(Decode(secret));
  running.pipeline->ReplaceAll(0, std::move(objects));
  ASSERT_TRUE(testing::WaitFor([&] {
    auto last = running.sink.last();
    return last != nullptr && last->snapshot.certificates_size() == 1;
  }));
  EXPECT_GT(running.sink.last()->certificates_expire, 0);
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        auto last = running.sink.last();
        return last != nullptr && last->snapshot.certificates_size() == 0;
      },
      milliseconds(10'000)));
  const compile::ObjectStatus* status = nullptr;
  for (const auto& s : running.sink.last()->statuses) {
    status = s.kind == "UrlMapping" ? &s : status;
  }
  ASSERT_NE(status, nullptr);
  EXPECT_EQ(status->Find(compile::kResolvedRefs)->reason, "InvalidCertificate");
}

}  // namespace
}  // namespace kwd::pipeline
