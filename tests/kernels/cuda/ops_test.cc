// Parity of the small CUDA ops with plain CPU references on odd shapes (hidden 769, 5125
// tokens). Label gpu; every test skips without a device.
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/fp16.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/kv_cache.cuh"
#include "kernels/cuda/rmsnorm.cuh"
#include "kernels/cuda/rope.cuh"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace kvfold::kernels::cuda {
namespace {

using testing::DeviceArray;
using testing::ExpectClose;
using testing::ExpectOk;
using testing::RandomFloats;

constexpr int64_t kHidden = 769;
constexpr int64_t kTokens = 5125;

std::vector<uint16_t> ToBf16(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = Fp32ToBf16(x[i]);
  return out;
}
std::vector<uint16_t> ToF16(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = Fp32ToFp16(x[i]);
  return out;
}

TEST(CudaOps, EmbeddingGatherBf16IsExactAndZeroesBadIds) {
  KVFOLD_SKIP_WITHOUT_GPU();
  const int64_t vocab = 1001;
  const auto table = ToBf16(RandomFloats(vocab * kHidden, 1));
  std::vector<int32_t> ids(kTokens);
  for (int64_t i = 0; i < kTokens; ++i) ids[i] = static_cast<int32_t>((i * 7919) % vocab);
  ids[17] = -1;
  ids[18] = static_cast<int32_t>(vocab);
  DeviceArray<uint16_t> d_table(table);
  DeviceArray<int32_t> d_ids(ids);
  DeviceArray<float> d_out(kTokens * kHidden);
  ExpectOk(EmbeddingGather(d_table.get(), core::DType::kBF16, vocab, kHidden, d_ids.get(), kTokens,
                           d_out.get(), nullptr));
  const auto out = d_out.ToHost();
  std::vector<double> ref(out.size());
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t i = 0; i < kHidden; ++i) {
      const bool ok = ids[t] >= 0 && ids[t] < vocab;
      ref[t * kHidden + i] = ok ? Bf16ToFp32(table[ids[t] * kHidden + i]) : 0.0;
    }
  }
  ExpectClose(out, ref, 0, 0, "embedding");
}

TEST(CudaOps, RmsNormMatchesCpu) {
  KVFOLD_SKIP_WITHOUT_GPU();
  for (const core::DType wt : {core::DType::kF32, core::DType::kBF16}) {
    const auto x = RandomFloats(kTokens * kHidden, 2, -3, 3);
    const auto w = RandomFloats(kHidden, 3, 0.5, 1.5);
    const auto w_bf16 = ToBf16(w);
    DeviceArray<float> d_x(x), d_w(w), d_out(x.size());
    DeviceArray<uint16_t> d_wb(w_bf16);
    const void* wp = wt == core::DType::kF32 ? static_cast<const void*>(d_w.get()) : d_wb.get();
    ExpectOk(RmsNorm(d_x.get(), wp, wt, 1e-5f, kTokens, kHidden, d_out.get(), nullptr));
    const auto out = d_out.ToHost();
    std::vector<double> ref(out.size());
    for (int64_t t = 0; t < kTokens; ++t) {
      double ss = 0;
      for (int64_t i = 0; i < kHidden; ++i) ss += double{x[t * kHidden + i]} * x[t * kHidden + i];
      const double inv = 1.0 / std::sqrt(ss / kHidden + 1e-5);
      for (int64_t i = 0; i < kHidden; ++i) {
        const double wi = wt == core::DType::kF32 ? w[i] : Bf16ToFp32(w_bf16[i]);
        ref[t * kHidden + i] = x[t * kHidden + i] * inv * wi;
      }
    }
    ExpectClose(out, ref, 1e-5, 1e-5, std::string("rmsnorm ") + core::DTypeName(wt));
  }
}

TEST(CudaOps, RopeRotatesHalfPairsInPlace) {
  KVFOLD_SKIP_WITHOUT_GPU();
  const int heads = 5, head_dim = 96, rows = 6000;
  const int64_t n = kTokens;
  const auto table = testing::RopeTable(rows, head_dim, 500000.0f);
  const auto x = RandomFloats(n * heads * head_dim, 4);
  std::vector<int32_t> pos(n);
  for (int64_t t = 0; t < n; ++t) pos[t] = static_cast<int32_t>((t * 31) % rows);
  DeviceArray<float> d_x(x), d_table(table);
  DeviceArray<int32_t> d_pos(pos);
  ExpectOk(Rope(d_x.get(), d_pos.get(), d_table.get(), rows, n, heads, head_dim, d_x.get(),
                nullptr));
  const auto out = d_x.ToHost();
  std::vector<double> ref(out.size());
  const int half = head_dim / 2;
  for (int64_t t = 0; t < n; ++t) {
    const float* cs = &table[static_cast<size_t>(pos[t]) * head_dim];
    for (int h = 0; h < heads; ++h) {
      const size_t b = (t * heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        ref[b + i] = double{x[b + i]} * cs[i] - double{x[b + i + half]} * cs[half + i];
        ref[b + i + half] = double{x[b + i + half]} * cs[i] + double{x[b + i]} * cs[half + i];
      }
    }
  }
  ExpectClose(out, ref, 1e-6, 1e-6, "rope");
}

