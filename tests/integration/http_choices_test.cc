// Several choices in one HTTP request on a real replica: `n` samples of a prompt and a
// completions batch of prompts. Each choice must be exactly what a request of its own
// gives (same prompt, the seed the choice is documented to get), under its index, streamed
// and not; usage counts each prompt once; one failing choice fails the request and cancels
// the others.
#include <chrono>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inference_svc/tokenizer/tokenizer.h"
#include "tests/common/prometheus_text.h"
#include "tests/integration/http_api_fixture.h"

namespace kvfold::testing {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

// The streamed choices of a completion or chat completion, gathered by index: text (and
// whether the first chunk of each carried the assistant role), finish reasons, the usage
// chunk, and whether the stream ended in [DONE].
struct StreamedChoices {
  std::map<int, std::string> text;
  std::map<int, std::vector<std::string>> finish;
  std::map<int, bool> first_had_role;
  json usage;
  bool done = false;
};

StreamedChoices Gather(const HttpReply& r, bool chat) {
  StreamedChoices out;
  for (const std::string& e : r.Events()) {
    if (e == "[DONE]") {
      out.done = true;
      continue;
    }
    const json chunk = json::parse(e);
    if (chunk.contains("usage") && !chunk["usage"].is_null()) out.usage = chunk["usage"];
    for (const json& c : chunk["choices"]) {
      const int index = c["index"];
      const bool first = !out.first_had_role.contains(index);
      if (chat) {
        if (first) out.first_had_role[index] = c["delta"].contains("role");
        if (c["delta"].contains("content")) out.text[index] += c["delta"]["content"];
      } else {
        out.first_had_role[index] = false;
        out.text[index] += c["text"];
      }
      if (!c["finish_reason"].is_null()) out.finish[index].push_back(c["finish_reason"]);
    }
  }
  return out;
}

// n sampled choices of one prompt: choice i is the answer of the same request with n = 1
// and seed + i, so the choices differ and a seeded request is reproducible; the prompt is
// fed once and copied to the other choices.
TEST_F(HttpApiTest, SampledChoicesAreTheSingleAnswersOfTheirSeeds) {
  const json base = {
      {"prompt", "Once upon a time"}, {"max_tokens", 24}, {"temperature", 1.0}, {"seed", 7}};
  json three = base;
  three["n"] = 3;
  // The prompt is fed once: the other two choices copy the fed session.
  auto copies = [&] {
    return ParsePrometheusText(HttpCall(port_[0], "GET", "/metrics").body)
        .Value("kvfold_prompt_copies_total", {});
  };
  const double copies_before = copies();
  HttpReply r = Post(0, "/v1/completions", three);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(copies() - copies_before, 2);
  const json body = Body(r);
  ASSERT_EQ(body["choices"].size(), 3u);
  std::set<std::string> distinct;
  int completion_tokens = 0;
  for (int i = 0; i < 3; ++i) {
    json one = base;
    one["seed"] = 7 + i;
    HttpReply single = Post(1, "/v1/completions", one);
    ASSERT_EQ(single.status, 200) << single.body;
    EXPECT_EQ(body["choices"][i]["index"], i);
    EXPECT_EQ(body["choices"][i]["text"], Body(single)["choices"][0]["text"]) << i;
    EXPECT_EQ(body["choices"][i]["finish_reason"], Body(single)["choices"][0]["finish_reason"]);
    EXPECT_EQ(body["usage"]["prompt_tokens"], Body(single)["usage"]["prompt_tokens"]);
    completion_tokens += Body(single)["usage"]["completion_tokens"].get<int>();
    distinct.insert(body["choices"][i]["text"].get<std::string>());
  }
  EXPECT_EQ(body["usage"]["completion_tokens"], completion_tokens);
  EXPECT_EQ(distinct.size(), 3u) << r.body;

  // Chat, streamed and not: the same choices, each streamed under its index (its first
  // chunk with the role, one finish), the usage chunk equal to the whole answer's.
  json chat = {{"messages", {{{"role", "user"}, {"content", "Tell me about a cat."}}}},
               {"max_tokens", 16},
               {"temperature", 1.0},
               {"seed", 11},
               {"n", 2}};
  const double chat_copies_before = copies();
  HttpReply whole = Post(0, "/v1/chat/completions", chat);
  ASSERT_EQ(whole.status, 200) << whole.body;
  EXPECT_EQ(copies() - chat_copies_before, 1);
  chat["stream"] = true;
  chat["stream_options"] = {{"include_usage", true}};
  HttpReply streamed = Post(1, "/v1/chat/completions", chat);
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  const StreamedChoices s = Gather(streamed, /*chat=*/true);
  ASSERT_EQ(Body(whole)["choices"].size(), 2u);
  ASSERT_EQ(s.text.size(), 2u) << streamed.body;
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(s.text.at(i), Body(whole)["choices"][i]["message"]["content"]) << i;
    EXPECT_TRUE(s.first_had_role.at(i)) << i;
    EXPECT_EQ(s.finish.at(i), std::vector<std::string>{Body(whole)["choices"][i]["finish_reason"]});
  }
  EXPECT_NE(s.text.at(0), s.text.at(1));
  EXPECT_EQ(s.usage["prompt_tokens"], Body(whole)["usage"]["prompt_tokens"]);
  EXPECT_EQ(s.usage["completion_tokens"], Body(whole)["usage"]["completion_tokens"]);
  EXPECT_TRUE(s.done);

