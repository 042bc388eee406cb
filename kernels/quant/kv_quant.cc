#include "kernels/quant/kv_quant.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/fp16.h"

namespace kvfold::quant {
namespace {

absl::Status CheckArgs(const void* in, const void* out, const void* scales,
                       int64_t num_tokens, int64_t channels, int32_t group_size) {
  if (num_tokens < 0 || channels < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv quant: negative size num_tokens=", num_tokens, " channels=", channels));
  }
  if (group_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("kv quant: group_size must be >= 1, got ",
                                                   group_size));
  }
  if (num_tokens > 0 && channels > 0 && (in == nullptr || out == nullptr || scales == nullptr)) {
    return absl::InvalidArgumentError("kv quant: null buffer");
  }
  return absl::OkStatus();
}

}  // namespace

float Int8Scale(float amax, bool fp16_scales) {
  float scale = amax / 127.0f;
  if (fp16_scales) {
    scale = Fp16ToFp32(Fp32ToFp16(scale));
    // Rounding down could push amax / scale past 127; the clamp in Int8Code absorbs it
    // (error stays below scale), so no correction is needed.
  }
  return scale;
}

int8_t Int8Code(float x, float scale) {
  if (scale == 0.0f) return 0;
  const float q = std::nearbyint(x / scale);
  return static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
}

absl::Status QuantizeKeys(const float* keys, int64_t num_tokens, int64_t channels,
                          const KvQuantOptions& options, int8_t* codes, float* scales) {
  const int32_t g = options.group_size;
  if (auto s = CheckArgs(keys, codes, scales, num_tokens, channels, g); !s.ok()) return s;
  for (int64_t group = 0; group * g < num_tokens; ++group) {
    const int64_t t0 = group * g;
    const int64_t t1 = std::min<int64_t>(num_tokens, t0 + g);
    for (int64_t c = 0; c < channels; ++c) {
      float amax = 0.0f;
      for (int64_t t = t0; t < t1; ++t) amax = std::max(amax, std::fabs(keys[t * channels + c]));
      const float scale = Int8Scale(amax, options.fp16_scales);
      scales[group * channels + c] = scale;
      for (int64_t t = t0; t < t1; ++t) codes[t * channels + c] = Int8Code(keys[t * channels + c], scale);
    }
  }
  return absl::OkStatus();
}

absl::Status DequantizeKeys(const int8_t* codes, const float* scales, int64_t num_tokens,
                            int64_t channels, int32_t group_size, float* keys) {
  if (auto s = CheckArgs(codes, keys, scales, num_tokens, channels, group_size); !s.ok()) return s;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* row_scales = scales + (t / group_size) * channels;
    for (int64_t c = 0; c < channels; ++c) {
      keys[t * channels + c] = static_cast<float>(codes[t * channels + c]) * row_scales[c];
    }
  }
  return absl::OkStatus();
}

absl::Status QuantizeValues(const float* values, int64_t num_tokens, int64_t channels,
                            const KvQuantOptions& options, int8_t* codes, float* scales) {
  const int32_t g = options.group_size;
  if (auto s = CheckArgs(values, codes, scales, num_tokens, channels, g); !s.ok()) return s;
  const int64_t groups = NumValueGroups(channels, g);
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* row = values + t * channels;
    for (int64_t group = 0; group < groups; ++group) {
      const int64_t c0 = group * g;
      const int64_t c1 = std::min<int64_t>(channels, c0 + g);
      float amax = 0.0f;
      for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(row[c]));
      const float scale = Int8Scale(amax, options.fp16_scales);
      scales[t * groups + group] = scale;
      for (int64_t c = c0; c < c1; ++c) codes[t * channels + c] = Int8Code(row[c], scale);
    }
  }
  return absl::OkStatus();
}

absl::Status DequantizeValues(const int8_t* codes, const float* scales, int64_t num_tokens,
                              int64_t channels, int32_t group_size, float* values) {
  if (auto s = CheckArgs(codes, values, scales, num_tokens, channels, group_size); !s.ok()) {
    return s;
  }
  const int64_t groups = NumValueGroups(channels, group_size);
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t c = 0; c < channels; ++c) {
      values[t * channels + c] =
          static_cast<float>(codes[t * channels + c]) * scales[t * groups + c / group_size];
    }
  }
  return absl::OkStatus();
}

double Int8BytesPerToken(int64_t channels, const KvQuantOptions& options) {
  const double scale_bytes = options.fp16_scales ? 2.0 : 4.0;
  const double key_bytes = channels + scale_bytes * channels / options.group_size;
  const double value_bytes =
      channels + scale_bytes * static_cast<double>(NumValueGroups(channels, options.group_size));
  return key_bytes + value_bytes;
}

}  // namespace kvfold::quant
