// PollOnce against the fake message server: the fetch, the keep-last-good
// rules and the group information, over real HTTP on loopback.

#include "controller/sapsystem/poller.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/fake_sap/fake_message_server_process.h"
#include "tests/support/process.h"
#include "tests/support/temp_path.h"
#include "tests/support/test_pki.h"

namespace kwd::sapsystem {
namespace {

using nlohmann::json;
using testing::FakeMessageServer;

std::vector<std::string> Loopback(const std::string& host) {
  return host == "127.0.0.1" ? std::vector<std::string>{"127.0.0.1"} : std::vector<std::string>{};
}

class PollerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_ = std::make_unique<FakeMessageServer>(json{
        {"instances",
         {{{"name", "a_FAK_00"}, {"lb", 3}, {"serve", true}},
          {{"name", "b_FAK_01"}, {"http", 8001}, {"https", 44301}, {"lb", 1}},
          {{"name", "j_FAK_02"}, {"http", 50000}, {"stack", "java"}, {"lb", 2}}}},
        {"groups", {{"PUBLIC", {"a_FAK_00", "b_FAK_01"}}, {"SPACE", {"a_FAK_00"}}}}});
    config_.host = "127.0.0.1";
    config_.port = fake_->port();
    config_.server_list_path = std::string(kDefaultServerListPath);
    config_.group_info_path = std::string(kDefaultGroupInfoPath);
    config_.url_map_path = std::string(kDefaultUrlMapPath);
    // The fake's application servers are on loopback: listed explicitly.
    std::string error;
    config_.allowed_networks = {*ParseCidr("127.0.0.0/8", &error)};
  }

  PollOutcome Poll(const model::SapServerList& previous,
                   std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    return PollOnce(config_, previous, timeout, Loopback);
  }

  std::unique_ptr<FakeMessageServer> fake_;
  SapSystemConfig config_;
};

TEST_F(PollerTest, ListsInstancesWithPortsAndCapacities) {
  PollOutcome outcome = Poll({});
  ASSERT_FALSE(outcome.failed) << outcome.list.message;
  const model::SapServerList& list = outcome.list;
  EXPECT_TRUE(list.has_list);
  EXPECT_TRUE(list.refreshed);
  EXPECT_EQ(list.reason, "Refreshed");
  ASSERT_EQ(list.instances.size(), 3u);
  EXPECT_EQ(list.instances[0].name, "a_FAK_00");
  EXPECT_EQ(list.instances[0].http_port, fake_->AppPort("a_FAK_00"));
  EXPECT_EQ(list.instances[0].capacity, 3u);
  EXPECT_EQ(list.instances[1].https_port, 44301u);
  EXPECT_TRUE(list.instances[2].java);
  EXPECT_FALSE(list.has_groups);  // logonGroups false
  EXPECT_NE(list.message.find("3 instances from http://127.0.0.1:"), std::string::npos)
      << list.message;
}

TEST_F(PollerTest, LfAndSpacesToo) {
  fake_->Set({{"line_ending", "lf"}, {"separator", "space"}, {"blank_between", false},
              {"vhost_twins", false}});
  PollOutcome outcome = Poll({});
  ASSERT_FALSE(outcome.failed) << outcome.list.message;
  EXPECT_EQ(outcome.list.instances.size(), 3u);
  EXPECT_EQ(outcome.list.instances[0].capacity, 3u);
}

