// THE one place where CUDA runtime and cuBLAS errors become absl::Status (every foreign
// error type is translated in exactly one place, with an explicit code table).
//
// Code table (cudaError_t):
//   cudaSuccess                                   -> OK
//   cudaErrorMemoryAllocation                     -> ResourceExhausted
//   cudaErrorInvalidValue, InvalidConfiguration,
//   InvalidDevicePointer, InvalidPitchValue,
//   InvalidDevice, InvalidResourceHandle          -> InvalidArgument  (a caller bug)
//   cudaErrorNoDevice, InsufficientDriver,
//   DevicesUnavailable, SystemNotReady,
//   SystemDriverMismatch, CompatNotSupportedOnDevice,
//   InitializationError                           -> Unavailable  (no usable GPU: retry elsewhere)
//   cudaErrorNoKernelImageForDevice,
//   InvalidPtx, UnsupportedPtxVersion             -> FailedPrecondition (rebuild for this arch)
//   cudaErrorNotSupported                         -> Unimplemented
//   everything else (launch failures, illegal
//   address, ECC, timeouts)                       -> Internal (the context is likely dead)
// Code table (cublasStatus_t):
//   SUCCESS -> OK; ALLOC_FAILED -> ResourceExhausted; INVALID_VALUE -> InvalidArgument;
//   NOT_INITIALIZED -> Unavailable; ARCH_MISMATCH, NOT_SUPPORTED -> Unimplemented;
//   LICENSE_ERROR -> FailedPrecondition; MAPPING_ERROR, EXECUTION_FAILED,
//   INTERNAL_ERROR and anything else -> Internal.
#ifndef KVFOLD_KERNELS_CUDA_CUDA_STATUS_H_
#define KVFOLD_KERNELS_CUDA_CUDA_STATUS_H_

#include "absl/strings/string_view.h"

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"

namespace kvfold::kernels::cuda {

// OK for cudaSuccess; otherwise the table above, message "<what>: <cuda name>: <text>".
absl::Status CudaStatus(cudaError_t error, absl::string_view what);
absl::Status CublasStatus(cublasStatus_t status, absl::string_view what);

// The status of the last kernel launch on this thread (cudaGetLastError, which also
// clears a non-sticky error). Launchers call it right after <<<...>>>.
absl::Status LaunchStatus(absl::string_view kernel_name);

}  // namespace kvfold::kernels::cuda

#define KVFOLD_CUDA_RETURN_IF_ERROR(expr, what)                              \
  do {                                                                       \
    if (const cudaError_t kvfold_cuda_err_ = (expr); kvfold_cuda_err_ != cudaSuccess) { \
      return ::kvfold::kernels::cuda::CudaStatus(kvfold_cuda_err_, what);             \
    }                                                                        \
  } while (0)

#define KVFOLD_CUBLAS_RETURN_IF_ERROR(expr, what)                                    \
  do {                                                                               \
    if (const cublasStatus_t kvfold_cublas_st_ = (expr);                             \
        kvfold_cublas_st_ != CUBLAS_STATUS_SUCCESS) {                                \
      return ::kvfold::kernels::cuda::CublasStatus(kvfold_cublas_st_, what);                  \
    }                                                                                \
  } while (0)

#endif  // KVFOLD_KERNELS_CUDA_CUDA_STATUS_H_
