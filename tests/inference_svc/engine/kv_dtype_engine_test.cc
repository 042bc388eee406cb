// EngineOptions::kv_dtype = kF16 and kInt8 (docs/engine.md "F16 KV", "INT8 KV"): prefill
// == token-by-token decode bit for bit on both CPU backends and every plain mode, chunking
// and ragged batching invariance, logits close to the F32 engine (and not equal: the
// cache type is really used), memory expansion with more slots than a block; for int8
// also rollback into a sealed block; pool capacity and ResidentBytes from the real sizes.
#include <cmath>
#include <cstring>
#include <random>

#include "gtest/gtest.h"
#include "inference_svc/engine/engine.h"
#include "inference_svc/model/random_model.h"
#include "tests/testing/engine_rig.h"

namespace kvfold::engine {
namespace {

using testing::RandomIds;
using testing::Rig;

EngineOptions Int8Options(int block_size = 4, int max_batch_tokens = 256) {
  EngineOptions o;
  o.kv_dtype = core::DType::kI8;
  o.block_size = block_size;
  o.max_batch_tokens = max_batch_tokens;
  o.kv_value_group = 10;  // tiny-odd: kv_dim 24, a partial last group
  return o;
}

Rig Make(bool reference, EngineOptions options, const std::string& shape = "tiny-odd") {
  Rig s;
  auto c = model::NamedShape(shape);
  EXPECT_TRUE(c.ok());
  s.model = model::MakeRandomModel(*c, 11, core::DType::kF32);
  s.backend = kernels::CreateCpuBackend({.num_threads = 2, .reference = reference});
  if (options.kv_pool_bytes == EngineOptions().kv_pool_bytes) options.kv_pool_bytes = 16 << 20;
  auto e = Engine::Create(s.model, s.backend.get(), options);
  EXPECT_TRUE(e.ok()) << e.status();
  s.engine = std::move(*e);
  return s;
}

std::vector<float> Feed(Engine& e, KvCache* cache, std::span<const int32_t> ids, int step) {
  std::vector<float> out;
  ForwardResult r;
  for (size_t i = 0; i < ids.size(); i += step) {
    SequenceInput in;
    in.cache = cache;
    in.token_ids = ids.subspan(i, std::min<size_t>(step, ids.size() - i));
    in.logits = RowSelect::kAll;
    EXPECT_TRUE(e.Forward(std::span<const SequenceInput>(&in, 1), &r).ok());
    out.insert(out.end(), r.outputs[0].logits.begin(), r.outputs[0].logits.end());
  }
  return out;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, double{std::fabs(a[i] - b[i])});
  return m;
}

struct ModeCase {
  const char* name;
  KvPolicy policy;
};

const ModeCase kModes[] = {{"full", KvPolicy::Full()},
                           {"sliding", KvPolicy::Sliding(9)},
                           {"sink", KvPolicy::Sink(6, 7)},
                           {"sink_one_block", KvPolicy::Sink(3, 10)}};

// (reference backend, KV dtype).
class KvBitwiseTest : public ::testing::TestWithParam<std::tuple<bool, core::DType>> {
 protected:
  bool reference() const { return std::get<0>(GetParam()); }
  bool int8() const { return std::get<1>(GetParam()) == core::DType::kI8; }
  EngineOptions Options(int block_size = 4, int max_batch_tokens = 256) const {
    EngineOptions o = Int8Options(block_size, max_batch_tokens);
    o.kv_dtype = std::get<1>(GetParam());
    return o;
  }
};

TEST_P(KvBitwiseTest, PrefillEqualsDecodeAndChunkingInEveryMode) {
  Rig s = Make(reference(), Options());
  Rig chunked = Make(reference(), Options(4, 7));
  const auto ids = RandomIds(41, s.engine->config().vocab_size, 5);
  for (const ModeCase& m : kModes) {
    SCOPED_TRACE(m.name);
    auto a = s.engine->NewCache(m.policy), b = s.engine->NewCache(m.policy);
    auto c = s.engine->NewCache(m.policy), d = chunked.engine->NewCache(m.policy);
    const auto prefill = Feed(*s.engine, a.get(), ids, 1000);
    const auto decode = Feed(*s.engine, b.get(), ids, 1);
    const auto pieces = Feed(*s.engine, c.get(), ids, 5);  // calls that start mid-block
    const auto small_chunks = Feed(*chunked.engine, d.get(), ids, 1000);
    EXPECT_TRUE(SameBits(prefill, decode));
    EXPECT_TRUE(SameBits(prefill, pieces));
    EXPECT_TRUE(SameBits(prefill, small_chunks));
  }
  // Int8: no page is held once the caches are gone.
  if (int8()) {
    EXPECT_EQ(s.engine->pool().num_pages() - s.engine->pool().free_pages(), 0);
  }
}

TEST_P(KvBitwiseTest, RaggedBatchEqualsSeparateCalls) {
  Rig s = Make(reference(), Options());
  const int vocab = s.engine->config().vocab_size;
  const auto p1 = RandomIds(13, vocab, 1), p2 = RandomIds(6, vocab, 2);
  auto a1 = s.engine->NewCache(KvPolicy::Full()), a2 = s.engine->NewCache(KvPolicy::Sink(3, 5));
  auto b1 = s.engine->NewCache(KvPolicy::Full()), b2 = s.engine->NewCache(KvPolicy::Sink(3, 5));
  ForwardResult r;
  std::vector<float> sep, batched;
  for (int step = 0; step < 4; ++step) {
    const int32_t t1 = static_cast<int32_t>((step * 31 + 7) % vocab),
                  t2 = static_cast<int32_t>((step * 17 + 3) % vocab);
    const std::vector<int32_t> x1 = step == 0 ? p1 : std::vector<int32_t>{t1};
    const std::vector<int32_t> x2 = step == 0 ? p2 : std::vector<int32_t>{t2};
    for (auto [cache, ids] : {std::pair{a1.get(), &x1}, std::pair{a2.get(), &x2}}) {
      SequenceInput in;
      in.cache = cache;
      in.token_ids = *ids;
      ASSERT_TRUE(s.engine->Forward(std::span<const SequenceInput>(&in, 1), &r).ok());
      sep.insert(sep.end(), r.outputs[0].logits.begin(), r.outputs[0].logits.end());
    }
    SequenceInput both[2];
    both[0].cache = b1.get();
    both[0].token_ids = x1;
    both[1].cache = b2.get();
    both[1].token_ids = x2;
    ASSERT_TRUE(s.engine->Forward(both, &r).ok());
    batched.insert(batched.end(), r.logits_storage.begin(), r.logits_storage.end());
  }
  EXPECT_TRUE(SameBits(sep, batched));
}

TEST_P(KvBitwiseTest, MemoryExpansionLargerThanABlockThenWindow) {
  Rig s = Make(reference(), Options());
  const int d = s.engine->config().hidden_size;
  const int M = 7;  // two prefix blocks of 4: both sealed at the end of the expansion
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> mem(M * d);
  for (float& x : mem) x = normal(rng);
  const auto ids = RandomIds(19, s.engine->config().vocab_size, 8);
  std::vector<float> results[2];
  for (int step : {1000, 1}) {
    auto cache = s.engine->NewCache(KvPolicy::Memory());
    SequenceInput expand;
    expand.cache = cache.get();
    expand.embeddings = mem;
    expand.mask = MaskKind::kBidirectionalPrefix;
    expand.logits = RowSelect::kAll;
    ForwardResult r;
    ASSERT_TRUE(s.engine->Forward(std::span<const SequenceInput>(&expand, 1), &r).ok());
    if (int8()) {
      EXPECT_EQ(s.engine->pool().page_of(cache->prefix_blocks().back()), -1);  // sealed
    }
    std::vector<float> out(r.outputs[0].logits.begin(), r.outputs[0].logits.end());
    const auto window = Feed(*s.engine, cache.get(), ids, step);
    out.insert(out.end(), window.begin(), window.end());
    results[step == 1] = out;
  }
  EXPECT_TRUE(SameBits(results[0], results[1]));
}

INSTANTIATE_TEST_SUITE_P(BackendsAndTypes, KvBitwiseTest,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Values(core::DType::kF16, core::DType::kI8)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "Reference_"
                                                                      : "Optimized_") +
                                  core::DTypeName(std::get<1>(info.param));
                         });

