// INT8 KV-cache quantization, KIVI-style (Liu et al. 2024, "KIVI: A Tuning-Free Asymmetric
// 2bit Quantization for KV Cache"), reference implementation used by the CPU backend and
// as the oracle for the CUDA kernels in kernels/cuda/kv_cache.cu.
//
// Keys have a few outlier CHANNELS, so keys are quantized per channel: for every group of
// `group_size` consecutive tokens, each channel gets its own scale. Values have no channel
// outliers but matter per token in the attention-weighted sum, so values are quantized per
// token: every token's channels are split into groups of `group_size` channels, each with
// its own scale. In the paged cache a key group is one KV block (group_size = block_size
// tokens), so a block's key scales sit beside the block; a partially filled last block is
// kept in full precision until it fills (KIVI's "residual").
//
// The scheme is symmetric int8 (q in [-127, 127], no zero point): at 8 bits the zero point
// buys nothing measurable and symmetric codes keep the attention dot product a plain
// integer-times-scale. For a group with absolute maximum amax:
//   scale = amax / 127            (0 when amax == 0; optionally rounded to fp16)
//   q     = clamp(rint(x / scale), -127, 127)      (0 when scale == 0)
//   x'    = q * scale
// so |x - x'| <= scale / 2 = amax / 254 (plus one fp32 rounding). The CUDA kernels use the
// same operations in the same order and produce bit-identical codes and scales.
//
// Layouts (row-major, channels = num_kv_heads * head_dim for a KV cache):
//   keys   [num_tokens, channels] -> codes [num_tokens, channels],
//          scales [NumKeyGroups(num_tokens, group_size), channels]
//   values [num_tokens, channels] -> codes [num_tokens, channels],
//          scales [num_tokens, NumValueGroups(channels, group_size)]
// The last group along either axis may be partial (odd sizes are allowed everywhere).
#ifndef KVFOLD_KERNELS_QUANT_KV_QUANT_H_
#define KVFOLD_KERNELS_QUANT_KV_QUANT_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace kvfold::quant {

struct KvQuantOptions {
  // Keys: tokens per group. Values: channels per group. Must be >= 1.
  // Default: 32 (KIVI's group size; a KV block of 16 tokens uses 16 for keys).
  int32_t group_size = 32;
  // Round every scale to the nearest fp16 value (so a cache may store scales as fp16 with
  // no further loss). The codes are computed with the rounded scale.
  // Default: false (fp32 scales).
  bool fp16_scales = false;
};

inline int64_t NumKeyGroups(int64_t num_tokens, int32_t group_size) {
  return (num_tokens + group_size - 1) / group_size;
}
inline int64_t NumValueGroups(int64_t channels, int32_t group_size) {
  return (channels + group_size - 1) / group_size;
}

// The scale for a group whose absolute maximum is `amax` (shared by CPU and CUDA code).
float Int8Scale(float amax, bool fp16_scales);
// One element's code for a given scale: clamp(rint(x / scale), -127, 127), 0 if scale == 0.
int8_t Int8Code(float x, float scale);

// Quantizes keys per channel in groups of options.group_size tokens.
// Returns InvalidArgument for negative sizes, group_size < 1 or null pointers with
// non-zero sizes; non-finite inputs produce a non-finite scale (callers check their data).
absl::Status QuantizeKeys(const float* keys,  // [num_tokens, channels]
                          int64_t num_tokens, int64_t channels, const KvQuantOptions& options,
                          int8_t* codes,    // [num_tokens, channels]
                          float* scales);   // [NumKeyGroups(num_tokens, g), channels]

absl::Status DequantizeKeys(const int8_t* codes,  // [num_tokens, channels]
                            const float* scales,  // [NumKeyGroups(num_tokens, g), channels]
                            int64_t num_tokens, int64_t channels, int32_t group_size,
                            float* keys);  // [num_tokens, channels]

// Quantizes values per token in groups of options.group_size channels.
absl::Status QuantizeValues(const float* values,  // [num_tokens, channels]
                            int64_t num_tokens, int64_t channels, const KvQuantOptions& options,
                            int8_t* codes,   // [num_tokens, channels]
                            float* scales);  // [num_tokens, NumValueGroups(channels, g)]

absl::Status DequantizeValues(const int8_t* codes,  // [num_tokens, channels]
                              const float* scales,  // [num_tokens, NumValueGroups(channels, g)]
                              int64_t num_tokens, int64_t channels, int32_t group_size,
                              float* values);  // [num_tokens, channels]

// Bytes one token of one layer occupies in an int8 cache with these options, keys and
// values together, scales amortised over a full key group (used by the planner).
double Int8BytesPerToken(int64_t channels, const KvQuantOptions& options);

}  // namespace kvfold::quant

#endif  // KVFOLD_KERNELS_QUANT_KV_QUANT_H_
