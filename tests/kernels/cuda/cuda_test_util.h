// Helpers for the `gpu` tests: skip without a device, RAII device arrays, and the
// llm.c-style comparison |got - ref| <= tol + |ref| * eps.
#ifndef KVFOLD_TESTS_KERNELS_CUDA_CUDA_TEST_UTIL_H_
#define KVFOLD_TESTS_KERNELS_CUDA_CUDA_TEST_UTIL_H_

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace kvfold::kernels::cuda::testing {

// True when a CUDA device is usable; `why` says why not.
inline bool HaveGpu(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    *why = std::string("no usable CUDA driver/device (") + cudaGetErrorName(err) + ")";
    return false;
  }
  if (count == 0) {
    *why = "no CUDA device";
    return false;
  }
  return true;
}

#define KVFOLD_SKIP_WITHOUT_GPU()                                                \
  do {                                                                           \
    std::string kvfold_why_;                                                     \
    if (!::kvfold::kernels::cuda::testing::HaveGpu(&kvfold_why_)) {                       \
      GTEST_SKIP() << "gpu test skipped: " << kvfold_why_                        \
                   << " (run scripts/gpu_check.sh on a machine with a GPU)";     \
    }                                                                            \
  } while (0)

template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(size_t n) : n_(n) {
    if (n > 0) {
      EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&ptr_), n * sizeof(T)), cudaSuccess);
    }
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    if (n_ > 0) {
      EXPECT_EQ(cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice),
                cudaSuccess);
    }
  }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return ptr_; }
  size_t size() const { return n_; }
  std::vector<T> ToHost() const {
    std::vector<T> host(n_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    if (n_ > 0) {
      EXPECT_EQ(cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost),
                cudaSuccess);
    }
    return host;
  }

 private:
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

inline std::vector<float> RandomFloats(size_t n, uint32_t seed, float lo = -1.0f,
                                       float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Asserts |got[i] - ref[i]| <= tol + |ref[i]| * eps for all i; reports the worst element.
inline void ExpectClose(const std::vector<float>& got, const std::vector<double>& ref,
                        double tol, double eps, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double worst = 0;
  size_t worst_i = 0;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double excess = std::fabs(got[i] - ref[i]) - (tol + std::fabs(ref[i]) * eps);
    if (!(excess <= 0)) {  // also catches NaN
      ++bad;
      if (!(excess <= worst)) {
        worst = excess;
        worst_i = i;
      }
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size()
                     << " elements out of tolerance; worst at " << worst_i << ": got "
                     << got[worst_i] << " ref " << ref[worst_i] << " (tol " << tol << " eps "
                     << eps << ")";
}

inline void ExpectOk(const absl::Status& s) { ASSERT_TRUE(s.ok()) << s; }

// HF rope table [rows, head_dim]: angle = float(p) * inv_freq (fp32 product, like HF).
inline std::vector<float> RopeTable(int rows, int head_dim, float theta = 10000.0f) {
  const int half = head_dim / 2;
  std::vector<float> table(static_cast<size_t>(rows) * head_dim);
  for (int i = 0; i < half; ++i) {
    const float inv_freq = static_cast<float>(1.0 / std::pow(theta, 2.0 * i / head_dim));
    for (int p = 0; p < rows; ++p) {
      const float angle = static_cast<float>(p) * inv_freq;
      table[static_cast<size_t>(p) * head_dim + i] = static_cast<float>(std::cos(double{angle}));
      table[static_cast<size_t>(p) * head_dim + half + i] =
          static_cast<float>(std::sin(double{angle}));
    }
  }
  return table;
}

}  // namespace kvfold::kernels::cuda::testing

#endif  // KVFOLD_TESTS_KERNELS_CUDA_CUDA_TEST_UTIL_H_