// int8 vs f32 logits on the same random model: close (the tiny model's logits are O(1)),
// and not identical.
TEST(Int8EngineTest, LogitsCloseToF32InEveryMode) {
  Rig i8 = Make(false, Int8Options(16));
  EngineOptions f32_options;
  f32_options.block_size = 16;
  Rig f32 = Make(false, f32_options);
  const auto ids = RandomIds(80, i8.engine->config().vocab_size, 9);
  for (const ModeCase& m : kModes) {
    SCOPED_TRACE(m.name);
    auto a = i8.engine->NewCache(m.policy), b = f32.engine->NewCache(m.policy);
    const auto la = Feed(*i8.engine, a.get(), ids, 1000),
               lb = Feed(*f32.engine, b.get(), ids, 1000);
    const double diff = MaxAbsDiff(la, lb);
    double scale = 0;
    for (float x : lb) scale = std::max(scale, double{std::fabs(x)});
    EXPECT_GT(diff, 0.0);
    EXPECT_LT(diff, 0.03 * scale) << "max |logit| " << scale;
  }
}

TEST(Int8EngineTest, PoolHoldsMoreTokensAndResidentBytesAreInt8Sizes) {
  EngineOptions f32_options;
  f32_options.kv_pool_bytes = 8 << 20;
  EngineOptions i8_options = Int8Options(16);
  i8_options.kv_pool_bytes = 8 << 20;
  i8_options.kv_value_group = 32;
  Rig f32 = Make(false, f32_options, "tiny"), i8 = Make(false, i8_options, "tiny");
  const BlockPool& pf = f32.engine->pool();
  const BlockPool& pi = i8.engine->pool();
  // tiny: 2 layers, kv_dim 32. Per token per layer f32 256 B; int8 2 * 32 codes + 32 fp16
  // key scales / 16 tokens * 2 B + 1 fp16 value scale * 2 B = 70 B.
  EXPECT_EQ(pf.bytes_per_block(), 2u * 16 * 256);
  EXPECT_EQ(pi.bytes_per_block(), 2u * 16 * 70);
  EXPECT_EQ(pi.bytes_per_page(), 2u * 16 * 256);
  const double ratio = static_cast<double>(pi.num_blocks()) / pf.num_blocks();
  EXPECT_GT(ratio, 3.4);
  EXPECT_LT(ratio, 256.0 / 70.0 + 1e-9);
  // ResidentBytes: 37 tokens = 2 sealed blocks + 1 open block with its page.
  auto cache = i8.engine->NewCache(KvPolicy::Full());
  Feed(*i8.engine, cache.get(), RandomIds(37, 256, 1), 1000);
  EXPECT_EQ(cache->ResidentBytes(), 3 * pi.bytes_per_block() + pi.bytes_per_page());
  Feed(*i8.engine, cache.get(), RandomIds(11, 256, 2), 1);  // fills block 3: no page left
  EXPECT_EQ(cache->ResidentBytes(), 3 * pi.bytes_per_block());
  cache->Clear();
  EXPECT_EQ(pi.free_blocks(), pi.num_blocks());
  EXPECT_EQ(pi.free_pages(), pi.num_pages());
}

