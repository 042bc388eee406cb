// Observability of a real kvfold-inference replica (with a real kvfold-memory) on loopback:
// its /metrics page parsed as a scraper would, its JSON request-log lines, and the drain
// that Kubernetes sees on SIGTERM (NOT_SERVING first, calls still served during
// --drain-delay, exit 0).
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/create_channel.h>
#include <nlohmann/json.hpp>

#include "gtest/gtest.h"
#include "tests/common/health_check.h"
#include "tests/common/http_get.h"
#include "tests/common/prometheus_text.h"
#include "tests/integration/service_cluster.h"

namespace kvfold::testing {
namespace {

constexpr char kTraceParent[] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
constexpr char kToken[] = "tok-observability-3f9a";
constexpr char kSecretPrompt[] = "zebra quartz";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The address the replica printed for /metrics ("kvfold-inference metrics on ADDR").
std::string MetricsAddress(const std::string& log) {
  const std::string marker = "metrics on ";
  const size_t at = log.find(marker);
  if (at == std::string::npos) return "";
  const size_t eol = log.find('\n', at);
  return log.substr(at + marker.size(), eol - at - marker.size());
}

// GET `path` from the metrics address "HOST:PORT" (a loopback host); the body.
std::string MetricsGet(const std::string& address, const std::string& path) {
  return HttpBody(HttpGet(std::stoi(address.substr(address.rfind(':') + 1)), path));
}

std::vector<nlohmann::json> JsonLines(const std::string& log) {
  std::vector<nlohmann::json> out;
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] != '{') continue;
    out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

class ObservabilityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tokens_dir_ = MakeTempDir("kvfold-obs-");
    std::ofstream(tokens_dir_ + "/tokens") << kToken << " acme\n";
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(tokens_dir_, ec);
  }

  // One turn with the bearer token and a traceparent; token ids, or `text` when given (the
  // tiny model has no tokenizer: a text prompt is then INVALID_ARGUMENT, still logged).
  TurnResult Turn(v1::InferenceService::Stub& stub, const std::string& session, int max_new,
                  const std::string& text = "") {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    context.AddMetadata("authorization", std::string("Bearer ") + kToken);
    context.AddMetadata("traceparent", kTraceParent);
    v1::GenerateRequest request;
    request.set_session_id(session);
    if (text.empty()) {
      for (int32_t id : PromptFor(3, max_new)) request.add_prompt_token_ids(id);
    } else {
      request.set_prompt(text);
    }
    request.mutable_sampling()->set_max_new_tokens(max_new);
    request.mutable_sampling()->set_ignore_eos(true);
    auto reader = stub.Generate(&context, request);
    TurnResult result;
    v1::GenerateResponse response;
    while (reader->Read(&response)) {
      if (response.has_delta()) {
        for (int32_t id : response.delta().token_ids()) result.tokens.push_back(id);
      } else if (response.has_final()) {
        result.final_message = response.final();
      }
    }
    result.status = reader->Finish();
    return result;
  }

  grpc::Status Create(v1::InferenceService::Stub& stub, const std::string& session) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    context.AddMetadata("authorization", std::string("Bearer ") + kToken);
    v1::CreateSessionRequest request;
    request.set_session_id(session);
    request.mutable_config()->set_mode(v1::KV_MODE_FULL);
    v1::Session out;
    return stub.CreateSession(&context, request, &out);
  }

  std::string tokens_dir_;
};

