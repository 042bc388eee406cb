// HTTP requests in a real replica's request log and metrics: one JSON line per request
// (tenant, session, version, status, timings, trace id, nothing secret) and the same
// kvfold_inference_* series as gRPC with front="http", in the one registry that both the
// HTTP port's /metrics and --metrics-listen serve.
#include <chrono>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/prometheus_text.h"
#include "tests/integration/http_api_fixture.h"

namespace kvfold::testing {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kTraceId[] = "4bf92f3577b34da6a3ce929d0e0e4736";
constexpr char kTraceParent[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

// The JSON request lines of `log` whose `key` equals `value`.
std::vector<json> LinesWith(const std::string& log, const std::string& key,
                            const std::string& value) {
  std::vector<json> out;
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] != '{') continue;
    json j = json::parse(line, nullptr, false);
    if (j.is_object() && j.value(key, "") == value) out.push_back(std::move(j));
  }
  return out;
}

// The port of "kvfold-inference metrics on HOST:PORT" in `log`; 0 when absent.
int MetricsPortOf(const std::string& log) {
  const std::string marker = "metrics on 127.0.0.1:";
  const size_t at = log.find(marker);
  return at == std::string::npos ? 0 : std::atoi(log.c_str() + at + marker.size());
}

PromPage Scrape(int port) {
  HttpReply r = HttpCall(port, "GET", "/metrics");
  EXPECT_EQ(r.status, 200);
  PromPage page = ParsePrometheusText(r.body);
  EXPECT_TRUE(page.errors.empty()) << page.errors[0];
  return page;
}

double Or0(double v) { return std::isnan(v) ? 0 : v; }