// f16 vs f32 logits: much closer than int8 (each K and V value moves by at most half an
// fp16 ulp), and not identical.
TEST(F16EngineTest, LogitsVeryCloseToF32InEveryMode) {
  EngineOptions f16_options, f32_options;
  f16_options.block_size = f32_options.block_size = 16;
  f16_options.kv_dtype = core::DType::kF16;
  Rig f16 = Make(false, f16_options), f32 = Make(false, f32_options);
  const auto ids = RandomIds(80, f16.engine->config().vocab_size, 9);
  for (const ModeCase& m : kModes) {
    SCOPED_TRACE(m.name);
    auto a = f16.engine->NewCache(m.policy), b = f32.engine->NewCache(m.policy);
    const auto la = Feed(*f16.engine, a.get(), ids, 1000),
               lb = Feed(*f32.engine, b.get(), ids, 1000);
    double scale = 0;
    for (float x : lb) scale = std::max(scale, double{std::fabs(x)});
    EXPECT_GT(MaxAbsDiff(la, lb), 0.0);
    EXPECT_LT(MaxAbsDiff(la, lb), 0.003 * scale) << "max |logit| " << scale;
  }
}

TEST(F16EngineTest, PoolHoldsTwiceTheTokensAndResidentBytesAreF16Sizes) {
  EngineOptions f32_options, f16_options;
  f32_options.kv_pool_bytes = f16_options.kv_pool_bytes = 8 << 20;
  f32_options.block_size = f16_options.block_size = 16;
  f16_options.kv_dtype = core::DType::kF16;
  Rig f32 = Make(false, f32_options, "tiny"), f16 = Make(false, f16_options, "tiny");
  const BlockPool& pf = f32.engine->pool();
  const BlockPool& ph = f16.engine->pool();
  // tiny: 2 layers, kv_dim 32: per token per layer f32 256 B, f16 128 B.
  EXPECT_EQ(pf.bytes_per_block(), 2u * 16 * 256);
  EXPECT_EQ(ph.bytes_per_block(), 2u * 16 * 128);
  EXPECT_EQ(ph.bytes_per_page(), 0u);
  EXPECT_EQ(ph.num_blocks(), 2 * pf.num_blocks());
  EXPECT_EQ(ph.k_cache(1).dtype, core::DType::kF16);
  auto cache = f16.engine->NewCache(KvPolicy::Full());
  Feed(*f16.engine, cache.get(), RandomIds(37, 256, 1), 1000);
  EXPECT_EQ(cache->ResidentBytes(), 3 * ph.bytes_per_block());
  cache->Clear();
  EXPECT_EQ(ph.free_blocks(), ph.num_blocks());
}

