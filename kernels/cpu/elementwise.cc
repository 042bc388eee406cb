#include "kernels/cpu/elementwise.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/vec16.h"
#include "kernels/quant/weight_q8.h"

namespace kvfold::kernels::cpu {
namespace {

// Per ISA path (identical bits on all, vec16.h):
//  SumSquares: sum of x[j]^2 in 16 lane partial sums over j in steps of 16 (the tail
//    padded with zeros), reduced by the tree 16 -> 8 (i + i+8) -> 4 -> 2 -> 1.
//  SiluMul: out = (g / (1 + exp(-g))) * up with Exp16, 16 elements at a time (the tail
//    through a zero-padded vector, so every element takes the same operations).
//  Argmax: per lane l the largest of x[l], x[l + 16], ... and the first index holding it
//    (strict >, so NaN never replaces a value), then the largest of the lanes with the
//    smallest index among equal ones, then the tail one element at a time.
#define KVFOLD_ELEMENTWISE_ISA(NS, ATTR)                                    \
  namespace NS {                                                            \
  KVFOLD_EXP16(ATTR)                                                        \
  ATTR inline void Load16(const float* p, int64_t valid, V16* v) {          \
    *v = V16{};                                                             \
    std::memcpy(v, p, static_cast<size_t>(valid) * sizeof(float));          \
  }                                                                         \
  ATTR float SumSquares(const float* x, int64_t d) {                        \
    V16 acc = V16{}, v;                                                     \
    int64_t j = 0;                                                          \
    for (; j + 16 <= d; j += 16) {                                          \
      std::memcpy(&v, x + j, sizeof(v));                                    \
      acc = acc + v * v;                                                    \
    }                                                                       \
    if (j < d) {                                                            \
      Load16(x + j, d - j, &v);                                             \
      acc = acc + v * v;                                                    \
    }                                                                       \
    float s8[8], s4[4];                                                     \
    for (int l = 0; l < 8; ++l) s8[l] = acc[l] + acc[l + 8];                \
    for (int l = 0; l < 4; ++l) s4[l] = s8[l] + s8[l + 4];                  \
    return (s4[0] + s4[2]) + (s4[1] + s4[3]);                               \
  }                                                                         \
  ATTR inline void Silu16(const V16* g, const V16* u, V16* out) {           \
    V16 e = -*g;                                                            \
    Exp16(&e);                                                              \
    *out = (*g / (1.0f + e)) * *u;                                          \
  }                                                                         \
  ATTR void SiluMul(const float* gate, const float* up, int64_t count,      \
                    float* out) {                                           \
    V16 g, u, r;                                                            \
    int64_t i = 0;                                                          \
    for (; i + 16 <= count; i += 16) {                                      \
      std::memcpy(&g, gate + i, sizeof(g));                                 \
      std::memcpy(&u, up + i, sizeof(u));                                   \
      Silu16(&g, &u, &r);                                                   \
      std::memcpy(out + i, &r, sizeof(r));                                  \
    }                                                                       \
    if (i < count) {                                                        \
      Load16(gate + i, count - i, &g);                                      \
      Load16(up + i, count - i, &u);                                        \
      Silu16(&g, &u, &r);                                                   \
      std::memcpy(out + i, &r, static_cast<size_t>(count - i) * sizeof(float)); \
    }                                                                       \
  }                                                                         \
  ATTR int64_t Argmax(const float* x, int64_t n) {                          \
    /* x[0] is not NaN (the caller checks): every lane starts there. */    \
    V16 best = V16{} + x[0], v;                                             \
    I16 at = I16{}, idx;                                                    \
    for (int l = 0; l < 16; ++l) idx[l] = l;                                \
    int64_t j = 0;                                                          \
    for (; j + 16 <= n && j + 16 <= INT32_MAX; j += 16) {                   \
      std::memcpy(&v, x + j, sizeof(v));                                    \
      const I16 gt = v > best;                                              \
      best = gt ? v : best;                                                 \
      at = gt ? idx : at;                                                   \
      idx = idx + 16;                                                       \
    }                                                                       \
    float value = best[0];                                                  \
    int64_t index = at[0];                                                  \
    for (int l = 1; l < 16; ++l) {                                          \
      if (best[l] > value || (best[l] == value && at[l] < index)) {         \
        value = best[l];                                                    \
        index = at[l];                                                      \
      }                                                                     \
    }                                                                       \
    for (; j < n; ++j) {                                                    \
      if (x[j] > value) {                                                   \
        value = x[j];                                                       \
        index = j;                                                          \
      }                                                                     \
    }                                                                       \
    return index;                                                           \
  }                                                                         \
  }  // namespace NS

KVFOLD_ELEMENTWISE_ISA(avx512, __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))))
KVFOLD_ELEMENTWISE_ISA(avx2, __attribute__((target("avx2,fma"))))
KVFOLD_ELEMENTWISE_ISA(portable, )
#undef KVFOLD_ELEMENTWISE_ISA

}  // namespace