  // Unseeded, each choice draws its own seed.
  json unseeded = base;
  unseeded.erase("seed");
  unseeded["n"] = 4;
  HttpReply free = Post(0, "/v1/completions", unseeded);
  ASSERT_EQ(free.status, 200) << free.body;
  const json free_body = Body(free);
  std::set<std::string> free_texts;
  for (const json& c : free_body["choices"]) free_texts.insert(c["text"].get<std::string>());
  EXPECT_GT(free_texts.size(), 1u) << free.body;
}

// A batch of prompts (text and token ids) with n = 2: prompt i's choices at 2i and 2i + 1,
// each the single request's answer (greedy, so both alike), echo per choice, usage the
// prompts' tokens once each; streamed equals not.
TEST_F(HttpApiTest, BatchedPromptsAnswerEachUnderItsIndex) {
  auto tokenizer = Tokenizer::Load(std::filesystem::path(SharedModel()).parent_path().string());
  ASSERT_TRUE(tokenizer.ok());
  auto dog = (*tokenizer)->Encode("The dog ran", /*add_bos=*/true);
  ASSERT_TRUE(dog.ok());
  const json prompts = {"Once upon a time", *dog, "Lily"};
  const json params = {{"max_tokens", 12}, {"temperature", 0}, {"echo", true}, {"n", 2}};
  json batch = params;
  batch["prompt"] = prompts;
  HttpReply r = Post(0, "/v1/completions", batch);
  ASSERT_EQ(r.status, 200) << r.body;
  const json body = Body(r);
  ASSERT_EQ(body["choices"].size(), 6u);
  int prompt_tokens = 0, completion_tokens = 0;
  for (int p = 0; p < 3; ++p) {
    json one = params;
    one.erase("n");
    one["prompt"] = prompts[p];
    HttpReply single = Post(1, "/v1/completions", one);
    ASSERT_EQ(single.status, 200) << single.body;
    for (int j = 0; j < 2; ++j) {
      const json& c = body["choices"][2 * p + j];
      EXPECT_EQ(c["index"], 2 * p + j);
      EXPECT_EQ(c["text"], Body(single)["choices"][0]["text"]) << p << "," << j;
    }
    prompt_tokens += Body(single)["usage"]["prompt_tokens"].get<int>();
    completion_tokens += 2 * Body(single)["usage"]["completion_tokens"].get<int>();
  }
  EXPECT_THAT(body["choices"][0]["text"].get<std::string>(),
              ::testing::StartsWith("Once upon a time"));
  EXPECT_THAT(body["choices"][4]["text"].get<std::string>(), ::testing::StartsWith("Lily"));
  EXPECT_EQ(body["usage"]["prompt_tokens"], prompt_tokens);
  EXPECT_EQ(body["usage"]["completion_tokens"], completion_tokens);

  batch["stream"] = true;
  batch["stream_options"] = {{"include_usage", true}};
  HttpReply streamed = Post(1, "/v1/completions", batch);
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  const StreamedChoices s = Gather(streamed, /*chat=*/false);
  ASSERT_EQ(s.text.size(), 6u) << streamed.body;
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(s.text.at(i), body["choices"][i]["text"]) << i;
    EXPECT_EQ(s.finish.at(i), std::vector<std::string>{body["choices"][i]["finish_reason"]}) << i;
  }
  EXPECT_EQ(s.usage["prompt_tokens"], prompt_tokens);
  EXPECT_EQ(s.usage["completion_tokens"], completion_tokens);
  EXPECT_TRUE(s.done);

  // A scoring batch (what lm-evaluation-harness sends with batch_size > 1): each prompt's
  // log-probabilities are those of its own request.
  const json score = {{"echo", true}, {"logprobs", 1}, {"max_tokens", 0}};
  json scoring = score;
  scoring["prompt"] = {*dog, prompts[0]};
  HttpReply scored = Post(0, "/v1/completions", scoring);
  ASSERT_EQ(scored.status, 200) << scored.body;
  const json scored_body = Body(scored);
  ASSERT_EQ(scored_body["choices"].size(), 2u);
  for (int p = 0; p < 2; ++p) {
    json one = score;
    one["prompt"] = scoring["prompt"][p];
    HttpReply single = Post(1, "/v1/completions", one);
    ASSERT_EQ(single.status, 200) << single.body;
    EXPECT_EQ(scored_body["choices"][p]["logprobs"], Body(single)["choices"][0]["logprobs"]) << p;
  }
}

