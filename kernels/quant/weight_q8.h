// Q8 weight quantization (core/dtype.h kQ8): symmetric int8 with one fp16 scale per
// kQ8Block consecutive weights of a row, like ggml's Q8_0. The scale is rounded to fp16
// BEFORE the codes are computed, so code * stored scale is the value the quantizer meant.
#ifndef KVFOLD_KERNELS_QUANT_WEIGHT_Q8_H_
#define KVFOLD_KERNELS_QUANT_WEIGHT_Q8_H_

#include <cstdint>

namespace kvfold::quant {

// Writes one row of `cols` floats as core::Q8RowBytes(cols) bytes: per block the
// scale d = fp16(max |x| / 127) and codes round(x / d) in [-127, 127] (0 when d == 0).
void QuantizeRowQ8(const float* x, int64_t cols, uint8_t* row);

// The inverse: out[c] = scale[c / kQ8Block] * code[c] for c < cols.
void DequantizeRowQ8(const uint8_t* row, int64_t cols, float* out);

}  // namespace kvfold::quant

#endif  // KVFOLD_KERNELS_QUANT_WEIGHT_Q8_H_
