// Memory mode on a random tiny model: against a naive reference (masks, positions, folds),
// against full mode when nothing folds, prefill == decode, exact checkpoints, errors.
#include "inference_svc/memory/memory_session.h"

#include <random>

#include "gtest/gtest.h"
#include "inference_svc/engine/sampler.h"
#include "inference_svc/memory/random_projector.h"
#include "inference_svc/memory/session_block.h"
#include "tests/testing/naive_forward.h"
#include "tests/testing/tiny_engine.h"

namespace kvfold::memory {
namespace {

using core::KvMode;
using testing::NaiveMemoryForward;
using testing::RandomTinyModel;

std::unique_ptr<testing::Rig> MakeEngine(uint32_t seed) {
  return testing::MakeTinyEngine(seed, {.max_batch_tokens = 64});
}

std::unique_ptr<Projector> MakeProjector(const engine::Engine& engine, int mem_slots, int window,
                                         int chunk, int input_layers, uint64_t seed) {
  ProjectorConfig c = testing::TinyProjectorConfig(engine, mem_slots, window, chunk);
  c.input_layers = input_layers;
  return testing::RandomTinyProjector(c, seed, "proj-" + std::to_string(seed));
}

std::unique_ptr<MemorySession> NewSession(engine::Engine* engine, const Projector* projector,
                                          KvMode mode, bool fp16_memory = true) {
  auto s = MemorySession::Create(engine, projector, {.mode = mode, .fp16_memory = fp16_memory});
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

using testing::RandomIds;

double MaxAbsDiff(std::span<const float> a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

// ---- Against the naive reference --------------------------------------------------------

// The naive memory algorithm (docs/memory-mode.md) on the double reference forward pass,
// with the C++ projector: mem starts empty; after each token whose window reaches W + C,
// fold the oldest C hidden states.
struct NaiveMemoryMode {
  const model::ModelFile& model;
  const Projector& projector;
  int window, chunk;
  std::vector<float> mem;
  std::vector<int32_t> w;

  std::vector<double> Feed(int32_t id) {
    w.push_back(id);
    const auto out = NaiveMemoryForward(model, mem, w);
    if (static_cast<int>(w.size()) == window + chunk) {
      const int d = model.config.hidden_size;
      std::vector<float> h;
      for (int i = 0; i < chunk; ++i)
        for (int t = 0; t < d; ++t) h.push_back(static_cast<float>(out.hidden[i][t]));
      std::vector<float> next(projector.config().mem_slots * d);
      ProjectorScratch scratch;
      EXPECT_TRUE(projector.Forward(mem, h, next, &scratch).ok());
      mem = next;
      w.erase(w.begin(), w.begin() + chunk);
    }
    return out.logits.back();
  }
};

class NaiveReferenceTest : public ::testing::TestWithParam<KvMode> {};

TEST_P(NaiveReferenceTest, LogitsMatchThroughFolds) {
  auto f = MakeEngine(3);
  const KvMode mode = GetParam();
  const int window = mode == KvMode::kMemory ? 7 : 0, chunk = 5;
  auto projector = MakeProjector(*f->engine, /*mem_slots=*/3, 7, chunk, 1, 9);
  // fp32 memory: the reference runs in double, and fp16 rounding could flip an ulp.
  auto session = NewSession(f->engine.get(), projector.get(), mode, /*fp16_memory=*/false);
  NaiveMemoryMode naive{f->model, *projector, window, chunk, {}, {}};
  const auto ids = RandomIds(window + 3 * chunk + 2, f->model.config.vocab_size, 4);  // 3 folds
  for (size_t t = 0; t < ids.size(); ++t) {
    ASSERT_TRUE(session->Append(ids[t]).ok());
    const auto want = naive.Feed(ids[t]);
    EXPECT_LT(MaxAbsDiff(session->Logits(), want), 1e-4) << "token " << t;
  }
  EXPECT_EQ(session->tokens_folded(), 3 * chunk);
  EXPECT_EQ(session->stats().num_folds, 3);
  // The session's memory is the reference's (same projector, hidden states ~1e-6 apart).
  ASSERT_EQ(session->memory().size(), naive.mem.size());
  for (size_t i = 0; i < naive.mem.size(); ++i) EXPECT_NEAR(session->memory()[i], naive.mem[i], 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Modes, NaiveReferenceTest,
                         ::testing::Values(KvMode::kMemory, KvMode::kMemoryOnly));

// Memory rows really are bidirectional and window rows really see them: perturbing the last
// memory row changes the first window token's logits (it could not if the window ignored
// memory), and the naive reference with a causal memory mask disagrees with the engine.
TEST(MemoryMaskTest, MemoryIsBidirectionalAndVisibleToEveryWindowToken) {
  auto f = MakeEngine(5);
  auto projector = MakeProjector(*f->engine, 4, 6, 4, 1, 2);
  auto session = NewSession(f->engine.get(), projector.get(), KvMode::kMemory, false);
  const auto ids = RandomIds(6 + 4 + 3, f->model.config.vocab_size, 8);
  ASSERT_TRUE(session->Prefill(ids).ok());
  ASSERT_EQ(session->tokens_folded(), 4);
  const std::vector<float> mem(session->memory().begin(), session->memory().end());
  const std::vector<int32_t> w(session->window_token_ids().begin(), session->window_token_ids().end());
  const auto want = NaiveMemoryForward(f->model, mem, w);
  EXPECT_LT(MaxAbsDiff(session->Logits(), want.logits.back()), 1e-4);

  // A causal-among-memory variant gives clearly different logits.
  const int num_mem = 4;
  std::vector<int> pos;
  const auto rows = testing::NaiveMemoryInputs(f->model, mem, w, &pos);
  const auto causal = testing::NaiveForward(
      f->model, testing::NaiveRowsFromMask(rows, pos, [](int i, int j) { return j <= i; }));
  EXPECT_GT(MaxAbsDiff(session->Logits(), causal.logits.back()), 1e-3);
  // Shifted window positions (0..n-1 instead of 1..n) also disagree.
  for (int i = num_mem; i < static_cast<int>(pos.size()); ++i) pos[i] -= 1;
  const auto shifted =
      testing::NaiveForward(f->model, testing::NaiveRowsFromMask(rows, pos, [&](int i, int j) {
                              return i < num_mem ? j < num_mem : (j < num_mem || j <= i);
                            }));
  EXPECT_GT(MaxAbsDiff(session->Logits(), shifted.logits.back()), 1e-6);
}

}  // namespace
}  // namespace kvfold::memory
