// Plain sessions: export/import continues exactly, batched decode across sessions equals
// per-session decode, accounting, sampler determinism and RNG save/restore, and the
// steady-state decode loop performs no heap allocation.
#include "inference_svc/engine/session.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <new>
#include <random>

#include "gtest/gtest.h"
#include "inference_svc/engine/sampler.h"
#include "inference_svc/model/random_model.h"
#include "kernels/cpu/elementwise.h"
#include "tests/testing/count_allocations.h"

namespace kvfold::engine {
namespace {

SamplingParams P(float temperature, int top_k = 0, float top_p = 1.0f, uint64_t seed = 0) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.seed = seed;
  return p;
}

struct Rig {
  model::ModelFile model;
  std::unique_ptr<kernels::Backend> backend;
  std::unique_ptr<Engine> engine;
};

Rig Make(bool reference = false, core::DType kv_dtype = core::DType::kF32) {
  Rig s;
  s.model = model::MakeRandomModel(*model::NamedShape("tiny-odd"), 3, core::DType::kF32);
  kernels::CpuBackendOptions bo;
  bo.reference = reference;
  bo.num_threads = 2;
  s.backend = kernels::CreateCpuBackend(bo);
  EngineOptions options;
  options.kv_pool_bytes = 32 << 20;
  options.kv_dtype = kv_dtype;
  s.engine = std::move(*Engine::Create(s.model, s.backend.get(), options));
  return s;
}

std::vector<float> Copy(std::span<const float> s) { return {s.begin(), s.end()}; }

TEST(SessionTest, FullModeExportImportContinuesBitwise) {
  Rig s = Make();
  SessionOptions o;
  auto a = *CreatePlainSession(s.engine.get(), o);
  ASSERT_TRUE(a->Prefill(std::vector<int32_t>{1, 5, 9, 33, 200, 17}).ok());
  for (int32_t id : {4, 8, 15}) ASSERT_TRUE(a->Append(id).ok());
  auto state = a->ExportState();
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->total_tokens, 9);
  EXPECT_EQ(state->window_token_ids.size(), 9u);
  auto b = *CreatePlainSession(s.engine.get(), o);
  ASSERT_TRUE(b->ImportState(*state).ok());
  EXPECT_EQ(Copy(a->Logits()), Copy(b->Logits()));
  for (int32_t id : {16, 23, 42}) {
    ASSERT_TRUE(a->Append(id).ok());
    ASSERT_TRUE(b->Append(id).ok());
    EXPECT_EQ(Copy(a->Logits()), Copy(b->Logits()));
  }
  EXPECT_EQ(b->ImportState(*state).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(SessionTest, SinkStateAndAccounting) {
  Rig s = Make();
  SessionOptions o;
  o.mode = KvMode::kSink;
  o.window_size = 10;
  o.sink_tokens = 3;
  auto a = *CreatePlainSession(s.engine.get(), o);
  std::vector<int32_t> ids;
  for (int i = 0; i < 40; ++i) ids.push_back(3 + i);
  ASSERT_TRUE(a->Prefill(ids).ok());
  EXPECT_EQ(a->TotalTokens(), 40);
  EXPECT_EQ(a->ResidentTokens(), 13);
  auto st = *a->ExportState();
  EXPECT_EQ(st.sink_token_ids, (std::vector<int32_t>{3, 4, 5}));
  EXPECT_EQ(st.window_token_ids, std::vector<int32_t>(ids.end() - 10, ids.end()));
  EXPECT_GT(a->KvBytesResident(), 0u);
  // Import on a fresh session: same resident ids and the same accounting.
  auto b = *CreatePlainSession(s.engine.get(), o);
  ASSERT_TRUE(b->ImportState(st).ok());
  EXPECT_EQ(b->TotalTokens(), 40);
  EXPECT_EQ(b->ResidentTokens(), 13);
  SessionOptions wrong = o;
  wrong.window_size = 11;
  auto c = *CreatePlainSession(s.engine.get(), wrong);
  EXPECT_EQ(c->ImportState(st).code(), absl::StatusCode::kInvalidArgument);
}

TEST(SessionTest, AppendBatchEqualsSingleAppends) {
  Rig s = Make();
  std::vector<std::unique_ptr<Session>> batched, single;
  const KvMode modes[] = {KvMode::kFull, KvMode::kSliding, KvMode::kSink};
  for (int i = 0; i < 3; ++i) {
    SessionOptions o;
    o.mode = modes[i];
    o.window_size = 6;
    o.sink_tokens = 2;
    batched.push_back(*CreatePlainSession(s.engine.get(), o));
    single.push_back(*CreatePlainSession(s.engine.get(), o));
    std::vector<int32_t> prompt(3 + 4 * i, 7 + i);
    ASSERT_TRUE(batched[i]->Prefill(prompt).ok());
    ASSERT_TRUE(single[i]->Prefill(prompt).ok());
  }
  ForwardResult scratch;
  std::vector<Session*> ptrs = {batched[0].get(), batched[1].get(), batched[2].get()};
  for (int step = 0; step < 12; ++step) {
    std::vector<int32_t> ids = {10 + step, 20 + step, 30 + step};
    ASSERT_TRUE(AppendBatch(*s.engine, ptrs, ids, &scratch).ok());
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(single[i]->Append(ids[i]).ok());
      EXPECT_EQ(Copy(single[i]->Logits()), Copy(batched[i]->Logits())) << step << " " << i;
    }
  }
}

// Session::CopyFrom: a copy continues exactly as the session copied and as a fresh session
// fed the same tokens, in every plain mode and KV dtype (an int8 copy holds sealed blocks
// and the open block's F32 page), and the copied session is not changed by the copy's
// steps.
class CopyTest : public ::testing::TestWithParam<core::DType> {};

TEST_P(CopyTest, CopyContinuesBitwise) {
  Rig s = Make(false, GetParam());
  for (KvMode mode : {KvMode::kFull, KvMode::kSliding, KvMode::kSink}) {
    SCOPED_TRACE(KvModeName(mode));
    SessionOptions o;
    o.mode = mode;
    o.window_size = 10;
    o.sink_tokens = 3;
    std::vector<int32_t> prompt;
    for (int i = 0; i < 37; ++i) prompt.push_back((7 * i + 3) % s.engine->config().vocab_size);
    auto source = *CreatePlainSession(s.engine.get(), o);
    auto fresh = *CreatePlainSession(s.engine.get(), o);
    ASSERT_TRUE(source->Prefill(prompt).ok());
    ASSERT_TRUE(fresh->Prefill(prompt).ok());
    const int free_before = s.engine->pool().free_blocks();
    auto copy = *CreatePlainSession(s.engine.get(), o);
    ASSERT_TRUE(copy->CopyFrom(*source).ok());
    EXPECT_LT(s.engine->pool().free_blocks(), free_before);  // its own blocks
    EXPECT_EQ(copy->TotalTokens(), 37);
    EXPECT_EQ(copy->ResidentTokens(), source->ResidentTokens());
    EXPECT_EQ(copy->KvBytesResident(), source->KvBytesResident());
    EXPECT_EQ(Copy(copy->Logits()), Copy(fresh->Logits()));
    auto sc = copy->ExportState(), sf = fresh->ExportState();
    ASSERT_TRUE(sc.ok() && sf.ok());
    EXPECT_EQ(sc->window_token_ids, sf->window_token_ids);
    EXPECT_EQ(sc->sink_token_ids, sf->sink_token_ids);
    // The copy steps first, then the others the same tokens.
    std::vector<std::vector<float>> copy_logits;
    for (int step = 0; step < 20; ++step) {
      ASSERT_TRUE(copy->Append(11 + step).ok());
      copy_logits.push_back(Copy(copy->Logits()));
    }
    for (int step = 0; step < 20; ++step) {
      ASSERT_TRUE(source->Append(11 + step).ok());
      ASSERT_TRUE(fresh->Append(11 + step).ok());
      EXPECT_EQ(copy_logits[step], Copy(fresh->Logits())) << step;
      EXPECT_EQ(Copy(source->Logits()), Copy(fresh->Logits())) << step;
    }
  }
}

TEST_P(CopyTest, CopyRefusesWhatItCannotCopy) {
  Rig s = Make(false, GetParam());
  SessionOptions full, sliding;
  sliding.mode = KvMode::kSliding;
  sliding.window_size = 10;
  const std::vector<int32_t> prompt(40, 9);
  auto source = *CreatePlainSession(s.engine.get(), full);
  ASSERT_TRUE(source->Prefill(prompt).ok());
  // Another mode, or geometry.
  auto other_mode = *CreatePlainSession(s.engine.get(), sliding);
  EXPECT_EQ(other_mode->CopyFrom(*source).code(), absl::StatusCode::kFailedPrecondition);
  auto windowed = *CreatePlainSession(s.engine.get(), sliding);
  ASSERT_TRUE(windowed->Prefill(prompt).ok());
  SessionOptions wider = sliding;
  wider.window_size = 11;
  auto other_window = *CreatePlainSession(s.engine.get(), wider);
  EXPECT_EQ(other_window->CopyFrom(*windowed).code(), absl::StatusCode::kFailedPrecondition);
  // A session that holds tokens.
  auto used = *CreatePlainSession(s.engine.get(), full);
  ASSERT_TRUE(used->Prefill(std::vector<int32_t>{1, 2}).ok());
  EXPECT_EQ(used->CopyFrom(*source).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(used->TotalTokens(), 2);
  // A source with a prompt in flight.
  auto in_flight = *CreatePlainSession(s.engine.get(), full);
  std::vector<int32_t> long_prompt(300, 5);
  ASSERT_TRUE(in_flight->StartPrefill(long_prompt).ok());
  auto target = *CreatePlainSession(s.engine.get(), full);
  EXPECT_EQ(target->CopyFrom(*in_flight).code(), absl::StatusCode::kFailedPrecondition);
  // A pool without room: refused whole, the target stays fresh and usable.
  std::vector<int32_t> taken;
  while (s.engine->pool().free_blocks() > 1) taken.push_back(*s.engine->pool().AllocateBlock());
  EXPECT_EQ(target->CopyFrom(*source).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(target->TotalTokens(), 0);
  EXPECT_EQ(s.engine->pool().free_blocks(), 1);
  for (int32_t b : taken) s.engine->pool().FreeBlock(b);
  ASSERT_TRUE(target->CopyFrom(*source).ok());
  EXPECT_EQ(Copy(target->Logits()), Copy(source->Logits()));
}

// A prefix of a full-mode session: its first tokens' entries, no logits until the next
// token; fed the rest, the copy equals a session fed all of it. INT8 KV copies whole blocks
// only; the other modes copy whole sessions only.
TEST_P(CopyTest, PrefixCopyContinuesAsTheSessionFedThePrefix) {
  Rig s = Make(false, GetParam());
  const bool int8 = GetParam() == core::DType::kI8;
  SessionOptions full;
  std::vector<int32_t> ids;
  for (int i = 0; i < 60; ++i) ids.push_back((5 * i + 2) % s.engine->config().vocab_size);
  auto source = *CreatePlainSession(s.engine.get(), full);
  ASSERT_TRUE(source->Prefill(std::span<const int32_t>(ids).first(45)).ok());
  for (int i = 45; i < 50; ++i) ASSERT_TRUE(source->Append(ids[i]).ok());
  const int cut = int8 ? 32 : 29;
  auto copy = *CreatePlainSession(s.engine.get(), full);
  ASSERT_TRUE(copy->CopyPrefixFrom(*source, cut).ok());
  EXPECT_EQ(copy->TotalTokens(), cut);
  EXPECT_EQ(copy->ResidentTokens(), cut);
  EXPECT_TRUE(copy->Logits().empty());
  ASSERT_EQ(copy->ExportState()->window_token_ids,
            std::vector<int32_t>(ids.begin(), ids.begin() + cut));
  auto fresh = *CreatePlainSession(s.engine.get(), full);
  ASSERT_TRUE(fresh->Prefill(std::span<const int32_t>(ids).first(cut)).ok());
  ASSERT_TRUE(copy->Prefill(std::span<const int32_t>(ids).subspan(cut)).ok());
  ASSERT_TRUE(fresh->Prefill(std::span<const int32_t>(ids).subspan(cut)).ok());
  EXPECT_EQ(Copy(copy->Logits()), Copy(fresh->Logits()));
  for (int step = 0; step < 8; ++step) {
    ASSERT_TRUE(copy->Append(3 + step).ok());
    ASSERT_TRUE(fresh->Append(3 + step).ok());
    EXPECT_EQ(Copy(copy->Logits()), Copy(fresh->Logits())) << step;
  }
  // All of it is CopyFrom; more than all, none, a cut inside an INT8 block and other
  // modes are refused.
  auto whole = *CreatePlainSession(s.engine.get(), full);
  ASSERT_TRUE(whole->CopyPrefixFrom(*source, 50).ok());
  EXPECT_EQ(Copy(whole->Logits()), Copy(source->Logits()));
  auto refused = *CreatePlainSession(s.engine.get(), full);
  EXPECT_EQ(refused->CopyPrefixFrom(*source, 51).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused->CopyPrefixFrom(*source, 0).code(), absl::StatusCode::kFailedPrecondition);
  if (int8) {
    EXPECT_EQ(refused->CopyPrefixFrom(*source, 30).code(), absl::StatusCode::kFailedPrecondition);
  }
  EXPECT_EQ(refused->TotalTokens(), 0);
}

// A windowed session's prefix while it has evicted nothing (its cache is then full mode's,
// sinks in their own segment): a copy fed the rest equals a session fed it all; once the
// window has evicted, a prefix is refused (whole copies only).
TEST_P(CopyTest, WindowedPrefixCopyBeforeAnyEviction) {
  Rig s = Make(false, GetParam());
  const bool int8 = GetParam() == core::DType::kI8;
  std::vector<int32_t> ids;
  for (int i = 0; i < 200; ++i) ids.push_back((3 * i + 5) % s.engine->config().vocab_size);
  for (KvMode mode : {KvMode::kSliding, KvMode::kSink}) {
    SCOPED_TRACE(KvModeName(mode));
    SessionOptions o;
    o.mode = mode;
    o.window_size = 64;
    o.sink_tokens = 3;
    const int sinks = mode == KvMode::kSink ? 3 : 0;
    auto source = *CreatePlainSession(s.engine.get(), o);
    ASSERT_TRUE(source->Prefill(std::span<const int32_t>(ids).first(50)).ok());
    const int cut = sinks + (int8 ? 32 : 29);  // INT8: whole blocks of the main segment
    auto copy = *CreatePlainSession(s.engine.get(), o);
    ASSERT_TRUE(copy->CopyPrefixFrom(*source, cut).ok());
    EXPECT_EQ(copy->TotalTokens(), cut);
    EXPECT_TRUE(copy->Logits().empty());
    auto fresh = *CreatePlainSession(s.engine.get(), o);
    ASSERT_TRUE(fresh->Prefill(std::span<const int32_t>(ids).first(cut)).ok());
    auto sc = copy->ExportState(), sf = fresh->ExportState();
    ASSERT_TRUE(sc.ok() && sf.ok());
    EXPECT_EQ(sc->window_token_ids, sf->window_token_ids);
    EXPECT_EQ(sc->sink_token_ids, sf->sink_token_ids);
    // Fed on past the window: evictions alike, logits bit for bit.
    ASSERT_TRUE(copy->Prefill(std::span<const int32_t>(ids).subspan(cut, 100 - cut)).ok());
    ASSERT_TRUE(fresh->Prefill(std::span<const int32_t>(ids).subspan(cut, 100 - cut)).ok());
    EXPECT_EQ(Copy(copy->Logits()), Copy(fresh->Logits()));
    for (int i = 100; i < 110; ++i) {
      ASSERT_TRUE(copy->Append(ids[i]).ok());
      ASSERT_TRUE(fresh->Append(ids[i]).ok());
      EXPECT_EQ(Copy(copy->Logits()), Copy(fresh->Logits())) << i;
    }
    // The copy has evicted: its prefixes are refused, the target stays fresh.
    ASSERT_LT(copy->ResidentTokens(), copy->TotalTokens());
    auto refused = *CreatePlainSession(s.engine.get(), o);
    EXPECT_EQ(refused->CopyPrefixFrom(*copy, cut).code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(refused->TotalTokens(), 0);
    if (sinks > 0) {  // a cut among the sinks
      EXPECT_EQ(refused->CopyPrefixFrom(*source, 2).code(), absl::StatusCode::kFailedPrecondition);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(KvDTypes, CopyTest,
                         ::testing::Values(core::DType::kF32, core::DType::kF16, core::DType::kI8),
                         [](const auto& info) { return std::string(core::DTypeName(info.param)); });

class SteadyStateTest : public ::testing::TestWithParam<core::DType> {};

TEST_P(SteadyStateTest, SteadyStateDecodeDoesNotAllocate) {
  Rig s = Make(false, GetParam());
  SessionOptions o;
  o.mode = KvMode::kSliding;
  o.window_size = 40;
  auto a = *CreatePlainSession(s.engine.get(), o);
  Sampler sampler(s.engine->config().vocab_size, P(0.8f, 20, 0.9f, 7));
  ASSERT_TRUE(a->Prefill(std::vector<int32_t>{1, 2, 3}).ok());
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(a->Append(sampler.Sample(a->Logits())).ok());
  const int64_t before = g_allocations.load();
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(a->Append(sampler.Sample(a->Logits())).ok());
  EXPECT_EQ(g_allocations.load() - before, 0);
}

TEST(SteadyStatePenaltiesTest, PenalisedDecodeDoesNotAllocate) {
  Rig s = Make(false, core::DType::kF32);
  SessionOptions o;
  o.mode = KvMode::kSliding;
  o.window_size = 40;
  auto a = *CreatePlainSession(s.engine.get(), o);
  SamplingParams params = P(0.8f, 20, 0.9f, 7);
  params.presence_penalty = 0.5f;
  params.frequency_penalty = 0.3f;
  params.repetition_penalty = 1.2f;
  Sampler sampler(s.engine->config().vocab_size, params);
  const std::vector<int32_t> prompt = {1, 2, 3};
  sampler.AddContext(prompt);
  ASSERT_TRUE(a->Prefill(prompt).ok());
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(a->Append(sampler.Sample(a->Logits())).ok());
  const int64_t before = g_allocations.load();
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(a->Append(sampler.Sample(a->Logits())).ok());
  EXPECT_EQ(g_allocations.load() - before, 0);
}

INSTANTIATE_TEST_SUITE_P(KvDTypes, SteadyStateTest,
                         ::testing::Values(core::DType::kF32, core::DType::kF16, core::DType::kI8),
                         [](const auto& info) { return std::string(core::DTypeName(info.param)); });

TEST(SamplerTest, ArgmaxTakesTheFirstLargestAndSkipsNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(Argmax(std::vector<float>{1.0f, 3.0f, 2.0f, 3.0f}), 1);
  EXPECT_EQ(Argmax(std::vector<float>{-5.0f, nan, -1.0f, nan}), 2);
  EXPECT_EQ(Argmax(std::vector<float>{-1.0f, -1.0f}), 0);
  std::vector<float> big(32000, -2.0f);
  big[31999] = 4.0f;
  big[17] = 4.0f;
  EXPECT_EQ(Argmax(big), 17);
}

// min_tokens: the first picks are never a stop id or an EOS id (unless ignore_eos), greedy
// or sampled; from then on they are.
TEST(SamplerTest, MinTokensHoldsBackStopAndEosIds) {
  const std::vector<float> logits = {1.0f, 2.0f, 3.0f, 4.0f};  // 3 most likely, then 2
  const int eos[] = {3};
  SamplingParams p = P(0.0f);
  p.min_tokens = 2;
  Sampler greedy(4, p, eos);
  EXPECT_EQ(greedy.Sample(logits), 2);
  EXPECT_EQ(greedy.Sample(logits), 2);
  EXPECT_EQ(greedy.Sample(logits), 3);
  p.stop_token_ids = {2};
  Sampler both(4, p, eos);
  EXPECT_EQ(both.Sample(logits), 1);
  EXPECT_EQ(both.Sample(logits), 1);
  EXPECT_EQ(both.Sample(logits), 3);
  p.ignore_eos = true;  // EOS is then an ordinary token
  Sampler ignoring(4, p, eos);
  EXPECT_EQ(ignoring.Sample(logits), 3);
  SamplingParams t = P(1.0f, 0, 1.0f, 7);
  t.min_tokens = 500;
  Sampler sampled(4, t, eos);
  int counts[4] = {};
  for (int i = 0; i < 500; ++i) ++counts[sampled.Sample(logits)];
  EXPECT_EQ(counts[3], 0) << "first 500 draws";
  int later_eos = 0;
  for (int i = 0; i < 500; ++i) later_eos += sampled.Sample(logits) == 3;
  EXPECT_GT(later_eos, 200);  // p(3) = 0.64 once min_tokens is behind
  t.min_tokens = -1;
  EXPECT_FALSE(t.Validate().ok());
}

TEST(SamplerTest, DistributionTopKTopPAndGreedy) {
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f),
                                     std::log(0.05f)};
  EXPECT_EQ(Argmax(logits), 0);
  Sampler greedy(4, P(0.0f));
  EXPECT_EQ(greedy.Sample(logits), 0);
  Sampler t1(4, P(1.0f, 0, 1.0f, 123));
  int counts[4] = {};
  for (int i = 0; i < 20000; ++i) ++counts[t1.Sample(logits)];
  EXPECT_NEAR(counts[0] / 20000.0, 0.5, 0.015);
  EXPECT_NEAR(counts[1] / 20000.0, 0.3, 0.015);
  EXPECT_NEAR(counts[3] / 20000.0, 0.05, 0.01);
  Sampler k2(4, P(1.0f, 2, 1.0f, 5));
  Sampler p(4, P(1.0f, 0, 0.75f, 5));  // keeps {0, 1}: 0.5 + 0.3 >= 0.75
  for (int i = 0; i < 2000; ++i) {
    EXPECT_LT(k2.Sample(logits), 2);
    EXPECT_LT(p.Sample(logits), 2);
  }
  // Same seed, same draws; restored RNG state, same continuation.
  Sampler x(4, P(0.7f, 0, 1.0f, 99)), y(4, P(0.7f, 0, 1.0f, 99));
  for (int i = 0; i < 50; ++i) EXPECT_EQ(x.Sample(logits), y.Sample(logits));
  Sampler z(4, P(0.7f, 0, 1.0f, 1));
  z.rng().set_state(x.rng().state());
  for (int i = 0; i < 50; ++i) EXPECT_EQ(x.Sample(logits), z.Sample(logits));
  EXPECT_FALSE(P(-1.0f).Validate().ok());
  EXPECT_FALSE(P(1.0f, 0, 1.5f).Validate().ok());
  SamplingParams stops;
  stops.stop_token_ids = {9};
  Sampler st(4, stops);
  const int eos[] = {2};
  EXPECT_TRUE(st.IsStop(9, eos));
  EXPECT_TRUE(st.IsStop(2, eos));
  EXPECT_FALSE(st.IsStop(3, eos));
}

TEST(SamplerTest, PenaltiesFollowTheirDefinitions) {
  // Greedy picks over five logits; each case's expected pick is worked out by hand.
  const std::vector<float> logits = {2.0f, 1.9f, 1.0f, -0.5f, -0.6f};
  auto params = [](float presence, float frequency, float repetition) {
    SamplingParams p = P(0.0f);
    p.presence_penalty = presence;
    p.frequency_penalty = frequency;
    p.repetition_penalty = repetition;
    return p;
  };
  // Frequency 0.3: 0 (2.0) is picked, then 2.0 - 0.3 = 1.7 < 1.9 so 1, then 1.9 - 0.3 = 1.6 <
  // 1.7 so 0 again, then 0 has 2.0 - 0.6 = 1.4 < 1.6: 1.
  Sampler f(5, params(0, 0.3f, 1));
  std::vector<int32_t> picks;
  for (int i = 0; i < 4; ++i) picks.push_back(f.Sample(logits));
  EXPECT_EQ(picks, (std::vector<int32_t>{0, 1, 0, 1}));
  // Presence 1.5: 0, 1 and 2 each drop below the next once picked (0.5, 0.4, -0.5); then
  // 0 at 0.5 is the largest and, the penalty not growing with the count, stays so.
  Sampler pr(5, params(1.5f, 0, 1));
  picks.clear();
  for (int i = 0; i < 5; ++i) picks.push_back(pr.Sample(logits));
  EXPECT_EQ(picks, (std::vector<int32_t>{0, 1, 2, 0, 0}));
  // A negative penalty favours repeats.
  Sampler neg(5, params(-0.5f, 0, 1));
  const std::vector<float> flat = {1.0f, 1.2f, 1.1f, 0.0f, 0.0f};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(neg.Sample(flat), 1);
  // Repetition 2 over the context {0}: 2.0 / 2 = 1.0 < 1.9, so 1; then 1 has 0.95, and 0
  // (1.0, halved once whatever its count) ties 2 (1.0): the lower id wins, twice.
  Sampler rep(5, params(0, 0, 2.0f));
  const int32_t context[] = {0, 0, 99, -1};  // out-of-vocabulary ids are skipped
  rep.AddContext(context);
  picks.clear();
  for (int i = 0; i < 3; ++i) picks.push_back(rep.Sample(logits));
  EXPECT_EQ(picks, (std::vector<int32_t>{1, 0, 0}));
  // A negative logit is multiplied: -0.5 x 2 = -1.0 falls below -0.6.
  const std::vector<float> negative = {-0.5f, -0.6f};
  Sampler rep_neg(2, params(0, 0, 2.0f));
  const int32_t first[] = {0};
  rep_neg.AddContext(first);
  EXPECT_EQ(rep_neg.Sample(negative), 1);
  // Without penalties AddContext does nothing and picks follow the raw logits.
  Sampler plain(5, P(0.0f));
  plain.AddContext(first);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(plain.Sample(logits), 0);
  // Bounds.
  EXPECT_TRUE(params(2, -2, 0.01f).Validate().ok());
  EXPECT_FALSE(params(2.5f, 0, 1).Validate().ok());
  EXPECT_FALSE(params(0, -2.5f, 1).Validate().ok());
  EXPECT_FALSE(params(0, 0, 0).Validate().ok());
  EXPECT_FALSE(params(0, std::numeric_limits<float>::quiet_NaN(), 1).Validate().ok());
}

// A temperature draw by the definition (docs/engine.md, "Sampling"), with a full sort: the
// kernel's integer masses (tested apart in elementwise_test), the candidates (mass > 0)
// sorted by weight then id, the first top_k of them, then the shortest prefix of those
// whose mass reaches top_p of theirs (compared exactly), one draw u = floor(U * kept mass)
// walked in id order over the kept candidates.
int32_t DrawReference(std::span<const float> logits, const SamplingParams& p, Rng& rng) {
  const auto n = static_cast<int64_t>(logits.size());
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  std::vector<uint32_t> keys(n);
  std::vector<uint64_t> mass(n);
  kernels::cpu::SamplingMassRow(logits.data(), n, max_logit, 1.0f / p.temperature, p.min_p,
                                keys.data(), mass.data());
  std::vector<int64_t> order;
  for (int64_t i = 0; i < n; ++i) {
    if (mass[i] > 0) order.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const float wa = std::bit_cast<float>(keys[a]), wb = std::bit_cast<float>(keys[b]);
    return wa != wb ? wa > wb : a < b;
  });
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < order.size()) order.resize(p.top_k);
  if (p.top_p > 0.0f && p.top_p < 1.0f) {
    unsigned __int128 all = 0;
    for (int64_t i : order) all += mass[i];
    // mass >= top_p * all, with top_p = mant / 2^shift.
    int e = 0;
    const auto mant = static_cast<unsigned __int128>(std::ldexp(std::frexp(p.top_p, &e), 24));
    const int shift = 24 - e;
    unsigned __int128 cum = 0;
    for (size_t j = 0; j < order.size(); ++j) {
      cum += mass[order[j]];
      if ((cum << shift) >= mant * all) {
        order.resize(j + 1);
        break;
      }
    }
  }
  std::vector<bool> kept(n, false);
  uint64_t total = 0;
  for (int64_t i : order) {
    kept[i] = true;
    total += mass[i];
  }
  const auto u =
      static_cast<uint64_t>((static_cast<unsigned __int128>(rng.Next() >> 11) * total) >> 53);
  uint64_t run = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!kept[i]) continue;
    run += mass[i];
    if (run > u) return static_cast<int32_t>(i);
  }
  ADD_FAILURE() << "the walk ran past the kept mass";
  return -1;
}

// The sampler selects top-k and top-p without sorting; its draws equal the definition's,
// on flat and peaked distributions, with ties, for small and large top_p, with top_k and
// min_p beside them.
TEST(SamplerTest, DrawsEqualTheFullSortDefinition) {
  std::mt19937 gen(7);
  struct Case {
    int top_k;
    float top_p, min_p;
  };
  const Case cases[] = {{0, 0.05f, 0},    {0, 0.5f, 0},     {0, 0.9f, 0},   {0, 0.999f, 0},
                        {0, 1.0f, 0},     {40, 1.0f, 0},    {700, 0.9f, 0}, {3000, 0.5f, 0},
                        {0, 0.9f, 0.05f}, {50, 0.95f, 0.2f}};
  for (float sigma : {0.0f, 0.3f, 3.0f, 8.0f}) {
    for (const Case& c : cases) {
      std::normal_distribution<float> normal(0.0f, sigma > 0 ? sigma : 1.0f);
      std::vector<float> logits(5000);
      for (float& l : logits) l = sigma > 0 ? normal(gen) : 1.5f;           // sigma 0: all equal
      for (size_t i = 0; i < logits.size(); i += 7) logits[i] = logits[0];  // ties
      logits[11] = -std::numeric_limits<float>::infinity();                 // never drawn
      SamplingParams p = P(0.8f, c.top_k, c.top_p, 99);
      p.min_p = c.min_p;
      Sampler sampler(static_cast<int>(logits.size()), p);
      Rng reference(99);
      for (int draw = 0; draw < 40; ++draw) {
        const int32_t got = sampler.Sample(logits);
        ASSERT_EQ(got, DrawReference(logits, p, reference))
            << "sigma " << sigma << " top_k " << c.top_k << " top_p " << c.top_p << " min_p "
            << c.min_p << " draw " << draw;
        ASSERT_NE(got, 11);
      }
    }
  }
}

// Settings at the edges of their ranges stay defined: a temperature so small that 1/T
// overflows picks the largest logit; a top_p far below any token's share keeps only the
// most likely one; min_p 1 keeps the tied largest ones; a huge temperature draws every
// token; an all -inf row but one picks that one.
TEST(SamplerTest, ExtremeSettingsStayDefined) {
  const std::vector<float> logits = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f, -50.0f};
  Sampler tiny_t(6, P(1e-40f, 0, 1.0f, 3));
  Sampler tiny_t_top_p(6, P(1e-40f, 0, 0.5f, 3));
  Sampler tiny_p(6, P(1.0f, 0, 1e-30f, 3));
  Sampler denormal_p(6, P(1.0f, 0, 1e-45f, 3));
  SamplingParams ties = P(1.0f, 0, 1.0f, 3);
  ties.min_p = 1.0f;
  Sampler min_p_one(6, ties);
  Sampler hot(6, P(1e30f, 0, 1.0f, 3));
  int drawn[6] = {}, tied[6] = {};
  for (int i = 0; i < 3000; ++i) {
    EXPECT_EQ(tiny_t.Sample(logits), 1);
    EXPECT_EQ(tiny_t_top_p.Sample(logits), 1);
    EXPECT_EQ(tiny_p.Sample(logits), 1);  // 1 before 3: equal weights, lower id first
    EXPECT_EQ(denormal_p.Sample(logits), 1);
    ++tied[min_p_one.Sample(logits)];
    ++drawn[hot.Sample(logits)];
  }
  EXPECT_EQ(tied[1] + tied[3], 3000);
  EXPECT_GT(tied[1], 1200);
  EXPECT_GT(tied[3], 1200);
  for (int id = 0; id < 6; ++id) EXPECT_GT(drawn[id], 350) << id;  // ~500 each
  const float inf = std::numeric_limits<float>::infinity();
  Sampler one_left(4, P(0.8f, 40, 0.9f, 3));
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(one_left.Sample(std::vector<float>{-inf, -inf, 7.0f, -inf}), 2);
}

