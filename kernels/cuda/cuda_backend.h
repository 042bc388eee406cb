// The CUDA implementation of kvfold::kernels::Backend (kernels/backend.h).
//
// - Buffers are cudaMalloc'ed device memory; weights are copied to the device once by
//   AdoptWeights (the host mmap can be dropped afterwards).
// - A Stream is a cudaStream_t plus its own cuBLAS handle and scratch (the F16/BF16 cast
//   of MatMul inputs, the split-K attention workspace). Scratch grows only when a larger
//   call than any before arrives; a steady decode loop does not allocate.
// - Ops only enqueue work: nothing inside a decode step synchronises with the host or
//   copies through it. CopyToHost results are valid after Synchronize(stream).
// - Shapes and dtypes are checked on the host before launch (InvalidArgument); device
//   failures come back through kernels/cuda/cuda_status.h.
// - Numerics: F32 activations and KV, weights F32/F16/BF16 fed to cuBLAS with F32
//   accumulation; results match the CPU backend within the tolerances in docs/cuda.md, not
//   bit for bit (cuBLAS picks its kernels by shape, so GPU rows are not batch-invariant).
// - INT8 KV (SupportsInt8Kv): StoreKvInt8 writes the F32 pages and seals blocks on the
//   device with codes and fp16 scales bit-identical to the CPU backend (kv_quant.h);
//   AttentionInt8 is the split-K Attention kernel reading int8 codes * fp16 scales, and
//   each row's own block F32 from its page (kv_cache.cuh, attention.cuh). Device-side
//   indices (slots, pages, seal entries) cannot be range-checked on the host: out-of-range
//   ones are skipped by the kernels instead of returning OutOfRange like the CPU.
#ifndef KVFOLD_KERNELS_CUDA_CUDA_BACKEND_H_
#define KVFOLD_KERNELS_CUDA_CUDA_BACKEND_H_

#include "kernels/backend.h"

// The backend is made by kernels::CreateCudaBackend (kernels/backend.h), defined in
// cuda_backend.cc.

#endif  // KVFOLD_KERNELS_CUDA_CUDA_BACKEND_H_
