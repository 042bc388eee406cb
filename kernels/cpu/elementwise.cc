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

typedef double D16 __attribute__((vector_size(128)));
typedef int64_t L16 __attribute__((vector_size(128)));

// Per ISA path (identical bits on all, vec16.h):
//  SumSquares: sum of x[j]^2 in 16 lane partial sums over j in steps of 16 (the tail
//    padded with zeros), reduced by the tree 16 -> 8 (i + i+8) -> 4 -> 2 -> 1.
//  SiluMul: out = (g / (1 + exp(-g))) * up with Exp16, 16 elements at a time (the tail
//    through a zero-padded vector, so every element takes the same operations).
//  SumExp: Exp16(x - max) 16 elements at a time (0 where x - max < -87, is NaN or lies in
//    the padded tail), added as doubles in 16 lane sums over j in steps of 16, then
//    the lanes in order.
//  SamplingMass: w = Exp16((x - max) * inv_t), 16 elements at a time (the tail through a
//    zero-padded vector); mass = w * 2^40 rounded to an integer in double arithmetic,
//    0 unless w >= min_w (so 0 for NaN); the total is an integer sum, whose order does not
//    matter.
//  Argmax: per lane l of four lane sets s the largest of x[16s + l], x[64 + 16s + l], ...
//    and the first index holding it (strict >, so NaN never replaces a value), then the
//    largest of all lanes with the smallest index among equal ones, then the tail one
//    element at a time.
#define KVFOLD_ELEMENTWISE_ISA(NS, ATTR)                                                     \
  namespace NS {                                                                             \
  KVFOLD_EXP16(ATTR)                                                                         \
  ATTR inline void Load16(const float* p, int64_t valid, V16* v) {                           \
    *v = V16{};                                                                              \
    std::memcpy(v, p, static_cast<size_t>(valid) * sizeof(float));                           \
  }                                                                                          \
  ATTR float SumSquares(const float* x, int64_t d) {                                         \
    V16 acc = V16{}, v;                                                                      \
    int64_t j = 0;                                                                           \
    for (; j + 16 <= d; j += 16) {                                                           \
      std::memcpy(&v, x + j, sizeof(v));                                                     \
      acc = acc + v * v;                                                                     \
    }                                                                                        \
    if (j < d) {                                                                             \
      Load16(x + j, d - j, &v);                                                              \
      acc = acc + v * v;                                                                     \
    }                                                                                        \
    float s8[8], s4[4];                                                                      \
    for (int l = 0; l < 8; ++l) s8[l] = acc[l] + acc[l + 8];                                 \
    for (int l = 0; l < 4; ++l) s4[l] = s8[l] + s8[l + 4];                                   \
    return (s4[0] + s4[2]) + (s4[1] + s4[3]);                                                \
  }                                                                                          \
  ATTR inline void Silu16(const V16* g, const V16* u, V16* out) {                            \
    V16 e = -*g;                                                                             \
    Exp16(&e);                                                                               \
    *out = (*g / (1.0f + e)) * *u;                                                           \
  }                                                                                          \
  ATTR void SiluMul(const float* gate, const float* up, int64_t count, float* out) {         \
    V16 g, u, r;                                                                             \
    int64_t i = 0;                                                                           \
    for (; i + 16 <= count; i += 16) {                                                       \
      std::memcpy(&g, gate + i, sizeof(g));                                                  \
      std::memcpy(&u, up + i, sizeof(u));                                                    \
      Silu16(&g, &u, &r);                                                                    \
      std::memcpy(out + i, &r, sizeof(r));                                                   \
    }                                                                                        \
    if (i < count) {                                                                         \
      Load16(gate + i, count - i, &g);                                                       \
      Load16(up + i, count - i, &u);                                                         \
      Silu16(&g, &u, &r);                                                                    \
      std::memcpy(out + i, &r, static_cast<size_t>(count - i) * sizeof(float));              \
    }                                                                                        \
  }                                                                                          \
  ATTR inline L16 Mass16(const V16& v, float max, float inv_t, float min_w, I16* key) {      \
    /* 2^52 + m as a double has m in its low mantissa bits: w * 2^40 is */                   \
    /* exact, the add rounds it to an integer (ties to even), which is 0 */                  \
    /* for w <= 2^-41. */                                                                    \
    V16 w = (v - max) * inv_t;                                                               \
    Exp16(&w);                                                                               \
    const I16 keep = (w >= min_w) & (w > 0x1p-41f);                                          \
    *key = __builtin_bit_cast(I16, w) & keep;                                                \
    const D16 scaled = __builtin_convertvector(w, D16) * 0x1p40 + 0x1p52;                    \
    return (__builtin_bit_cast(L16, scaled) - 0x4330000000000000LL) &                        \
           __builtin_convertvector(keep, L16);                                               \
  }                                                                                          \
  ATTR double SumExp(const float* x, int64_t n, float max) {                                 \
    D16 sum = D16{};                                                                         \
    V16 v;                                                                                   \
    for (int64_t j = 0; j < n; j += 16) {                                                    \
      const int64_t valid = n - j < 16 ? n - j : 16;                                         \
      v = V16{} - __builtin_inff();                                                          \
      std::memcpy(&v, x + j, static_cast<size_t>(valid) * sizeof(float));                    \
      V16 w = v - max;                                                                       \
      const I16 live = w >= -87.0f;                                                          \
      Exp16(&w);                                                                             \
      w = live ? w : V16{};                                                                  \
      sum = sum + __builtin_convertvector(w, D16);                                           \
    }                                                                                        \
    double total = 0;                                                                        \
    for (int l = 0; l < 16; ++l) total += sum[l];                                            \
    return total;                                                                            \
  }                                                                                          \
  ATTR uint64_t SamplingMass(const float* x, int64_t n, float max, float inv_t, float min_w, \
                             uint32_t* keys, uint64_t* mass) {                               \
    L16 sum = L16{}, m;                                                                      \
    V16 v;                                                                                   \
    I16 key;                                                                                 \
    int64_t j = 0;                                                                           \
    for (; j + 16 <= n; j += 16) {                                                           \
      std::memcpy(&v, x + j, sizeof(v));                                                     \
      m = Mass16(v, max, inv_t, min_w, &key);                                                \
      std::memcpy(keys + j, &key, sizeof(key));                                              \
      std::memcpy(mass + j, &m, sizeof(m));                                                  \
      sum = sum + m;                                                                         \
    }                                                                                        \
    uint64_t total = 0;                                                                      \
    for (int l = 0; l < 16; ++l) total += static_cast<uint64_t>(sum[l]);                     \
    if (j < n) {                                                                             \
      Load16(x + j, n - j, &v);                                                              \
      m = Mass16(v, max, inv_t, min_w, &key);                                                \
      for (int64_t l = 0; l < n - j; ++l) {                                                  \
        keys[j + l] = static_cast<uint32_t>(key[l]);                                         \
        mass[j + l] = static_cast<uint64_t>(m[l]);                                           \
        total += mass[j + l];                                                                \
      }                                                                                      \
    }                                                                                        \
    return total;                                                                            \
  }                                                                                          \
  ATTR int64_t Argmax(const float* x, int64_t n) {                                           \
    /* x[0] is not NaN (the caller checks): every lane starts there. Four */                 \
    /* sets of lanes take x[64i + 16s + l], so four compare chains run */                    \
    /* side by side. */                                                                      \
    V16 best[4], v;                                                                          \
    I16 at[4], idx[4];                                                                       \
    for (int t = 0; t < 4; ++t) {                                                            \
      best[t] = V16{} + x[0];                                                                \
      at[t] = I16{};                                                                         \
      for (int l = 0; l < 16; ++l) idx[t][l] = 16 * t + l;                                   \
    }                                                                                        \
    int64_t j = 0;                                                                           \
    for (; j + 64 <= n && j + 64 <= INT32_MAX; j += 64) {                                    \
      for (int t = 0; t < 4; ++t) {                                                          \
        std::memcpy(&v, x + j + 16 * t, sizeof(v));                                          \
        const I16 gt = v > best[t];                                                          \
        best[t] = gt ? v : best[t];                                                          \
        at[t] = gt ? idx[t] : at[t];                                                         \
        idx[t] = idx[t] + 64;                                                                \
      }                                                                                      \
    }                                                                                        \
    float value = best[0][0];                                                                \
    int64_t index = at[0][0];                                                                \
    for (int t = 0; t < 4; ++t) {                                                            \
      for (int l = 0; l < 16; ++l) {                                                         \
        if (best[t][l] > value || (best[t][l] == value && at[t][l] < index)) {               \
          value = best[t][l];                                                                \
          index = at[t][l];                                                                  \
        }                                                                                    \
      }                                                                                      \
    }                                                                                        \
    for (; j < n; ++j) {                                                                     \
      if (x[j] > value) {                                                                    \
        value = x[j];                                                                        \
        index = j;                                                                           \
      }                                                                                      \
    }                                                                                        \
    return index;                                                                            \
  }                                                                                          \
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

uint64_t SamplingMassRow(const float* x, int64_t n, float max, float inv_t, float min_w,
                         uint32_t* keys, uint64_t* mass) {
  if (n <= 0) return 0;
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      return avx512::SamplingMass(x, n, max, inv_t, min_w, keys, mass);
    case Isa::kAvx2:
      return avx2::SamplingMass(x, n, max, inv_t, min_w, keys, mass);
    case Isa::kPortable:
      break;
  }
  return portable::SamplingMass(x, n, max, inv_t, min_w, keys, mass);
}

double SumExpRow(const float* x, int64_t n, float max) {
  if (n <= 0) return 0;
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      return avx512::SumExp(x, n, max);
    case Isa::kAvx2:
      return avx2::SumExp(x, n, max);
    case Isa::kPortable:
      break;
  }
  return portable::SumExp(x, n, max);
}

}  // namespace kvfold::kernels::cpu