TEST(SamplerTest, LogitBiasAndMinP) {
  const std::vector<float> logits = {2.0f, 1.9f, 1.0f, -0.5f, -0.6f};
  SamplingParams ban = P(0.0f);
  ban.logit_bias = {{0, -0.2f}, {99, 50.0f}};  // 0 drops to 1.8 < 1.9; 99 is skipped
  Sampler b(5, ban);
  EXPECT_EQ(b.Sample(logits), 1);
  SamplingParams force = P(0.0f);
  force.logit_bias = {{3, 3.0f}};  // -0.5 + 3 = 2.5
  Sampler f(5, force);
  EXPECT_EQ(f.Sample(logits), 3);
  // The bias comes before the penalties: 0 biased to 2.5 and, generated once, 2.5 - 0.7 =
  // 1.8 < 1.9.
  SamplingParams both = P(0.0f);
  both.logit_bias = {{0, 0.5f}};
  both.presence_penalty = 0.7f;
  Sampler bp(5, both);
  EXPECT_EQ(bp.Sample(logits), 0);
  EXPECT_EQ(bp.Sample(logits), 1);

  // min_p 0.5 over {0.5, 0.3, 0.15, 0.05}: the cut is 0.25, so only 0 and 1 remain, drawn
  // 5 : 3.
  const std::vector<float> dist = {std::log(0.5f), std::log(0.3f), std::log(0.15f),
                                   std::log(0.05f)};
  SamplingParams mp = P(1.0f, 0, 1.0f, 11);
  mp.min_p = 0.5f;
  Sampler m(4, mp);
  int counts[4] = {};
  for (int i = 0; i < 8000; ++i) ++counts[m.Sample(dist)];
  EXPECT_EQ(counts[2] + counts[3], 0);
  EXPECT_NEAR(counts[0] / 8000.0, 0.625, 0.02);
  // The same seed without min_p does draw 2 and 3.
  Sampler open(4, P(1.0f, 0, 1.0f, 11));
  int tail = 0;
  for (int i = 0; i < 8000; ++i) tail += open.Sample(dist) >= 2;
  EXPECT_GT(tail, 1000);

  SamplingParams bad = P(1.0f);
  bad.min_p = 1.5f;
  EXPECT_FALSE(bad.Validate().ok());
  bad.min_p = 0;
  bad.logit_bias = {{1, 100.5f}};
  EXPECT_FALSE(bad.Validate().ok());
  bad.logit_bias.assign(kMaxLogitBiasEntries + 1, {1, 0.0f});
  EXPECT_FALSE(bad.Validate().ok());
  bad.logit_bias = {{1, -100.0f}};
  EXPECT_TRUE(bad.Validate().ok());
}