TEST_F(PollerTest, FailuresKeepTheLastGoodList) {
  PollOutcome good = Poll({});
  ASSERT_FALSE(good.failed);
  const std::pair<json, std::string> failures[] = {
      {{{"mode", "status"}, {"status", 503}}, "HTTPError"},
      {{{"mode", "garbage"}}, "InvalidServerList"},
      {{{"mode", "binary"}}, "InvalidServerList"},
      {{{"mode", "huge"}}, "InvalidServerList"},
      {{{"mode", "empty"}}, "EmptyList"},
      {{{"mode", "raw"}, {"raw", "version 1.2\nbad\x01_X_00\nHTTP\t127.0.0.1\t1\t\n"}},
       "EmptyList"},
      {{{"mode", "timeout"}, {"delay_seconds", 3}}, "Timeout"},
  };
  for (const auto& [state, reason] : failures) {
    fake_->Set(state);
    PollOutcome outcome =
        Poll(good.list, reason == "Timeout" ? std::chrono::milliseconds(500) : std::chrono::seconds(5));
    EXPECT_TRUE(outcome.failed) << reason;
    EXPECT_FALSE(outcome.list.refreshed) << reason;
    EXPECT_EQ(outcome.list.reason, reason) << outcome.list.message;
    EXPECT_EQ(outcome.list.instances, good.list.instances) << reason;
    EXPECT_NE(outcome.list.message.find("keeping the last good list of 3 instances"),
              std::string::npos)
        << outcome.list.message;
    for (char c : outcome.list.message) {
      EXPECT_FALSE(static_cast<unsigned char>(c) < 0x20) << outcome.list.message;
    }
  }
  // The same failure twice gives the same message: no recompile per poll.
  fake_->Set({{"mode", "status"}});
  EXPECT_EQ(Poll(good.list).list, Poll(good.list).list);
  // Recovery applies the new list.
  fake_->Set({{"mode", "ok"}, {"instances", {{{"name", "n_FAK_09"}, {"http", 8009}}}}});
  PollOutcome recovered = Poll(good.list);
  ASSERT_FALSE(recovered.failed) << recovered.list.message;
  ASSERT_EQ(recovered.list.instances.size(), 1u);
  EXPECT_EQ(recovered.list.instances[0].name, "n_FAK_09");
}

TEST_F(PollerTest, UnreachableMessageServer) {
  config_.port = 1;  // nothing listens on port 1 on loopback
  PollOutcome outcome = Poll({});
  EXPECT_TRUE(outcome.failed);
  EXPECT_EQ(outcome.list.reason, "Unreachable");
  EXPECT_FALSE(outcome.list.has_list);
}

TEST_F(PollerTest, LogonGroupsFromAnApplicationServer) {
  config_.logon_groups = true;
  PollOutcome outcome = Poll({});
  ASSERT_FALSE(outcome.failed) << outcome.list.message;
  EXPECT_TRUE(outcome.list.has_groups);
  EXPECT_EQ(outcome.list.logon_groups.at("PUBLIC"),
            (std::vector<std::string>{"a_FAK_00", "b_FAK_01"}));
  EXPECT_EQ(outcome.list.logon_groups.at("SPACE"), (std::vector<std::string>{"a_FAK_00"}));

  // Group information fails: the list is applied, the groups stay, Refreshed=False.
  fake_->Set({{"groups_mode", "garbage"}});
  PollOutcome failed = Poll(outcome.list);
  EXPECT_TRUE(failed.failed);
  EXPECT_EQ(failed.list.reason, "GroupInfoFailed");
  EXPECT_EQ(failed.list.logon_groups, outcome.list.logon_groups);
  EXPECT_EQ(failed.list.instances.size(), 3u);
}

