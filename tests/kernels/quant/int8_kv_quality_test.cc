// The quality cost of INT8 KV on a real model: mean NLL of stories260K on the first 100
// TinyStories (protocol of ../shared/models/README.md, token-by-token decode so that every
// token attends to the quantized cache), for
//   f32       the engine's F32 cache (reference: 1.408 nats/token)
//   kivi      KIVI int8: keys per channel over each full 16-token block (the newest,
//             partial block stays F32, KIVI's residual), values per token per head
//   per_token naive int8: keys and values per token per head, quantized at once
// The cache is quantized and dequantized in place after every step (the CPU backend's
// device memory is host RAM), which is numerically what an int8 cache with dequantization
// inside attention computes. Label slow (about 3 x 37k decode steps).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "inference_svc/engine/engine.h"
#include "inference_svc/engine/kv_cache.h"
#include "inference_svc/model/model_file.h"
#include "inference_svc/tokenizer/tokenizer.h"
#include "kernels/quant/kv_quant.h"
#include "tests/testing/shared_dir.h"

namespace kvfold::quant {
namespace {

enum class Scheme { kF32, kKivi, kPerToken };

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Quantize + dequantize entries [t0, t0 + n) (slots of one block) of one F32 cache tensor
// in place. The cache is head-major within a block (kernels::FloatKvIndex): the entries
// are gathered into rows [n, kv_dim], as the int8 kernels see them, and scattered back.
void FakeQuant(float* cache, int64_t t0, int64_t n, int64_t kv_dim, int head_dim, int bs,
               bool per_channel) {
  const int64_t heads = kv_dim / head_dim;
  std::vector<float> x(n * kv_dim);
  auto each = [&](auto&& fn) {
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t c = 0; c < kv_dim; ++c) {
        fn(x[t * kv_dim + c],
           cache[kernels::FloatKvIndex(t0 + t, c / head_dim, c % head_dim, heads, bs, head_dim)]);
      }
    }
  };
  each([](float& row, float& at) { row = at; });
  std::vector<int8_t> codes(n * kv_dim);
  if (per_channel) {
    std::vector<float> scales(kv_dim);
    ASSERT_TRUE(QuantizeKeys(x.data(), n, kv_dim, {.group_size = static_cast<int32_t>(n)},
                             codes.data(), scales.data())
                    .ok());
    ASSERT_TRUE(
        DequantizeKeys(codes.data(), scales.data(), n, kv_dim, static_cast<int32_t>(n), x.data())
            .ok());
  } else {
    std::vector<float> scales(n * NumValueGroups(kv_dim, head_dim));
    ASSERT_TRUE(
        QuantizeValues(x.data(), n, kv_dim, {.group_size = head_dim}, codes.data(), scales.data())
            .ok());
    ASSERT_TRUE(DequantizeValues(codes.data(), scales.data(), n, kv_dim, head_dim, x.data()).ok());
  }
  each([](float& row, float& at) { at = row; });
}

