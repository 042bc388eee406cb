// Element types the CUDA kernels read and write. Host-safe (no CUDA headers), so engine
// code and tests can name them. The float values match kvfold::kernels::DType.
#ifndef KVFOLD_KERNELS_CUDA_ELEM_TYPE_H_
#define KVFOLD_KERNELS_CUDA_ELEM_TYPE_H_

#include <cstddef>
#include <cstdint>

namespace kvfold::cuda {

enum class ElemType : int32_t {
  kF32 = 0,
  kF16 = 1,
  kBF16 = 2,
  kI8 = 3,  // KV cache only: KIVI int8 codes with fp32 scales (kernels/quant/kv_quant.h)
};

inline size_t ElemSize(ElemType t) {
  switch (t) {
    case ElemType::kF32: return 4;
    case ElemType::kF16: return 2;
    case ElemType::kBF16: return 2;
    case ElemType::kI8: return 1;
  }
  return 0;
}

inline const char* ElemTypeName(ElemType t) {
  switch (t) {
    case ElemType::kF32: return "f32";
    case ElemType::kF16: return "f16";
    case ElemType::kBF16: return "bf16";
    case ElemType::kI8: return "i8";
  }
  return "?";
}

inline bool IsFloatType(ElemType t) {
  return t == ElemType::kF32 || t == ElemType::kF16 || t == ElemType::kBF16;
}

}  // namespace kvfold::cuda

#endif  // KVFOLD_KERNELS_CUDA_ELEM_TYPE_H_
