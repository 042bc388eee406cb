// StoreKv into a float cache, head by head (FloatKvIndex): F32 caches take the rows'
// values as they are, fp16 caches each value rounded to the nearest fp16 with ties to
// even on every path (VCVTPS2PH with the rounding mode in its immediate; common/fp16.h's
// Fp32ToFp16 on the portable one), so the cache's bits do not depend on the ISA.
// (Attention widens entries back, exactly, in attention_tiled.cc.)
// GCC 12's AVX-512 conversion intrinsics read an undefined vector (false positives).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>

#include "common/fp16.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/isa.h"

namespace kvfold::kernels::cpu {
namespace {

#define KVFOLD_KV_HALF_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
#define KVFOLD_KV_HALF_AVX2 __attribute__((target("avx2,fma,f16c")))

constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

KVFOLD_KV_HALF_AVX512 void FloatToHalfAvx512(const float* f, int64_t n, uint16_t* h) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(h + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(f + i), kRound));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm256_mask_storeu_epi16(h + i, m, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, f + i), kRound));
  }
}

KVFOLD_KV_HALF_AVX2 void FloatToHalfAvx2(const float* f, int64_t n, uint16_t* h) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(h + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(f + i), kRound));
  }
  for (; i < n; ++i) h[i] = Fp32ToFp16(f[i]);
}

void FloatToHalfPortable(const float* f, int64_t n, uint16_t* h) {
  for (int64_t i = 0; i < n; ++i) h[i] = Fp32ToFp16(f[i]);
}

}  // namespace

namespace {

// Row i of k and v, head by head, to slots[i]'s place in each head's run of the block
// (FloatKvIndex), each head's head_dim values through convert(src, head_dim, dst).
template <class T, class Convert>
void ScatterHeads(const float* k, const float* v, const int32_t* slots, int64_t n,
                  int64_t num_kv_heads, int64_t block_size, int64_t head_dim, T* k_cache,
                  T* v_cache, Convert convert) {
  const int64_t kv_dim = num_kv_heads * head_dim;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t h = 0; h < num_kv_heads; ++h) {
      const int64_t dst = FloatKvIndex(slots[i], h, 0, num_kv_heads, block_size, head_dim);
      convert(k + i * kv_dim + h * head_dim, head_dim, k_cache + dst);
      convert(v + i * kv_dim + h * head_dim, head_dim, v_cache + dst);
    }
  }
}

}  // namespace

void StoreKvHalf(const float* k, const float* v, const int32_t* slots, int64_t n,
                 int64_t num_kv_heads, int64_t block_size, int64_t head_dim, uint16_t* k_cache,
                 uint16_t* v_cache) {
  const Isa isa = ActiveIsa();
  auto convert = isa == Isa::kAvx512 ? FloatToHalfAvx512
                 : isa == Isa::kAvx2 ? FloatToHalfAvx2
                                     : FloatToHalfPortable;
  ScatterHeads(k, v, slots, n, num_kv_heads, block_size, head_dim, k_cache, v_cache, convert);
}

void StoreKvF32(const float* k, const float* v, const int32_t* slots, int64_t n,
                int64_t num_kv_heads, int64_t block_size, int64_t head_dim, float* k_cache,
                float* v_cache) {
  ScatterHeads(k, v, slots, n, num_kv_heads, block_size, head_dim, k_cache, v_cache,
               [](const float* src, int64_t count, float* dst) {
                 std::memcpy(dst, src, count * sizeof(float));
               });
}

}  // namespace kvfold::kernels::cpu
