// Logit adjustments through both fronts of a real replica (stories260K): greedy tokens
// under presence, frequency and repetition penalties and a logit bias equal a greedy pick
// over the engine's own logits adjusted here, in-process, by the definitions of
// docs/api.md; min_p drops what it should; the reported log-probabilities stay those of the
// raw logits; out-of-range values are refused.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inference_svc/engine/sampler.h"
#include "inference_svc/tokenizer/tokenizer.h"
#include "tests/common/prometheus_text.h"
#include "tests/integration/http_api_fixture.h"
#include "tests/integration/reference_engine.h"

namespace kvfold::testing {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

struct Penalties {
  float presence = 0;
  float frequency = 0;
  float repetition = 1;
  std::map<int32_t, float> bias;  // logit_bias
};

struct Step {
  int32_t token = 0;
  double raw_logprob = 0;  // log_softmax of the unpenalised logits at `token`
};

// Greedy decoding of `steps` tokens after `prompt` on an in-process engine, each pick over
// the logits with `p` applied: the bias added, then repetition over the prompt and
// generated ids (positive logits divided, negative multiplied), then frequency x count +
// presence for generated ids.
std::vector<Step> PenalisedGreedy(const std::vector<int32_t>& prompt, int steps, Penalties p) {
  ReferenceSession session(prompt);
  if (!session.ok()) return {};
  std::map<int32_t, int> generated;
  std::vector<Step> out;
  for (int step = 0; step < steps; ++step) {
    std::span<const float> raw = session.Logits();
    std::vector<float> logits(raw.begin(), raw.end());
    for (size_t id = 0; id < logits.size(); ++id) {
      const int32_t i = static_cast<int32_t>(id);
      const bool in_prompt = std::find(prompt.begin(), prompt.end(), i) != prompt.end();
      const int n = generated.contains(i) ? generated[i] : 0;
      if (p.bias.contains(i)) logits[id] += p.bias.at(i);
      if (in_prompt || n > 0) {
        logits[id] = logits[id] > 0 ? logits[id] / p.repetition : logits[id] * p.repetition;
      }
      if (n > 0) logits[id] -= p.frequency * static_cast<float>(n) + p.presence;
    }
    const int32_t next =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    const double max_raw = *std::max_element(raw.begin(), raw.end());
    double z = 0;
    for (float l : raw) z += std::exp(l - max_raw);
    out.push_back({next, raw[next] - max_raw - std::log(z)});
    ++generated[next];
    session.Append(next);
  }
  return out;
}

constexpr int kSteps = 40;
constexpr char kPrompt[] = "Once upon a time, there was a little dog. The dog";

class HttpSamplingTest : public HttpApiTest {
 protected:
  void SetUp() override {
    HttpApiTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto tokenizer = Tokenizer::Load(std::filesystem::path(SharedModel()).parent_path().string());
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = std::move(*tokenizer);
    auto ids = tokenizer_->Encode(kPrompt, /*add_bos=*/true);
    ASSERT_TRUE(ids.ok());
    prompt_ = std::move(*ids);
  }

  static std::vector<int32_t> Ids(const std::vector<Step>& steps, size_t n) {
    std::vector<int32_t> out;
    for (size_t i = 0; i < std::min(n, steps.size()); ++i) out.push_back(steps[i].token);
    return out;
  }

  bool Create(const std::string& session, v1::KvMode mode) {
    const grpc::Status status = CreateGrpcSession(1, session, mode);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return status.ok();
  }

