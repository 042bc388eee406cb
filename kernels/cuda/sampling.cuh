// Token selection on the device: greedy argmax, and temperature + top-k + top-p sampling
// driven by a counter-based uniform (seed, step), so a decode loop needs no host RNG and no
// host round trip for the random number.
//
// Sampling semantics (the CPU twin lives in tests/kernels/cuda/sampling_test.cc):
//   w_i = exp((x_i - max x) / temperature)
//   top_k in (0, vocab): keep tokens whose logit >= the k-th largest logit (ties at the
//     threshold are all kept)
//   top_p in (0, 1): of those, keep the smallest set of LARGEST logits whose mass reaches
//     top_p * (mass of the top-k set) (again ties at the threshold are kept)
//   pick: walk the kept tokens in INDEX order accumulating w; the token where the running
//     sum first exceeds u * (kept mass), u = SamplingUniform(seed, step).
//   temperature <= 0 or top_k == 1: argmax (lowest index on ties). NaN logits never win.
#ifndef KVFOLD_KERNELS_CUDA_SAMPLING_CUH_
#define KVFOLD_KERNELS_CUDA_SAMPLING_CUH_

#include <cstdint>

#include <cuda_runtime_api.h>

#include "absl/status/status.h"

#ifdef __CUDACC__
#define KVFOLD_HOST_DEVICE __host__ __device__
#else
#define KVFOLD_HOST_DEVICE
#endif

namespace kvfold::kernels::cuda {

struct SamplingParams {
  float temperature = 0.0f;  // <= 0: greedy
  int32_t top_k = 0;         // <= 0 or >= vocab: off
  float top_p = 1.0f;        // >= 1 or <= 0: off
  int32_t reserved = 0;
  uint64_t seed = 0;
  uint64_t step = 0;         // the caller advances it every token
};

// Uniform in [0, 1) with 24 random bits, identical on host and device.
KVFOLD_HOST_DEVICE inline float SamplingUniform(uint64_t seed, uint64_t step) {
  uint64_t x = seed ^ (step * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull);
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return static_cast<float>(x >> 40) * (1.0f / 16777216.0f);
}

// tokens[r] = argmax_i logits[r, i]. logits [num_rows, vocab_size] F32, tokens [num_rows] I32.
absl::Status Argmax(const float* logits, int32_t num_rows, int32_t vocab_size, int32_t* tokens,
                    cudaStream_t stream);

// tokens[r] sampled from row r with params[r] (device array [num_rows]).
absl::Status Sample(const float* logits, int32_t num_rows, int32_t vocab_size,
                    const SamplingParams* params, int32_t* tokens, cudaStream_t stream);

}  // namespace kvfold::kernels::cuda

#endif  // KVFOLD_KERNELS_CUDA_SAMPLING_CUH_
