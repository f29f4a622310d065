#include "common/metrics.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/temp_path.h"

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
  EXPECT_NE(text.find("kwd_test_duration_seconds_bucket{le=\"0.1\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("kwd_test_duration_seconds_bucket{le=\"1\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("kwd_test_duration_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("kwd_test_duration_seconds_count 3\n"), std::string::npos);
  EXPECT_NE(text.find("kwd_test_duration_seconds_sum 5.5"), std::string::npos);
}

// Bucket bounds and values print as the shortest text that reads back as the
// same double (before: le="0.00025000000000000001").
TEST(MetricsTest, NumbersPrintInTheirShortestForm) {
  EXPECT_EQ(FormatMetricValue(0.00025), "0.00025");
  EXPECT_EQ(FormatMetricValue(0.1), "0.1");
  EXPECT_EQ(FormatMetricValue(10), "10");
  EXPECT_EQ(FormatMetricValue(0.0001), "0.0001");
  EXPECT_EQ(FormatMetricValue(1.5e-7), "1.5e-07");
  EXPECT_EQ(FormatMetricValue(123456789), "123456789");
  EXPECT_EQ(FormatMetricValue(-2.5), "-2.5");
  EXPECT_EQ(FormatMetricValue(1e300), "1e+300");
  EXPECT_EQ(FormatMetricValue(1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(std::stod(FormatMetricValue(1.0 / 3)), 1.0 / 3);
  MetricsRegistry registry;
  registry.GetHistogram("kwd_test_seconds", "Durations.");
  std::string text = registry.Render();
  EXPECT_NE(text.find("kwd_test_seconds_bucket{le=\"0.00025\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("kwd_test_seconds_bucket{le=\"0.0001\"} 0\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("00000"), std::string::npos) << text;
}

TEST(MetricsTest, StandardMetricsAreThere) {
  MetricsRegistry registry;
  RegisterStandardMetrics(registry);
  std::string text = registry.Render();
  for (const char* name : {"process_cpu_seconds_total ", "process_resident_memory_bytes ",
                           "process_virtual_memory_bytes ", "process_open_fds ", "process_max_fds ",
                           "process_start_time_seconds "}) {
    size_t at = text.find(std::string("\n") + name);
    ASSERT_NE(at, std::string::npos) << name << "\n" << text;
    EXPECT_GT(std::stod(text.substr(at + 1 + std::strlen(name))), 0) << name;
  }
  EXPECT_NE(text.find("# TYPE process_cpu_seconds_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("kwd_build_info{version=\""), std::string::npos) << text;
  EXPECT_NE(text.find("\",revision=\""), std::string::npos) << text;
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

// A registry with every kind of series, filled the same way for the golden
// rendering below.
void FillGoldenRegistry(MetricsRegistry& registry) {
  registry
      .GetCounter("kwd_g_requests_total", "Requests.", {{"group", "erp/public"}, {"code", "2xx"}})
      .Inc(7);
  registry
      .GetCounter("kwd_g_requests_total", "Requests.", {{"group", "a\"b\\c\nd"}, {"code", "5xx"}})
      .Inc(2);
  registry.GetCounter("kwd_g_requests_total", "Requests.", {{"group", "gone"}, {"code", "2xx"}})
      .Inc(1);
  registry.GetCounter("kwd_g_plain_total", "Plain.").Inc(0);
  registry.GetGauge("kwd_g_up", "Up.", {{"server", "s1"}}).Set(1);
  registry.GetGauge("kwd_g_up", "Up.", {{"server", "s2"}}).Set(0.25);
  registry.GetGauge("kwd_g_active", "Active.").Add(3);
  registry.GetGauge("kwd_g_active", "Active.").Add(-1);
  registry.AddCallbackGauge("kwd_g_callback", "Callback.", {{"k", "v"}}, [] { return 42.5; });
  registry.AddCallbackCounter("kwd_g_cb_total", "Callback counter.", {}, [] { return 9.0; });
  auto& h = registry.GetHistogram("kwd_g_duration_seconds", "Durations.", {{"group", "erp"}});
  h.Observe(0.00005);
  h.Observe(0.003);
  h.Observe(0.003);
  h.Observe(20);
  auto& bytes = registry.GetHistogram("kwd_g_bytes", "Bytes.", {}, {10, 100});
  bytes.Observe(5);
  bytes.Observe(50);
  registry.GetHistogram("kwd_g_duration_seconds", "Durations.", {{"group", "gone"}}).Observe(1);
  registry.RetainLabelValues("kwd_g_requests_total", "group", {"a\"b\\c\nd", "erp/public"});
  registry.RetainLabelValues("kwd_g_duration_seconds", "group", {"erp"});
}

// The exposition of FillGoldenRegistry, rendered by the registry before the
// per-worker slots: the text format must not change.
constexpr const char* kGoldenRendering =
    R"golden(# HELP kwd_g_active Active.
# TYPE kwd_g_active gauge
kwd_g_active 2
# HELP kwd_g_bytes Bytes.
# TYPE kwd_g_bytes histogram
kwd_g_bytes_bucket{le="10"} 1
kwd_g_bytes_bucket{le="100"} 2
kwd_g_bytes_bucket{le="+Inf"} 2
kwd_g_bytes_sum 55
kwd_g_bytes_count 2
# HELP kwd_g_callback Callback.
# TYPE kwd_g_callback gauge
kwd_g_callback{k="v"} 42.5
# HELP kwd_g_cb_total Callback counter.
# TYPE kwd_g_cb_total counter
kwd_g_cb_total 9
# HELP kwd_g_duration_seconds Durations.
# TYPE kwd_g_duration_seconds histogram
kwd_g_duration_seconds_bucket{group="erp",le="0.0001"} 1
kwd_g_duration_seconds_bucket{group="erp",le="0.00025"} 1
kwd_g_duration_seconds_bucket{group="erp",le="0.0005"} 1
kwd_g_duration_seconds_bucket{group="erp",le="0.001"} 1
kwd_g_duration_seconds_bucket{group="erp",le="0.0025"} 1
kwd_g_duration_seconds_bucket{group="erp",le="0.005"} 3
kwd_g_duration_seconds_bucket{group="erp",le="0.01"} 3
kwd_g_duration_seconds_bucket{group="erp",le="0.025"} 3
kwd_g_duration_seconds_bucket{group="erp",le="0.05"} 3
kwd_g_duration_seconds_bucket{group="erp",le="0.1"} 3
kwd_g_duration_seconds_bucket{group="erp",le="0.25"} 3
kwd_g_duration_seconds_bucket{group="erp",le="0.5"} 3
kwd_g_duration_seconds_bucket{group="erp",le="1"} 3
kwd_g_duration_seconds_bucket{group="erp",le="2.5"} 3
kwd_g_duration_seconds_bucket{group="erp",le="5"} 3
kwd_g_duration_seconds_bucket{group="erp",le="10"} 3
kwd_g_duration_seconds_bucket{group="erp",le="+Inf"} 4
kwd_g_duration_seconds_sum{group="erp"} 20.00605
kwd_g_duration_seconds_count{group="erp"} 4
# HELP kwd_g_plain_total Plain.
# TYPE kwd_g_plain_total counter
kwd_g_plain_total 0
# HELP kwd_g_requests_total Requests.
# TYPE kwd_g_requests_total counter
kwd_g_requests_total{group="a\"b\\c\nd",code="5xx"} 2
kwd_g_requests_total{group="erp/public",code="2xx"} 7
# HELP kwd_g_up Up.
# TYPE kwd_g_up gauge
kwd_g_up{server="s1"} 1
kwd_g_up{server="s2"} 0.25
)golden";

TEST(MetricsTest, RenderingMatchesTheGolden) {
  MetricsRegistry registry;
  FillGoldenRegistry(registry);
  EXPECT_EQ(registry.Render(), kGoldenRendering);
}

// Worker threads count into their own slots; the scrape sums them with what
// other threads added to the shared slot, exactly.
TEST(MetricsTest, PerWorkerSlotsAreSummedExactly) {
  MetricsRegistry registry;
  Counter& counter = registry.GetCounter("kwd_w_total", "W.", {{"group", "g"}});
  Gauge& active = registry.GetGauge("kwd_w_active", "Active.");
  Histogram& histogram = registry.GetHistogram("kwd_w_seconds", "S.", {}, {0.5, 1});
  constexpr int kWorkers = 4;
  constexpr int kShared = 2;
  constexpr uint64_t kPerThread = 100000;
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers + kShared; ++w) {
    threads.emplace_back([&, w] {
      if (w < kWorkers) {
        SetMetricsWorker(w);
      }
      for (uint64_t i = 0; i < kPerThread; ++i) {
        counter.Inc();
        histogram.Observe(i % 2 == 0 ? 0.25 : 0.75);
        active.Add(1);
      }
      for (uint64_t i = 0; i < kPerThread / 2; ++i) {
        active.Add(-1);
      }
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  constexpr uint64_t kTotal = kPerThread * (kWorkers + kShared);
  EXPECT_EQ(counter.Value(), kTotal);
  EXPECT_EQ(histogram.Count(), kTotal);
  EXPECT_EQ(histogram.CumulativeCounts(), (std::vector<uint64_t>{kTotal / 2, kTotal, kTotal}));
  EXPECT_DOUBLE_EQ(histogram.Sum(), 0.5 * static_cast<double>(kTotal));
  EXPECT_DOUBLE_EQ(active.Value(), static_cast<double>(kTotal / 2));
  std::string text = registry.Render();
  EXPECT_NE(text.find("kwd_w_total{group=\"g\"} " + std::to_string(kTotal) + "\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("kwd_w_seconds_count " + std::to_string(kTotal) + "\n"), std::string::npos);
  EXPECT_NE(text.find("kwd_w_active " + std::to_string(kTotal / 2) + "\n"), std::string::npos);
}

// Slots of a dropped series are reused zeroed: a new series starts at 0 even
// where a worker had counted into the old one.
TEST(MetricsTest, ReusedSlotsStartAtZero) {
  MetricsRegistry registry;
  {
    std::shared_ptr<Counter> old = registry.CounterPtr("kwd_r_total", "R.", {{"server", "a"}});
    std::thread([&] {
      SetMetricsWorker(1);
      old->Inc(5);
    }).join();
    old->Inc(2);
    EXPECT_EQ(old->Value(), 7u);
    registry.RetainLabelValues("kwd_r_total", "server", {});
    EXPECT_EQ(old->Value(), 7u);  // the holder still counts
  }
  for (int i = 0; i < 8; ++i) {
    Counter& fresh =
        registry.GetCounter("kwd_r_total", "R.", {{"server", "b" + std::to_string(i)}});
    EXPECT_EQ(fresh.Value(), 0u);
  }
  std::shared_ptr<Histogram> h = registry.HistogramPtr("kwd_r_seconds", "R.", {}, {1});
  std::thread([&] {
    SetMetricsWorker(0);
    h->Observe(0.5);
  }).join();
  registry.RetainLabelValues("kwd_r_seconds", "server", {});  // no such label: kept
  EXPECT_EQ(h->Count(), 1u);
}

// RetainLabelValues matches label values however they are escaped.
TEST(MetricsTest, RetainMatchesEscapedValues) {
  MetricsRegistry registry;
  registry.GetCounter("kwd_e_total", "E.", {{"a", "x,y=\"z\""}, {"server", "q\"\\"}}).Inc();
  registry.GetCounter("kwd_e_total", "E.", {{"a", "1"}, {"server", "drop"}}).Inc();
  registry.RetainLabelValues("kwd_e_total", "server", {"q\"\\"});
  std::string text = registry.Render();
  EXPECT_NE(text.find("kwd_e_total{a=\"x,y=\\\"z\\\"\",server=\"q\\\"\\\\\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("drop"), std::string::npos) << text;
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

// What `promtool check metrics` says about `exposition` (empty: all good),
// or "exit N: ..." when it fails.
std::string PromtoolCheck(const std::string& exposition) {
  std::string path = testing::UniqueTempPath("metrics.txt");
  std::ofstream(path) << exposition;
  std::string command = "promtool check metrics < " + path + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    return "popen failed";
  }
  std::string output;
  char buf[256];
  while (fgets(buf, sizeof buf, pipe) != nullptr) {
    output += buf;
  }
  int status = pclose(pipe);
  std::remove(path.c_str());
  return status == 0 ? output : "exit " + std::to_string(status) + ": " + output;
}

TEST(MetricsTest, PromtoolAcceptsTheExposition) {
  MetricsRegistry registry;
  registry.GetCounter("kwd_proxy_requests_total", "Requests by group.", {{"group", "g"}}).Inc();
  registry.GetGauge("kwd_proxy_server_up", "1 when healthy.", {{"server", "s"}}).Set(1);
  registry.GetHistogram("kwd_proxy_request_duration_seconds", "Latency.", {{"group", "g"}})
      .Observe(0.002);
  RegisterStandardMetrics(registry);
  EXPECT_EQ(PromtoolCheck(registry.Render()), "");
}

// A label value from an object (a server or group name) can hold anything a
// snapshot file or an annotation held. The exposition must stay one sample
// per line, parseable, and UTF-8: \\, \" and \n are the format's escapes; other
// control characters and bytes that are not UTF-8 are written as the text
// \\xNN (an escaped backslash, then xNN), which every parser reads back as is.
TEST(MetricsTest, LabelValuesAreEscapedPerTheTextFormat) {
  EXPECT_EQ(EscapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  EXPECT_EQ(EscapeLabelValue("A\r\nSet-Cookie: x"), "A\\\\x0d\\nSet-Cookie: x");
  EXPECT_EQ(EscapeLabelValue(std::string("t\tz\x7f\x00", 5)), "t\\\\x09z\\\\x7f\\\\x00");
  EXPECT_EQ(EscapeLabelValue("caf\xc3\xa9 \xff\xc3"), "caf\xc3\xa9 \\\\xff\\\\xc3");
  EXPECT_EQ(EscapeLabelValue("\xed\xa0\x80"), "\\\\xed\\\\xa0\\\\x80");  // a surrogate
  EXPECT_EQ(EscapeLabelValue("\xc0\xaf"), "\\\\xc0\\\\xaf");             // overlong "/"
  EXPECT_EQ(EscapeLabelValue("\xf0\x9f\x98\x80"), "\xf0\x9f\x98\x80");   // U+1F600

  MetricsRegistry registry;
  const std::string hostile = "B\r\nSet-Cookie: evil=1\n# TYPE x counter\r\xff\"\\";
  registry.GetCounter("kwd_proxy_requests_total", "Requests.", {{"server", hostile}}).Inc();
  registry.GetGauge("kwd_proxy_server_up", "Up.", {{"server", hostile}}).Set(1);
  registry.GetHistogram("kwd_proxy_request_duration_seconds", "Latency.", {{"server", hostile}})
      .Observe(0.002);
  std::string text = registry.Render();
  EXPECT_EQ(text.find('\r'), std::string::npos) << text;
  std::istringstream lines(text);
  std::string line;
  int samples = 0;
  while (std::getline(lines, line)) {
    ASSERT_TRUE(line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0 ||
                line.rfind("kwd_proxy_", 0) == 0)
        << line;
    samples += line[0] == '#' ? 0 : 1;
  }
  EXPECT_EQ(samples, 2 + 16 + 1 + 2);  // counter, gauge, buckets, +Inf, sum and count
  EXPECT_EQ(PromtoolCheck(text), "");
}

}  // namespace
}  // namespace kwd
