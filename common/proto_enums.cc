#include "common/proto_enums.h"

#include "absl/strings/str_cat.h"

namespace kvfold {
namespace {

struct ModePair {
  v1::KvMode proto;
  core::KvMode mode;
};
constexpr ModePair kModes[] = {
    {v1::KV_MODE_FULL, core::KvMode::kFull},
    {v1::KV_MODE_SLIDING, core::KvMode::kSliding},
    {v1::KV_MODE_SINK, core::KvMode::kSink},
    {v1::KV_MODE_MEMORY, core::KvMode::kMemory},
    {v1::KV_MODE_MEMORY_ONLY, core::KvMode::kMemoryOnly},
};

struct DTypePair {
  v1::Dtype proto;
  core::DType dtype;
};
constexpr DTypePair kDTypes[] = {
    {v1::DTYPE_FP32, core::DType::kF32}, {v1::DTYPE_FP16, core::DType::kF16},
    {v1::DTYPE_BF16, core::DType::kBF16}, {v1::DTYPE_FP8, core::DType::kF8},
    {v1::DTYPE_INT8, core::DType::kI8},  {v1::DTYPE_INT4, core::DType::kI4},
};

}  // namespace

absl::StatusOr<core::KvMode> KvModeFromProto(v1::KvMode mode) {
  for (const ModePair& p : kModes) {
    if (p.proto == mode) return p.mode;
  }
  if (mode == v1::KV_MODE_UNSPECIFIED) {
    return absl::InvalidArgumentError("KV mode is unspecified");
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown KV mode ", static_cast<int>(mode)));
}

v1::KvMode KvModeToProto(core::KvMode mode) {
  for (const ModePair& p : kModes) {
    if (p.mode == mode) return p.proto;
  }
  return v1::KV_MODE_UNSPECIFIED;
}

absl::StatusOr<core::DType> DTypeFromProto(v1::Dtype dtype) {
  for (const DTypePair& p : kDTypes) {
    if (p.proto == dtype) return p.dtype;
  }
  if (dtype == v1::DTYPE_UNSPECIFIED) return absl::InvalidArgumentError("dtype is unspecified");
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype ", static_cast<int>(dtype)));
}

v1::Dtype DTypeToProto(core::DType dtype) {
  for (const DTypePair& p : kDTypes) {
    if (p.dtype == dtype) return p.proto;
  }
  return v1::DTYPE_UNSPECIFIED;
}

}  // namespace kvfold