TEST(Int8EngineTest, ManySequencesGrowThePagesAndKeepBits) {
  EngineOptions o = Int8Options(4, 8);
  Rig s = Make(false, o);
  const int initial_pages = s.engine->pool().num_pages();
  const int vocab = s.engine->config().vocab_size;
  std::vector<std::unique_ptr<KvCache>> caches;
  for (int i = 0; i < 3 * initial_pages; ++i) {  // each holds an open block
    caches.push_back(s.engine->NewCache(KvPolicy::Full()));
    Feed(*s.engine, caches.back().get(), RandomIds(6, vocab, 100 + i), 6);
  }
  EXPECT_GT(s.engine->pool().num_pages(), initial_pages);
  const auto ids = RandomIds(6, vocab, 100);
  // Continue the first sequence past its (grown, copied) page: same bits as a fresh run.
  const auto more = RandomIds(5, vocab, 7);
  auto twin = s.engine->NewCache(KvPolicy::Full());
  Feed(*s.engine, twin.get(), ids, 6);
  EXPECT_TRUE(
      SameBits(Feed(*s.engine, caches[0].get(), more, 1), Feed(*s.engine, twin.get(), more, 5)));
}

TEST(Int8EngineTest, TruncateIntoASealedBlockRestoresItsPage) {
  Rig s = Make(false, Int8Options());
  const auto ids = RandomIds(14, s.engine->config().vocab_size, 4);
  auto a = s.engine->NewCache(KvPolicy::Full());
  Feed(*s.engine, a.get(), ids, 1000);  // blocks 0..2 sealed, block 3 open
  a->Truncate(0, 6);                    // block 1 is partial again
  EXPECT_EQ(s.engine->pool().page_of(a->main_blocks()[1]), -1);
  const auto more = RandomIds(5, s.engine->config().vocab_size, 6);
  const auto after = Feed(*s.engine, a.get(), more, 1);
  // Entries 4, 5 now come from their int8 codes: close to, not equal to, a clean run.
  auto b = s.engine->NewCache(KvPolicy::Full());
  std::vector<int32_t> clean(ids.begin(), ids.begin() + 6);
  Feed(*s.engine, b.get(), clean, 1000);
  const auto expected = Feed(*s.engine, b.get(), more, 1);
  EXPECT_LT(MaxAbsDiff(after, expected), 0.05);
  EXPECT_EQ(a->main_len(), 11);
}