TEST(SamplerTest, LogprobsAreTheRawLogSoftmaxWithSortedAlternatives) {
  // An odd vocabulary, seeded logits, and a tie at the top to check the order rule.
  constexpr int kVocab = 769;
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(kVocab);
  for (float& l : logits) l = normal(rng);
  logits[400] = logits[7] = 12.5f;
  double z = 0;
  for (float l : logits) z += std::exp(static_cast<double>(l));
  auto reference = [&](int id) { return static_cast<double>(logits[id]) - std::log(z); };
  std::vector<int32_t> order(kVocab);
  for (int i = 0; i < kVocab; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });

  TokenLogprobs lp;
  const int64_t before = g_allocations.load();
  for (int32_t token : {0, 7, 400, 768}) {
    ComputeLogprobs(logits, token, kMaxTopLogprobs, &lp);
    EXPECT_NEAR(lp.logprob, reference(token), 1e-5) << token;
  }
  EXPECT_EQ(g_allocations.load() - before, 0);
  ASSERT_EQ(lp.num_top, kMaxTopLogprobs);
  for (int k = 0; k < lp.num_top; ++k) {
    EXPECT_EQ(lp.top_ids[k], order[k]) << k;
    EXPECT_NEAR(lp.top_logprobs[k], reference(order[k]), 1e-5) << k;
    if (k > 0) {
      EXPECT_GE(lp.top_logprobs[k - 1], lp.top_logprobs[k]);
    }
  }
  EXPECT_EQ(lp.top_ids[0], 7);  // the tie: lower id first
  EXPECT_EQ(lp.top_ids[1], 400);
  // Sampling settings do not change what is reported: the greedy token is the top one.
  EXPECT_EQ(Argmax(logits), lp.top_ids[0]);

  ComputeLogprobs(logits, 3, 0, &lp);
  EXPECT_EQ(lp.num_top, 0);
  const std::vector<float> four = {1.0f, 3.0f, 2.0f, 0.0f};
  ComputeLogprobs(four, 1, kMaxTopLogprobs + 5, &lp);
  ASSERT_EQ(lp.num_top, 4);  // clamped to the vocabulary
  EXPECT_EQ(lp.top_ids[0], 1);
  EXPECT_EQ(lp.top_ids[3], 3);
  EXPECT_FLOAT_EQ(lp.logprob, lp.top_logprobs[0]);

  SamplingParams p;
  p.top_logprobs = kMaxTopLogprobs + 1;
  EXPECT_FALSE(p.Validate().ok());
  p.top_logprobs = -1;
  EXPECT_TRUE(p.Validate().ok());
}

}  // namespace
}  // namespace kvfold::engine
