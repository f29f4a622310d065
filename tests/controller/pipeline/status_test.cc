#include "controller/pipeline/status.h"

#include <gtest/gtest.h>

#include <deque>
#include <thread>

#include "tests/support/process.h"

namespace kwd::pipeline {
namespace {

using nlohmann::json;
using std::chrono::system_clock;

const system_clock::time_point kT1 = system_clock::from_time_t(1'800'000'000);
const system_clock::time_point kT2 = kT1 + std::chrono::hours(1);

compile::ObjectStatus GroupStatus(std::string accepted, std::string reason, int generation = 1,
                                  int ready = 2) {
  compile::ObjectStatus status;
  status.kind = "LogonGroup";
  status.namespace_ = "erp";
  status.name = "g";
  status.generation = generation;
  status.ready_servers = ready;
  status.conditions = {{"Accepted", accepted, reason, "message for " + reason, {}},
                       {"ResolvedRefs", "True", "ResolvedRefs", "2 servers", {}}};
  return status;
}

TEST(StatusToWriteTest, NoStatusYetWritesEverythingWithNow) {
  auto write = StatusToWrite(GroupStatus("True", "Accepted"), nullptr, kT1);
  ASSERT_TRUE(write.has_value());
  EXPECT_EQ((*write)["observedGeneration"], 1);
  EXPECT_EQ((*write)["readyServers"], 2);
  ASSERT_EQ((*write)["conditions"].size(), 2u);
  const json& accepted = (*write)["conditions"][0];
  EXPECT_EQ(accepted["type"], "Accepted");
  EXPECT_EQ(accepted["status"], "True");
  EXPECT_EQ(accepted["reason"], "Accepted");
  EXPECT_EQ(accepted["observedGeneration"], 1);
  EXPECT_EQ(accepted["lastTransitionTime"], FormatTime(kT1));
  EXPECT_EQ(FormatTime(kT1), "2027-01-15T08:00:00Z");
}

TEST(StatusToWriteTest, SameStatusWritesNothingEvenLater) {
  auto first = StatusToWrite(GroupStatus("True", "Accepted"), nullptr, kT1);
  ASSERT_TRUE(first.has_value());
  EXPECT_FALSE(StatusToWrite(GroupStatus("True", "Accepted"), &*first, kT2).has_value());
}

TEST(StatusToWriteTest, TransitionTimeKeptUnlessTheConditionStatusFlips) {
  struct Case {
    std::string name;
    compile::ObjectStatus next;
    std::string want_accepted_time;
  };
  std::vector<Case> cases = {
      {"new generation, same status", GroupStatus("True", "Accepted", 2), FormatTime(kT1)},
      {"ready servers change", GroupStatus("True", "Accepted", 1, 5), FormatTime(kT1)},
      {"flip to False", GroupStatus("False", "InvalidStrategy"), FormatTime(kT2)},
  };
  auto first = StatusToWrite(GroupStatus("True", "Accepted"), nullptr, kT1);
  ASSERT_TRUE(first.has_value());
  for (const Case& c : cases) {
    auto write = StatusToWrite(c.next, &*first, kT2);
    ASSERT_TRUE(write.has_value()) << c.name;
    EXPECT_EQ((*write)["conditions"][0]["lastTransitionTime"], c.want_accepted_time) << c.name;
    EXPECT_EQ((*write)["conditions"][1]["lastTransitionTime"], FormatTime(kT1)) << c.name;
    EXPECT_EQ((*write)["conditions"][0]["reason"], c.next.conditions[0].reason) << c.name;
  }
}

TEST(StatusToWriteTest, OtherConditionTypesAreKept) {
  auto first = StatusToWrite(GroupStatus("True", "Accepted"), nullptr, kT1);
  json observed = *first;
  json programmed = {{"type", "Programmed"}, {"status", "True"}, {"reason", "Programmed"}};
  observed["conditions"].push_back(programmed);
  EXPECT_FALSE(StatusToWrite(GroupStatus("True", "Accepted"), &observed, kT2).has_value());
  auto write = StatusToWrite(GroupStatus("False", "InvalidKind"), &observed, kT2);
  ASSERT_TRUE(write.has_value());
  ASSERT_EQ((*write)["conditions"].size(), 3u);
  EXPECT_EQ((*write)["conditions"][2], programmed);
}

TEST(StatusToWriteTest, UrlMappingHasNoReadyServers) {
  compile::ObjectStatus status = GroupStatus("True", "Accepted");
  status.kind = "UrlMapping";
  status.rules = 3;
  status.hosts = "*";
  auto write = StatusToWrite(status, nullptr, kT1);
  ASSERT_TRUE(write.has_value());
  EXPECT_FALSE(write->contains("readyServers"));
  // The printer columns Rules and Hosts read these.
  EXPECT_EQ((*write)["rules"], 3);
  EXPECT_EQ((*write)["hosts"], "*");
  EXPECT_EQ(ObjectPath("UrlMapping", "erp", "m"),
            "/apis/dispatch.kwd.io/v1alpha1/namespaces/erp/urlmappings/m");
}

// A KubeApi that answers status patches from a script and records them.
class ScriptedApi final : public kube::KubeApi {
 public:
  std::mutex mu;
  std::deque<long> codes;  // answers for the next patches; empty: 200
  std::vector<std::pair<std::string, json>> patches;

  kube::ApiResult MergePatchStatus(std::string_view path, const json& patch) override {
    std::lock_guard lock(mu);
    patches.emplace_back(std::string(path), patch);
    long code = 200;
    if (!codes.empty()) {
      code = codes.front();
      codes.pop_front();
    }
    return kube::ApiResult{{code, code == 200 ? "" : "Injected", ""}, json::object()};
  }
  size_t Count() {
    std::lock_guard lock(mu);
    return patches.size();
  }
  kube::ApiResult Get(std::string_view) override { return {}; }
  kube::ApiResult Post(std::string_view, const json&) override { return {}; }
  kube::ApiResult Put(std::string_view, const json&) override { return {}; }
  kube::ApiResult Patch(std::string_view, const json&, std::string_view) override { return {}; }
  kube::ApiResult Delete(std::string_view) override { return {}; }
  kube::ListResult List(std::string_view, std::string_view, std::stop_token) override { return {}; }
  kube::WatchResult Watch(std::string_view, const kube::WatchOptions&, const kube::WatchCallback&,
                          std::stop_token) override {
    return {};
  }
  kube::ApiResult GetLease(std::string_view, std::string_view, std::chrono::milliseconds) override {
    return {};
  }
  kube::ApiResult CreateLease(std::string_view, const json&, std::chrono::milliseconds) override {
    return {};
  }
  kube::ApiResult UpdateLease(std::string_view, std::string_view, const json&,
                              std::chrono::milliseconds) override {
    return {};
  }
};

StatusWriterOptions FastRetries() {
  StatusWriterOptions options;
  options.backoff = {std::chrono::milliseconds(1), std::chrono::milliseconds(5), 2.0, 0.0};
  return options;
}

StatusUpdate Update(const std::string& name, int generation) {
  return StatusUpdate{{"LogonGroup", "erp", name}, json{{"observedGeneration", generation}}};
}

TEST(StatusWriterTest, WritesOnlyWhileLeading) {
  ScriptedApi api;
  MetricsRegistry metrics;
  StatusWriter writer(api, FastRetries(), &metrics);
  std::jthread thread([&](std::stop_token stop) { writer.Run(stop); });
  writer.Submit({Update("g", 1)});
  EXPECT_EQ(writer.pending(), 0u);  // not leading: dropped
  writer.SetLeader(true);
  writer.Submit({Update("g", 1)});
  ASSERT_TRUE(testing::WaitFor([&] { return api.Count() == 1; }));
  EXPECT_EQ(api.patches[0].first, "/apis/dispatch.kwd.io/v1alpha1/namespaces/erp/logongroups/g");
  EXPECT_EQ(api.patches[0].second, (json{{"status", {{"observedGeneration", 1}}}}));
  // The same status again (the watch has not echoed the write yet): not rewritten.
  writer.Submit({Update("g", 1)});
  EXPECT_EQ(writer.pending(), 0u);
  writer.SetLeader(false);
  writer.Submit({Update("g", 2)});
  EXPECT_EQ(writer.pending(), 0u);
  EXPECT_EQ(api.Count(), 1u);
  EXPECT_NE(metrics.Render().find("kwd_controller_status_writes_total{result=\"ok\"} 1"),
            std::string::npos);
}

TEST(StatusWriterTest, RetriesErrorsAndDropsNotFound) {
  ScriptedApi api;
  api.codes = {500, 503, 200, 404};
  MetricsRegistry metrics;
  StatusWriter writer(api, FastRetries(), &metrics);
  std::jthread thread([&](std::stop_token stop) { writer.Run(stop); });
  writer.SetLeader(true);
  writer.Submit({Update("g", 1)});
  ASSERT_TRUE(testing::WaitFor([&] { return api.Count() == 3 && writer.pending() == 0; }));
  writer.Submit({Update("gone", 1)});
  ASSERT_TRUE(testing::WaitFor([&] { return api.Count() == 4 && writer.pending() == 0; }));
  std::string text = metrics.Render();
  EXPECT_NE(text.find("kwd_controller_status_writes_total{result=\"error\"} 2"), std::string::npos)
      << text;
  EXPECT_NE(text.find("kwd_controller_status_writes_total{result=\"not_found\"} 1"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace kwd::pipeline