// A backend without int8 KV ops (like the CUDA backend for now): delegates to the CPU.
class F32OnlyBackend : public kernels::Backend {
 public:
  F32OnlyBackend() : cpu_(kernels::CreateCpuBackend({})) {}
  std::string Name() const override { return "f32-only"; }
  absl::StatusOr<std::unique_ptr<kernels::Buffer>> Allocate(size_t bytes) override {
    return cpu_->Allocate(bytes);
  }
  absl::StatusOr<std::unique_ptr<kernels::Buffer>> AdoptWeights(
      const void* host, size_t bytes, std::shared_ptr<const void> keepalive) override {
    return cpu_->AdoptWeights(host, bytes, std::move(keepalive));
  }
  std::unique_ptr<kernels::Stream> CreateStream() override { return cpu_->CreateStream(); }
  absl::Status CopyToDevice(kernels::Stream& s, const void* host, kernels::Tensor dst) override {
    return cpu_->CopyToDevice(s, host, dst);
  }
  absl::Status CopyToHost(kernels::Stream& s, kernels::Tensor src, void* host) override {
    return cpu_->CopyToHost(s, src, host);
  }
  absl::Status Copy(kernels::Stream& s, kernels::Tensor src, kernels::Tensor dst) override {
    return cpu_->Copy(s, src, dst);
  }
  absl::Status Synchronize(kernels::Stream& s) override { return cpu_->Synchronize(s); }
  absl::Status Gather(kernels::Stream& s, kernels::Tensor t, kernels::Tensor ids,
                      kernels::Tensor out) override {
    return cpu_->Gather(s, t, ids, out);
  }
  absl::Status RmsNorm(kernels::Stream& s, kernels::Tensor x, kernels::Tensor w, float eps,
                       kernels::Tensor out) override {
    return cpu_->RmsNorm(s, x, w, eps, out);
  }
  absl::Status MatMul(kernels::Stream& s, kernels::Tensor x, kernels::Tensor w, kernels::Tensor b,
                      kernels::Tensor out) override {
    return cpu_->MatMul(s, x, w, b, out);
  }
  absl::Status Rope(kernels::Stream& s, kernels::Tensor x, kernels::Tensor p, kernels::Tensor t,
                    kernels::Tensor out) override {
    return cpu_->Rope(s, x, p, t, out);
  }
  absl::Status StoreKv(kernels::Stream& s, kernels::Tensor k, kernels::Tensor v, kernels::Tensor sl,
                       kernels::Tensor kc, kernels::Tensor vc) override {
    return cpu_->StoreKv(s, k, v, sl, kc, vc);
  }
  absl::Status Attention(kernels::Stream& s, kernels::Tensor q, kernels::Tensor kc,
                         kernels::Tensor vc, kernels::Tensor rows, kernels::Tensor tables,
                         kernels::Tensor rope, const kernels::AttentionShape& shape,
                         kernels::Tensor out) override {
    return cpu_->Attention(s, q, kc, vc, rows, tables, rope, shape, out);
  }
  absl::Status SiluMul(kernels::Stream& s, kernels::Tensor g, kernels::Tensor u,
                       kernels::Tensor out) override {
    return cpu_->SiluMul(s, g, u, out);
  }
  absl::Status Add(kernels::Stream& s, kernels::Tensor a, kernels::Tensor b,
                   kernels::Tensor out) override {
    return cpu_->Add(s, a, b, out);
  }

 private:
  std::unique_ptr<kernels::Backend> cpu_;
};

TEST(Int8EngineTest, BackendWithoutInt8OrF16OpsIsUnimplemented) {
  auto c = model::NamedShape("tiny");
  auto m = model::MakeRandomModel(*c, 1, core::DType::kF32);
  F32OnlyBackend backend;
  EngineOptions o = Int8Options();
  o.kv_pool_bytes = 1 << 20;
  auto e = Engine::Create(m, &backend, o);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(e.status().message().find("f32-only"), std::string::npos) << e.status();
  o.kv_dtype = core::DType::kF16;
  e = Engine::Create(m, &backend, o);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(e.status().message().find("no F16 KV cache"), std::string::npos) << e.status();
  o.kv_dtype = core::DType::kF32;
  EXPECT_TRUE(Engine::Create(m, &backend, o).ok());  // the F32 cache still works
  auto stream = backend.CreateStream();
  EXPECT_EQ(backend.StoreKvInt8(*stream, {}, {}, {}, {}, {}, {}).code(),
            absl::StatusCode::kUnimplemented);
}

TEST(Int8EngineTest, KvDTypeParserAndBackendSupport) {
  EXPECT_EQ(*ParseKvDType("f32"), core::DType::kF32);
  EXPECT_EQ(*ParseKvDType("f16"), core::DType::kF16);
  EXPECT_EQ(ParseKvDType("bf16").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseKvDType("int8"), core::DType::kI8);
  EXPECT_EQ(*ParseKvDType("INT8"), core::DType::kI8);  // core::ParseDType's spellings
  EXPECT_EQ(ParseKvDType("fp8").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseKvDType("int9").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_STREQ(core::DTypeName(core::DType::kI8), "int8");
  EngineOptions bad = Int8Options();
  bad.kv_value_group = 0;
  auto c = model::NamedShape("tiny");
  auto m = model::MakeRandomModel(*c, 1, core::DType::kF32);
  auto be = kernels::CreateCpuBackend({});
  EXPECT_EQ(Engine::Create(m, be.get(), bad).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvfold::engine
