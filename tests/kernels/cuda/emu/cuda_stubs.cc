// The CUDA runtime and cuBLAS functions the CUDA backend calls, on the host, for the
// emulated CUDA tests (cuda_emu_test, label emu): device memory is host memory, streams are
// synchronous, cublasGemmEx is a plain loop with double accumulation (only OP_T x OP_N,
// the one Linear uses). The test links the CUDA backend's own sources, so
// kernels::CreateBackend("cuda[:N]") reaches the emulated backend.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

extern "C" {
cudaError_t cudaMalloc(void** p, size_t n) { *p = std::calloc(1, n ? n : 1); return cudaSuccess; }
cudaError_t cudaFree(void* p) { std::free(p); return cudaSuccess; }
cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) { std::memmove(d, s, n); return cudaSuccess; }
cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind, cudaStream_t) { std::memmove(d, s, n); return cudaSuccess; }
cudaError_t cudaMemset(void* d, int v, size_t n) { std::memset(d, v, n); return cudaSuccess; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) { *s = reinterpret_cast<cudaStream_t>(0x1); return cudaSuccess; }
cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
cudaError_t cudaGetDeviceCount(int* c) { *c = 1; return cudaSuccess; }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) { std::memset(p, 0, sizeof(*p)); std::strcpy(p->name, "emu"); p->major = 9; return cudaSuccess; }
cudaError_t cudaGetLastError() { return cudaSuccess; }
cudaError_t cudaFuncSetAttribute(const void*, cudaFuncAttribute, int) { return cudaSuccess; }
const char* cudaGetErrorName(cudaError_t) { return "emu"; }
const char* cudaGetErrorString(cudaError_t) { return "emu"; }
const char* cublasGetStatusString(cublasStatus_t) { return "emu"; }
const char* cublasGetStatusName(cublasStatus_t) { return "emu"; }
cublasStatus_t cublasCreate(cublasHandle_t* h) { *h = reinterpret_cast<cublasHandle_t>(0x1); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasDestroy(cublasHandle_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
static float Ld(const void* p, cudaDataType t, long i) {
  if (t == CUDA_R_32F) return static_cast<const float*>(p)[i];
  if (t == CUDA_R_16F) return __half2float(static_cast<const __half*>(p)[i]);
  return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}
cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void* alpha, const void* A, cudaDataType at, int lda, const void* B,
                            cudaDataType bt, int ldb, const void* beta, void* C, cudaDataType,
                            int ldc, cublasComputeType_t, cublasGemmAlgo_t) {
  if (ta != CUBLAS_OP_T || tb != CUBLAS_OP_N) std::abort();
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  float* c = static_cast<float*>(C);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double acc = 0;
      for (int l = 0; l < k; ++l) acc += double(Ld(A, at, l + long(i) * lda)) * Ld(B, bt, l + long(j) * ldb);
      float& out = c[i + long(j) * ldc];
      out = al * float(acc) + (be == 0 ? 0.0f : be * out);
    }
  return CUBLAS_STATUS_SUCCESS;
}
}