TEST_F(PollerTest, UrlMapFromAnApplicationServer) {
  config_.url_map = true;
  fake_->Set({{"url_prefixes",
               {{{"prefix", "/sap/bc/gui/sap/its/webgui/"}, {"group", "PUBLIC"}, {"stack", "ABAP"}},
                {{"prefix", "/irj~PORTAL/"}, {"stack", "J2EE"}},
                {{"prefix", "/bad path/"}}}}});
  PollOutcome outcome = Poll({});
  ASSERT_FALSE(outcome.failed) << outcome.list.message;
  EXPECT_FALSE(outcome.list.has_groups);  // logonGroups false
  ASSERT_TRUE(outcome.list.has_url_map);
  EXPECT_EQ(outcome.list.url_prefixes,
            (std::vector<model::SapUrlPrefix>{{"/irj~portal/", "", true},
                                              {"/sap/bc/gui/sap/its/webgui/", "PUBLIC", false}}));
  EXPECT_NE(outcome.list.message.find("2 URL prefixes from http://127.0.0.1:"), std::string::npos)
      << outcome.list.message;
  EXPECT_NE(outcome.list.message.find("1 entry skipped: line 4: prefix \"/bad path/\""),
            std::string::npos)
      << outcome.list.message;
  EXPECT_EQ(outcome.skips.counts[SkipReason::kInvalidPrefix], 1u);

  // The URL map fails: the list is applied, the prefixes stay, Refreshed=False.
  for (std::string mode : {"garbage", "status"}) {
    fake_->Set({{"url_map_mode", mode}});
    PollOutcome failed = Poll(outcome.list);
    EXPECT_TRUE(failed.failed) << mode;
    EXPECT_EQ(failed.list.reason, "UrlMapFailed") << mode;
    EXPECT_EQ(failed.list.url_prefixes, outcome.list.url_prefixes) << mode;
    EXPECT_NE(failed.list.message.find("keeping the last good URL prefixes"), std::string::npos)
        << failed.list.message;
    EXPECT_EQ(failed.list.instances.size(), 3u);
  }

  // Recovery with a changed map.
  fake_->Set({{"url_map_mode", "ok"}, {"url_prefixes", {{{"prefix", "/sap/opu/odata/"}}}}});
  PollOutcome recovered = Poll(outcome.list);
  ASSERT_FALSE(recovered.failed) << recovered.list.message;
  EXPECT_EQ(recovered.list.url_prefixes,
            (std::vector<model::SapUrlPrefix>{{"/sap/opu/odata/", "", false}}));
}

// Issue 23 item 2: without spec.allowedNetworks naming loopback, a list
// of loopback instances gives no server, and the controller does not fetch
// the group or URL-map feeds from them either.
TEST_F(PollerTest, LoopbackInstancesAreRefusedWithoutAllowedNetworks) {
  config_.allowed_networks.clear();
  config_.logon_groups = true;
  config_.url_map = true;
  PollOutcome outcome = Poll({});
  EXPECT_TRUE(outcome.list.instances.empty());
  EXPECT_EQ(outcome.skips.counts[SkipReason::kRefusedAddress], 3u);
  EXPECT_NE(outcome.list.message.find(
                "instance \"a_FAK_00\": host \"127.0.0.1\": address \"127.0.0.1\" refused: "
                "loopback address, not in spec.allowedNetworks"),
            std::string::npos)
      << outcome.list.message;
  EXPECT_TRUE(fake_->AppRequests().empty()) << fake_->AppRequests().dump();

  // An allowedNetworks that does not hold loopback refuses it too.
  std::string error;
  config_.allowed_networks = {*ParseCidr("10.0.0.0/8", &error)};
  outcome = Poll({});
  EXPECT_TRUE(outcome.list.instances.empty());
  EXPECT_TRUE(fake_->AppRequests().empty());

  // Listing it lets them in, and the feeds come from them.
  config_.allowed_networks.push_back(*ParseCidr("127.0.0.0/8", &error));
  outcome = Poll({});
  ASSERT_FALSE(outcome.failed) << outcome.list.message;
  EXPECT_EQ(outcome.list.instances.size(), 3u);
  EXPECT_FALSE(fake_->AppRequests().empty());
}

// A narrowed allowedNetworks also applies to the last good list kept when
// the poll fails: it is not a way to keep sending traffic outside it.
TEST_F(PollerTest, NarrowedAllowedNetworksApplyToTheKeptList) {
  PollOutcome good = Poll({});
  ASSERT_EQ(good.list.instances.size(), 3u);
  std::string error;
  config_.allowed_networks = {*ParseCidr("10.0.0.0/8", &error)};
  for (json state : {json{{"mode", "status"}}, json{{"mode", "ok"}}}) {
    fake_->Set(state);
    PollOutcome outcome = Poll(good.list);
    EXPECT_TRUE(outcome.list.instances.empty()) << state.dump() << " " << outcome.list.message;
  }
}

