#include "common/request_log.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "gtest/gtest.h"

namespace kvfold::logging {
namespace {

TEST(TraceParentTest, ParsesTheW3CExample) {
  auto t = ParseTraceParent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(t->parent_id, "00f067aa0ba902b7");
  EXPECT_TRUE(t->sampled);
  auto unsampled = ParseTraceParent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
  ASSERT_TRUE(unsampled.has_value());
  EXPECT_FALSE(unsampled->sampled);
  // A later version may append fields after a dash.
  EXPECT_TRUE(ParseTraceParent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra")
                  .has_value());
}

TEST(TraceParentTest, RejectsMalformedHeaders) {
  for (const char* bad : {
           "", "garbage",
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",       // no flags
           "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",    // upper case
           "00-00000000000000000000000000000000-00f067aa0ba902b7-01",    // zero trace id
           "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",    // zero parent id
           "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // version ff
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",  // v00 has no tail
           "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",    // non-hex
           "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",    // separators
       }) {
    EXPECT_FALSE(ParseTraceParent(bad).has_value()) << bad;
  }
}

TEST(RequestLogTest, LevelsFollowTheStatus) {
  RequestRecord r;
  r.method = "/kvfold.v1.InferenceService/Generate";
  r.code = absl::StatusCode::kOk;
  EXPECT_EQ(LevelFor(r), Level::kInfo);
  r.code = absl::StatusCode::kNotFound;
  EXPECT_EQ(LevelFor(r), Level::kInfo);
  r.code = absl::StatusCode::kResourceExhausted;
  EXPECT_EQ(LevelFor(r), Level::kWarn);
  r.code = absl::StatusCode::kInternal;
  EXPECT_EQ(LevelFor(r), Level::kError);
  r.method = "/grpc.health.v1.Health/Check";
  r.code = absl::StatusCode::kOk;
  EXPECT_EQ(LevelFor(r), Level::kDebug);
  RequestRecord probe;
  probe.front = "http";
  probe.method = "GET /health/ready";
  probe.code = absl::StatusCode::kUnavailable;
  EXPECT_EQ(LevelFor(probe), Level::kWarn);
  probe.probe = true;
  EXPECT_EQ(LevelFor(probe), Level::kDebug);
  EXPECT_EQ(*ParseLevel("warn"), Level::kWarn);
  EXPECT_EQ(ParseLevel("verbose").status().code(), absl::StatusCode::kInvalidArgument);
}

RequestRecord Sample() {
  RequestRecord r;
  r.front = "grpc";
  r.method = "/kvfold.v1.InferenceService/Generate";
  r.code = absl::StatusCode::kOk;
  r.duration_ms = 12.5;
  r.tenant = "acme";
  r.session = "s-1";
  r.version = 3;
  r.trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
  r.parent_id = "00f067aa0ba902b7";
  r.timings_ms = {{"ttft", 4.0}};
  r.counts = {{"generated_tokens", 8}};
  r.prompt = "my secret question";
  return r;
}

TEST(RequestLogTest, FormatIsOneJsonObjectWithTheFields) {
  RequestLogger logger(RequestLogOptions{});
  const std::string line = logger.Format(Sample(), "2026-01-02T03:04:05.678Z");
  EXPECT_EQ(line.find('\n'), std::string::npos);
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["time"], "2026-01-02T03:04:05.678Z");
  EXPECT_EQ(j["level"], "info");
  EXPECT_EQ(j["method"], "/kvfold.v1.InferenceService/Generate");
  EXPECT_EQ(j["code"], "OK");
  EXPECT_EQ(j["tenant"], "acme");
  EXPECT_EQ(j["session"], "s-1");
  EXPECT_EQ(j["version"], 3);
  EXPECT_EQ(j["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(j["timings_ms"]["ttft"], 4.0);
  EXPECT_EQ(j["generated_tokens"], 8);
  EXPECT_DOUBLE_EQ(j["duration_ms"].get<double>(), 12.5);
  EXPECT_FALSE(j.contains("prompt")) << "prompts are logged only with log_prompts";
  EXPECT_EQ(line.find("secret"), std::string::npos);
}

TEST(RequestLogTest, PromptsOnlyWithLogPromptsAndInvalidUtf8IsReplaced) {
  RequestLogOptions options;
  options.log_prompts = true;
  RequestLogger logger(options);
  RequestRecord r = Sample();
  r.prompt = std::string("caf\xc3", 4);  // cut inside a UTF-8 character
  const auto j = nlohmann::json::parse(logger.Format(r, "t"));
  EXPECT_EQ(j["prompt"], "caf\xef\xbf\xbd");
}

TEST(RequestLogTest, WriteHonoursTheLevelAndWritesWholeLines) {
  std::FILE* sink = std::tmpfile();
  ASSERT_NE(sink, nullptr);
  RequestLogOptions options;
  options.min_level = Level::kWarn;
  options.sink = sink;
  RequestLogger logger(options);
  RequestRecord ok = Sample();
  logger.Write(ok);  // info: below warn, dropped
  RequestRecord failed = Sample();
  failed.code = absl::StatusCode::kInternal;
  failed.error = "boom";
  logger.Write(failed);
  std::rewind(sink);
  std::string content;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), sink)) > 0) content.append(buf, n);
  std::fclose(sink);
  ASSERT_EQ(std::count(content.begin(), content.end(), '\n'), 1) << content;
  const auto j = nlohmann::json::parse(content);
  EXPECT_EQ(j["level"], "error");
  EXPECT_EQ(j["code"], "INTERNAL");
  EXPECT_EQ(j["error"], "boom");
  EXPECT_EQ(j["time"].get<std::string>().size(), std::string("2026-01-02T03:04:05.678Z").size());
}

}  // namespace
}  // namespace kvfold::logging