  // A greedy gRPC turn of `prompt_` on `session` (replica `replica`) under `p`.
  std::vector<int32_t> Generate(int replica, const std::string& session, int max_new_tokens,
                                Penalties p) {
    grpc::ClientContext context;
    Authorize(&context);
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::GenerateRequest request;
    request.set_session_id(session);
    for (int32_t id : prompt_) request.add_prompt_token_ids(id);
    v1::SamplingParams* s = request.mutable_sampling();
    s->set_max_new_tokens(max_new_tokens);
    s->set_top_k(1);
    s->set_presence_penalty(p.presence);
    s->set_frequency_penalty(p.frequency);
    s->set_repetition_penalty(p.repetition);
    for (const auto& [id, bias] : p.bias) (*s->mutable_logit_bias())[id] = bias;
    auto reader = cluster_->stub(replica).Generate(&context, request);
    std::vector<int32_t> out;
    v1::GenerateResponse response;
    while (reader->Read(&response)) {
      for (int32_t id : response.delta().token_ids()) out.push_back(id);
    }
    const grpc::Status status = reader->Finish();
    EXPECT_TRUE(status.ok()) << status.error_message();
    return out;
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<int32_t> prompt_;
};

TEST_F(HttpSamplingTest, PenalisedGreedyIsTheEnginesLogitsPenalised) {
  const Penalties penalties{0.4f, 0.8f, 1.3f, {}};
  const std::vector<Step> plain = PenalisedGreedy(prompt_, kSteps, Penalties());
  const std::vector<Step> want = PenalisedGreedy(prompt_, kSteps, penalties);
  // The penalties change this continuation: the comparison can tell them from none.
  ASSERT_NE(Ids(plain, kSteps), Ids(want, kSteps));
  // A full-mode session computes what the in-process plain session does.
  ASSERT_TRUE(Create("penalties-full", v1::KV_MODE_FULL));
  ASSERT_TRUE(Create("penalties-none", v1::KV_MODE_FULL));
  const std::vector<int32_t> got = Generate(1, "penalties-full", kSteps, penalties);
  ASSERT_GE(got.size(), 20u);  // the model may end the story early
  EXPECT_EQ(got, Ids(want, got.size()));
  const std::vector<int32_t> none = Generate(1, "penalties-none", kSteps, Penalties());
  EXPECT_EQ(none, Ids(plain, none.size()));
}

TEST_F(HttpSamplingTest, HttpPenaltiesAreGrpcsAndLogprobsStayRaw) {
  const Penalties penalties{0.4f, 0.8f, 1.3f, {}};
  json body = {{"prompt", kPrompt},        {"max_tokens", kSteps},
               {"temperature", 0},         {"logprobs", 3},
               {"presence_penalty", 0.4},  {"frequency_penalty", 0.8},
               {"repetition_penalty", 1.3}};
  HttpReply r = Post(0, "/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json logprobs = Body(r)["choices"][0]["logprobs"];
  // The same turn through gRPC on the other replica, the replicas' default mode as HTTP's.
  ASSERT_TRUE(Create("penalties-default", v1::KV_MODE_UNSPECIFIED));
  const std::vector<int32_t> ids = Generate(1, "penalties-default", kSteps, penalties);
  json texts = json::array();
  for (int32_t id : ids) texts.push_back(std::string(tokenizer_->TokenBytes(id)));
  EXPECT_EQ(logprobs["tokens"], texts);
  // Log-probabilities are the raw distribution's: a penalised pick is not its top token.
  int below_top = 0;
  for (size_t i = 0; i < logprobs["tokens"].size(); ++i) {
    double top = -1e30;
    for (const auto& [token, lp] : logprobs["top_logprobs"][i].items()) {
      top = std::max(top, lp.get<double>());
    }
    const double chosen = logprobs["token_logprobs"][i].get<double>();
    EXPECT_LE(chosen, top + 1e-6) << i;
    if (chosen < top - 1e-3) ++below_top;
  }
  EXPECT_GT(below_top, 0) << r.body;
}

TEST_F(HttpSamplingTest, LogitBiasBansTokensAsTheEnginesLogitsBiased) {
  const std::vector<Step> plain = PenalisedGreedy(prompt_, kSteps, Penalties());
  // Ban the plain continuation's two most frequent tokens, and favour one it never uses.
  std::map<int32_t, int> count;
  for (const Step& s : plain) ++count[s.token];
  std::vector<std::pair<int, int32_t>> by_count;
  for (const auto& [id, n] : count) by_count.emplace_back(n, id);
  std::sort(by_count.rbegin(), by_count.rend());
  Penalties biased;
  biased.bias[by_count[0].second] = -100;
  biased.bias[by_count[1].second] = -100;
  int32_t unused = 3;
  while (count.contains(unused)) ++unused;
  biased.bias[unused] = 4.5f;
  const std::vector<Step> want = PenalisedGreedy(prompt_, kSteps, biased);
  ASSERT_NE(Ids(plain, kSteps), Ids(want, kSteps));
  ASSERT_TRUE(Create("bias-full", v1::KV_MODE_FULL));
  const std::vector<int32_t> got = Generate(1, "bias-full", kSteps, biased);
  ASSERT_GE(got.size(), 20u);
  EXPECT_EQ(got, Ids(want, got.size()));
  for (int32_t id : got) {
    EXPECT_NE(id, by_count[0].second);
    EXPECT_NE(id, by_count[1].second);
  }

  // HTTP (object keys are id strings) and gRPC on the replicas' default mode agree.
  json bias = json::object();
  for (const auto& [id, b] : biased.bias) bias[std::to_string(id)] = b;
  HttpReply r = Post(0, "/v1/completions",
                     {{"prompt", kPrompt},
                      {"max_tokens", kSteps},
                      {"temperature", 0},
                      {"logprobs", 0},
                      {"logit_bias", bias}});
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_TRUE(Create("bias-default", v1::KV_MODE_UNSPECIFIED));
  json texts = json::array();
  for (int32_t id : Generate(1, "bias-default", kSteps, biased)) {
    texts.push_back(std::string(tokenizer_->TokenBytes(id)));
  }
  EXPECT_EQ(Body(r)["choices"][0]["logprobs"]["tokens"], texts);

  // An id outside the vocabulary is refused, over HTTP and gRPC.
  HttpReply outside =
      Post(0, "/v1/completions", {{"prompt", kPrompt}, {"logit_bias", {{"512", 1}}}});
  EXPECT_EQ(outside.status, 400) << outside.body;
  EXPECT_THAT(outside.body, HasSubstr("logit_bias token id 512 outside [0, 512)"));
  grpc::ClientContext context;
  Authorize(&context);
  v1::GenerateRequest request;
  request.set_session_id("bias-full");
  request.add_prompt_token_ids(1);
  (*request.mutable_sampling()->mutable_logit_bias())[512] = 1;
  auto reader = cluster_->stub(1).Generate(&context, request);
  v1::GenerateResponse response;
  while (reader->Read(&response)) {
  }
  const grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("logit_bias token id 512 outside [0, 512)"));
}

// At temperature 1 with no other filter, min_p keeps exactly the tokens whose raw
// probability is at least min_p times the most likely one's: the reported (raw)
// log-probabilities show it.
TEST_F(HttpSamplingTest, MinPDropsTheUnlikelyTokens) {
  constexpr double kMinP = 0.3;
  auto below_cut = [&](const json& body) {
    HttpReply r = Post(0, "/v1/completions", body);
    EXPECT_EQ(r.status, 200) << r.body;
    const json logprobs = Body(r)["choices"][0]["logprobs"];
    int below = 0;
    for (size_t i = 0; i < logprobs["tokens"].size(); ++i) {
      double top = -1e30;
      for (const auto& [token, lp] : logprobs["top_logprobs"][i].items()) {
        top = std::max(top, lp.get<double>());
      }
      below += logprobs["token_logprobs"][i].get<double>() < top + std::log(kMinP) - 1e-4;
    }
    return below;
  };
  int unfiltered = 0;
  for (int seed = 1; seed <= 3; ++seed) {
    json body = {{"prompt", kPrompt},
                 {"max_tokens", 48},
                 {"temperature", 1},
                 {"seed", seed},
                 {"logprobs", 1}};
    unfiltered += below_cut(body);
    body["min_p"] = kMinP;
    EXPECT_EQ(below_cut(body), 0) << "seed " << seed;
  }
  // Without min_p the same seeds do draw such tokens: the check can tell.
  EXPECT_GT(unfiltered, 0);
}

TEST_F(HttpSamplingTest, SampledTurnsStayReproducibleUnderPenalties) {
  json body = {{"prompt", kPrompt},         {"max_tokens", 24},
               {"temperature", 0.9},        {"seed", 1234},
               {"presence_penalty", -0.5},  {"frequency_penalty", 1},
               {"repetition_penalty", 0.9}, {"top_k", 40}};
  HttpReply a = Post(0, "/v1/completions", body);
  HttpReply b = Post(1, "/v1/completions", body);
  ASSERT_EQ(a.status, 200) << a.body;
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_EQ(Body(a)["choices"][0]["text"], Body(b)["choices"][0]["text"]);
}

// Sampled turns decoding side by side share decode steps, and the replica picks their
// tokens on its threads in parallel: each turn's tokens are still its own seed's draws
// over its own logits, those of an in-process engine and sampler (docs/engine.md,
// "Sampling").
TEST_F(HttpSamplingTest, ConcurrentSampledTurnsDrawTheirOwnSeedsTokens) {
  constexpr int kTurns = 6, kTokens = 32;
  auto params = [](int turn) {
    engine::SamplingParams p;
    p.temperature = 0.9f;
    p.top_p = turn % 2 == 0 ? 0.9f : 1.0f;
    p.top_k = turn % 3 == 0 ? 40 : 0;
    p.seed = 500 + turn;
    p.max_new_tokens = kTokens;
    return p;
  };
  auto metric = [&](const std::string& name, const std::map<std::string, std::string>& labels) {
    return ParsePrometheusText(HttpCall(port_[1], "GET", "/metrics").body).Value(name, labels);
  };
  const double steps_before = metric("kvfold_decode_steps_total", {});
  const double tokens_before = metric("kvfold_inference_tokens_total", {{"kind", "generated"}});
  std::vector<std::vector<int32_t>> got(kTurns);
  std::vector<std::thread> threads;
  for (int t = 0; t < kTurns; ++t) {
    ASSERT_TRUE(Create("concurrent-" + std::to_string(t), v1::KV_MODE_FULL));
  }
  for (int t = 0; t < kTurns; ++t) {
    threads.emplace_back([&, t] {
      grpc::ClientContext context;
      Authorize(&context);
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
      v1::GenerateRequest request;
      request.set_session_id("concurrent-" + std::to_string(t));
      for (int32_t id : prompt_) request.add_prompt_token_ids(id);
      const engine::SamplingParams p = params(t);
      v1::SamplingParams* s = request.mutable_sampling();
      s->set_temperature(p.temperature);
      s->set_top_p(p.top_p);
      s->set_top_k(p.top_k);
      s->set_seed(p.seed);
      s->set_max_new_tokens(p.max_new_tokens);
      auto reader = cluster_->stub(1).Generate(&context, request);
      v1::GenerateResponse response;
      while (reader->Read(&response)) {
        for (int32_t id : response.delta().token_ids()) got[t].push_back(id);
      }
      const grpc::Status status = reader->Finish();
      EXPECT_TRUE(status.ok()) << status.error_message();
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kTurns; ++t) {
    ReferenceSession session(prompt_);
    ASSERT_TRUE(session.ok());
    engine::Sampler sampler(static_cast<int>(session.Logits().size()), params(t));
    std::vector<int32_t> want;
    for (int step = 0; step < kTokens; ++step) {
      const int32_t token = sampler.Sample(session.Logits());
      want.push_back(token);
      const int eos[] = {2};
      if (sampler.IsStop(token, eos)) break;
      session.Append(token);
    }
    EXPECT_EQ(got[t], want) << "turn " << t;
  }
  // The turns did share steps: fewer steps than generated tokens.
  const double steps = metric("kvfold_decode_steps_total", {}) - steps_before;
  const double tokens =
      metric("kvfold_inference_tokens_total", {{"kind", "generated"}}) - tokens_before;
  EXPECT_GT(tokens, 0);
  EXPECT_LT(steps, tokens);
}

// vLLM's stopping controls: stop_token_ids end the turn (the id's text not shown),
// ignore_eos lets EOS pass, min_tokens holds both back for its first tokens. The tokens
// forced by a +100 bias make every outcome exact.
TEST_F(HttpSamplingTest, StopTokenIdsIgnoreEosAndMinTokens) {
  auto complete = [&](json extra) {
    json body = {{"prompt", "Once upon a time"}, {"max_tokens", 8}, {"temperature", 0}};
    body.update(extra);
    HttpReply r = Post(0, "/v1/completions", body);
    EXPECT_EQ(r.status, 200) << r.body;
    return Body(r);
  };
  auto tokens = [](const json& b) { return b["usage"]["completion_tokens"].get<int>(); };
  auto finish = [](const json& b) { return b["choices"][0]["finish_reason"].get<std::string>(); };
  auto text = [](const json& b) { return b["choices"][0]["text"].get<std::string>(); };

  const json forced_300 = {{"300", 100}};
  json stopped = complete({{"logit_bias", forced_300}, {"stop_token_ids", {300}}});
  EXPECT_EQ(tokens(stopped), 1);
  EXPECT_EQ(finish(stopped), "stop");
  EXPECT_EQ(text(stopped), "");  // the stop id's text is not shown
  // Held back for 3 tokens, the picks are those of a run with 300 banned.
  const json held =
      complete({{"logit_bias", forced_300}, {"stop_token_ids", {300}}, {"min_tokens", 3}});
  const json banned = complete({{"logit_bias", {{"300", -100}}}, {"max_tokens", 3}});
  EXPECT_EQ(tokens(held), 4);
  EXPECT_EQ(finish(held), "stop");
  EXPECT_EQ(text(held), text(banned));

  const json forced_eos = {{"2", 100}};
  EXPECT_EQ(tokens(complete({{"logit_bias", forced_eos}})), 1);
  const json ignoring = complete({{"logit_bias", forced_eos}, {"ignore_eos", true}});
  EXPECT_EQ(tokens(ignoring), 8);
  EXPECT_EQ(finish(ignoring), "length");
  const json eos_held = complete({{"logit_bias", forced_eos}, {"min_tokens", 5}});
  const json eos_banned = complete({{"logit_bias", {{"2", -100}}}, {"max_tokens", 5}});
  EXPECT_EQ(tokens(eos_held), 6);
  EXPECT_EQ(finish(eos_held), "stop");
  EXPECT_EQ(text(eos_held), text(eos_banned));

  const struct {
    json extra;
    const char* param;  // nullptr: checked by the replica, no param
    const char* message;
  } bad[] = {
      {{{"min_tokens", 9}}, "min_tokens", "'min_tokens' is 9; it must be at most max_tokens (8)"},
      {{{"min_tokens", -1}}, "min_tokens", "'min_tokens' is -1"},
      {{{"stop_token_ids", "2"}}, "stop_token_ids", "must be an array of token ids"},
      {{{"stop_token_ids", {1, -2}}}, "stop_token_ids", "integers >= 0"},
      {{{"stop_token_ids", {600}}}, nullptr, "stop token id 600 outside [0, 512)"},
      {{{"ignore_eos", "yes"}}, "ignore_eos", "'ignore_eos' must be a boolean"},
  };
  for (const auto& c : bad) {
    json body = {{"prompt", "Once"}, {"max_tokens", 8}};
    body.update(c.extra);
    HttpReply r = Post(0, "/v1/completions", body);
    EXPECT_EQ(r.status, 400) << c.extra.dump() << ": " << r.body;
    EXPECT_THAT(Body(r)["error"]["message"].get<std::string>(), HasSubstr(c.message))
        << c.extra.dump();
    if (c.param != nullptr) {
      EXPECT_EQ(Body(r)["error"]["param"], c.param) << c.extra.dump();
    }
  }

  // gRPC: the same min_tokens through SamplingParams.
  ASSERT_TRUE(CreateGrpcSession(1, "min-tokens-grpc").ok());
  grpc::ClientContext context;
  Authorize(&context);
  v1::GenerateRequest request;
  request.set_session_id("min-tokens-grpc");
  request.set_prompt("Once upon a time");
  request.mutable_sampling()->set_top_k(1);
  request.mutable_sampling()->set_max_new_tokens(8);
  request.mutable_sampling()->set_min_tokens(5);
  (*request.mutable_sampling()->mutable_logit_bias())[2] = 100;
  auto reader = cluster_->stub(1).Generate(&context, request);
  v1::GenerateResponse response;
  uint32_t generated = 0;
  while (reader->Read(&response)) {
    if (response.has_final()) generated = response.final().usage().generated_tokens();
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(generated, 6u);
}

TEST_F(HttpSamplingTest, OutOfRangePenaltiesAreRefused) {
  struct Case {
    const char* field;
    json value;
    const char* message;
  };
  const Case cases[] = {
      {"presence_penalty", 2.5, "'presence_penalty' is 2.5; it must be in [-2, 2]"},
      {"frequency_penalty", -3, "'frequency_penalty' is -3; it must be in [-2, 2]"},
      {"frequency_penalty", "high", "'frequency_penalty' must be a number"},
      {"repetition_penalty", 0, "'repetition_penalty' must be greater than 0"},
      {"top_k", -2, "'top_k' is -2; it must be in [-1, "},
  };
  for (const Case& c : cases) {
    json body = kChat;
    body[c.field] = c.value;
    HttpReply r = Post(0, "/v1/chat/completions", body);
    EXPECT_EQ(r.status, 400) << c.field << ": " << r.body;
    EXPECT_THAT(r.body, HasSubstr(c.message)) << r.body;
    EXPECT_EQ(Body(r)["error"]["param"], c.field) << r.body;
  }

  ASSERT_TRUE(CreateGrpcSession(0, "penalties-refused").ok());
  for (auto set : {+[](v1::SamplingParams* s) { s->set_presence_penalty(-2.01f); },
                   +[](v1::SamplingParams* s) { s->set_frequency_penalty(NAN); },
                   +[](v1::SamplingParams* s) { s->set_repetition_penalty(-1); }}) {
    grpc::ClientContext context;
    Authorize(&context);
    v1::GenerateRequest request;
    request.set_session_id("penalties-refused");
    request.add_prompt_token_ids(1);
    set(request.mutable_sampling());
    auto reader = cluster_->stub(0).Generate(&context, request);
    v1::GenerateResponse response;
    while (reader->Read(&response)) {
    }
    const grpc::Status status = reader->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr("_penalty")) << status.error_message();
  }
}

}  // namespace
}  // namespace kvfold::testing