// The controller's own addresses are refused even inside allowedNetworks.
TEST_F(PollerTest, OwnAddressesAreRefused) {
  fake_->Set({{"instances", {{{"name", "me_FAK_00"}, {"host", "10.0.0.9"}, {"http", 8000}},
                             {{"name", "ok_FAK_01"}, {"host", "10.0.0.8"}, {"http", 8000}}}}});
  std::string error;
  config_.allowed_networks = {*ParseCidr("10.0.0.0/8", &error)};
  PollOutcome outcome =
      PollOnce(config_, {}, std::chrono::seconds(5),
               [](const std::string& host) { return std::vector<std::string>{host}; },
               {*ParseIpAddress("10.0.0.9")});
  ASSERT_EQ(outcome.list.instances.size(), 1u);
  EXPECT_EQ(outcome.list.instances[0].name, "ok_FAK_01");
  EXPECT_NE(outcome.list.message.find("refused: an address of the controller or of a connected "
                                      "proxy"),
            std::string::npos)
      << outcome.list.message;
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Issue 23 item 6: with the message server reached over HTTPS, the logon
// groups and the URL map come over HTTPS too (verified with the same CA),
// even from instances that also have an HTTP port.
TEST(PollerTlsTest, FeedsFollowTheMessageServerOverHttps) {
  const std::string pki = kwd::testing::UniqueTempPath("sap_pki");
  std::filesystem::create_directories(pki);
  std::string error;
  ASSERT_TRUE(kwd::testing::MakeTestPki(pki, &error)) << error;
  FakeMessageServer fake(json{{"instances",
                               {{{"name", "a_FAK_00"}, {"lb", 3}, {"serve", true}},
                                {{"name", "b_FAK_01"}, {"lb", 1}, {"serve", true}}}},
                              {"groups", {{"PUBLIC", {"a_FAK_00", "b_FAK_01"}}}},
                              {"url_prefixes", {{{"prefix", "/sap/bc/gui/"}}}}},
                         {},
                         {"--tls-cert", pki + "/server.pem", "--tls-key",
                          pki + "/server.key"});
  SapSystemConfig config;
  config.host = "localhost";
  config.port = fake.TlsPort();
  config.https = true;
  config.ca_bundle = ReadFile(pki + "/ca.pem");
  config.server_list_path = std::string(kDefaultServerListPath);
  config.group_info_path = std::string(kDefaultGroupInfoPath);
  config.url_map_path = std::string(kDefaultUrlMapPath);
  config.logon_groups = true;
  config.url_map = true;
  config.allowed_networks = {*ParseCidr("127.0.0.0/8", &error)};
  // The list names the hosts "127.0.0.1": the certificate holds that IP.
  PollOutcome outcome = PollOnce(config, {}, std::chrono::seconds(5), Loopback);
  ASSERT_FALSE(outcome.failed) << outcome.list.message;
  ASSERT_EQ(outcome.list.instances.size(), 2u);
  EXPECT_NE(outcome.list.instances[0].http_port, 0u);  // both ports listed
  EXPECT_NE(outcome.list.instances[0].https_port, 0u);
  EXPECT_TRUE(outcome.list.has_groups);
  EXPECT_TRUE(outcome.list.has_url_map);
  json requests = fake.AppRequests();
  ASSERT_FALSE(requests.empty());
  for (const json& request : requests) {
    EXPECT_EQ(request["scheme"], "https") << requests.dump();
  }
  EXPECT_NE(outcome.list.message.find("logon groups from https://127.0.0.1:"), std::string::npos)
      << outcome.list.message;

  // Another CA: nothing is trusted, and nothing falls back to plain HTTP.
  config.ca_bundle = ReadFile(pki + "/other-ca.pem");
  PollOutcome untrusted = PollOnce(config, outcome.list, std::chrono::seconds(5), Loopback);
  EXPECT_TRUE(untrusted.failed);
  EXPECT_EQ(untrusted.list.instances, outcome.list.instances);
  for (const json& request : fake.AppRequests()) {
    EXPECT_EQ(request["scheme"], "https") << fake.AppRequests().dump();
  }

  // Instances with only an HTTP port: nothing to ask over HTTPS.
  config.ca_bundle = ReadFile(pki + "/ca.pem");
  fake.Set({{"instances", {{{"name", "p_FAK_02"}, {"http", 8002}}}}});
  PollOutcome plain_only = PollOnce(config, {}, std::chrono::seconds(5), Loopback);
  EXPECT_TRUE(plain_only.failed);
  EXPECT_EQ(plain_only.list.reason, "GroupInfoFailed");
  EXPECT_NE(plain_only.list.message.find("no instance with an HTTPS port to ask"),
            std::string::npos)
      << plain_only.list.message;
}

class NullSink final : public pipeline::SnapshotSink {
 public:
  void Publish(std::shared_ptr<const compile::CompileResult>) override {}
};

// How many times the fast system's message server was asked within 4.5 s,
// with two slow message servers (3 s per answer) polled by `workers`.
std::size_t FastPollsBesideSlowOnes(int workers) {
  const json slow_state = {{"mode", "timeout"},
                           {"delay_seconds", 3},
                           {"instances", {{{"name", "s_FAK_00"}, {"host", "10.0.0.2"}, {"http", 8000}}}}};
  FakeMessageServer slow1(slow_state);
  FakeMessageServer slow2(slow_state);
  FakeMessageServer fast(
      json{{"instances", {{{"name", "f_FAK_00"}, {"host", "10.0.0.1"}, {"http", 8000}}}}});
  NullSink sink;
  pipeline::PipelineOptions pipeline_options;
  pipeline_options.hold_off = std::chrono::milliseconds(0);
  pipeline_options.max_delay = std::chrono::milliseconds(0);
  pipeline::Pipeline pipeline(pipeline_options, sink, nullptr);
  PollerOptions options;
  options.timeout = std::chrono::seconds(5);
  options.resolve = [](const std::string& host) { return std::vector<std::string>{host}; };
  options.own_addresses = [] { return std::vector<IpAddress>{}; };
  options.max_concurrent_polls = workers;
  SapSystemPoller poller(pipeline, options, nullptr);
  auto system = [](const std::string& ns, uint16_t port) {
    model::SapSystem object;
    object.metadata.namespace_ = ns;
    object.metadata.name = "sys";
    object.spec.message_server.host = "127.0.0.1";
    object.spec.message_server.http_port = port;
    object.spec.refresh_interval_seconds = 1;
    return object;
  };
  poller.SetSystems({system("slow-a", slow1.port()), system("slow-b", slow2.port()),
                     system("fast", fast.port())});
  std::jthread pipeline_thread([&](std::stop_token stop) { pipeline.Run(stop); });
  std::jthread poll_thread([&](std::stop_token stop) { poller.Run(stop); });
  const auto start = std::chrono::steady_clock::now();
  kwd::testing::WaitFor([&] { return fast.ListRequests() >= 5; }, std::chrono::milliseconds(4500));
  std::size_t polls = fast.ListRequests();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(6));
  poll_thread.request_stop();
  return polls;
}

// Issue 23 item 8: SAP systems were polled one at a time, so two slow
// message servers stretched another namespace's 1 s refresh to 6 s and more.
TEST(PollerConcurrencyTest, SlowMessageServersDoNotDelayOtherSystems) {
  // Polled at 0, 1, 2, 3 and 4 s: at least four within 4.5 s.
  EXPECT_GE(FastPollsBesideSlowOnes(4), 4u);
}

// The bound holds: with one worker the slow systems take turns with it.
TEST(PollerConcurrencyTest, OneWorkerPollsOneSystemAtATime) {
  EXPECT_LE(FastPollsBesideSlowOnes(1), 2u);
}

}  // namespace
}  // namespace kwd::sapsystem
