// Projector files (a few MB at most, read whole) as fp32 tensors: reading goes through the
// one safetensors reader (inference_svc/model/safetensors.h), then converts to fp32;
// writing emits F32 safetensors.
//
// Format: 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//  "__metadata__": {...}}, then the data section.
#ifndef KVFOLD_INFERENCE_SVC_MEMORY_SAFETENSORS_LITE_H_
#define KVFOLD_INFERENCE_SVC_MEMORY_SAFETENSORS_LITE_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvfold::memory {

// One tensor converted to fp32 (F32, F16 and BF16 are accepted on load).
struct Fp32Tensor {
  std::vector<int64_t> shape;
  std::vector<float> data;  // row-major, product(shape) elements
};

using Fp32TensorMap = std::map<std::string, Fp32Tensor>;

// Parses a whole safetensors file held in `bytes`.
// Returns INVALID_ARGUMENT (with the reason) when the header is malformed, an offset is out
// of range or inconsistent with dtype x shape, tensors overlap, or a dtype is not F32, F16
// or BF16.
absl::StatusOr<Fp32TensorMap> ParseSafetensors(std::string_view bytes);

// Serializes `tensors` as F32 safetensors (names sorted, data contiguous, header padded
// with spaces to a multiple of 8 bytes as the reference implementation does).
std::string SerializeSafetensorsF32(const Fp32TensorMap& tensors);

// Whole-file helpers. ReadFileBytes: NOT_FOUND when missing, UNAVAILABLE on I/O errors.
absl::StatusOr<std::string> ReadFileBytes(const std::string& path);
absl::Status WriteFileBytes(const std::string& path, std::string_view bytes);

}  // namespace kvfold::memory

#endif  // KVFOLD_INFERENCE_SVC_MEMORY_SAFETENSORS_LITE_H_