TEST_F(HttpApiTest, HttpRequestsAreLoggedAndCountedInTheOneRegistry) {
  const PromPage before = Scrape(port_[0]);
  auto requests = [](const PromPage& p, const char* code) {
    return Or0(p.Value("kvfold_inference_requests_total", {{"front", "http"}, {"code", code}}));
  };
  auto tokens = [](const PromPage& p, const char* kind) {
    return Or0(p.Value("kvfold_inference_tokens_total", {{"kind", kind}}));
  };

  json chat = kChat;
  chat["kvfold_session"] = "http-logged";
  HttpReply ok = Post(0, "/v1/chat/completions", chat, {kAuth[0], {"traceparent", kTraceParent}});
  ASSERT_EQ(ok.status, 200) << ok.body;
  const uint64_t version = Body(ok)["usage"]["kvfold"]["version"];
  json n0 = kChat;
  n0["n"] = 0;
  ASSERT_EQ(Post(0, "/v1/chat/completions", n0).status, 400);
  ASSERT_EQ(Post(0, "/v1/chat/completions", kChat, {}).status, 401);
  ASSERT_EQ(HttpCall(port_[0], "GET", "/health/live").status, 200);

  // The line is written as the answer goes out: wait for it.
  std::vector<json> lines;
  for (int i = 0; i < 100 && lines.empty(); ++i) {
    lines = LinesWith(ReplicaLog(0), "trace_id", kTraceId);
    if (lines.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(lines.size(), 1u) << ReplicaLog(0);
  const json& line = lines[0];
  EXPECT_EQ(line["level"], "info");
  EXPECT_EQ(line["front"], "http");
  EXPECT_EQ(line["method"], "POST /v1/chat/completions");
  EXPECT_EQ(line["code"], "OK");
  EXPECT_EQ(line["http_status"], 200);
  EXPECT_EQ(line["tenant"], "tenant-a");
  EXPECT_EQ(line["session"], "http-logged");
  EXPECT_EQ(line["version"], version);
  EXPECT_EQ(line["parent_id"], "00f067aa0ba902b7");
  EXPECT_THAT(line["peer"].get<std::string>(), HasSubstr("ipv4:127.0.0.1:"));
  EXPECT_EQ(line["generated_tokens"], 12);
  EXPECT_GT(line["prompt_tokens"].get<int>(), 0);
  EXPECT_GT(line["timings_ms"]["ttft"].get<double>(), 0);
  EXPECT_GE(line["timings_ms"]["total"].get<double>(), line["timings_ms"]["ttft"].get<double>());
  EXPECT_GE(line["duration_ms"].get<double>(), line["timings_ms"]["ttft"].get<double>());

  for (int i = 0; i < 100 && LinesWith(ReplicaLog(0), "code", "UNAUTHENTICATED").empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::vector<json> bad = LinesWith(ReplicaLog(0), "code", "INVALID_ARGUMENT");
  ASSERT_FALSE(bad.empty());
  EXPECT_EQ(bad.back()["http_status"], 400);
  EXPECT_THAT(bad.back()["error"].get<std::string>(), HasSubstr("'n' is 0"));
  const std::vector<json> unauthenticated = LinesWith(ReplicaLog(0), "code", "UNAUTHENTICATED");
  ASSERT_FALSE(unauthenticated.empty());
  EXPECT_EQ(unauthenticated.back()["level"], "warn");
  EXPECT_FALSE(unauthenticated.back().contains("tenant"));
  // Probes are debug lines (not written at the default level); nothing secret is written.
  const std::string log = ReplicaLog(0);
  EXPECT_THAT(log, Not(HasSubstr("GET /health")));
  EXPECT_THAT(log, Not(HasSubstr(kToken)));
  EXPECT_THAT(log, Not(HasSubstr("Tell me about a cat")));

  // The same series as gRPC, with front="http", in the registry both pages render.
  PromPage after;
  for (int i = 0; i < 100; ++i) {
    after = Scrape(port_[0]);
    if (requests(after, "UNAUTHENTICATED") > requests(before, "UNAUTHENTICATED")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_GE(requests(after, "OK") - requests(before, "OK"), 1);
  EXPECT_GE(requests(after, "INVALID_ARGUMENT") - requests(before, "INVALID_ARGUMENT"), 1);
  EXPECT_GE(requests(after, "UNAUTHENTICATED") - requests(before, "UNAUTHENTICATED"), 1);
  EXPECT_GE(tokens(after, "generated") - tokens(before, "generated"), 12);
  EXPECT_GE(Or0(after.Value("kvfold_inference_request_seconds_count", {{"front", "http"}})) -
                Or0(before.Value("kvfold_inference_request_seconds_count", {{"front", "http"}})),
            3);
  EXPECT_GE(Or0(after.Value("kvfold_inference_ttft_seconds_count")) -
                Or0(before.Value("kvfold_inference_ttft_seconds_count")),
            1);
  for (const char* family :
       {"kvfold_inference_requests_total", "kvfold_inference_ttft_seconds",
        "kvfold_inference_admission_total", "kvfold_inference_restores_total"}) {
    EXPECT_TRUE(after.help.count(family)) << family;
    EXPECT_TRUE(after.type.count(family)) << family;
  }
  const int metrics_port = MetricsPortOf(ReplicaLog(0));
  ASSERT_GT(metrics_port, 0) << ReplicaLog(0);
  const PromPage other = Scrape(metrics_port);
  const PromPage again = Scrape(port_[0]);
  EXPECT_EQ(requests(other, "OK"), requests(again, "OK"));
  EXPECT_EQ(tokens(other, "generated"), tokens(again, "generated"));
}

// --http-max-connections on a real replica: with two connections open a third is answered
// 503 "busy" and closed, and the replica's registry counts it while the open ones keep
// working.
TEST(HttpConnectionLimitTest, AConnectionOverTheLimitIs503AndCounted) {
  if (!std::filesystem::exists(SharedModel())) {
    GTEST_SKIP() << MissingShared("models/stories260K/stories260K.bin");
  }
  Cluster cluster;
  std::string error;
  ASSERT_TRUE(
      cluster.Setup(1, &error, {"--http-port=0", "--http-max-connections=2"}, SharedModel()))
      << error;
  const int port = HttpPortOf(cluster.replica_process(0));
  ASSERT_GT(port, 0) << cluster.replica_process(0).output();
  HttpConnection first(port), second(port);
  for (HttpConnection* c : {&first, &second}) {  // both accepted: each answers
    ASSERT_TRUE(c->Send("GET", "/health/live", ""));
    ASSERT_EQ(c->Read().status, 200);
  }
  const HttpReply busy = HttpCall(port, "GET", "/health/live");
  EXPECT_EQ(busy.status, 503);
  EXPECT_THAT(busy.body, HasSubstr("too many open connections"));
  ASSERT_TRUE(first.Send("GET", "/metrics", ""));
  const HttpReply metrics = first.Read();
  ASSERT_EQ(metrics.status, 200);
  const PromPage page = ParsePrometheusText(metrics.body);
  EXPECT_EQ(page.Value("kvfold_inference_http_refused_connections_total"), 1);
  EXPECT_EQ(page.Value("kvfold_inference_http_open_connections"), 2);
}

// A model file whose name is not UTF-8 (the served model's id is the file's stem): the
// answers carry U+FFFD instead (GET /v1/models used to throw in the I/O thread and end the
// replica), and the replica keeps serving.
TEST(HttpModelNameTest, AModelFileNameThatIsNotUtf8IsServedReplaced) {
  if (!std::filesystem::exists(SharedModel())) {
    GTEST_SKIP() << MissingShared("models/stories260K/stories260K.bin");
  }
  const std::string dir = MakeTempDir("kvfold-http-name-");
  const std::string model = dir + "/st\xff.bin";
  std::filesystem::create_symlink(std::filesystem::absolute(SharedModel()), model);
  std::filesystem::create_symlink(std::filesystem::absolute(Stories260K() + "/tok512.bin"),
                                  dir + "/tok512.bin");
  {
    Cluster cluster;
    std::string error;
    ASSERT_TRUE(cluster.Setup(1, &error, {"--http-port=0"}, model)) << error;
    const int port = HttpPortOf(cluster.replica_process(0));
    ASSERT_GT(port, 0) << cluster.replica_process(0).output();
    const HttpReply models = HttpCall(port, "GET", "/v1/models");
    ASSERT_EQ(models.status, 200) << models.body;
    EXPECT_EQ(Body(models)["data"][0]["id"], "st\xef\xbf\xbd") << models.body;
    const HttpReply chat =
        HttpCall(port, "POST", "/v1/chat/completions",
                 R"({"max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]})");
    ASSERT_EQ(chat.status, 200) << chat.body;
    EXPECT_EQ(Body(chat)["model"], "st\xef\xbf\xbd");
    EXPECT_EQ(HttpCall(port, "GET", "/health/live").status, 200);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvfold::testing
