#include "kernels/cpu/elementwise.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_ops.h"

namespace kvfold::kernels::cpu {

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
      for (int64_t j = 0; j < width; ++j) out[i * width + j] = Q8At(table, width, ids[i], j);
    } else {
      for (int64_t j = 0; j < width; ++j) out[i * width + j] = LoadAsF32(table, dtype, base + j);
    }
  }
  return absl::OkStatus();
}

void RmsNormRows(const float* x, const void* weight, DType w_dtype, float eps, int64_t n,
                 int64_t d, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float* row = x + i * d;
    float ss = 0.0f;
    for (int64_t j = 0; j < d; ++j) ss += row[j] * row[j];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
    for (int64_t j = 0; j < d; ++j) out[i * d + j] = (row[j] * inv) * LoadAsF32(weight, w_dtype, j);
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
  for (int64_t i = 0; i < count; ++i) {
    const float g = gate[i];
    out[i] = (g / (1.0f + std::exp(-g))) * up[i];
  }
}

}  // namespace kvfold::kernels::cpu
