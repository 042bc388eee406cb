// Log-probabilities through both fronts of a real replica (stories260K): the greedy
// token's logprob equals the maximum of log_softmax over the engine's own logits for the
// same prompt (computed here, in-process), alternatives come sorted, and the OpenAI shapes
// and validation errors of chat completions, completions, responses and gRPC Generate.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inference_svc/engine/sampler.h"
#include "inference_svc/tokenizer/tokenizer.h"
#include "tests/integration/http_api_fixture.h"
#include "tests/integration/reference_engine.h"

namespace kvfold::testing {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

// The replica computes in another process (in memory mode, positions shifted by its empty
// memory): equal up to float rounding.
constexpr double kTolerance = 2e-4;

// log_softmax of `logits` (double).
std::vector<double> LogSoftmax(std::span<const float> logits) {
  const double max_logit = *std::max_element(logits.begin(), logits.end());
  double z = 0;
  for (float l : logits) z += std::exp(l - max_logit);
  std::vector<double> row(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) row[i] = logits[i] - max_logit - std::log(z);
  return row;
}

// log_softmax of the engine's logits at each greedy step after `prompt`: [step][vocab].
std::vector<std::vector<double>> GreedyLogSoftmax(const std::vector<int32_t>& prompt, int steps,
                                                  std::vector<int32_t>* greedy) {
  ReferenceSession session(prompt);
  if (!session.ok()) return {};
  std::vector<std::vector<double>> out;
  for (int step = 0; step < steps; ++step) {
    std::vector<double> row = LogSoftmax(session.Logits());
    const int32_t next =
        static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    greedy->push_back(next);
    out.push_back(std::move(row));
    session.Append(next);
  }
  return out;
}

std::unique_ptr<Tokenizer> LoadTokenizer() {
  auto tokenizer = Tokenizer::Load(std::filesystem::path(SharedModel()).parent_path().string());
  EXPECT_TRUE(tokenizer.ok());
  return tokenizer.ok() ? std::move(*tokenizer) : nullptr;
}

TEST_F(HttpApiTest, CompletionLogprobsAreTheEnginesLogSoftmax) {
  const std::string prompt = "Once upon a time";
  auto tokenizer = LoadTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  auto ids = tokenizer->Encode(prompt, /*add_bos=*/true);
  ASSERT_TRUE(ids.ok());
  constexpr int kSteps = 6;
  std::vector<int32_t> greedy;
  const auto want = GreedyLogSoftmax(*ids, kSteps, &greedy);
  ASSERT_EQ(want.size(), static_cast<size_t>(kSteps));

  HttpReply r =
      Post(0, "/v1/completions",
           {{"prompt", prompt}, {"max_tokens", kSteps}, {"temperature", 0}, {"logprobs", 5}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json logprobs = Body(r)["choices"][0]["logprobs"];
  ASSERT_EQ(logprobs["tokens"].size(), static_cast<size_t>(kSteps)) << r.body;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<double> sorted = want[step];
    std::sort(sorted.rbegin(), sorted.rend());
    EXPECT_EQ(logprobs["tokens"][step], std::string(tokenizer->TokenBytes(greedy[step])));
    // The greedy token's logprob is the largest of log_softmax(logits).
    EXPECT_NEAR(logprobs["token_logprobs"][step].get<double>(), sorted[0], kTolerance) << step;
    std::vector<double> top;
    for (const auto& [token, lp] : logprobs["top_logprobs"][step].items()) top.push_back(lp);
    std::sort(top.rbegin(), top.rend());
    ASSERT_LE(top.size(), 5u);  // tokens with equal text share a key
    ASSERT_GE(top.size(), 4u);
    for (size_t k = 0; k < top.size(); ++k) EXPECT_NEAR(top[k], sorted[k], kTolerance) << step;
  }
}

TEST_F(HttpApiTest, ChatLogprobsStreamedAndNotAreSortedAndAgree) {
  json request = kChat;
  request["logprobs"] = true;
  request["top_logprobs"] = 3;
  HttpReply r = Post(0, "/v1/chat/completions", request);
  ASSERT_EQ(r.status, 200) << r.body;
  const json content = Body(r)["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), Body(r)["usage"]["completion_tokens"].get<size_t>()) << r.body;
  for (const json& t : content) {
    const std::string token = t["token"];
    ASSERT_EQ(t["bytes"].size(), token.size());
    ASSERT_EQ(t["top_logprobs"].size(), 3u);
    EXPECT_LE(t["logprob"].get<double>(), 0.0);
    // Greedy: the chosen token is the most likely one.
    EXPECT_EQ(t["top_logprobs"][0]["token"], token);
    EXPECT_FLOAT_EQ(t["top_logprobs"][0]["logprob"].get<float>(), t["logprob"].get<float>());
    for (size_t k = 1; k < 3; ++k) {
      EXPECT_GE(t["top_logprobs"][k - 1]["logprob"].get<double>(),
                t["top_logprobs"][k]["logprob"].get<double>());
    }
  }

  request["stream"] = true;
  HttpReply s = Post(1, "/v1/chat/completions", request);
  ASSERT_EQ(s.status, 200) << s.body;
  json streamed = json::array();
  for (const std::string& e : s.Events()) {
    if (e == "[DONE]") break;
    const json chunk = json::parse(e);
    if (chunk["choices"].empty() || chunk["choices"][0]["logprobs"].is_null()) continue;
    for (const json& t : chunk["choices"][0]["logprobs"]["content"]) streamed.push_back(t);
  }
  ASSERT_EQ(streamed.size(), content.size()) << s.body;
  for (size_t i = 0; i < content.size(); ++i) {
    EXPECT_EQ(streamed[i]["token"], content[i]["token"]) << i;
    EXPECT_NEAR(streamed[i]["logprob"].get<double>(), content[i]["logprob"].get<double>(), 1e-6);
  }

  // Without logprobs the answer has none.
  HttpReply plain = Post(0, "/v1/chat/completions", kChat);
  EXPECT_TRUE(Body(plain)["choices"][0]["logprobs"].is_null()) << plain.body;
}

TEST_F(HttpApiTest, ResponsesReturnLogprobsWhenIncluded) {
  HttpReply r = Post(0, "/v1/responses",
                     {{"input", "Once upon a time"},
                      {"max_output_tokens", 5},
                      {"temperature", 0},
                      {"top_logprobs", 2},
                      {"include", {"message.output_text.logprobs"}}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json part = Body(r)["output"][0]["content"][0];
  ASSERT_EQ(part["logprobs"].size(), 5u) << r.body;
  EXPECT_EQ(part["logprobs"][0]["top_logprobs"].size(), 2u);
}

TEST_F(HttpApiTest, LogprobsValidationErrors) {
  json too_many = kChat;
  too_many["logprobs"] = true;
  too_many["top_logprobs"] = 21;
  HttpReply r = Post(0, "/v1/chat/completions", too_many);
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(Body(r)["error"]["message"].get<std::string>(),
              HasSubstr("'top_logprobs' is 21; it must be in [0, 20]"));
  json without = kChat;
  without["top_logprobs"] = 2;
  r = Post(0, "/v1/chat/completions", without);
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(Body(r)["error"]["message"].get<std::string>(), HasSubstr("needs 'logprobs': true"));
  r = Post(0, "/v1/completions", {{"prompt", "Once"}, {"logprobs", 6}});
  EXPECT_EQ(r.status, 400) << r.body;
  r = Post(0, "/v1/completions", {{"prompt", "Once"}, {"logprobs", true}});
  EXPECT_EQ(r.status, 400) << r.body;
}

TEST_F(HttpApiTest, GrpcGenerateCarriesLogprobsPerToken) {
  auto tokenizer = LoadTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  auto ids = tokenizer->Encode("Once upon a time", /*add_bos=*/true);
  ASSERT_TRUE(ids.ok());
  std::vector<int32_t> greedy;
  const auto want = GreedyLogSoftmax(*ids, 4, &greedy);
  ASSERT_TRUE(CreateGrpcSession(0, "grpc-logprobs", v1::KV_MODE_FULL).ok());

  auto generate = [&](bool logprobs, uint32_t top, std::vector<v1::TokenLogprob>* out) {
    grpc::ClientContext context;
    Authorize(&context);
    v1::GenerateRequest request;
    request.set_session_id("grpc-logprobs");
    for (int32_t id : *ids) request.add_prompt_token_ids(id);
    request.mutable_sampling()->set_max_new_tokens(4);
    request.mutable_sampling()->set_top_k(1);
    request.mutable_sampling()->set_ignore_eos(true);
    request.set_logprobs(logprobs);
    request.set_top_logprobs(top);
    auto reader = cluster_->stub(0).Generate(&context, request);
    v1::GenerateResponse response;
    std::vector<int32_t> tokens;
    while (reader->Read(&response)) {
      EXPECT_EQ(response.delta().logprobs_size(), logprobs ? response.delta().token_ids_size() : 0);
      for (const v1::TokenLogprob& t : response.delta().logprobs()) out->push_back(t);
    }
    return reader->Finish();
  };
  std::vector<v1::TokenLogprob> got;
  ASSERT_TRUE(generate(true, 20, &got).ok());
  ASSERT_EQ(got.size(), 4u);
  for (size_t step = 0; step < got.size(); ++step) {
    EXPECT_EQ(got[step].token_id(), greedy[step]);
    EXPECT_NEAR(got[step].logprob(), want[step][greedy[step]], kTolerance);
    ASSERT_EQ(got[step].top_logprobs_size(), 20);
    EXPECT_EQ(got[step].top_logprobs(0).token_id(), greedy[step]);
    for (int k = 1; k < 20; ++k) {
      EXPECT_GE(got[step].top_logprobs(k - 1).logprob(), got[step].top_logprobs(k).logprob());
    }
  }
  std::vector<v1::TokenLogprob> none;
  EXPECT_EQ(generate(true, 21, &none).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(generate(false, 3, &none).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(none.empty());
}

// log_softmax before each of `ids`, appended one at a time to `session`: [i][vocab].
std::vector<std::vector<double>> LogSoftmaxBefore(ReferenceSession& session,
                                                  std::span<const int32_t> ids) {
  std::vector<std::vector<double>> out;
  for (size_t i = 0; i < ids.size() && session.ok(); ++i) {
    out.push_back(LogSoftmax(session.Logits()));
    session.Append(ids[i]);
  }
  return out;
}

// log_softmax before each of ids[1..] (ids fed one at a time in-process): [i - 1][vocab].
std::vector<std::vector<double>> PromptLogSoftmax(const std::vector<int32_t>& ids) {
  ReferenceSession session({ids[0]});
  return LogSoftmaxBefore(session, std::span<const int32_t>(ids).subspan(1));
}

// OpenAI's legacy scoring request (echo, logprobs, max_tokens 0), as evaluation harnesses
// send it: every prompt token after the first gets the log-probability the engine's own
// logits give it, the first (BOS, nothing before it) null; nothing is generated.
TEST_F(HttpApiTest, EchoedPromptIsScoredWithTheEnginesLogSoftmax) {
  const std::string prompt = "Once upon a time there was a little girl named Lily.";
  auto tokenizer = LoadTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  auto ids = tokenizer->Encode(prompt, /*add_bos=*/true);
  ASSERT_TRUE(ids.ok());
  const auto want = PromptLogSoftmax(*ids);
  ASSERT_EQ(want.size(), ids->size() - 1);

  HttpReply r = Post(0, "/v1/completions",
                     {{"prompt", prompt}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 3}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json choice = Body(r)["choices"][0];
  EXPECT_EQ(choice["text"], prompt);
  EXPECT_EQ(choice["finish_reason"], "length");
  EXPECT_EQ(Body(r)["usage"]["completion_tokens"], 0);
  EXPECT_EQ(Body(r)["usage"]["prompt_tokens"], ids->size());
  const json logprobs = choice["logprobs"];
  ASSERT_EQ(logprobs["tokens"].size(), ids->size()) << r.body;
  EXPECT_TRUE(logprobs["token_logprobs"][0].is_null());
  EXPECT_TRUE(logprobs["top_logprobs"][0].is_null());
  for (size_t i = 1; i < ids->size(); ++i) {
    EXPECT_EQ(logprobs["tokens"][i], std::string(tokenizer->TokenBytes((*ids)[i])));
    EXPECT_NEAR(logprobs["token_logprobs"][i].get<double>(), want[i - 1][(*ids)[i]], kTolerance)
        << i;
    std::vector<double> sorted = want[i - 1];
    std::sort(sorted.rbegin(), sorted.rend());
    std::vector<double> top;
    for (const auto& [token, lp] : logprobs["top_logprobs"][i].items()) top.push_back(lp);
    std::sort(top.rbegin(), top.rend());
    ASSERT_GE(top.size(), 2u) << i;  // tokens with equal text share a key
    for (size_t k = 0; k < top.size(); ++k) EXPECT_NEAR(top[k], sorted[k], kTolerance) << i;
  }

  // max_tokens 0 is a scoring request only with echo.
  HttpReply bad = Post(0, "/v1/completions", {{"prompt", prompt}, {"max_tokens", 0}});
  EXPECT_EQ(bad.status, 400) << bad.body;
  EXPECT_EQ(Body(bad)["error"]["param"], "max_tokens");
}

// Token ids in, one token generated (the harnesses' other form): the prompt's records, then
// the generated token's; streamed or not, the same; a stop string inside the echoed prompt
// does not cut it (stop strings apply to generated text).
TEST_F(HttpApiTest, EchoedTokenPromptScoresThenGeneratesStreamedAndNot) {
  auto tokenizer = LoadTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  auto ids = tokenizer->Encode("Lily and Ben went to the park to play", /*add_bos=*/true);
  ASSERT_TRUE(ids.ok());
  const auto want = PromptLogSoftmax(*ids);
  const json request = {{"prompt", *ids}, {"max_tokens", 1},  {"echo", true},
                        {"logprobs", 1},  {"temperature", 0}, {"stop", "park"}};
  HttpReply r = Post(1, "/v1/completions", request);
  ASSERT_EQ(r.status, 200) << r.body;
  const json choice = Body(r)["choices"][0];
  const std::string text = choice["text"];
  EXPECT_EQ(text.substr(0, tokenizer->Decode(*ids).size()), tokenizer->Decode(*ids));
  const json logprobs = choice["logprobs"];
  ASSERT_EQ(logprobs["token_logprobs"].size(), ids->size() + 1) << r.body;
  for (size_t i = 1; i < ids->size(); ++i) {
    EXPECT_NEAR(logprobs["token_logprobs"][i].get<double>(), want[i - 1][(*ids)[i]], kTolerance);
  }
  // The generated (greedy) token's logprob is its top alternative.
  const double generated = logprobs["token_logprobs"][ids->size()].get<double>();
  EXPECT_NEAR(logprobs["top_logprobs"][ids->size()].begin().value().get<double>(), generated, 1e-6);

  json streamed_request = request;
  streamed_request["stream"] = true;
  HttpReply s = Post(0, "/v1/completions", streamed_request);
  ASSERT_EQ(s.status, 200) << s.body;
  std::string streamed_text;
  json streamed = json::array();
  for (const std::string& e : s.Events()) {
    if (e == "[DONE]") break;
    const json c = json::parse(e)["choices"][0];
    streamed_text += c["text"].get<std::string>();
    if (c["logprobs"].is_null()) continue;
    for (const json& v : c["logprobs"]["token_logprobs"]) streamed.push_back(v);
  }
  EXPECT_EQ(streamed_text, text);
  ASSERT_EQ(streamed.size(), logprobs["token_logprobs"].size()) << s.body;
  EXPECT_TRUE(streamed[0].is_null());
  for (size_t i = 1; i < streamed.size(); ++i) {
    EXPECT_NEAR(streamed[i].get<double>(), logprobs["token_logprobs"][i].get<double>(), 1e-6);
  }
}

// A prompt that folds many times in memory mode (the replicas' window 16 + chunk 8), longer
// than a whole-run prompt (256 tokens), so the scheduler feeds it in pieces after the
// replica has decoded: every score equals, bit for bit, what the same projector and
// model give in-process with the tokens appended one at a time.
TEST_F(HttpApiTest, ScoredPromptThroughFoldsIsBitExact) {
  auto tokenizer = LoadTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  std::string prompt;
  for (int i = 0; i < 40; ++i) prompt += "The cat sat on the mat and looked at the bird. ";
  auto ids = tokenizer->Encode(prompt, /*add_bos=*/true);
  ASSERT_TRUE(ids.ok());
  ASSERT_GT(ids->size(), 300u);

  ReferenceSession reference({(*ids)[0]}, cluster_->projector_dir());
  ASSERT_TRUE(reference.ok());
  std::vector<engine::TokenLogprobs> want(ids->size());
  for (size_t i = 1; i < ids->size(); ++i) {
    engine::ComputeLogprobs(reference.Logits(), (*ids)[i], 2, &want[i]);
    reference.Append((*ids)[i]);
  }

  // A decode first: the scheduler then budgets prompt work by the decode step's time.
  ASSERT_EQ(Post(1, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 3}}).status, 200);
  HttpReply r = Post(1, "/v1/completions",
                     {{"prompt", *ids}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 2}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_GT(Body(r)["usage"]["kvfold"]["tokens_folded"].get<int>(), 256) << r.body;
  const json logprobs = Body(r)["choices"][0]["logprobs"];
  ASSERT_EQ(logprobs["token_logprobs"].size(), ids->size());
  for (size_t i = 1; i < ids->size(); ++i) {
    ASSERT_EQ(logprobs["token_logprobs"][i].get<float>(), want[i].logprob) << i;
    const json& top = logprobs["top_logprobs"][i];
    ASSERT_EQ(top[std::string(tokenizer->TokenBytes(want[i].top_ids[0]))].get<float>(),
              want[i].top_logprobs[0])
        << i;
  }
}

// gRPC: prompt_logprobs scores the echoed prompt. On a session that holds tokens every
// prompt token is scored, the first from the session's last logits, also when another
// replica resumes the session from the store (a full-mode replay first).
TEST_F(HttpApiTest, GrpcPromptLogprobsScoreEveryTokenOfAContinuation) {
  auto tokenizer = LoadTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  auto first = tokenizer->Encode("Once upon a time", /*add_bos=*/true);
  auto second = tokenizer->Encode(" there was a dog", /*add_bos=*/false);
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_TRUE(CreateGrpcSession(0, "grpc-prompt-scores", v1::KV_MODE_FULL).ok());
  auto generate = [&](int replica, const std::vector<int32_t>& prompt, bool echo,
                      bool prompt_logprobs, int max_new_tokens, v1::GenerateResponse* echoed,
                      std::vector<int32_t>* generated) {
    grpc::ClientContext context;
    Authorize(&context);
    v1::GenerateRequest request;
    request.set_session_id("grpc-prompt-scores");
    for (int32_t id : prompt) request.add_prompt_token_ids(id);
    request.mutable_sampling()->set_max_new_tokens(max_new_tokens);
    request.mutable_sampling()->set_top_k(1);
    request.mutable_sampling()->set_ignore_eos(true);
    request.set_echo(echo);
    request.set_prompt_logprobs(prompt_logprobs);
    if (prompt_logprobs) request.set_top_logprobs(2);
    auto reader = cluster_->stub(replica).Generate(&context, request);
    v1::GenerateResponse response;
    bool first_delta = true;
    while (reader->Read(&response)) {
      if (!response.has_delta()) continue;
      if (first_delta && echo && echoed != nullptr) {
        *echoed = response;
      } else if (generated != nullptr) {
        generated->insert(generated->end(), response.delta().token_ids().begin(),
                          response.delta().token_ids().end());
      }
      first_delta = false;
    }
    return reader->Finish();
  };
  std::vector<int32_t> history = *first;
  const grpc::Status started = generate(0, *first, false, false, 3, nullptr, &history);
  ASSERT_TRUE(started.ok()) << started.error_message();
  ASSERT_EQ(history.size(), first->size() + 3);

  // The reference: the history, then the new prompt one token at a time.
  ReferenceSession reference(history);
  const auto want = LogSoftmaxBefore(reference, *second);
  v1::GenerateResponse echoed;
  ASSERT_TRUE(generate(1, *second, true, true, 1, &echoed, nullptr).ok());
  ASSERT_EQ(echoed.delta().token_ids_size(), static_cast<int>(second->size()));
  ASSERT_EQ(echoed.delta().logprobs_size(), static_cast<int>(second->size()));
  for (size_t i = 0; i < second->size(); ++i) {
    const v1::TokenLogprob& t = echoed.delta().logprobs(static_cast<int>(i));
    EXPECT_EQ(t.token_id(), (*second)[i]);
    EXPECT_NEAR(t.logprob(), want[i][(*second)[i]], kTolerance) << i;
    ASSERT_EQ(t.top_logprobs_size(), 2);
    EXPECT_GE(t.top_logprobs(0).logprob(), t.top_logprobs(1).logprob());
  }
  // prompt_logprobs needs echo.
  EXPECT_EQ(generate(0, *second, false, true, 1, nullptr, nullptr).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace kvfold::testing