TEST(CudaOps, SiluMulAddAndBias) {
  KVFOLD_SKIP_WITHOUT_GPU();
  const int64_t inter = kHidden;
  // Fused gate|up rows: [n, 2 * inter].
  const auto gu = RandomFloats(kTokens * 2 * inter, 5, -8, 8);
  DeviceArray<float> d_gu(gu), d_out(kTokens * inter);
  ExpectOk(SiluMul(d_gu.get(), 2 * inter, d_gu.get() + inter, 2 * inter, kTokens, inter,
                   d_out.get(), nullptr));
  auto out = d_out.ToHost();
  std::vector<double> ref(out.size());
  for (int64_t r = 0; r < kTokens; ++r) {
    for (int64_t i = 0; i < inter; ++i) {
      const double g = gu[r * 2 * inter + i], u = gu[r * 2 * inter + inter + i];
      ref[r * inter + i] = g / (1.0 + std::exp(-g)) * u;
    }
  }
  ExpectClose(out, ref, 1e-6, 2e-6, "silu_mul");

  const auto a = RandomFloats(kTokens * kHidden, 6), b = RandomFloats(kTokens * kHidden, 7);
  const auto bias = RandomFloats(kHidden, 8);
  DeviceArray<float> d_a(a), d_b(b), d_bias(bias);
  ExpectOk(Add(d_a.get(), d_b.get(), a.size(), d_a.get(), nullptr));
  ExpectOk(AddBias(d_a.get(), d_bias.get(), core::DType::kF32, kTokens, kHidden, nullptr));
  out = d_a.ToHost();
  ref.assign(out.size(), 0);
  for (size_t i = 0; i < a.size(); ++i) ref[i] = (a[i] + b[i]) + bias[i % kHidden];
  ExpectClose(out, ref, 1e-6, 1e-6, "add + bias");
}

TEST(CudaOps, CastAndFillUniformMatchHostRounding) {
  KVFOLD_SKIP_WITHOUT_GPU();
  const auto x = RandomFloats(kTokens, 9, -70000, 70000);
  DeviceArray<float> d_x(x);
  DeviceArray<uint16_t> d_bf(x.size()), d_h(x.size());
  ExpectOk(Cast(d_x.get(), d_bf.get(), core::DType::kBF16, x.size(), nullptr));
  ExpectOk(Cast(d_x.get(), d_h.get(), core::DType::kF16, x.size(), nullptr));
  EXPECT_EQ(d_bf.ToHost(), ToBf16(x));
  EXPECT_EQ(d_h.ToHost(), ToF16(x));

  DeviceArray<float> d_u(kTokens);
  ExpectOk(FillUniform(d_u.get(), core::DType::kF32, kTokens, 42, -0.5f, 0.25f, nullptr));
  const auto u = d_u.ToHost();
  for (int64_t i = 0; i < kTokens; ++i) {
    ASSERT_EQ(u[i], std::fmaf(0.75f, UniformHash(42, i), -0.5f)) << i;
    ASSERT_GE(u[i], -0.5f);
    ASSERT_LT(u[i], 0.25f);
  }
}

// y = x w^T + bias + beta * y, against a double reference on the same (rounded) inputs.
void CheckLinear(core::DType wt, int64_t n, int64_t k, int64_t m, float beta) {
  auto x = RandomFloats(n * k, 10);
  auto w = RandomFloats(m * k, 11, -0.1f, 0.1f);
  const auto bias = RandomFloats(m, 12);
  const auto y0 = RandomFloats(n * m, 13);
  std::vector<uint16_t> w16;
  if (wt == core::DType::kBF16) w16 = ToBf16(w);
  if (wt == core::DType::kF16) w16 = ToF16(w);
  DeviceArray<float> d_x(x), d_w(w), d_bias(bias), d_y(y0);
  DeviceArray<uint16_t> d_w16(w16);
  DeviceArray<uint8_t> scratch(LinearScratchBytes(n, k, wt) + 1);
  cublasHandle_t handle;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  LinearArgs args;
  args.x = d_x.get();
  args.num_tokens = n;
  args.in_features = k;
  args.w = wt == core::DType::kF32 ? static_cast<const void*>(d_w.get()) : d_w16.get();
  args.w_type = wt;
  args.out_features = m;
  args.bias = d_bias.get();
  args.y = d_y.get();
  args.beta = beta;
  args.scratch = scratch.get();
  args.scratch_bytes = scratch.size();
  ExpectOk(Linear(handle, nullptr, args));
  const auto y = d_y.ToHost();
  cublasDestroy(handle);
  // The reference rounds the inputs exactly as the device path does.
  auto round = [&](float v) -> double {
    if (wt == core::DType::kBF16) return Bf16ToFp32(Fp32ToBf16(v));
    if (wt == core::DType::kF16) return Fp16ToFp32(Fp32ToFp16(v));
    return v;
  };
  std::vector<double> ref(n * m);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t o = 0; o < m; ++o) {
      double acc = 0;
      for (int64_t i = 0; i < k; ++i) acc += round(x[r * k + i]) * round(w[o * k + i]);
      ref[r * m + o] = acc + bias[o] + double{beta} * y0[r * m + o];
    }
  }
  ExpectClose(y, ref, 1e-4, 1e-4,
              std::string("linear ") + core::DTypeName(wt) + " n=" + std::to_string(n));
}