TEST_F(ObservabilityTest, MetricsPageParsesAndCountsATurn) {
  Cluster cluster;
  std::string error;
  ASSERT_TRUE(cluster.Setup(
      1, &error, {"--metrics-listen=127.0.0.1:0", "--tokens-file=" + tokens_dir_ + "/tokens"}))
      << error;
  const std::string address = MetricsAddress(ReadFile(cluster.dir() + "/replica0.log"));
  ASSERT_FALSE(address.empty()) << "no 'metrics on' line in the replica's log";

  // A fresh replica already lists every family (at zero).
  PromPage before = ParsePrometheusText(MetricsGet(address, "/metrics"));
  ASSERT_TRUE(before.errors.empty()) << before.errors[0];
  const std::vector<std::pair<std::string, std::string>> families = {
      {"kvfold_inference_ttft_seconds", "histogram"},
      {"kvfold_inference_inter_token_seconds", "histogram"},
      {"kvfold_inference_request_seconds", "histogram"},
      {"kvfold_inference_tokens_total", "counter"},
      {"kvfold_inference_requests_total", "counter"},
      {"kvfold_inference_restores_total", "counter"},
      {"kvfold_inference_admission_total", "counter"},
      {"kvfold_inference_kv_pool_utilization", "gauge"},
      {"kvfold_inference_active_sessions", "gauge"},
      {"kvfold_inference_queue_depth", "gauge"}};
  for (const auto& [name, type] : families) {
    ASSERT_TRUE(before.type.count(name)) << name << " missing";
    EXPECT_EQ(before.type.at(name), type) << name;
    EXPECT_FALSE(before.help.at(name).empty()) << name;
  }
  EXPECT_EQ(before.Value("kvfold_inference_tokens_total", {{"kind", "generated"}}), 0);

  ASSERT_TRUE(Create(cluster.stub(0), "obs-1").ok());
  TurnResult turn = Turn(cluster.stub(0), "obs-1", 9);
  ASSERT_TRUE(turn.status.ok()) << turn.status.error_message();
  ASSERT_EQ(turn.tokens.size(), 9u);
  const v1::Usage& usage = turn.final_message.usage();

  PromPage after = ParsePrometheusText(MetricsGet(address, "/metrics"));
  ASSERT_TRUE(after.errors.empty()) << after.errors[0];
  EXPECT_EQ(after.Value("kvfold_inference_tokens_total", {{"kind", "generated"}}), 9);
  EXPECT_EQ(after.Value("kvfold_inference_tokens_total", {{"kind", "prompt"}}),
            usage.prompt_tokens());
  EXPECT_EQ(after.Value("kvfold_inference_tokens_total", {{"kind", "folded"}}),
            usage.tokens_folded());
  EXPECT_EQ(after.Value("kvfold_inference_ttft_seconds_count"), 1);
  EXPECT_NEAR(after.Value("kvfold_inference_ttft_seconds_sum"),
              usage.timings().time_to_first_token_ms() / 1000.0, 1e-6);
  EXPECT_EQ(after.Value("kvfold_inference_inter_token_seconds_count"), 8);
  EXPECT_EQ(after.Value("kvfold_inference_requests_total", {{"front", "grpc"}, {"code", "OK"}}), 2);
  EXPECT_EQ(after.Value("kvfold_inference_request_seconds_count", {{"front", "grpc"}}), 2);
  EXPECT_EQ(after.Value("kvfold_inference_admission_total", {{"decision", "admit"}}), 1);
  EXPECT_EQ(after.Value("kvfold_inference_restores_total", {{"source", "cache"}}) +
                after.Value("kvfold_inference_restores_total", {{"source", "store"}}),
            1);
  const double utilization = after.Value("kvfold_inference_kv_pool_utilization");
  EXPECT_GE(utilization, 0);
  EXPECT_LE(utilization, 1);
  EXPECT_EQ(after.Value("kvfold_inference_queue_depth"), 0);

  // A refused call is counted under its code.
  {
    grpc::ClientContext context;
    v1::GenerateRequest request;
    request.set_session_id("obs-1");
    auto reader = cluster.stub(0).Generate(&context, request);  // no token
    v1::GenerateResponse ignored;
    while (reader->Read(&ignored)) {
    }
    ASSERT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  // The server counts a call after its status reached the client: poll briefly.
  double unauthenticated = 0;
  for (int i = 0; i < 100; ++i) {
    PromPage refused = ParsePrometheusText(MetricsGet(address, "/metrics"));
    unauthenticated = refused.Value("kvfold_inference_requests_total",
                                    {{"front", "grpc"}, {"code", "UNAUTHENTICATED"}});
    if (unauthenticated == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(unauthenticated, 1);
}

TEST_F(ObservabilityTest, OneJsonLinePerCallWithTraceIdAndNoSecrets) {
  Cluster cluster;
  std::string error;
  ASSERT_TRUE(cluster.Setup(1, &error, {"--tokens-file=" + tokens_dir_ + "/tokens"})) << error;
  ASSERT_TRUE(Create(cluster.stub(0), "log-1").ok());
  TurnResult turn = Turn(cluster.stub(0), "log-1", 4);
  ASSERT_TRUE(turn.status.ok()) << turn.status.error_message();
  Turn(cluster.stub(0), "log-1", 4, kSecretPrompt);  // a text prompt: logged without its text
  ASSERT_EQ(cluster.replica_process(0).Kill(SIGTERM), 0);

  const std::string log = ReadFile(cluster.dir() + "/replica0.log");
  EXPECT_EQ(log.find(kToken), std::string::npos) << "the bearer token reached the log";
  EXPECT_EQ(log.find(kSecretPrompt), std::string::npos) << "prompt text without --log-prompts";
  const std::vector<nlohmann::json> lines = JsonLines(log);
  const nlohmann::json* generate = nullptr;
  int create_lines = 0, generate_lines = 0;
  for (const nlohmann::json& j : lines) {
    if (j["method"] == "/kvfold.v1.InferenceService/Generate") {
      ++generate_lines;
      if (generate == nullptr) generate = &j;
      EXPECT_FALSE(j.contains("prompt"));
    }
    if (j["method"] == "/kvfold.v1.InferenceService/CreateSession") {
      ++create_lines;
      EXPECT_EQ(j["session"], "log-1");
      EXPECT_EQ(j["tenant"], "acme");
    }
    EXPECT_NE(j["method"].get<std::string>().rfind("/grpc.health", 0), 0u)
        << "health probes are debug-level";
  }
  EXPECT_EQ(create_lines, 1);
  EXPECT_EQ(generate_lines, 2);
  ASSERT_NE(generate, nullptr) << log;
  const nlohmann::json& g = *generate;
  EXPECT_EQ(g["level"], "info");
  EXPECT_EQ(g["front"], "grpc");
  EXPECT_EQ(g["code"], "OK");
  EXPECT_EQ(g["tenant"], "acme");
  EXPECT_EQ(g["session"], "log-1");
  EXPECT_EQ(g["version"].get<uint64_t>(), turn.final_message.usage().memory_version());
  EXPECT_EQ(g["trace_id"], "0af7651916cd43dd8448eb211c80319c");
  EXPECT_EQ(g["parent_id"], "b7ad6b7169203331");
  EXPECT_EQ(g["generated_tokens"], 4);
  EXPECT_GT(g["duration_ms"].get<double>(), 0);
  EXPECT_TRUE(g["timings_ms"].contains("ttft"));
  EXPECT_EQ(g["time"].get<std::string>().back(), 'Z');
}

TEST_F(ObservabilityTest, PromptsAppearOnlyWithLogPrompts) {
  Cluster cluster;
  std::string error;
  ASSERT_TRUE(
      cluster.Setup(1, &error, {"--tokens-file=" + tokens_dir_ + "/tokens", "--log-prompts"}))
      << error;
  ASSERT_TRUE(Create(cluster.stub(0), "p-1").ok());
  Turn(cluster.stub(0), "p-1", 2, kSecretPrompt);
  ASSERT_EQ(cluster.replica_process(0).Kill(SIGTERM), 0);
  const std::string log = ReadFile(cluster.dir() + "/replica0.log");
  EXPECT_NE(log.find(std::string("\"prompt\":\"") + kSecretPrompt + "\""), std::string::npos)
      << log;
  EXPECT_EQ(log.find(kToken), std::string::npos);
}

TEST_F(ObservabilityTest, CallsDuringTheDrainDelaySucceedWhileHealthIsNotServing) {
  Cluster cluster;
  std::string error;
  ASSERT_TRUE(
      cluster.Setup(1, &error, {"--tokens-file=" + tokens_dir_ + "/tokens", "--drain-delay=4"}))
      << error;
  const std::string address = cluster.replica_process(0).address();
  // SERVING once the store answers (re-checked every second).
  for (int i = 0; i < 50 && HealthCheck(address) != kHealthServing; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(HealthCheck(address), kHealthServing);
  ASSERT_TRUE(Create(cluster.stub(0), "d-1").ok());

  const auto sigterm = std::chrono::steady_clock::now();
  cluster.replica_process(0).Notify(SIGTERM);
  // 1. NOT_SERVING at once: readiness fails, the endpoint leaves the Service.
  bool not_serving = false;
  for (int i = 0; i < 20 && !not_serving; ++i) {
    not_serving = HealthCheck(address) == kHealthNotServing;
    if (!not_serving) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(not_serving);
  // 2. A call that arrives during the delay (a client that has not yet seen the endpoint
  // change, on a new connection) is still served, and its turn is committed.
  auto late_channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto late_stub = v1::InferenceService::NewStub(late_channel);
  ASSERT_TRUE(Create(*late_stub, "d-2").ok());
  TurnResult late = Turn(*late_stub, "d-2", 5);
  EXPECT_TRUE(late.status.ok()) << late.status.error_message();
  EXPECT_EQ(late.tokens.size(), 5u);
  EXPECT_GT(late.final_message.usage().memory_version(), 0u);
  EXPECT_LT(std::chrono::steady_clock::now() - sigterm, std::chrono::seconds(4))
      << "the call above must land inside the delay for this test to mean anything";
  // 3. Then the replica stops accepting and exits 0 after the delay.
  const int exit_code = cluster.replica_process(0).Kill(SIGTERM);  // reaps; already draining
  EXPECT_EQ(exit_code, 0);
  EXPECT_GE(std::chrono::steady_clock::now() - sigterm, std::chrono::seconds(4));
}

}  // namespace
}  // namespace kvfold::testing
