// 100k tokens through memory mode on a small random model: resident KV bytes and the
// checkpoint block stay constant after warm-up, and the token accounting adds up.
#include <random>
#include <set>

#include "gtest/gtest.h"
#include "inference_svc/memory/memory_session.h"
#include "inference_svc/memory/random_projector.h"
#include "inference_svc/memory/session_block.h"
#include "tests/testing/naive_forward.h"
#include "tests/testing/tiny_model.h"

namespace kvfold::memory {
namespace {

TEST(MemoryLongTest, HundredThousandTokensInConstantMemory) {
  const model::ModelFile model = testing::RandomTinyModel(11);
  auto backend = kernels::CreateCpuBackend({.num_threads = 2});
  auto engine = engine::Engine::Create(model, backend.get(), {.block_size = 16});
  ASSERT_TRUE(engine.ok()) << engine.status();
  ProjectorConfig c;
  c.mem_slots = 8;
  c.hidden_size = model.config.hidden_size;
  c.num_heads = 4;
  c.ffn_mult = 2;
  c.window_size = 32;
  c.chunk_size = 16;
  c.model_fingerprint = (*engine)->fingerprint();
  auto projector = Projector::FromTensors(c, RandomProjectorTensors(c, 1.0f, 3), "p");
  ASSERT_TRUE(projector.ok());
  auto session = MemorySession::Create(engine->get(), projector->get(), {});
  ASSERT_TRUE(session.ok()) << session.status();
  MemorySession& s = **session;

  const int64_t num_tokens = 100000;
  const int W = 32, C = 16, M = 8, block = 16;
  // Bound: prefix blocks for M slots + main blocks for W + C entries.
  const size_t bytes_per_block = (*engine)->pool().bytes_per_block();
  const size_t bound = ((M + block - 1) / block + (W + C + block - 1) / block) * bytes_per_block;
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> dist(0, model.config.vocab_size - 1);
  size_t max_resident = 0;
  std::set<size_t> resident_after_fold, block_payload_sizes;
  std::set<int> free_blocks_after_fold;
  size_t first_block_bytes = 0;
  int64_t last_folds = 0;
  for (int64_t t = 0; t < num_tokens; ++t) {
    ASSERT_TRUE(s.Append(dist(rng)).ok()) << "token " << t;
    max_resident = std::max(max_resident, s.KvBytesResident());
    ASSERT_EQ(s.TotalTokens(), t + 1);
    ASSERT_EQ(s.TotalTokens(), s.tokens_folded() + static_cast<int64_t>(s.window_token_ids().size()));
    if (s.stats().num_folds != last_folds) {  // this token came right after a fold
      last_folds = s.stats().num_folds;
      ASSERT_EQ(s.tokens_folded(), last_folds * C);
      ASSERT_EQ(s.window_token_ids().size(), static_cast<size_t>(W + 1));
      resident_after_fold.insert(s.KvBytesResident());
      free_blocks_after_fold.insert((*engine)->pool().free_blocks());
      if (last_folds % 500 == 1) {
        auto state = s.ExportState();
        ASSERT_TRUE(state.ok());
        auto b = ExportSessionBlock(*state, {(*engine)->fingerprint(), c.hidden_size, "p"},
                                    SamplerStateToProto({}, engine::Rng(1).state()));
        ASSERT_TRUE(b.ok());
        block_payload_sizes.insert(b->payload.size());
        const size_t bytes = SerializeMemoryBlock(*b).size();
        if (first_block_bytes == 0) first_block_bytes = bytes;
        // Constant up to varint widths: the counters grow by a few bytes and each of the
        // W + 1 window ids takes 1..5 bytes; nothing scales with the history's length.
        EXPECT_LE(bytes, first_block_bytes + 8 + static_cast<size_t>(W + 1) * 4);
        EXPECT_LE(bytes, b->payload.size() + static_cast<size_t>(W + 1) * 5 + 512);
      }
    }
  }
  // 100000 tokens: the window holds 32..48 tokens, everything before is folded.
  const int64_t expected_folds = (num_tokens - (W + C) + C - 1) / C;
  EXPECT_EQ(s.stats().num_folds, expected_folds);
  EXPECT_EQ(s.tokens_folded(), expected_folds * C);
  EXPECT_EQ(s.stats().refill_tokens, expected_folds * W);
  EXPECT_LE(max_resident, bound);
  EXPECT_EQ(resident_after_fold.size(), 1u) << "resident bytes differ between folds";
  EXPECT_EQ(free_blocks_after_fold.size(), 1u) << "KV blocks leak";
  EXPECT_EQ(block_payload_sizes, std::set<size_t>{static_cast<size_t>(M) * c.hidden_size * 2});
  EXPECT_EQ(s.ResidentTokens(), M + static_cast<int64_t>(s.window_token_ids().size()));
  RecordProperty("fold_seconds", std::to_string(s.stats().fold_seconds));
}

}  // namespace
}  // namespace kvfold::memory