TEST(CudaOps, LinearF32Bf16F16WithBiasAndResidual) {
  KVFOLD_SKIP_WITHOUT_GPU();
  for (const core::DType wt : {core::DType::kF32, core::DType::kBF16, core::DType::kF16}) {
    CheckLinear(wt, 1, kHidden, 1031, 0.0f);    // decode row
    CheckLinear(wt, 37, kHidden, 1031, 1.0f);   // residual folded in
    CheckLinear(wt, 513, 1000, 769, 0.0f);      // prefill chunk
  }
}

TEST(CudaOps, StoreKvWritesSlotsHeadMajorAndSkipsOutOfRange) {
  KVFOLD_SKIP_WITHOUT_GPU();
  const int64_t heads = 3, hd = 41, bs = 16, blocks = 11, kv_dim = heads * hd;
  const int64_t slots_total = bs * blocks, n = 37;
  const auto k = RandomFloats(n * kv_dim, 14), v = RandomFloats(n * kv_dim, 15);
  std::vector<int32_t> slots(n);
  for (int64_t i = 0; i < n; ++i) slots[i] = static_cast<int32_t>((i * 13 + 5) % slots_total);
  slots[3] = -1;
  slots[9] = static_cast<int32_t>(slots_total);  // one past the cache: skipped
  for (const core::DType ct : {core::DType::kF32, core::DType::kBF16}) {
    const size_t es = core::DTypeSize(ct);
    std::vector<uint8_t> zeros(slots_total * kv_dim * es, 0);
    DeviceArray<uint8_t> d_kc(zeros), d_vc(zeros);
    DeviceArray<float> d_k(k), d_v(v);
    DeviceArray<int32_t> d_slots(slots);
    ExpectOk(StoreKv(d_k.get(), d_v.get(), d_slots.get(), n, heads, bs, hd, blocks, d_kc.get(),
                     d_vc.get(), ct, nullptr));
    const auto kc = d_kc.ToHost(), vc = d_vc.ToHost();
    auto at = [&](const std::vector<uint8_t>& c, int64_t i) -> float {
      if (ct == core::DType::kF32) return reinterpret_cast<const float*>(c.data())[i];
      return Bf16ToFp32(reinterpret_cast<const uint16_t*>(c.data())[i]);
    };
    auto rnd = [&](float x) { return ct == core::DType::kF32 ? x : Bf16ToFp32(Fp32ToBf16(x)); };
    std::vector<bool> written(slots_total, false);
    for (int64_t i = 0; i < n; ++i) {
      if (slots[i] < 0 || slots[i] >= slots_total) continue;
      written[slots[i]] = true;
      for (int64_t c = 0; c < kv_dim; ++c) {
        const int64_t at_c = kernels::FloatKvIndex(slots[i], c / hd, c % hd, heads, bs, hd);
        ASSERT_EQ(at(kc, at_c), rnd(k[i * kv_dim + c]));
        ASSERT_EQ(at(vc, at_c), rnd(v[i * kv_dim + c]));
      }
    }
    for (int64_t s = 0; s < slots_total; ++s) {
      if (written[s]) continue;
      for (int64_t c = 0; c < kv_dim; ++c) {
        ASSERT_EQ(at(kc, kernels::FloatKvIndex(s, c / hd, c % hd, heads, bs, hd)), 0.0f)
            << "slot " << s << " touched";
      }
    }
  }
}

TEST(CudaOps, LaunchersRejectBadArguments) {
  // Host-side validation: runs with or without a GPU (no launch happens).
  EXPECT_EQ(Rope(nullptr, nullptr, nullptr, 1, 1, 1, 3, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RmsNorm(nullptr, nullptr, core::DType::kI8, 1e-5f, 1, 1, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StoreKv(nullptr, nullptr, nullptr, 1, 2, 16, 4, 1, nullptr, nullptr, core::DType::kI8,
                    nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StoreKv(nullptr, nullptr, nullptr, 1, 2, 0, 4, 1, nullptr, nullptr, core::DType::kF32,
                    nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Add(nullptr, nullptr, 0, nullptr, nullptr).ok());
}

}  // namespace
}  // namespace kvfold::kernels::cuda
