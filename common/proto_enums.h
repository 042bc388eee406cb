// The one place where the API's enums (kvfold.v1.KvMode, kvfold.v1.Dtype) are translated
// to and from the shared vocabulary (core/kv_mode.h, core/dtype.h). Both services, the
// planner and the CLI convert here.
//
//   KvMode:  KV_MODE_FULL <-> kFull, _SLIDING <-> kSliding, _SINK <-> kSink,
//            _MEMORY <-> kMemory, _MEMORY_ONLY <-> kMemoryOnly
//   Dtype:   DTYPE_FP32 <-> kF32, _FP16 <-> kF16, _BF16 <-> kBF16, _FP8 <-> kF8,
//            _INT8 <-> kI8, _INT4 <-> kI4 (kI32 and kQ8 have no API value)
#ifndef KVFOLD_COMMON_PROTO_ENUMS_H_
#define KVFOLD_COMMON_PROTO_ENUMS_H_

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/kv_mode.h"
#include "kvfold/v1/common.pb.h"

namespace kvfold {

// InvalidArgument for KV_MODE_UNSPECIFIED (callers resolve their default first) and for
// values outside the enum.
absl::StatusOr<core::KvMode> KvModeFromProto(v1::KvMode mode);
v1::KvMode KvModeToProto(core::KvMode mode);

// InvalidArgument for DTYPE_UNSPECIFIED (callers resolve their default first) and for
// values outside the enum.
absl::StatusOr<core::DType> DTypeFromProto(v1::Dtype dtype);
// DTYPE_UNSPECIFIED for kI32 and kQ8.
v1::Dtype DTypeToProto(core::DType dtype);

}  // namespace kvfold

#endif  // KVFOLD_COMMON_PROTO_ENUMS_H_