double MeanNll(Scheme scheme, int64_t* count_out) {
  auto m = model::LoadModel(testing::Stories260K() + "/stories260K.bin");
  EXPECT_TRUE(m.ok()) << m.status();
  auto backend = kernels::CreateCpuBackend({.num_threads = 1});
  engine::EngineOptions options;
  options.kv_pool_bytes = 32 << 20;
  auto eng = engine::Engine::Create(*m, backend.get(), options);
  EXPECT_TRUE(eng.ok()) << eng.status();
  auto tok = Tokenizer::Load(testing::Stories260K() + "/tok512.bin");
  EXPECT_TRUE(tok.ok()) << tok.status();
  if (!m.ok() || !eng.ok() || !tok.ok()) return NAN;
  engine::Engine& e = **eng;
  const auto& c = e.config();
  const int bs = e.options().block_size;
  const std::string text = ReadAll(testing::SharedDir() + "/text/tinystories_train_sample.txt");
  double total = 0;
  int64_t count = 0;
  size_t pos = 0;
  engine::ForwardResult r;
  for (int story = 0; story < 100; ++story) {
    size_t end = text.find("<|endoftext|>", pos);
    if (end == std::string::npos) end = text.size();
    std::string s = text.substr(pos, end - pos);
    pos = end + 13;
    const size_t b = s.find_first_not_of(" \t\r\n"), l = s.find_last_not_of(" \t\r\n");
    s = b == std::string::npos ? "" : s.substr(b, l - b + 1);
    auto ids = (*tok)->Encode(s, /*add_bos=*/true);
    EXPECT_TRUE(ids.ok());
    if (ids->size() > 512) ids->resize(512);
    auto cache = e.NewCache(engine::KvPolicy::Full());
    for (size_t t = 0; t + 1 < ids->size(); ++t) {
      engine::SequenceInput in;
      in.cache = cache.get();
      in.token_ids = std::span<const int32_t>(&(*ids)[t], 1);
      EXPECT_TRUE(e.Forward({&in, 1}, &r).ok());
      const int n = cache->main_len();  // entries; the newest is n - 1
      const auto& blocks = cache->main_blocks();
      for (int layer = 0; layer < c.num_layers && scheme != Scheme::kF32; ++layer) {
        float* k = static_cast<float*>(e.pool().k_cache(layer).data);
        float* v = static_cast<float*>(e.pool().v_cache(layer).data);
        const int64_t slot = int64_t{blocks[(n - 1) / bs]} * bs + (n - 1) % bs;
        FakeQuant(v, slot, 1, c.kv_dim(), c.head_dim, bs, false);
        if (scheme == Scheme::kPerToken) {
          FakeQuant(k, slot, 1, c.kv_dim(), c.head_dim, bs, false);
        } else if (n % bs == 0) {  // a key block just filled: per-channel over its tokens
          FakeQuant(k, int64_t{blocks[(n - 1) / bs]} * bs, bs, c.kv_dim(), c.head_dim, bs, true);
        }
      }
      const auto logits = r.outputs[0].logits;
      double mx = logits[0], sum = 0;
      for (float x : logits) mx = std::max<double>(mx, x);
      for (float x : logits) sum += std::exp(x - mx);
      total += -(logits[(*ids)[t + 1]] - mx - std::log(sum));
      ++count;
    }
  }
  *count_out = count;
  return total / count;
}

TEST(Int8KvQuality, Stories260KNllCost) {
  if (!testing::HaveStories260K()) {
    GTEST_SKIP() << "stories260K not found under " << testing::Stories260K()
                 << " (set KVFOLD_SHARED_DIR)";
  }
  int64_t n0 = 0, n1 = 0, n2 = 0;
  const double f32 = MeanNll(Scheme::kF32, &n0);
  const double kivi = MeanNll(Scheme::kKivi, &n1);
  const double per_token = MeanNll(Scheme::kPerToken, &n2);
  std::printf("{\"model\": \"stories260K\", \"tokens\": %lld, \"nll_f32\": %.5f, "
              "\"nll_int8_kivi\": %.5f, \"nll_int8_per_token\": %.5f, "
              "\"delta_kivi\": %.5f, \"delta_per_token\": %.5f}\n",
              static_cast<long long>(n0), f32, kivi, per_token, kivi - f32, per_token - f32);
  EXPECT_EQ(n0, 37072);
  EXPECT_EQ(n1, n0);
  EXPECT_NEAR(f32, 1.408, 0.002);  // decode path == the published figure
  // Measured 2026-11-29: f32 1.40762, kivi 1.40774 (+0.00013), per_token 1.40931
  // (+0.00170): per-channel keys are what keeps int8 nearly free (docs/cuda.md).
  EXPECT_LT(std::fabs(kivi - f32), 0.001);
  EXPECT_LT(kivi - f32, per_token - f32);
}

}  // namespace
}  // namespace kvfold::quant
