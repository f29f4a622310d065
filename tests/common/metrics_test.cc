#include "common/metrics.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

namespace kwd {
namespace {

TEST(MetricsTest, RendersCountersGaugesAndHistograms) {
  MetricsRegistry registry;
  registry.GetCounter("kwd_test_requests_total", "Requests.", {{"group", "erp/public"}}).Inc(3);
  registry.GetGauge("kwd_test_up", "Up.", {{"server", "a\"b"}}).Set(1);
  auto& h = registry.GetHistogram("kwd_test_duration_seconds", "Durations.", {}, {0.1, 1});
  h.Observe(0.05);
  h.Observe(0.5);
  h.Observe(5);
  std::string text = registry.Render();
  EXPECT_NE(text.find("# TYPE kwd_test_requests_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("kwd_test_requests_total{group=\"erp/public\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("kwd_test_up{server=\"a\\\"b\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("kwd_test_duration_seconds_bucket{le=\"0.10000000000000001\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("kwd_test_duration_seconds_bucket{le=\"1\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("kwd_test_duration_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("kwd_test_duration_seconds_count 3\n"), std::string::npos);
  EXPECT_NE(text.find("kwd_test_duration_seconds_sum 5.5"), std::string::npos);
}

TEST(MetricsTest, SameNameAndLabelsReturnTheSameObject) {
  MetricsRegistry registry;
  Counter& a = registry.GetCounter("kwd_x_total", "X.", {{"k", "v"}});
  Counter& b = registry.GetCounter("kwd_x_total", "X.", {{"k", "v"}});
  Counter& c = registry.GetCounter("kwd_x_total", "X.", {{"k", "w"}});
  EXPECT_EQ(&a, &b);
  EXPECT_NE(&a, &c);
}

TEST(MetricsTest, ConcurrentIncrementsAreNotLost) {
  MetricsRegistry registry;
  Counter& counter = registry.GetCounter("kwd_c_total", "C.");
  std::thread t1([&] {
    for (int i = 0; i < 100000; ++i) {
      counter.Inc();
    }
  });
  std::thread t2([&] {
    for (int i = 0; i < 100000; ++i) {
      counter.Inc();
    }
  });
  t1.join();
  t2.join();
  EXPECT_EQ(counter.Value(), 200000u);
}

TEST(MetricsTest, RetainDropsSeriesOfRemovedServers) {
  MetricsRegistry registry;
  registry.GetGauge("kwd_s_up", "Up.", {{"server", "a"}}).Set(1);
  registry.GetGauge("kwd_s_up", "Up.", {{"server", "b"}}).Set(1);
  registry.RetainLabelValues("kwd_s_up", "server", {"b"});
  std::string text = registry.Render();
  EXPECT_EQ(text.find("server=\"a\""), std::string::npos);
  EXPECT_NE(text.find("server=\"b\""), std::string::npos);
}

TEST(MetricsTest, CallbackGaugeIsReadAtScrapeTime) {
  MetricsRegistry registry;
  int size = 1;
  registry.AddCallbackGauge("kwd_table_entries", "Entries.", {}, [&] { return size; });
  size = 42;
  EXPECT_NE(registry.Render().find("kwd_table_entries 42\n"), std::string::npos);
}

TEST(MetricsTest, PromtoolAcceptsTheExposition) {
  MetricsRegistry registry;
  registry.GetCounter("kwd_proxy_requests_total", "Requests by group.", {{"group", "g"}}).Inc();
  registry.GetGauge("kwd_proxy_server_up", "1 when healthy.", {{"server", "s"}}).Set(1);
  registry.GetHistogram("kwd_proxy_request_duration_seconds", "Latency.", {{"group", "g"}})
      .Observe(0.002);
  std::string path = ::testing::TempDir() + "/metrics.txt";
  std::ofstream(path) << registry.Render();
  std::string command = "promtool check metrics < " + path + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buf[256];
  while (fgets(buf, sizeof buf, pipe) != nullptr) {
    output += buf;
  }
  int status = pclose(pipe);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(output, "") << output;
}

}  // namespace
}  // namespace kwd
