// Engine::Forward: bitwise prefill == decode (both CPU backends), chunking and ragged
// batching invariance, windowed modes vs an independent naive forward, memory-expansion
// masks and positions, hidden states, bad input and pool exhaustion.
#include "inference_svc/engine/engine.h"

#include <cstring>
#include <random>

#include "gtest/gtest.h"
#include "inference_svc/model/random_model.h"
#include "tests/testing/engine_rig.h"
#include "tests/testing/naive_forward.h"

namespace kvfold::engine {
namespace {

using core::DType;

model::ModelFile Model(const std::string& shape, uint64_t seed, DType dtype = DType::kF32) {
  auto c = model::NamedShape(shape);
  EXPECT_TRUE(c.ok());
  if (shape == "tiny-qwen2") c->num_layers = 3;  // room for hidden_layers = 3
  return model::MakeRandomModel(*c, seed, dtype);
}

using testing::RandomIds;
using testing::Rig;

Rig MakeFrom(model::ModelFile model, bool reference, EngineOptions options = {}) {
  Rig s;
  s.model = std::move(model);
  kernels::CpuBackendOptions bo;
  bo.reference = reference;
  bo.num_threads = 2;
  s.backend = kernels::CreateCpuBackend(bo);
  options.kv_pool_bytes = 64 << 20;
  auto e = Engine::Create(s.model, s.backend.get(), options);
  EXPECT_TRUE(e.ok()) << e.status();
  s.engine = std::move(*e);
  return s;
}

Rig Make(const std::string& shape, bool reference, EngineOptions options = {},
           DType dtype = DType::kF32) {
  return MakeFrom(Model(shape, 11, dtype), reference, options);
}

// All-row logits of `ids` fed in one Forward.
std::vector<float> PrefillLogits(Engine& e, KvCache* cache, std::span<const int32_t> ids) {
  SequenceInput in;
  in.cache = cache;
  in.token_ids = ids;
  in.logits = RowSelect::kAll;
  ForwardResult r;
  EXPECT_TRUE(e.Forward(std::span<const SequenceInput>(&in, 1), &r).ok());
  return std::vector<float>(r.outputs[0].logits.begin(), r.outputs[0].logits.end());
}

std::vector<float> DecodeLogits(Engine& e, KvCache* cache, std::span<const int32_t> ids) {
  std::vector<float> out;
  ForwardResult r;
  for (size_t i = 0; i < ids.size(); ++i) {
    SequenceInput in;
    in.cache = cache;
    in.token_ids = ids.subspan(i, 1);
    EXPECT_TRUE(e.Forward(std::span<const SequenceInput>(&in, 1), &r).ok());
    out.insert(out.end(), r.outputs[0].logits.begin(), r.outputs[0].logits.end());
  }
  return out;
}

// The K/V of main entry j of `cache`, layer l (CPU backend: device memory is host memory).
std::vector<float> MainKv(const Engine& e, const KvCache& cache, int layer, int j) {
  const int bs = e.pool().block_size(), kv = e.config().kv_dim();
  const int slot = cache.main_front() + j;
  const int64_t off = (static_cast<int64_t>(cache.main_blocks()[slot / bs]) * bs + slot % bs) * kv;
  const float* k = static_cast<const float*>(e.pool().k_cache(layer).data) + off;
  const float* v = static_cast<const float*>(e.pool().v_cache(layer).data) + off;
  std::vector<float> out(k, k + kv);
  out.insert(out.end(), v, v + kv);
  return out;
}

// Feeds `n` random ids to two full caches, as one prefill and token by token: the logits
// and every `kv_every`-th main entry's K/V of every layer are bit-identical.
void ExpectPrefillEqualsDecode(Rig& s, int n, uint64_t seed, int kv_every) {
  const auto ids = RandomIds(n, s.engine->config().vocab_size, seed);
  auto a = s.engine->NewCache(KvPolicy::Full());
  auto b = s.engine->NewCache(KvPolicy::Full());
  const auto prefill = PrefillLogits(*s.engine, a.get(), ids);
  const auto decode = DecodeLogits(*s.engine, b.get(), ids);
  ASSERT_EQ(prefill.size(), decode.size());
  EXPECT_EQ(0, std::memcmp(prefill.data(), decode.data(), prefill.size() * sizeof(float)));
  for (int l = 0; l < s.engine->config().num_layers; ++l) {
    for (int j = 0; j < n; j += kv_every) {
      EXPECT_EQ(MainKv(*s.engine, *a, l, j), MainKv(*s.engine, *b, l, j)) << l << " " << j;
    }
  }
}

class BitwiseTest : public ::testing::TestWithParam<std::tuple<bool, DType>> {};

TEST_P(BitwiseTest, PrefillEqualsDecodeBitForBit) {
  const auto [reference, dtype] = GetParam();
  Rig s = Make("tiny-odd", reference, {}, dtype);
  ExpectPrefillEqualsDecode(s, 45, 5, 11);
}

// Heads of 40 and 64 dimensions: the optimised attention scores them by key rows (16-lane
// chunks and a lane tree) instead of the transposed tile the tiny shapes' heads use; prefill
// and decode still give the same bits.
TEST_P(BitwiseTest, PrefillEqualsDecodeWithWideHeads) {
  const auto [reference, dtype] = GetParam();
  for (const int head_dim : {40, 64}) {
    SCOPED_TRACE(head_dim);
    auto c = model::NamedShape("tiny");
    ASSERT_TRUE(c.ok());
    c->num_heads = 4;
    c->num_kv_heads = 2;
    c->head_dim = head_dim;
    c->hidden_size = 4 * head_dim;
    Rig s = MakeFrom(model::MakeRandomModel(*c, 11, dtype), reference);
    ExpectPrefillEqualsDecode(s, 40, 6, 13);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, BitwiseTest,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Values(DType::kF32, DType::kBF16,
                                                              DType::kF16, DType::kQ8)));

TEST(EngineTest, ChunkSizeDoesNotChangeBits) {
  EngineOptions small;
  small.max_batch_tokens = 7;
  Rig s1 = Make("tiny", false, small);
  Rig s2 = Make("tiny", false);
  const auto ids = RandomIds(40, 256, 9);
  for (const KvPolicy& policy : {KvPolicy::Full(), KvPolicy::Sliding(8), KvPolicy::Sink(3, 6)}) {
    auto a = s1.engine->NewCache(policy);
    auto b = s2.engine->NewCache(policy);
    EXPECT_EQ(PrefillLogits(*s1.engine, a.get(), ids), PrefillLogits(*s2.engine, b.get(), ids));
    EXPECT_EQ(a->main_len(), b->main_len());
    EXPECT_EQ(a->prefix_len(), b->prefix_len());
  }
}

TEST(EngineTest, RopeTableGrowthDoesNotChangeBits) {
  EngineOptions tiny_table;
  tiny_table.rope_table_rows = 3;  // grows several times during the run
  Rig s1 = Make("tiny", false, tiny_table);
  Rig s2 = Make("tiny", false);
  const auto ids = RandomIds(70, 256, 12);
  auto a = s1.engine->NewCache(KvPolicy::Full());
  auto b = s2.engine->NewCache(KvPolicy::Full());
  EXPECT_EQ(DecodeLogits(*s1.engine, a.get(), ids), PrefillLogits(*s2.engine, b.get(), ids));
}

TEST(EngineTest, RaggedBatchEqualsSeparateCalls) {
  Rig s = Make("tiny-odd", false);
  const int vocab = s.engine->config().vocab_size;
  std::vector<std::vector<int32_t>> prompts = {RandomIds(13, vocab, 1), RandomIds(1, vocab, 2),
                                               RandomIds(29, vocab, 3)};
  std::vector<std::unique_ptr<KvCache>> together, alone;
  std::vector<SequenceInput> inputs;
  for (auto& p : prompts) {
    together.push_back(s.engine->NewCache(KvPolicy::Full()));
    alone.push_back(s.engine->NewCache(KvPolicy::Full()));
    SequenceInput in;
    in.cache = together.back().get();
    in.token_ids = p;
    in.logits = RowSelect::kAll;
    inputs.push_back(in);
  }
  ForwardResult r;
  ASSERT_TRUE(s.engine->Forward(inputs, &r).ok());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto ref = PrefillLogits(*s.engine, alone[i].get(), prompts[i]);
    EXPECT_EQ(ref, std::vector<float>(r.outputs[i].logits.begin(), r.outputs[i].logits.end()));
  }
  // One batched decode step across the three sequences == three single steps.
  const std::vector<int32_t> next = {7, 8, 9};
  for (size_t i = 0; i < 3; ++i) {
    inputs[i].token_ids = std::span<const int32_t>(&next[i], 1);
    inputs[i].logits = RowSelect::kLast;
  }
  ASSERT_TRUE(s.engine->Forward(inputs, &r).ok());
  for (size_t i = 0; i < 3; ++i) {
    const auto ref = DecodeLogits(*s.engine, alone[i].get(), std::span<const int32_t>(&next[i], 1));
    EXPECT_EQ(ref, std::vector<float>(r.outputs[i].logits.begin(), r.outputs[i].logits.end()));
  }
}

void ExpectNear(const std::vector<float>& got, const testing::NaiveOutput& ref, int vocab,
                double tol) {
  ASSERT_EQ(got.size(), ref.logits.size() * vocab);
  double max_err = 0;
  for (size_t r = 0; r < ref.logits.size(); ++r)
    for (int v = 0; v < vocab; ++v)
      max_err = std::max(max_err, std::abs(got[r * vocab + v] - ref.logits[r][v]));
  EXPECT_LT(max_err, tol);
}

class WindowTest : public ::testing::TestWithParam<std::tuple<std::string, int, int>> {};

// Sliding and sink semantics against the naive forward, through prefill (rows with
// different windows in one call) and through decode.
TEST_P(WindowTest, MatchesNaiveReference) {
  const auto [mode, window, sink] = GetParam();
  Rig s = Make("tiny-odd", false);
  const int vocab = s.engine->config().vocab_size;
  const auto ids = RandomIds(37, vocab, 21);
  const KvPolicy policy = mode == "full"      ? KvPolicy::Full()
                          : mode == "sliding" ? KvPolicy::Sliding(window)
                                              : KvPolicy::Sink(sink, window);
  std::vector<int> ids_int(ids.begin(), ids.end());
  const auto ref = testing::NaiveForward(
      s.model, testing::NaiveRowsForMode(s.model, ids_int, mode, window, sink));
  auto a = s.engine->NewCache(policy);
  ExpectNear(PrefillLogits(*s.engine, a.get(), ids), ref, vocab, 1e-4);
  auto b = s.engine->NewCache(policy);
  ExpectNear(DecodeLogits(*s.engine, b.get(), ids), ref, vocab, 1e-4);
  if (policy.window > 0) {
    EXPECT_LE(b->main_len(), window);
    EXPECT_LE(b->prefix_len(), sink);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, WindowTest,
                         ::testing::Values(std::make_tuple("full", 0, 0),
                                           std::make_tuple("sliding", 8, 0),
                                           std::make_tuple("sliding", 17, 0),
                                           std::make_tuple("sink", 6, 4),
                                           std::make_tuple("sink", 11, 1)));

TEST(EngineTest, WindowAtLeastSequenceEqualsFullExactly) {
  Rig s = Make("tiny", false);
  const auto ids = RandomIds(40, 256, 4);
  auto full = s.engine->NewCache(KvPolicy::Full());
  auto sliding = s.engine->NewCache(KvPolicy::Sliding(40));
  auto sink = s.engine->NewCache(KvPolicy::Sink(4, 36));
  const auto f = DecodeLogits(*s.engine, full.get(), ids);
  EXPECT_EQ(f, DecodeLogits(*s.engine, sliding.get(), ids));
  EXPECT_EQ(f, DecodeLogits(*s.engine, sink.get(), ids));
}

// Memory expansion: M embeddings at position 0 attending bidirectionally to each other
// only; then window tokens at positions 1.. attending to all of them and causally.
TEST(EngineTest, BidirectionalPrefixAndMemoryPositions) {
  Rig s = Make("tiny-qwen2", false);
  const int d = s.engine->config().hidden_size, vocab = s.engine->config().vocab_size;
  const int M = 5;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> mem(M * d);
  for (float& x : mem) x = normal(rng);
  const auto ids = RandomIds(9, vocab, 8);
  auto cache = s.engine->NewCache(KvPolicy::Memory());
  SequenceInput expand;
  expand.cache = cache.get();
  expand.embeddings = mem;
  expand.mask = MaskKind::kBidirectionalPrefix;
  expand.logits = RowSelect::kAll;
  expand.hidden = RowSelect::kAll;
  ForwardResult r1;
  ASSERT_TRUE(s.engine->Forward(std::span<const SequenceInput>(&expand, 1), &r1).ok());
  EXPECT_EQ(cache->prefix_len(), M);
  SequenceInput window;
  window.cache = cache.get();
  window.token_ids = ids;
  window.logits = RowSelect::kAll;
  window.hidden = RowSelect::kAll;
  window.hidden_layers = 3;
  ForwardResult r2;
  ASSERT_TRUE(s.engine->Forward(std::span<const SequenceInput>(&window, 1), &r2).ok());

  std::vector<testing::NaiveRow> rows;
  for (int m = 0; m < M; ++m) {
    testing::NaiveRow row;
    row.embedding.assign(mem.begin() + m * d, mem.begin() + (m + 1) * d);
    for (int j = 0; j < M; ++j) row.keys.push_back({j, 0});
    rows.push_back(row);
  }
  for (int i = 0; i < 9; ++i) {
    testing::NaiveRow row;
    row.embedding = testing::NaiveEmbedding(s.model, ids[i]);
    for (int j = 0; j < M; ++j) row.keys.push_back({j, 0});
    for (int j = 0; j <= i; ++j) row.keys.push_back({M + j, j + 1});
    row.query_position = i + 1;
    rows.push_back(row);
  }
  const auto ref = testing::NaiveForward(s.model, rows);
  std::vector<float> all(r1.outputs[0].logits.begin(), r1.outputs[0].logits.end());
  all.insert(all.end(), r2.outputs[0].logits.begin(), r2.outputs[0].logits.end());
  ExpectNear(all, ref, vocab, 1e-4);
  // Hidden states: the last of the three layer blocks is the final residual stream.
  double max_err = 0;
  for (int i = 0; i < 9; ++i)
    for (int j = 0; j < d; ++j)
      max_err = std::max(max_err, std::abs(r2.outputs[0].hidden[(i * 3 + 2) * d + j] -
                                           ref.hidden[M + i][j]));
  EXPECT_LT(max_err, 1e-4);
  for (int m = 0; m < M; ++m)
    for (int j = 0; j < d; ++j)
      max_err = std::max(max_err, std::abs(r1.outputs[0].hidden[m * d + j] - ref.hidden[m][j]));
  EXPECT_LT(max_err, 1e-4);
}

TEST(EngineTest, BadInputsAreInvalidArgument) {
  Rig s = Make("tiny", false);
  auto cache = s.engine->NewCache(KvPolicy::Full());
  ForwardResult r;
  SequenceInput in;
  in.cache = cache.get();
  const std::vector<int32_t> bad = {1, 256};
  in.token_ids = bad;
  EXPECT_EQ(s.engine->Forward(std::span<const SequenceInput>(&in, 1), &r).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache->main_len(), 0);
  const std::vector<float> emb(63);
  in.token_ids = {};
  in.embeddings = emb;
  EXPECT_EQ(s.engine->Forward(std::span<const SequenceInput>(&in, 1), &r).code(),
            absl::StatusCode::kInvalidArgument);
  in.embeddings = {};
  EXPECT_EQ(s.engine->Forward(std::span<const SequenceInput>(&in, 1), &r).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(EngineTest, PoolExhaustionIsResourceExhaustedAndRollsBack) {
  EngineOptions options;
  Rig s = Make("tiny", false, options);
  // Shrink: a second engine with a 4-block pool.
  options.kv_pool_bytes = s.engine->pool().bytes_per_block() * 4;
  auto e = Engine::Create(s.model, s.backend.get(), options);
  ASSERT_TRUE(e.ok());
  auto cache = (*e)->NewCache(KvPolicy::Full());
  const auto ids = RandomIds(16 * 4, 256, 1);
  ForwardResult r;
  SequenceInput in;
  in.cache = cache.get();
  in.token_ids = ids;
  ASSERT_TRUE((*e)->Forward(std::span<const SequenceInput>(&in, 1), &r).ok());
  const std::vector<int32_t> one = {5};
  in.token_ids = one;
  EXPECT_EQ((*e)->Forward(std::span<const SequenceInput>(&in, 1), &r).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(cache->main_len(), 64);
  cache->DropFront(16);
  EXPECT_TRUE((*e)->Forward(std::span<const SequenceInput>(&in, 1), &r).ok());
}

}  // namespace
}  // namespace kvfold::engine
