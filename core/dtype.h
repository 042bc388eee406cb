// Element types: the one DType every layer names (weights, activations, the KV cache, the
// planner's estimates, memory-block payloads) and its one name table.
//
// Host-safe and CUDA-safe (no CUDA headers, constexpr helpers), so kernels of every
// backend switch on the same values.
#ifndef KVFOLD_CORE_DTYPE_H_
#define KVFOLD_CORE_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace kvfold::core {

// The numeric values are stable (tests and benchmark outputs may print them); never reuse
// one.
enum class DType : uint8_t {
  kF32 = 0,
  kF16 = 1,
  kBF16 = 2,
  kI32 = 3,
  kI8 = 4,   // int8 codes (KV cache: KIVI codes with fp16 scales, docs/engine.md "INT8 KV")
  kQ8 = 5,   // blocked int8 weights with fp16 scales (see kQ8Block)
  kF8 = 6,   // fp8 e4m3 (planner estimates only)
  kI4 = 7,   // int4 codes (planner estimates only)
};

// Storage bits per element: 32, 16, 8 or 4. kQ8 counts its codes only (8); its scales are
// in StorageBytes.
constexpr int DTypeBits(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kI32:
      return 32;
    case DType::kF16:
    case DType::kBF16:
      return 16;
    case DType::kI8:
    case DType::kQ8:
    case DType::kF8:
      return 8;
    case DType::kI4:
      return 4;
  }
  return 0;
}

// Bytes per element; 0 for the formats that are not a whole number of bytes per element
// (kQ8: use StorageBytes; kI4).
constexpr size_t DTypeSize(DType dtype) {
  return dtype == DType::kQ8 || dtype == DType::kI4 ? 0 : DTypeBits(dtype) / 8;
}

constexpr bool IsFloatDType(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}

// Integer codes that carry fp16 scales (int8 / int4 KV caches and weights).
constexpr bool IsQuantizedDType(DType dtype) {
  return dtype == DType::kI8 || dtype == DType::kI4 || dtype == DType::kQ8;
}

// The one name table. Printed names: "f32", "f16", "bf16", "int32", "int8", "q8", "f8",
// "int4" (model fingerprints hash the weight names, so f32/f16/bf16/q8 never change).
const char* DTypeName(DType dtype);

// Every printed name, case-insensitive, plus the aliases fp32, float32, fp16, float16,
// half, bfloat16, i32, i8, fp8, fp8_e4m3, i4. InvalidArgument naming the accepted names
// otherwise.
absl::StatusOr<DType> ParseDType(std::string_view name);

// Q8 weights (kQ8, the numbers of ggml's Q8_0, docs/model-format.md "Q8 weights"): a
// [rows, cols] matrix stored row by row; a row is ceil(cols / kQ8Block) fp16 scales
// followed by ceil(cols / kQ8Block) * kQ8Block int8 codes (codes past `cols` are 0).
// Weight (r, c) = scale[c / kQ8Block] * code[c]. Only weight matrices use it.
inline constexpr int64_t kQ8Block = 32;
constexpr size_t Q8RowBytes(int64_t cols) {
  return static_cast<size_t>((cols + kQ8Block - 1) / kQ8Block) * (sizeof(uint16_t) + kQ8Block);
}

// Bytes of a tensor of `numel` elements whose last dimension is `last_dim` (int4: two
// elements per byte, rounded up).
constexpr size_t StorageBytes(DType dtype, int64_t numel, int64_t last_dim) {
  if (dtype == DType::kQ8) {
    return last_dim <= 0 ? 0 : static_cast<size_t>(numel / last_dim) * Q8RowBytes(last_dim);
  }
  if (dtype == DType::kI4) return static_cast<size_t>(numel + 1) / 2;
  return static_cast<size_t>(numel) * DTypeSize(dtype);
}

}  // namespace kvfold::core

#endif  // KVFOLD_CORE_DTYPE_H_
