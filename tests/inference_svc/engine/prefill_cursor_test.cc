// PrefillCursor and Session::StartPrefill / ContinuePrefill: a prompt fed in pieces, with
// other sessions' decode steps between the pieces, equals Prefill bit for bit (logits,
// the cache's K/V through later decode steps, the exported state), for F32 KV (attention
// split into key slices) and INT8 KV (sub-chunks only); an abandoned prompt rolls back
// only its sub-chunk in flight; bad calls are refused.
#include "inference_svc/engine/prefill_cursor.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "inference_svc/engine/session.h"
#include "tests/testing/engine_rig.h"

namespace kvfold::engine {
namespace {

using testing::RandomIds;
using testing::Rig;

Rig Make(core::DType kv_dtype) {
  Rig s;
  s.model = testing::RandomTinyModel(21);
  s.backend = kernels::CreateCpuBackend({2, false});
  EngineOptions options;
  options.kv_pool_bytes = 64 << 20;
  options.kv_dtype = kv_dtype;
  auto e = Engine::Create(s.model, s.backend.get(), options);
  EXPECT_TRUE(e.ok()) << e.status();
  s.engine = std::move(*e);
  return s;
}

std::unique_ptr<Session> NewSession(Engine& e, KvMode mode = KvMode::kFull) {
  SessionOptions o;
  o.mode = mode;
  o.window_size = 100;
  auto s = CreatePlainSession(&e, o);
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
}

bool SameBits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && !a.empty() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class PrefillCursorTest : public ::testing::TestWithParam<std::tuple<core::DType, KvMode>> {};

TEST_P(PrefillCursorTest, PiecesWithOtherSessionsBetweenEqualPrefill) {
  const auto [kv_dtype, mode] = GetParam();
  Rig rig = Make(kv_dtype);
  Engine& e = *rig.engine;
  const int vocab = e.config().vocab_size;
  const auto history = RandomIds(600, vocab, 1);
  const auto prompt = RandomIds(150, vocab, 2);
  auto whole = NewSession(e, mode), pieces = NewSession(e, mode), other = NewSession(e);
  ASSERT_TRUE(whole->Prefill(history).ok());
  ASSERT_TRUE(pieces->Prefill(history).ok());
  ASSERT_TRUE(other->Prefill(RandomIds(5, vocab, 3)).ok());
  ASSERT_TRUE(whole->Prefill(prompt).ok());

  ASSERT_TRUE(pieces->StartPrefill(prompt).ok());
  int calls = 0;
  for (bool done = false; !done; ++calls) {
    absl::StatusOr<bool> r = pieces->ContinuePrefill(0.0);  // one piece per call
    ASSERT_TRUE(r.ok()) << r.status();
    done = *r;
    ASSERT_TRUE(other->Append(static_cast<int32_t>(calls % vocab)).ok());
  }
  // 150 rows in 3 sub-chunks (59 rows each at most) of 3 layers: place, 3 pieces per
  // layer, logits = 33 pieces; full-mode F32 and F16 KV also split the attention over ~750
  // keys into slices.
  const int unsplit = 3 * (1 + 3 * 3 + 1);
  EXPECT_GE(calls, unsplit);
  if (kv_dtype != core::DType::kI8 && mode == KvMode::kFull) {
    EXPECT_GT(calls, unsplit);
  }
  EXPECT_TRUE(SameBits(whole->Logits(), pieces->Logits()));
  EXPECT_EQ(whole->TotalTokens(), pieces->TotalTokens());
  EXPECT_EQ(whole->ResidentTokens(), pieces->ResidentTokens());
  for (int32_t id : RandomIds(4, vocab, 4)) {  // the K/V fed in pieces are Prefill's too
    ASSERT_TRUE(whole->Append(id).ok());
    ASSERT_TRUE(pieces->Append(id).ok());
    EXPECT_TRUE(SameBits(whole->Logits(), pieces->Logits()));
  }
  auto a = whole->ExportState(), b = pieces->ExportState();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->window_token_ids, b->window_token_ids);
  EXPECT_EQ(a->total_tokens, b->total_tokens);
}

INSTANTIATE_TEST_SUITE_P(KvTypesAndModes, PrefillCursorTest,
                         ::testing::Values(std::make_tuple(core::DType::kF32, KvMode::kFull),
                                           std::make_tuple(core::DType::kF32, KvMode::kSliding),
                                           std::make_tuple(core::DType::kF16, KvMode::kFull),
                                           std::make_tuple(core::DType::kI8, KvMode::kFull)));

TEST(PrefillCursorTest, AbandonedPromptKeepsOnlyWholeSubChunks) {
  Rig rig = Make(core::DType::kF32);
  Engine& e = *rig.engine;
  const auto prompt = RandomIds(150, e.config().vocab_size, 5);
  auto cache = e.NewCache(KvPolicy::Full());
  const int free_before = e.pool().free_blocks();
  auto cursor = PrefillCursor::Create(&e);
  ASSERT_TRUE(cursor.ok()) << cursor.status();
  ASSERT_TRUE((*cursor)->Start(cache.get(), prompt).ok());
  EXPECT_EQ(absl::StatusCode::kFailedPrecondition,
            (*cursor)->Start(cache.get(), prompt).code());  // one prompt at a time
  int64_t fed = 0;
  while (fed == 0) {  // the first sub-chunk, then one piece of the second
    auto r = (*cursor)->Run(0.0);
    ASSERT_TRUE(r.ok() && !*r);
    fed = (*cursor)->fed();
  }
  ASSERT_TRUE((*cursor)->Run(0.0).ok());
  EXPECT_GT(cache->main_len(), fed);  // the second sub-chunk is placed
  cursor->reset();
  EXPECT_EQ(fed, cache->main_len());
  cache.reset();
  EXPECT_EQ(free_before, e.pool().free_blocks());
}

TEST(PrefillCursorTest, RefusesBadCalls) {
  Rig rig = Make(core::DType::kF32);
  Engine& e = *rig.engine;
  auto s = NewSession(e);
  EXPECT_EQ(absl::StatusCode::kFailedPrecondition, s->ContinuePrefill(1.0).status().code());
  EXPECT_EQ(absl::StatusCode::kInvalidArgument, s->StartPrefill({}).code());
  const std::vector<int32_t> bad = {1, e.config().vocab_size};
  EXPECT_EQ(absl::StatusCode::kInvalidArgument, s->StartPrefill(bad).code());
  auto cursor = PrefillCursor::Create(&e);
  ASSERT_TRUE(cursor.ok());
  EXPECT_EQ(absl::StatusCode::kFailedPrecondition, (*cursor)->Run(1.0).status().code());
  EXPECT_TRUE((*cursor)->logits().empty());
}

}  // namespace
}  // namespace kvfold::engine
