// Memory modes (memory, memory_only) on an int8 KV engine: memory slots are int8 for the
// window rows (the seed's third pitfall), folds happen, prefill == token-by-token decode
// bit for bit, and a session exported from one int8 engine and imported on another int8
// engine continues bit for bit. Plain modes export/import too (they re-prefill).
#include <random>

#include "gtest/gtest.h"
#include "inference_svc/engine/sampler.h"
#include "inference_svc/memory/memory_session.h"
#include "inference_svc/memory/random_projector.h"
#include "tests/testing/naive_forward.h"
#include "tests/testing/tiny_engine.h"

namespace kvfold::memory {
namespace {

using core::KvMode;

using Fixture = testing::Rig;

std::unique_ptr<Fixture> MakeEngine(core::DType dtype, bool reference = false) {
  engine::EngineOptions options;
  options.max_batch_tokens = 32;
  options.block_size = 4;  // mem_slots 5: two prefix blocks, the second partial
  options.kv_pool_bytes = 4 << 20;
  options.kv_dtype = dtype;
  return testing::MakeTinyEngine(4, options, {.num_threads = 2, .reference = reference});
}

std::unique_ptr<Projector> MakeProjector(const engine::Engine& engine, int window, int chunk) {
  return testing::RandomTinyProjector(testing::TinyProjectorConfig(engine, 5, window, chunk), 77,
                                      "projector-77");
}

std::unique_ptr<engine::Session> NewSession(engine::Engine* engine, const Projector* projector,
                                            KvMode mode) {
  engine::SessionOptions options;
  options.mode = mode;
  options.window_size = 9;
  options.sink_tokens = 3;
  auto s = CreateSession(engine, options, projector);
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

using testing::RandomIds;

std::vector<std::vector<float>> Greedy(engine::Session& s, int n) {
  std::vector<std::vector<float>> logits;
  for (int i = 0; i < n; ++i) {
    EXPECT_TRUE(s.Append(engine::Argmax(s.Logits())).ok());
    logits.emplace_back(s.Logits().begin(), s.Logits().end());
  }
  return logits;
}

class Int8MemoryTest : public ::testing::TestWithParam<KvMode> {};

TEST_P(Int8MemoryTest, PrefillEqualsDecodeAndFoldsHappen) {
  for (bool reference : {false, true}) {
    auto f = MakeEngine(core::DType::kI8, reference);
    auto projector = MakeProjector(*f->engine, 10, 7);
    auto a = NewSession(f->engine.get(), projector.get(), GetParam());
    auto b = NewSession(f->engine.get(), projector.get(), GetParam());
    const auto ids = RandomIds(47, f->model.config.vocab_size, 3);
    ASSERT_TRUE(a->Prefill(ids).ok());
    for (int32_t id : ids) ASSERT_TRUE(b->Append(id).ok());
    EXPECT_TRUE(std::equal(a->Logits().begin(), a->Logits().end(), b->Logits().begin()));
    if (GetParam() == KvMode::kMemory || GetParam() == KvMode::kMemoryOnly) {
      EXPECT_GT(static_cast<MemorySession*>(a.get())->tokens_folded(), 0);
    }
  }
}

// Modes whose state resumes exactly (docs/engine.md: sliding/sink windows are recomputed
// from their ids after evictions, in F32 as in int8).
class Int8ResumeTest : public ::testing::TestWithParam<KvMode> {};

TEST_P(Int8ResumeTest, ExportImportOnAnotherInt8EngineContinuesBitwise) {
  auto f = MakeEngine(core::DType::kI8);
  auto g = MakeEngine(core::DType::kI8);
  auto projector = MakeProjector(*f->engine, 10, 7);
  for (int checkpoint_at : {22, 24, 25}) {
    SCOPED_TRACE(::testing::Message() << "checkpoint after " << checkpoint_at << " tokens");
    auto live = NewSession(f->engine.get(), projector.get(), GetParam());
    ASSERT_TRUE(live->Prefill(RandomIds(5, f->model.config.vocab_size, 5)).ok());
    Greedy(*live, checkpoint_at - 5);
    auto state = live->ExportState();
    ASSERT_TRUE(state.ok());
    auto restored = NewSession(g->engine.get(), projector.get(), GetParam());
    ASSERT_TRUE(restored->ImportState(*state).ok());
    ASSERT_TRUE(
        std::equal(live->Logits().begin(), live->Logits().end(), restored->Logits().begin()));
    EXPECT_EQ(Greedy(*live, 23), Greedy(*restored, 23));  // through more folds
  }
}

// The memory slots really are int8 for window rows: the int8 engine's logits differ from
// the F32 engine's, by little.
TEST_P(Int8MemoryTest, CloseToF32Engine) {
  auto i8 = MakeEngine(core::DType::kI8);
  auto f32 = MakeEngine(core::DType::kF32);
  auto projector = MakeProjector(*i8->engine, 10, 7);
  auto a = NewSession(i8->engine.get(), projector.get(), GetParam());
  auto b = NewSession(f32->engine.get(), projector.get(), GetParam());
  const auto ids = RandomIds(40, i8->model.config.vocab_size, 8);
  ASSERT_TRUE(a->Prefill(ids).ok());
  ASSERT_TRUE(b->Prefill(ids).ok());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a->Logits().size(); ++i) {
    diff = std::max(diff, double{std::fabs(a->Logits()[i] - b->Logits()[i])});
    scale = std::max(scale, double{std::fabs(b->Logits()[i])});
  }
  EXPECT_GT(diff, 0.0);
  EXPECT_LT(diff, 0.05 * scale);
}

INSTANTIATE_TEST_SUITE_P(Modes, Int8ResumeTest,
                         ::testing::Values(KvMode::kMemory, KvMode::kMemoryOnly, KvMode::kFull),
                         [](const auto& info) {
                           return std::string(core::KvModeName(info.param));
                         });
INSTANTIATE_TEST_SUITE_P(Modes, Int8MemoryTest,
                         ::testing::Values(KvMode::kMemory, KvMode::kMemoryOnly, KvMode::kFull,
                                           KvMode::kSliding, KvMode::kSink),
                         [](const auto& info) {
                           return std::string(core::KvModeName(info.param));
                         });

}  // namespace
}  // namespace kvfold::memory