absl::Status GatherRows(const void* table, DType dtype, int64_t num_rows, int64_t width,
                        const int32_t* ids, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= num_rows) {
      return absl::OutOfRangeError(
          absl::StrCat("Gather: index ", ids[i], " outside [0, ", num_rows, ")"));
    }
    const int64_t base = static_cast<int64_t>(ids[i]) * width;
    if (dtype == DType::kF32) {
      std::memcpy(out + i * width, static_cast<const float*>(table) + base, width * sizeof(float));
    } else if (dtype == DType::kQ8) {
      // Q8At's product per element, each block's scale widened once.
      quant::DequantizeRowQ8(static_cast<const uint8_t*>(table) + ids[i] * Q8RowBytes(width), width,
                             out + i * width);
    } else {
      for (int64_t j = 0; j < width; ++j) out[i * width + j] = LoadAsF32(table, dtype, base + j);
    }
  }
  return absl::OkStatus();
}

void RmsNormRows(const float* x, const void* weight, DType w_dtype, float eps, int64_t n,
                 int64_t d, float* out) {
  const Isa isa = ActiveIsa();
  for (int64_t i = 0; i < n; ++i) {
    const float* row = x + i * d;
    const float ss = isa == Isa::kAvx512 ? avx512::SumSquares(row, d)
                     : isa == Isa::kAvx2 ? avx2::SumSquares(row, d)
                                         : portable::SumSquares(row, d);
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
    float* o = out + i * d;
    if (w_dtype == DType::kF32) {
      const float* w = static_cast<const float*>(weight);
      for (int64_t j = 0; j < d; ++j) o[j] = (row[j] * inv) * w[j];
    } else {
      for (int64_t j = 0; j < d; ++j) o[j] = (row[j] * inv) * LoadAsF32(weight, w_dtype, j);
    }
  }
}

absl::Status RopeRows(const float* x, const int32_t* positions, const float* table,
                      int64_t table_rows, int64_t n, int64_t heads, int64_t head_dim,
                      float* out) {
  float tmp[1024];
  if (head_dim > 1024) return absl::InvalidArgumentError("Rope: head_dim > 1024");
  for (int64_t i = 0; i < n; ++i) {
    if (positions[i] < 0 || positions[i] >= table_rows) {
      return absl::OutOfRangeError(absl::StrCat("Rope: position ", positions[i],
                                                " outside the table (", table_rows, " rows)"));
    }
    const float* cs = table + static_cast<int64_t>(positions[i]) * head_dim;
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t off = (i * heads + h) * head_dim;
      RotateHalf(x + off, cs, static_cast<int>(head_dim), tmp);
      std::memcpy(out + off, tmp, head_dim * sizeof(float));
    }
  }
  return absl::OkStatus();
}

void SiluMulRows(const float* gate, const float* up, int64_t count, float* out) {
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      return avx512::SiluMul(gate, up, count, out);
    case Isa::kAvx2:
      return avx2::SiluMul(gate, up, count, out);
    case Isa::kPortable:
      return portable::SiluMul(gate, up, count, out);
  }
}

int64_t ArgmaxRow(const float* x, int64_t n) {
  if (n <= 0 || std::isnan(x[0])) return 0;
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      return avx512::Argmax(x, n);
    case Isa::kAvx2:
      return avx2::Argmax(x, n);
    case Isa::kPortable:
      break;
  }
  return portable::Argmax(x, n);
}

}  // namespace kvfold::kernels::cpu
