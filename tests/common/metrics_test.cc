#include "common/metrics.h"

#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "common/metrics_http.h"
#include "gtest/gtest.h"
#include "tests/common/http_get.h"
#include "tests/common/prometheus_text.h"
#include "tests/testing/descriptors.h"

namespace kvfold::metrics {
namespace {

using kvfold::testing::HttpBody;
using kvfold::testing::HttpGet;
using kvfold::testing::ParsePrometheusText;
using kvfold::testing::ProcessCpuSeconds;
using kvfold::testing::PromPage;
using kvfold::testing::ScopedDescriptorLimit;
using kvfold::testing::ScopedThreadLimit;
using kvfold::testing::SilentConnections;

TEST(MetricsRegistryTest, RendersHelpTypeAndLabelledCounters) {
  Registry r;
  r.GetCounter("kvfold_t_total", "Things.", {{"code", "OK"}}).Increment(3);
  r.GetCounter("kvfold_t_total", "Things.", {{"code", "NOT_FOUND"}}).Increment();
  r.GetGauge("kvfold_g", "A gauge.").Set(0.25);
  const std::string text = r.Render();
  EXPECT_NE(text.find("# HELP kvfold_t_total Things.\n# TYPE kvfold_t_total counter\n"),
            std::string::npos)
      << text;
  const PromPage page = ParsePrometheusText(text);
  EXPECT_TRUE(page.errors.empty()) << page.errors[0];
  EXPECT_EQ(page.Value("kvfold_t_total", {{"code", "OK"}}), 3);
  EXPECT_EQ(page.Value("kvfold_t_total", {{"code", "NOT_FOUND"}}), 1);
  EXPECT_EQ(page.Value("kvfold_g"), 0.25);
  EXPECT_EQ(page.type.at("kvfold_g"), "gauge");
}

TEST(MetricsRegistryTest, SameNameAndLabelsIsTheSameSeries) {
  Registry r;
  Counter& a = r.GetCounter("kvfold_c_total", "C.", {{"k", "v"}});
  Counter& b = r.GetCounter("kvfold_c_total", "C.", {{"k", "v"}});
  EXPECT_EQ(&a, &b);
  a.Increment(2);
  b.Increment(-5);  // ignored: counters never go down
  EXPECT_EQ(b.value(), 2);
}

TEST(MetricsRegistryTest, HistogramBucketsAreCumulativeWithInfEqualToCount) {
  Registry r;
  Histogram& h = r.GetHistogram("kvfold_h_seconds", "Latency.", {0.01, 0.1, 1});
  for (double v : {0.005, 0.01, 0.05, 0.5, 7.0}) h.Observe(v);
  h.ObserveMany(0.2, 3);
  const PromPage page = ParsePrometheusText(r.Render());
  ASSERT_TRUE(page.errors.empty()) << page.errors[0];
  EXPECT_EQ(page.Value("kvfold_h_seconds_bucket", {{"le", "0.01"}}), 2);  // le is inclusive
  EXPECT_EQ(page.Value("kvfold_h_seconds_bucket", {{"le", "0.1"}}), 3);
  EXPECT_EQ(page.Value("kvfold_h_seconds_bucket", {{"le", "1"}}), 7);
  EXPECT_EQ(page.Value("kvfold_h_seconds_bucket", {{"le", "+Inf"}}), 8);
  EXPECT_EQ(page.Value("kvfold_h_seconds_count"), 8);
  EXPECT_NEAR(page.Value("kvfold_h_seconds_sum"), 0.005 + 0.01 + 0.05 + 0.5 + 7 + 0.6, 1e-9);
}

TEST(MetricsRegistryTest, LabelValuesAreEscaped) {
  Registry r;
  r.GetCounter("kvfold_e_total", "Escapes \\ and\nnewlines.", {{"v", "a\"b\\c\nd"}}).Increment();
  const std::string text = r.Render();
  EXPECT_NE(text.find("kvfold_e_total{v=\"a\\\"b\\\\c\\nd\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("# HELP kvfold_e_total Escapes \\\\ and\\nnewlines."), std::string::npos);
  const PromPage page = ParsePrometheusText(text);
  EXPECT_TRUE(page.errors.empty());
  EXPECT_EQ(page.Value("kvfold_e_total", {{"v", "a\"b\\c\nd"}}), 1);
}

TEST(MetricsRegistryTest, CallbackSeriesAreReadAtRender) {
  Registry r;
  double pool = 0.5;
  r.AddCallbackGauge("kvfold_pool", "Pool.", [&pool] { return pool; });
  r.AddCallbackCounter("kvfold_steps_total", "Steps.", [] { return 41.0; });
  EXPECT_EQ(ParsePrometheusText(r.Render()).Value("kvfold_pool"), 0.5);
  pool = 0.75;
  const PromPage page = ParsePrometheusText(r.Render());
  EXPECT_EQ(page.Value("kvfold_pool"), 0.75);
  EXPECT_EQ(page.Value("kvfold_steps_total"), 41);
  EXPECT_EQ(page.type.at("kvfold_steps_total"), "counter");
}

TEST(MetricsRegistryTest, ConcurrentIncrementsAreAllCounted) {
  Registry r;
  Counter& c = r.GetCounter("kvfold_conc_total", "C.");
  Histogram& h = r.GetHistogram("kvfold_conc_seconds", "H.", {1});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.Increment();
        h.Observe(0.5);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.value(), 40000);
  EXPECT_EQ(h.count(), 40000u);
  EXPECT_EQ(h.CumulativeCounts()[0], 40000u);
}

TEST(MetricsRegistryTest, ValueFormatting) {
  EXPECT_EQ(FormatValue(3), "3");
  EXPECT_EQ(FormatValue(0.005), "0.005");
  EXPECT_EQ(FormatValue(INFINITY), "+Inf");
  EXPECT_EQ(FormatValue(NAN), "NaN");
  EXPECT_EQ(ExponentialBuckets(0.001, 2, 3), (std::vector<double>{0.001, 0.002, 0.004}));
}

TEST(MetricsRegistryDeathTest, TypeClashIsAProgrammingError) {
  Registry r;
  r.GetCounter("kvfold_x", "X.");
  EXPECT_DEATH(r.GetGauge("kvfold_x", "X."), "another type");
  EXPECT_DEATH(r.GetCounter("bad name", "X."), "bad metric name");
}

TEST(MetricsHttpServerTest, ServesTheRegistryOnTheConfiguredAddress) {
  Registry r;
  r.GetCounter("kvfold_http_total", "Scrapes.").Increment(7);
  auto server = MetricsHttpServer::Start("127.0.0.1:0", [&r] { return r.Render(); });
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  EXPECT_EQ((*server)->address(), "127.0.0.1:" + std::to_string((*server)->port()));
  const std::string response = HttpGet((*server)->port(), "/metrics");
  ASSERT_EQ(response.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << response;
  EXPECT_NE(response.find("Content-Type: text/plain; version=0.0.4"), std::string::npos);
  const std::string body = HttpBody(response);
  EXPECT_EQ(ParsePrometheusText(body).Value("kvfold_http_total"), 7);
  EXPECT_EQ(HttpGet((*server)->port(), "/other").rfind("HTTP/1.1 404", 0), 0u);
}

TEST(MetricsHttpServerTest, ReadyzFollowsTheCallback) {
  std::atomic<bool> ready{true};
  auto server = MetricsHttpServer::Start(
      "127.0.0.1:0", [] { return std::string(); }, [&ready] { return ready.load(); });
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(HttpGet((*server)->port(), "/readyz").rfind("HTTP/1.1 200", 0), 0u);
  ready = false;
  EXPECT_EQ(HttpGet((*server)->port(), "/readyz").rfind("HTTP/1.1 503", 0), 0u);
  EXPECT_EQ(HttpGet((*server)->port(), "/livez").rfind("HTTP/1.1 200", 0), 0u);
}

TEST(MetricsHttpServerTest, AllInterfacesAddressIsReachableOnLoopback) {
  auto server = MetricsHttpServer::Start("0.0.0.0:0", [] { return std::string("x 1\n"); });
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_NE(HttpGet((*server)->port(), "/metrics").find("\r\n\r\nx 1\n"), std::string::npos);
}

TEST(MetricsHttpServerTest, BadAddressesAreInvalidArgument) {
  for (const char* bad : {"9090", "localhost:9090", "127.0.0.1:99999", "127.0.0.1:x", ""}) {
    auto server = MetricsHttpServer::Start(bad, [] { return std::string(); });
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(MetricsHttpServerTest, PortInUseIsUnavailable) {
  auto first = MetricsHttpServer::Start("127.0.0.1:0", [] { return std::string(); });
  ASSERT_TRUE(first.ok());
  // SO_REUSEADDR does not allow two listeners on one port.
  auto second = MetricsHttpServer::Start("127.0.0.1:" + std::to_string((*first)->port()),
                                         [] { return std::string(); });
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
}

// Probes go to this port (the prod overlay's readiness asks /readyz here, with the
// kubelet's 1 s timeout): clients that connect and say nothing must not hold them up.
TEST(MetricsHttpServerTest, SilentClientsDoNotDelayAProbe) {
  auto server = MetricsHttpServer::Start("127.0.0.1:0", [] { return std::string("x 1\n"); });
  ASSERT_TRUE(server.ok()) << server.status();
  const std::vector<int> silent = SilentConnections((*server)->port(), 4);
  ASSERT_EQ(silent.size(), 4u);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // all four accepted first
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(HttpGet((*server)->port(), "/readyz").rfind("HTTP/1.1 200", 0), 0u);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 0.5);
  for (int fd : silent) ::close(fd);
}

// Out of descriptors, accept() fails at once while the connection stays queued: the loop
// must wait between tries, not spin, and answer again once descriptors are free.
TEST(MetricsHttpServerTest, OutOfDescriptorsTheLoopWaitsInsteadOfSpinning) {
  auto server = MetricsHttpServer::Start("127.0.0.1:0", [] { return std::string("x 1\n"); });
  ASSERT_TRUE(server.ok()) << server.status();
  double cpu = 0;
  {
    ScopedDescriptorLimit limit(11);
    ASSERT_TRUE(limit.ok());
    const std::vector<int> fds = SilentConnections((*server)->port(), 50);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const double cpu_start = ProcessCpuSeconds();
    std::this_thread::sleep_for(std::chrono::seconds(1));
    cpu = ProcessCpuSeconds() - cpu_start;
    for (int fd : fds) ::close(fd);
  }
  EXPECT_LT(cpu, 0.2) << "CPU seconds in one second out of descriptors";
  EXPECT_EQ(HttpGet((*server)->port(), "/livez").rfind("HTTP/1.1 200", 0), 0u);
}

TEST(MetricsHttpServerTest, OutOfThreadsRequestsAreStillAnswered) {
  auto server = MetricsHttpServer::Start("127.0.0.1:0", [] { return std::string("x 1\n"); });
  ASSERT_TRUE(server.ok()) << server.status();
  ScopedThreadLimit limit;
  if (!limit.ok()) GTEST_SKIP() << "no writable pids cgroup (needs root and cgroup v1 pids)";
  ASSERT_TRUE(limit.Freeze());
  // The loop cannot start a thread for the connection (that used to end the process with
  // an uncaught std::system_error): it answers on its own thread.
  const std::string ready = HttpGet((*server)->port(), "/readyz");
  const std::string page = HttpGet((*server)->port(), "/metrics");
  ASSERT_TRUE(limit.Thaw());
  EXPECT_EQ(ready.rfind("HTTP/1.1 200", 0), 0u) << ready;
  EXPECT_NE(page.find("x 1"), std::string::npos) << page;
}

}  // namespace
}  // namespace kvfold::metrics
