// THE safetensors reader (format v0), for model weights and projector files alike:
// 8-byte little-endian header length N (at most 100 MiB), N bytes of JSON {name: {dtype,
// shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the data. Every offset
// and shape is checked against the file size and the dtype, and tensors may not overlap;
// InvalidArgument on any inconsistency.
#ifndef KVFOLD_INFERENCE_SVC_MODEL_SAFETENSORS_H_
#define KVFOLD_INFERENCE_SVC_MODEL_SAFETENSORS_H_

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "inference_svc/model/model_file.h"

namespace kvfold::model {

// Parses `bytes` (which `keepalive` owns). Tensors point into `bytes`. F32/F16/BF16 only;
// other dtypes are InvalidArgument. `what` names the file in error messages.
absl::StatusOr<std::map<std::string, HostTensor>> ParseSafetensors(
    std::string_view bytes, std::shared_ptr<const void> keepalive, std::string_view what);

// Memory-maps `path` and parses it. NotFound if missing.
absl::StatusOr<std::map<std::string, HostTensor>> LoadSafetensorsFile(const std::string& path);

// Serialises tensors (already in their final dtype) to safetensors bytes.
std::string SerializeSafetensors(const std::map<std::string, HostTensor>& tensors);

}  // namespace kvfold::model

#endif  // KVFOLD_INFERENCE_SVC_MODEL_SAFETENSORS_H_
