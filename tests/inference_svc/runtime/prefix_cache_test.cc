// The prefix cache (SchedulerOptions::prefix_cache_entries) in a Runtime on a random tiny
// model: an ephemeral prompt that starts with what a finished ephemeral session fed copies
// that session's entries and feeds the rest, and its tokens equal the same turn on a
// runtime without the cache, in every mode (whole entries) and for a full-mode prefix
// (f32 and INT8 KV); a scored prompt feeds every token; entries give way to admission.
#include "gtest/gtest.h"
#include "inference_svc/runtime/runtime.h"
#include "tests/testing/tiny_engine.h"

namespace kvfold::runtime {
namespace {

struct Replica {
  std::unique_ptr<testing::Rig> rig;
  std::unique_ptr<memory::Projector> projector;
  std::unique_ptr<Runtime> runtime;
};

Replica Start(int cache_entries, core::DType kv_dtype = core::DType::kF32,
              size_t kv_pool_bytes = size_t{16} << 20) {
  Replica r;
  r.rig = testing::MakeTinyEngine(5, {.kv_pool_bytes = kv_pool_bytes, .kv_dtype = kv_dtype});
  r.projector = testing::RandomTinyProjector(testing::TinyProjectorConfig(*r.rig->engine, 4, 12, 6),
                                             3, "prefix-projector");
  Runtime::Deps deps;
  deps.engine = r.rig->engine.get();
  deps.projector = r.projector.get();
  RuntimeOptions options;
  options.scheduler.prefix_cache_entries = cache_entries;
  r.runtime = std::make_unique<Runtime>(deps, options);
  return r;
}

struct Answer {
  absl::Status status;
  std::vector<int32_t> tokens;
  std::vector<engine::TokenLogprobs> prompt_logprobs;
};

Answer RunTurn(Runtime& runtime, TurnRequest request, const Caller& caller = {"tenant", ""}) {
  Answer a;
  auto turn = runtime.StartTurn(caller, std::move(request));
  if (!turn.ok()) {
    a.status = turn.status();
    return a;
  }
  while (!(*turn)->Wait(absl::Milliseconds(20), &a.tokens)) {
  }
  (*turn)->TakePromptLogprobs(&a.prompt_logprobs);
  a.status = (*turn)->Finish().status();
  return a;
}

TurnRequest Request(core::KvMode mode, std::vector<int32_t> prompt, uint64_t seed,
                    int max_new = 10) {
  TurnRequest r;
  r.ephemeral.mode = mode;
  r.ephemeral.window_size = mode == core::KvMode::kMemory ? 12 : 10;
  r.ephemeral.sink_tokens = 2;
  r.prompt_ids = std::move(prompt);
  r.sampling.temperature = 1.0f;
  r.sampling.seed = seed;
  r.sampling.max_new_tokens = max_new;
  r.sampling.ignore_eos = true;
  return r;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

struct Case {
  core::KvMode mode;
  core::DType kv_dtype;
};

class PrefixCacheTest : public ::testing::TestWithParam<Case> {};

TEST_P(PrefixCacheTest, PromptsStartingWithCachedTokensEqualColdTurns) {
  const core::KvMode mode = GetParam().mode;
  Replica cached = Start(16, GetParam().kv_dtype), cold = Start(0, GetParam().kv_dtype);
  const int vocab = cached.rig->model.config.vocab_size;
  const std::vector<int32_t> prompt = testing::RandomIds(40, vocab, 21);
  const Scheduler& sched = cached.runtime->scheduler();

  // A first turn: nothing cached yet.
  const Answer first = RunTurn(*cached.runtime, Request(mode, prompt, 1));
  ASSERT_TRUE(first.status.ok()) << first.status;
  EXPECT_EQ(first.tokens, RunTurn(*cold.runtime, Request(mode, prompt, 1)).tokens);
  EXPECT_EQ(sched.prefix_cache_hits(), 0u);

  // Continuing what the first turn fed (its prompt and tokens): the whole entry, any mode.
  const std::vector<int32_t> next =
      Concat(Concat(prompt, first.tokens), testing::RandomIds(5, vocab, 22));
  const Answer second = RunTurn(*cached.runtime, Request(mode, next, 2));
  ASSERT_TRUE(second.status.ok()) << second.status;
  EXPECT_EQ(second.tokens, RunTurn(*cold.runtime, Request(mode, next, 2)).tokens);
  EXPECT_EQ(sched.prefix_cache_hits(), 1u);
  EXPECT_EQ(sched.prefix_cache_tokens(), 50u);

  // Another prompt sharing only the first 30 tokens: a prefix of an entry, full mode only
  // (INT8 KV: the whole blocks of it, 16 tokens).
  const std::vector<int32_t> branch = Concat(
      std::vector<int32_t>(prompt.begin(), prompt.begin() + 30), testing::RandomIds(12, vocab, 23));
  const Answer third = RunTurn(*cached.runtime, Request(mode, branch, 3));
  ASSERT_TRUE(third.status.ok()) << third.status;
  EXPECT_EQ(third.tokens, RunTurn(*cold.runtime, Request(mode, branch, 3)).tokens);
  if (mode == core::KvMode::kFull) {
    EXPECT_EQ(sched.prefix_cache_hits(), 2u);
    EXPECT_EQ(sched.prefix_cache_tokens(),
              50u + (GetParam().kv_dtype == core::DType::kI8 ? 16u : 30u));
  } else {
    EXPECT_EQ(sched.prefix_cache_hits(), 1u);
  }

  // The same prompt again: all but its last token come from the cache in full mode (the
  // second turn's entry holds it all), and the answer is still the cold one.
  const Answer again = RunTurn(*cached.runtime, Request(mode, next, 4));
  EXPECT_EQ(again.tokens, RunTurn(*cold.runtime, Request(mode, next, 4)).tokens);
}

// A scored prompt needs every row's logits: it feeds every token, and its records and
// tokens are the cold ones.
TEST_P(PrefixCacheTest, AScoredPromptFeedsEveryToken) {
  const core::KvMode mode = GetParam().mode;
  Replica cached = Start(16, GetParam().kv_dtype), cold = Start(0, GetParam().kv_dtype);
  const std::vector<int32_t> prompt =
      testing::RandomIds(36, cached.rig->model.config.vocab_size, 31);
  ASSERT_TRUE(RunTurn(*cached.runtime, Request(mode, prompt, 1)).status.ok());
  TurnRequest scored = Request(mode, Concat(prompt, {5, 6, 7}), 2);
  scored.prompt_logprobs = 1;
  const Answer got = RunTurn(*cached.runtime, scored);
  const Answer want = RunTurn(*cold.runtime, scored);
  EXPECT_EQ(cached.runtime->scheduler().prefix_cache_hits(), 0u);
  EXPECT_EQ(got.tokens, want.tokens);
  ASSERT_EQ(got.prompt_logprobs.size(), want.prompt_logprobs.size());
  for (size_t i = 0; i < got.prompt_logprobs.size(); ++i) {
    EXPECT_EQ(got.prompt_logprobs[i].logprob, want.prompt_logprobs[i].logprob) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, PrefixCacheTest,
                         ::testing::Values(Case{core::KvMode::kFull, core::DType::kF32},
                                           Case{core::KvMode::kFull, core::DType::kI8},
                                           Case{core::KvMode::kSliding, core::DType::kF32},
                                           Case{core::KvMode::kSink, core::DType::kF32},
                                           Case{core::KvMode::kMemory, core::DType::kF32}),
                         [](const auto& info) {
                           return std::string(core::KvModeName(info.param.mode)) + "_" +
                                  std::string(core::DTypeName(info.param.kv_dtype));
                         });

// Entries are the caller's own: another tenant (or the same tenant with another store
// credential) feeds the same prompt itself.
// Sliding and sink entries that have evicted nothing (a window longer than what they fed)
// give prefixes too, as full mode's do: the answer is the cold turn's.
TEST(PrefixCacheWindowTest, AWindowedEntryThatEvictedNothingGivesItsPrefix) {
  for (core::DType kv : {core::DType::kF32, core::DType::kI8}) {
    for (core::KvMode mode : {core::KvMode::kSliding, core::KvMode::kSink}) {
      SCOPED_TRACE(std::string(core::KvModeName(mode)) + " " + core::DTypeName(kv));
      Replica cached = Start(16, kv), cold = Start(0, kv);
      const int vocab = cached.rig->model.config.vocab_size;
      const Scheduler& sched = cached.runtime->scheduler();
      auto request = [&](std::vector<int32_t> prompt, uint64_t seed) {
        TurnRequest r = Request(mode, std::move(prompt), seed);
        r.ephemeral.window_size = 64;
        return r;
      };
      const std::vector<int32_t> prompt = testing::RandomIds(40, vocab, 51);
      ASSERT_TRUE(RunTurn(*cached.runtime, request(prompt, 1)).status.ok());
      const std::vector<int32_t> branch =
          Concat(std::vector<int32_t>(prompt.begin(), prompt.begin() + 30),
                 testing::RandomIds(9, vocab, 52));
      const Answer warm = RunTurn(*cached.runtime, request(branch, 2));
      ASSERT_TRUE(warm.status.ok()) << warm.status;
      EXPECT_EQ(warm.tokens, RunTurn(*cold.runtime, request(branch, 2)).tokens);
      EXPECT_EQ(sched.prefix_cache_hits(), 1u);
      // INT8: whole blocks of the main segment (after the sink mode's 2 sinks).
      const uint64_t sinks = mode == core::KvMode::kSink ? 2 : 0;
      EXPECT_EQ(sched.prefix_cache_tokens(), kv == core::DType::kI8 ? sinks + 16 : 30u);
    }
  }
}

// The n choices of one prompt share leave one entry, not n: they would hold the same
// prompt's KV n times and push other conversations' entries out of the cache.
TEST(PrefixCacheShareTest, TheChoicesOfOneShareKeepOneEntry) {
  Replica cached = Start(2);
  const int vocab = cached.rig->model.config.vocab_size;
  const Scheduler& sched = cached.runtime->scheduler();
  const std::vector<int32_t> a = testing::RandomIds(30, vocab, 41);
  const Answer first = RunTurn(*cached.runtime, Request(core::KvMode::kSliding, a, 1));
  ASSERT_TRUE(first.status.ok()) << first.status;

  const std::vector<int32_t> b = testing::RandomIds(30, vocab, 42);
  auto share = NewPromptShare(3);
  std::vector<std::unique_ptr<TurnHandle>> turns;
  for (uint64_t seed = 2; seed <= 4; ++seed) {
    TurnRequest r = Request(core::KvMode::kSliding, b, seed);
    r.prompt_share = share;
    auto turn = cached.runtime->StartTurn({"tenant", ""}, std::move(r));
    ASSERT_TRUE(turn.ok()) << turn.status();
    turns.push_back(std::move(*turn));
  }
  for (auto& turn : turns) {
    std::vector<int32_t> tokens;
    while (!turn->Wait(absl::Milliseconds(20), &tokens)) {
    }
    ASSERT_TRUE(turn->Finish().ok());
  }
  EXPECT_EQ(sched.prompt_copies(), 2u);

  // The first conversation's entry is still there: its continuation starts from it.
  const std::vector<int32_t> next =
      Concat(Concat(a, first.tokens), testing::RandomIds(4, vocab, 43));
  const uint64_t hits = sched.prefix_cache_hits();
  ASSERT_TRUE(RunTurn(*cached.runtime, Request(core::KvMode::kSliding, next, 5)).status.ok());
  EXPECT_EQ(sched.prefix_cache_hits() - hits, 1u);
}

TEST(PrefixCacheScopeTest, AnotherCallersEntriesAreNotReused) {
  Replica r = Start(16);
  const int vocab = r.rig->model.config.vocab_size;
  const std::vector<int32_t> prompt = testing::RandomIds(40, vocab, 60);
  const std::vector<int32_t> longer = Concat(prompt, {4, 5, 6});
  const Scheduler& sched = r.runtime->scheduler();
  const Caller a{"tenant-a", "key-1"}, b{"tenant-b", "key-1"}, a2{"tenant-a", "key-2"};
  TurnRequest fed = Request(core::KvMode::kFull, prompt, 1);
  fed.prompt_only = true;  // the entry holds the prompt alone
  ASSERT_TRUE(RunTurn(*r.runtime, fed, a).status.ok());
  const Answer other = RunTurn(*r.runtime, Request(core::KvMode::kFull, longer, 2), b);
  ASSERT_TRUE(other.status.ok()) << other.status;
  EXPECT_EQ(sched.prefix_cache_hits(), 0u);
  ASSERT_TRUE(RunTurn(*r.runtime, Request(core::KvMode::kFull, longer, 2), a2).status.ok());
  EXPECT_EQ(sched.prefix_cache_hits(), 0u);
  const Answer own = RunTurn(*r.runtime, Request(core::KvMode::kFull, longer, 2), a);
  EXPECT_EQ(sched.prefix_cache_hits(), 1u);
  EXPECT_EQ(sched.prefix_cache_tokens(), 40u);
  EXPECT_EQ(own.tokens, other.tokens);
}

// The cache's sessions hold KV blocks; a turn that needs them gets them: entries are
// dropped before anything is refused.
TEST(PrefixCacheEvictionTest, EntriesGiveWayToAdmission) {
  Replica r = Start(16, core::DType::kF32, size_t{1} << 20);
  const engine::BlockPool& pool = r.rig->engine->pool();
  const int vocab = r.rig->model.config.vocab_size;
  for (uint64_t i = 0; i < 6; ++i) {
    const Answer a = RunTurn(
        *r.runtime, Request(core::KvMode::kFull, testing::RandomIds(60, vocab, 40 + i), i + 1));
    ASSERT_TRUE(a.status.ok()) << a.status;
  }
  EXPECT_LT(pool.free_blocks(), pool.num_blocks());  // the entries hold blocks
  // A turn whose reservation needs most of the pool.
  const int tokens = (pool.num_blocks() - 2) * pool.block_size();
  const Answer big = RunTurn(
      *r.runtime, Request(core::KvMode::kFull, testing::RandomIds(tokens - 8, vocab, 50), 7, 4));
  EXPECT_TRUE(big.status.ok()) << big.status;
  EXPECT_EQ(big.tokens.size(), 4u);
}

}  // namespace
}  // namespace kvfold::runtime