// One choice the replica refuses fails the whole request with its error; the choices
// already started are cancelled (the replica runs nothing afterwards).
TEST_F(HttpApiTest, ARefusedChoiceFailsTheRequestAndCancelsTheOthers) {
  auto metric = [&](const char* name, const std::map<std::string, std::string>& labels) {
    const PromPage page = ParsePrometheusText(HttpCall(port_[0], "GET", "/metrics").body);
    return page.Value(name, labels);
  };
  // A finished turn counts its tokens; a cancelled one does not.
  const double generated_before = metric("kvfold_inference_tokens_total", {{"kind", "generated"}});
  const std::vector<int32_t> too_long(65537, 1);  // over --max-prompt-tokens (65536)
  HttpReply r =
      Post(0, "/v1/completions",
           {{"prompt", json::array({json("Once upon a time"), json(too_long)})},
            {"max_tokens", 2000},
            {"logit_bias", {{"2", -100}}},  // no end of text: 2000 tokens unless cancelled
            {"temperature", 0}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_THAT(Body(r)["error"]["message"].get<std::string>(), HasSubstr("prompt is 65537 tokens"));
  double active = -1;
  for (int i = 0; i < 500 && active != 0; ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    active = metric("kvfold_inference_active_sessions", {});
  }
  EXPECT_EQ(active, 0);
  EXPECT_EQ(metric("kvfold_inference_tokens_total", {{"kind", "generated"}}), generated_before);

  // Limits: prompts x n at most 128; n > 1 on a kept session; a response has one output.
  HttpReply many =
      Post(0, "/v1/completions", {{"prompt", std::vector<std::string>(65, "a")}, {"n", 2}});
  EXPECT_EQ(many.status, 400) << many.body;
  EXPECT_EQ(Body(many)["error"]["param"], "n");
  HttpReply response = Post(0, "/v1/responses", {{"input", "hi"}, {"n", 2}});
  EXPECT_EQ(response.status, 400) << response.body;
  EXPECT_EQ(Body(response)["error"]["param"], "n");
}

}  // namespace
}  // namespace kvfold::testing
