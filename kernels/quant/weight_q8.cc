#include "kernels/quant/weight_q8.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/fp16.h"
#include "core/dtype.h"

namespace kvfold::quant {

using core::kQ8Block;

void QuantizeRowQ8(const float* x, int64_t cols, uint8_t* row) {
  const int64_t blocks = (cols + kQ8Block - 1) / kQ8Block;
  uint8_t* scales = row;
  int8_t* codes = reinterpret_cast<int8_t*>(row + blocks * sizeof(uint16_t));
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kQ8Block, end = std::min(cols, begin + kQ8Block);
    float amax = 0.0f;
    for (int64_t c = begin; c < end; ++c) amax = std::max(amax, std::fabs(x[c]));
    const uint16_t h = Fp32ToFp16(amax / 127.0f);
    std::memcpy(scales + b * sizeof(uint16_t), &h, sizeof(h));
    const float d = Fp16ToFp32(h);
    for (int64_t c = begin; c < begin + kQ8Block; ++c) {
      float q = 0.0f;
      if (c < end && d > 0.0f) q = std::clamp(std::nearbyint(x[c] / d), -127.0f, 127.0f);
      codes[c] = static_cast<int8_t>(q);
    }
  }
}

void DequantizeRowQ8(const uint8_t* row, int64_t cols, float* out) {
  const int64_t blocks = (cols + kQ8Block - 1) / kQ8Block;
  const int8_t* codes = reinterpret_cast<const int8_t*>(row + blocks * sizeof(uint16_t));
  for (int64_t b = 0; b < blocks; ++b) {
    uint16_t h;
    std::memcpy(&h, row + b * sizeof(uint16_t), sizeof(h));
    const float d = Fp16ToFp32(h);
    const int64_t end = std::min(cols, (b + 1) * kQ8Block);
    for (int64_t c = b * kQ8Block; c < end; ++c) out[c] = d * static_cast<float>(codes[c]);
  }
}

}  // namespace kvfold::quant
