// Memory mode equivalences and exact checkpoints: W >= sequence == full mode; prefill ==
// decode; export -> block -> import on a fresh engine continues token for token.
#include <random>

#include "gtest/gtest.h"
#include "inference_svc/engine/sampler.h"
#include "inference_svc/memory/memory_session.h"
#include "inference_svc/memory/random_projector.h"
#include "inference_svc/memory/session_block.h"
#include "tests/testing/naive_forward.h"
#include "tests/testing/tiny_engine.h"

namespace kvfold::memory {
namespace {

using core::KvMode;

using Fixture = testing::Rig;

std::unique_ptr<Fixture> MakeEngine(uint32_t seed) {
  return testing::MakeTinyEngine(seed, {.max_batch_tokens = 32});
}

std::unique_ptr<Projector> MakeProjector(const engine::Engine& engine, int window, int chunk,
                                         int input_layers = 1,
                                         WindowPolicy policy = WindowPolicy::kGrowing,
                                         int sink_tokens = 0, int prefix_gap = 0,
                                         int memory_only_window = 0, bool memory_kv = false) {
  ProjectorConfig c = testing::TinyProjectorConfig(engine, 5, window, chunk);
  c.input_layers = input_layers;
  c.window_policy = policy;
  c.sink_tokens = sink_tokens;
  c.prefix_gap = prefix_gap;
  c.memory_only_window = memory_only_window;
  if (memory_kv) {  // per-layer memory K/V maps through one hidden layer (random weights)
    c.memory_kv_layers = engine.config().num_layers;
    c.memory_kv_dim = engine.config().kv_dim();
    c.memory_kv_hidden = 8;
  }
  return testing::RandomTinyProjector(c, 77, "projector-77");
}

std::unique_ptr<engine::Session> NewSession(engine::Engine* engine, const Projector* projector,
                                            KvMode mode) {
  engine::SessionOptions options;
  options.mode = mode;
  auto s = CreateSession(engine, options, projector);
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

using testing::RandomIds;

// Greedy decode of n tokens; returns the ids and every step's logits.
std::vector<int32_t> Greedy(engine::Session& s, int n, std::vector<std::vector<float>>* logits) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const int32_t id = engine::Argmax(s.Logits());
    out.push_back(id);
    EXPECT_TRUE(s.Append(id).ok());
    if (logits) logits->emplace_back(s.Logits().begin(), s.Logits().end());
  }
  return out;
}

// Feeds `ids` token by token to both sessions: a's largest resident KV and whether the
// two ever gave different logits.
struct SideBySide {
  int64_t max_resident = 0;
  bool differ = false;
};
SideBySide FeedBoth(engine::Session& a, engine::Session& b, const std::vector<int32_t>& ids) {
  SideBySide r;
  for (int32_t id : ids) {
    EXPECT_TRUE(a.Append(id).ok());
    EXPECT_TRUE(b.Append(id).ok());
    r.max_resident = std::max(r.max_resident, a.ResidentTokens());
    r.differ |= !std::equal(a.Logits().begin(), a.Logits().end(), b.Logits().begin());
  }
  return r;
}

TEST(MemoryModeTest, NoFoldEqualsFullMode) {
  auto f = MakeEngine(1);
  auto projector = MakeProjector(*f->engine, /*window=*/200, /*chunk=*/16);
  auto memory = NewSession(f->engine.get(), projector.get(), KvMode::kMemory);
  auto full = NewSession(f->engine.get(), nullptr, KvMode::kFull);
  const auto prompt = RandomIds(23, f->model.config.vocab_size, 2);
  ASSERT_TRUE(memory->Prefill(prompt).ok());
  ASSERT_TRUE(full->Prefill(prompt).ok());
  std::vector<std::vector<float>> lm, lf;
  const auto tm = Greedy(*memory, 60, &lm);
  const auto tf = Greedy(*full, 60, &lf);
  EXPECT_EQ(tm, tf);
  double max_err = 0;
  for (size_t i = 0; i < lm.size(); ++i)
    for (size_t j = 0; j < lm[i].size(); ++j) max_err = std::max<double>(max_err, std::abs(lm[i][j] - lf[i][j]));
  EXPECT_LT(max_err, 1e-5);  // positions are shifted by one: not bitwise, but RoPE is relative
  EXPECT_EQ(static_cast<MemorySession*>(memory.get())->tokens_folded(), 0);
}

// A memory mode under one of the projector's window policies, with S sink tokens, a
// prefix gap G, memory_only's window Wo and per-layer memory K/V maps.
struct ModeAndPolicy {
  KvMode mode;
  WindowPolicy policy;
  int sink_tokens = 0;
  int prefix_gap = 0;
  int memory_only_window = 0;
  bool memory_kv = false;
};

class MemoryModeParamTest : public ::testing::TestWithParam<ModeAndPolicy> {};

TEST_P(MemoryModeParamTest, PrefillEqualsTokenByTokenDecode) {
  auto f = MakeEngine(2);
  auto projector = MakeProjector(*f->engine, 9, 6, /*input_layers=*/3, GetParam().policy,
                                 GetParam().sink_tokens, GetParam().prefix_gap,
                                 GetParam().memory_only_window, GetParam().memory_kv);
  auto a = NewSession(f->engine.get(), projector.get(), GetParam().mode);
  auto b = NewSession(f->engine.get(), projector.get(), GetParam().mode);
  const auto ids = RandomIds(61, f->model.config.vocab_size, 3);  // several folds
  ASSERT_TRUE(a->Prefill(ids).ok());
  for (int32_t id : ids) ASSERT_TRUE(b->Append(id).ok());
  EXPECT_TRUE(std::equal(a->Logits().begin(), a->Logits().end(), b->Logits().begin()));
  auto sa = a->ExportState(), sb = b->ExportState();
  ASSERT_TRUE(sa.ok() && sb.ok());
  EXPECT_EQ(sa->memory, sb->memory);
  EXPECT_EQ(sa->window_token_ids, sb->window_token_ids);
  EXPECT_EQ(sa->sink_token_ids, sb->sink_token_ids);
  EXPECT_EQ(sa->sink_token_ids.size(), static_cast<size_t>(GetParam().sink_tokens));
  EXPECT_EQ(sa->tokens_folded, sb->tokens_folded);
  EXPECT_GT(sa->tokens_folded, 0);
  EXPECT_EQ(sa->total_tokens, 61);
}

// Checkpoints mid-window, with the window full (fold pending), and right after a fold:
// export -> KVFB bytes -> parse -> validate -> fresh engine -> import -> greedy continuation
// equals the uninterrupted session token for token and logit for logit (bitwise).
TEST_P(MemoryModeParamTest, ExportImportContinuesExactly) {
  const KvMode mode = GetParam().mode;
  const int window = mode == KvMode::kMemory ? 10 : GetParam().memory_only_window, chunk = 7;
  auto f = MakeEngine(4);
  const int sinks = GetParam().sink_tokens;
  auto projector = MakeProjector(*f->engine, 10, chunk, 1, GetParam().policy, sinks,
                                 GetParam().prefix_gap, GetParam().memory_only_window,
                                 GetParam().memory_kv);
  const auto prompt = RandomIds(sinks > 1 ? sinks - 1 : 5, f->model.config.vocab_size, 5);
  // Total tokens when the window is full again.
  const int full_at = sinks + window + chunk + chunk;
  std::vector<int> checkpoints = {full_at - 3, full_at, full_at + 1};
  if (sinks > 1) checkpoints.push_back(sinks - 1);  // before the last sink
  for (int checkpoint_at : checkpoints) {
    SCOPED_TRACE(::testing::Message() << "checkpoint after " << checkpoint_at << " tokens");
    auto live = NewSession(f->engine.get(), projector.get(), mode);
    ASSERT_TRUE(live->Prefill(prompt).ok());
    ASSERT_LE(static_cast<int>(prompt.size()), checkpoint_at);
    Greedy(*live, checkpoint_at - static_cast<int>(prompt.size()), nullptr);
    ASSERT_EQ(live->TotalTokens(), checkpoint_at);

    engine::SamplingParams params;
    engine::Rng rng(1234);
    rng.Next();
    auto state = live->ExportState();
    ASSERT_TRUE(state.ok());
    BlockIdentity identity{f->engine->fingerprint(), f->model.config.hidden_size, projector->fingerprint()};
    auto block = ExportSessionBlock(*state, identity, SamplerStateToProto(params, rng.state()));
    ASSERT_TRUE(block.ok()) << block.status();
    const std::string bytes = SerializeMemoryBlock(*block);

    // A different engine instance (its own KV pool), as on another replica.
    auto g = MakeEngine(4);
    ASSERT_EQ(g->engine->fingerprint(), f->engine->fingerprint());
    auto parsed = ParseMemoryBlock(bytes);
    ASSERT_TRUE(parsed.ok());
    BlockExpectations expected{g->engine->fingerprint(), g->model.config.hidden_size,
                               projector->fingerprint(), 5, g->model.config.vocab_size};
    v1::SamplerState sampler;
    auto restored_state = ImportSessionBlock(*parsed, expected, &sampler);
    ASSERT_TRUE(restored_state.ok()) << restored_state.status();
    engine::SamplingParams restored_params;
    std::array<uint64_t, 4> restored_rng;
    ASSERT_TRUE(SamplerStateFromProto(sampler, &restored_params, &restored_rng).ok());
    EXPECT_EQ(restored_rng, rng.state());
    auto restored = NewSession(g->engine.get(), projector.get(), mode);
    ASSERT_TRUE(restored->ImportState(*restored_state).ok());
    EXPECT_EQ(restored->TotalTokens(), live->TotalTokens());

    ASSERT_TRUE(std::equal(live->Logits().begin(), live->Logits().end(), restored->Logits().begin()));
    std::vector<std::vector<float>> l_live, l_restored;
    const auto t_live = Greedy(*live, 3 * chunk + 2, &l_live);  // through more folds
    const auto t_restored = Greedy(*restored, 3 * chunk + 2, &l_restored);
    EXPECT_EQ(t_live, t_restored);
    EXPECT_EQ(l_live, l_restored);
    // Block size is the same at every checkpoint after the first fold: M x d x 2 bytes.
    if (checkpoint_at >= full_at - chunk) {
      EXPECT_EQ(block->payload.size(), 5u * f->model.config.hidden_size * 2);
    }
  }
}

// A copy (engine::Session::CopyFrom) mid-window, with the window full (fold pending) and
// right after a fold continues exactly as the session copied and as a fresh session fed
// the same tokens, and leaves the session copied unchanged.
TEST_P(MemoryModeParamTest, CopyContinuesExactly) {
  const KvMode mode = GetParam().mode;
  const int window = mode == KvMode::kMemory ? 10 : GetParam().memory_only_window, chunk = 7;
  auto f = MakeEngine(6);
  const int sinks = GetParam().sink_tokens;
  auto projector =
      MakeProjector(*f->engine, 10, chunk, 1, GetParam().policy, sinks, GetParam().prefix_gap,
                    GetParam().memory_only_window, GetParam().memory_kv);
  const int full_at = sinks + window + chunk + chunk;
  for (int fed : {full_at - 3, full_at, full_at + 1}) {
    SCOPED_TRACE(::testing::Message() << "copy after " << fed << " tokens");
    const auto ids = RandomIds(fed, f->model.config.vocab_size, 11);
    auto source = NewSession(f->engine.get(), projector.get(), mode);
    auto fresh = NewSession(f->engine.get(), projector.get(), mode);
    ASSERT_TRUE(source->Prefill(ids).ok());
    ASSERT_TRUE(fresh->Prefill(ids).ok());
    auto copy = NewSession(f->engine.get(), projector.get(), mode);
    ASSERT_TRUE(copy->CopyFrom(*source).ok());
    EXPECT_EQ(copy->TotalTokens(), fed);
    EXPECT_EQ(copy->ResidentTokens(), source->ResidentTokens());
    EXPECT_EQ(copy->KvBytesResident(), source->KvBytesResident());
    ASSERT_TRUE(std::equal(copy->Logits().begin(), copy->Logits().end(), fresh->Logits().begin(),
                           fresh->Logits().end()));
    auto sc = copy->ExportState(), sf = fresh->ExportState();
    ASSERT_TRUE(sc.ok() && sf.ok());
    EXPECT_EQ(sc->memory, sf->memory);
    EXPECT_EQ(sc->window_token_ids, sf->window_token_ids);
    EXPECT_EQ(sc->sink_token_ids, sf->sink_token_ids);
    EXPECT_EQ(sc->tokens_folded, sf->tokens_folded);
    // The copy first (its blocks are its own), then the source and the fresh session.
    std::vector<std::vector<float>> l_copy, l_source, l_fresh;
    const auto t_copy = Greedy(*copy, 3 * chunk + 2, &l_copy);  // through more folds
    const auto t_source = Greedy(*source, 3 * chunk + 2, &l_source);
    const auto t_fresh = Greedy(*fresh, 3 * chunk + 2, &l_fresh);
    EXPECT_EQ(t_copy, t_fresh);
    EXPECT_EQ(l_copy, l_fresh);
    EXPECT_EQ(t_source, t_fresh);
    EXPECT_EQ(l_source, l_fresh);
    // Only a fresh session copies; the kind and the projector must match.
    EXPECT_EQ(copy->CopyFrom(*source).code(), absl::StatusCode::kFailedPrecondition);
    auto other_mode = NewSession(f->engine.get(), projector.get(),
                                 mode == KvMode::kMemory ? KvMode::kMemoryOnly : KvMode::kMemory);
    EXPECT_EQ(other_mode->CopyFrom(*source).code(), absl::StatusCode::kFailedPrecondition);
    engine::SessionOptions full;
    auto plain = engine::CreatePlainSession(f->engine.get(), full);
    ASSERT_TRUE(plain.ok());
    EXPECT_EQ((*plain)->CopyFrom(*source).code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(other_mode->TotalTokens(), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Modes, MemoryModeParamTest,
    ::testing::Values(ModeAndPolicy{KvMode::kMemory, WindowPolicy::kGrowing},
                      ModeAndPolicy{KvMode::kMemoryOnly, WindowPolicy::kGrowing},
                      ModeAndPolicy{KvMode::kMemory, WindowPolicy::kSliding},
                      ModeAndPolicy{KvMode::kMemoryOnly, WindowPolicy::kSliding},
                      ModeAndPolicy{KvMode::kMemory, WindowPolicy::kSliding, 3},
                      ModeAndPolicy{KvMode::kMemory, WindowPolicy::kGrowing, 1},
                      ModeAndPolicy{KvMode::kMemoryOnly, WindowPolicy::kGrowing, 2},
                      ModeAndPolicy{KvMode::kMemory, WindowPolicy::kSliding, 2, 50},
                      ModeAndPolicy{KvMode::kMemoryOnly, WindowPolicy::kGrowing, 0, 0, 5},
                      ModeAndPolicy{KvMode::kMemory, WindowPolicy::kSliding, 0, 0, 0, true},
                      ModeAndPolicy{KvMode::kMemory, WindowPolicy::kGrowing, 2, 0, 0, true}),
    [](const auto& info) {
      return std::string(core::KvModeName(info.param.mode)) + "_" +
             WindowPolicyName(info.param.policy) +
             (info.param.sink_tokens > 0 ? "_sinks" + std::to_string(info.param.sink_tokens)
                                         : "") +
             (info.param.prefix_gap > 0 ? "_gap" + std::to_string(info.param.prefix_gap) : "") +
             (info.param.memory_only_window > 0
                  ? "_window" + std::to_string(info.param.memory_only_window)
                  : "") +
             (info.param.memory_kv ? "_memory_kv" : "");
    });

// Sink tokens: resident KV reaches exactly S + M + W (sliding), the sinks stay the session's
// first S ids through every fold, and they change what the window rows see. With one sink
// and a window covering the sequence, memory mode is full mode (BOS at position 0, window
// token i at i + 1, as in full mode).
TEST(MemoryModeTest, SinkTokensStayResidentAndCount) {
  auto f = MakeEngine(9);
  const int window = 11, chunk = 5, sinks = 3;
  auto with = MakeProjector(*f->engine, window, chunk, 1, WindowPolicy::kSliding, sinks);
  auto without = MakeProjector(*f->engine, window, chunk, 1, WindowPolicy::kSliding);
  EXPECT_EQ(with->config().kv_budget(), sinks + 5 + window);
  auto s = NewSession(f->engine.get(), with.get(), KvMode::kMemory);
  auto p = NewSession(f->engine.get(), without.get(), KvMode::kMemory);
  const auto ids = RandomIds(70, f->model.config.vocab_size, 11);
  const SideBySide fed = FeedBoth(*s, *p, ids);
  EXPECT_EQ(fed.max_resident, with->config().kv_budget());
  EXPECT_TRUE(fed.differ);
  auto* ms = static_cast<MemorySession*>(s.get());
  EXPECT_GT(ms->tokens_folded(), 0);
  EXPECT_EQ(std::vector<int32_t>(ms->sink_token_ids().begin(), ms->sink_token_ids().end()),
            std::vector<int32_t>(ids.begin(), ids.begin() + sinks));
  EXPECT_EQ(ms->TotalTokens(), ms->tokens_folded() + sinks +
                                   static_cast<int64_t>(ms->window_token_ids().size()));
  // A state with sinks does not import into a session without them, nor the reverse.
  auto state = s->ExportState();
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(NewSession(f->engine.get(), without.get(), KvMode::kMemory)->ImportState(*state).code(),
            absl::StatusCode::kInvalidArgument);
  auto plain_state = p->ExportState();
  ASSERT_TRUE(plain_state.ok());
  EXPECT_EQ(NewSession(f->engine.get(), with.get(), KvMode::kMemory)->ImportState(*plain_state).code(),
            absl::StatusCode::kInvalidArgument);

  // memory_only with memory_only_window Wo is memory mode with W = Wo, sliding: same
  // logits, resident S + M + Wo at most.
  auto only = MakeProjector(*f->engine, window, chunk, 1, WindowPolicy::kGrowing, sinks, 0, 4);
  auto as_memory = MakeProjector(*f->engine, 4, chunk, 1, WindowPolicy::kSliding, sinks);
  EXPECT_EQ(only->config().memory_only_budget(), sinks + 5 + 4);
  auto o = NewSession(f->engine.get(), only.get(), KvMode::kMemoryOnly);
  auto m = NewSession(f->engine.get(), as_memory.get(), KvMode::kMemory);
  const SideBySide same = FeedBoth(*o, *m, ids);
  EXPECT_FALSE(same.differ);
  EXPECT_EQ(same.max_resident, only->config().memory_only_budget());

  auto one = MakeProjector(*f->engine, 200, 16, 1, WindowPolicy::kGrowing, 1);
  auto memory = NewSession(f->engine.get(), one.get(), KvMode::kMemory);
  auto full = NewSession(f->engine.get(), nullptr, KvMode::kFull);
  ASSERT_TRUE(memory->Prefill(ids).ok());
  ASSERT_TRUE(full->Prefill(ids).ok());
  double max_err = 0;
  for (size_t j = 0; j < full->Logits().size(); ++j) {
    max_err = std::max<double>(max_err, std::abs(memory->Logits()[j] - full->Logits()[j]));
  }
  EXPECT_LT(max_err, 1e-5);
}

// The sliding window policy keeps at most M + W entries resident (the projector's KV
// budget), reaches it, and its rows see exactly the last W tokens: with W covering the
// whole sequence it is full mode, with W smaller it differs from the growing policy.
TEST(MemoryModeTest, SlidingPolicyResidentBudget) {
  auto f = MakeEngine(8);
  const int window = 11, chunk = 5;
  auto sliding = MakeProjector(*f->engine, window, chunk, 1, WindowPolicy::kSliding);
  auto growing = MakeProjector(*f->engine, window, chunk, 1, WindowPolicy::kGrowing);
  EXPECT_EQ(sliding->config().kv_budget(), 5 + window);
  EXPECT_EQ(growing->config().kv_budget(), 5 + window + chunk);
  auto s = NewSession(f->engine.get(), sliding.get(), KvMode::kMemory);
  auto g = NewSession(f->engine.get(), growing.get(), KvMode::kMemory);
  const SideBySide fed = FeedBoth(*s, *g, RandomIds(70, f->model.config.vocab_size, 10));
  EXPECT_EQ(fed.max_resident, sliding->config().kv_budget());
  EXPECT_TRUE(fed.differ);
  EXPECT_GT(static_cast<MemorySession*>(s.get())->tokens_folded(), 0);
}

TEST(MemoryModeTest, BadInputAndMismatches) {
  auto f = MakeEngine(6);
  auto projector = MakeProjector(*f->engine, 6, 4);
  engine::SessionOptions options;
  options.mode = KvMode::kMemory;
  EXPECT_EQ(CreateSession(f->engine.get(), options, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A projector made for another model.
  ProjectorConfig c = projector->config();
  c.model_fingerprint = "0000";
  auto other = Projector::FromTensors(c, RandomProjectorTensors(c, 1.0f, 1), "x");
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(CreateSession(f->engine.get(), options, other->get()).status().code(),
            absl::StatusCode::kFailedPrecondition);

  auto session = NewSession(f->engine.get(), projector.get(), KvMode::kMemory);
  EXPECT_EQ(session->Append(-1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(session->Append(f->model.config.vocab_size).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(session->Prefill({}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(session->Logits().empty());
  ASSERT_TRUE(session->Prefill(RandomIds(15, f->model.config.vocab_size, 1)).ok());
  auto state = session->ExportState();
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->mem_slots, 5);
  // Import only into a fresh session, of the same mode and geometry.
  EXPECT_EQ(session->ImportState(*state).code(), absl::StatusCode::kFailedPrecondition);
  auto only = NewSession(f->engine.get(), projector.get(), KvMode::kMemoryOnly);
  EXPECT_EQ(only->ImportState(*state).code(), absl::StatusCode::kInvalidArgument);
  auto fresh = NewSession(f->engine.get(), projector.get(), KvMode::kMemory);
  engine::SessionState bad = *state;
  bad.memory.pop_back();
  EXPECT_EQ(fresh->ImportState(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = *state;
  bad.window_token_ids[0] = 100000;
  EXPECT_EQ(fresh->ImportState(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = *state;
  bad.total_tokens += 1;
  EXPECT_EQ(fresh->ImportState(bad).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(fresh->ImportState(*state).ok());

  // A block of this session read by a replica with another projector / model.
  auto block = ExportSessionBlock(*state, {f->engine->fingerprint(), 48, projector->fingerprint()},
                                  SamplerStateToProto({}, engine::Rng(1).state()));
  ASSERT_TRUE(block.ok());
  BlockExpectations expected{f->engine->fingerprint(), 48, projector->fingerprint(), 5, 97};
  EXPECT_TRUE(ImportSessionBlock(*block, expected).ok());
  expected.projector_fingerprint = "other";
  EXPECT_EQ(ImportSessionBlock(*block, expected).status().code(), absl::StatusCode::kFailedPrecondition);
  expected = {"other-model", 48, projector->fingerprint(), 5, 97};
  EXPECT_EQ(ImportSessionBlock(*block, expected).status().code(), absl::StatusCode::kFailedPrecondition);
  MemoryBlock corrupt = *block;
  corrupt.payload[3] ^= 0x40;
  expected = {f->engine->fingerprint(), 48, projector->fingerprint(), 5, 97};
  EXPECT_EQ(ImportSessionBlock(corrupt, expected).status().code(), absl::StatusCode::kDataLoss);
}

// Every mode through a block: ExportState -> ExportSessionBlock -> KVFB bytes ->
// ImportSessionBlock -> a fresh session on another engine -> ImportState, the path a
// checkpoint takes from one replica to the next (plain modes have M = 0, no payload).
TEST(MemoryModeTest, EveryModeRoundTripsThroughABlock) {
  auto f = MakeEngine(7);
  auto g = MakeEngine(7);
  auto projector = MakeProjector(*f->engine, 6, 4);
  for (KvMode mode : {KvMode::kFull, KvMode::kSliding, KvMode::kSink, KvMode::kMemory,
                      KvMode::kMemoryOnly}) {
    SCOPED_TRACE(core::KvModeName(mode));
    engine::SessionOptions options;
    options.mode = mode;
    // Sliding/sink import recomputes the window from its ids, exact only while nothing was
    // evicted (engine/session.h): a window of 40 keeps all 13 tokens of the checkpoint.
    options.window_size = 40;
    options.sink_tokens = 2;
    auto live = CreateSession(f->engine.get(), options, projector.get());
    ASSERT_TRUE(live.ok()) << live.status();
    ASSERT_TRUE((*live)->Prefill(RandomIds(9, 97, 8)).ok());
    Greedy(**live, 4, nullptr);
    engine::Rng rng(99);
    auto state = (*live)->ExportState();
    ASSERT_TRUE(state.ok()) << state.status();
    auto block = ExportSessionBlock(*state, IdentityFor(*f->engine, projector.get()),
                                    SamplerStateToProto({}, rng.state()));
    ASSERT_TRUE(block.ok()) << block.status();
    const bool memory_mode = mode == KvMode::kMemory || mode == KvMode::kMemoryOnly;
    EXPECT_EQ(block->payload.size(), memory_mode ? 5u * 48 * 2 : 0u);
    auto parsed = ParseMemoryBlock(SerializeMemoryBlock(*block));
    ASSERT_TRUE(parsed.ok());
    v1::SamplerState sampler;
    auto imported =
        ImportSessionBlock(*parsed, ExpectationsFor(*g->engine, projector.get()), &sampler);
    ASSERT_TRUE(imported.ok()) << imported.status();
    EXPECT_EQ(sampler.rng_state(0), rng.state()[0]);
    EXPECT_EQ(imported->mode, mode);
    auto restored = CreateSession(g->engine.get(), options, projector.get());
    ASSERT_TRUE(restored.ok()) << restored.status();
    ASSERT_TRUE((*restored)->ImportState(*imported).ok());
    EXPECT_EQ((*restored)->TotalTokens(), (*live)->TotalTokens());
    std::vector<std::vector<float>> a, b;
    EXPECT_EQ(Greedy(**live, 12, &a), Greedy(**restored, 12, &b));
    EXPECT_EQ(a, b);
  }
  // A replica without the projector cannot resume a memory-mode session.
  engine::SessionOptions options;
  options.mode = KvMode::kMemory;
  auto live = CreateSession(f->engine.get(), options, projector.get());
  ASSERT_TRUE(live.ok());
  ASSERT_TRUE((*live)->Prefill(RandomIds(20, 97, 9)).ok());
  auto state = (*live)->ExportState();
  ASSERT_TRUE(state.ok());
  auto block = ExportSessionBlock(*state, IdentityFor(*f->engine, projector.get()),
                                  SamplerStateToProto({}, engine::Rng(1).state()));
  ASSERT_TRUE(block.ok());
  EXPECT_EQ(ImportSessionBlock(*block, ExpectationsFor(*g->engine, nullptr)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace kvfold::memory

namespace kvfold::memory {
namespace {

// Every sampling field survives the block's SamplerState; repetition 1 (off) is stored
// unset, so a block without penalties has the bytes it had before they existed.
TEST(SamplerStateTest, SamplingParamsRoundTrip) {
  engine::SamplingParams params;
  params.temperature = 0.7f;
  params.top_k = 40;
  params.top_p = 0.9f;
  params.seed = 12;
  params.stop_token_ids = {3, 9};
  params.max_new_tokens = 77;
  params.presence_penalty = -0.5f;
  params.frequency_penalty = 1.25f;
  params.repetition_penalty = 1.1f;
  params.min_p = 0.05f;
  params.logit_bias = {{2, -100.0f}, {300, 4.5f}};
  const std::array<uint64_t, 4> rng = engine::Rng(5).state();
  engine::SamplingParams back;
  std::array<uint64_t, 4> rng_back;
  ASSERT_TRUE(SamplerStateFromProto(SamplerStateToProto(params, rng), &back, &rng_back).ok());
  EXPECT_EQ(rng_back, rng);
  EXPECT_EQ(back.temperature, params.temperature);
  EXPECT_EQ(back.top_k, params.top_k);
  EXPECT_EQ(back.top_p, params.top_p);
  EXPECT_EQ(back.seed, params.seed);
  EXPECT_EQ(back.stop_token_ids, params.stop_token_ids);
  EXPECT_EQ(back.max_new_tokens, params.max_new_tokens);
  EXPECT_EQ(back.presence_penalty, params.presence_penalty);
  EXPECT_EQ(back.frequency_penalty, params.frequency_penalty);
  EXPECT_EQ(back.repetition_penalty, params.repetition_penalty);
  EXPECT_EQ(back.min_p, params.min_p);
  EXPECT_EQ(back.logit_bias, params.logit_bias);

  const v1::SamplerState plain = SamplerStateToProto(engine::SamplingParams(), rng);
  EXPECT_EQ(plain.params().repetition_penalty(), 0.0f);
  ASSERT_TRUE(SamplerStateFromProto(plain, &back, &rng_back).ok());
  EXPECT_EQ(back.repetition_penalty, 1.0f);
  EXPECT_FALSE(back.AdjustsLogits());
}

}  // namespace
}  // namespace kvfold::memory
