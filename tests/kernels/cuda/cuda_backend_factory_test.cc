// `--backend cuda[:N]` without a usable GPU: a clear Unavailable, never a crash; with one,
// a working backend. Runs on every machine (label unit) in CUDA builds.
#include <string>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace kvfold {
namespace {

TEST(CudaBackendFactory, UnavailableWithoutGpuElseWorking) {
  std::string why;
  const bool have_gpu = kernels::cuda::testing::HaveGpu(&why);
  auto backend = kernels::CreateBackend("cuda", 1);
  if (!have_gpu) {
    ASSERT_FALSE(backend.ok());
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kUnavailable) << backend.status();
    EXPECT_NE(backend.status().message().find("CUDA"), std::string::npos) << backend.status();
  } else {
    ASSERT_TRUE(backend.ok()) << backend.status();
    EXPECT_EQ((*backend)->Name(), "cuda:0");
  }
  auto far = kernels::CreateBackend("cuda:99", 1);
  ASSERT_FALSE(far.ok());
  EXPECT_EQ(far.status().code(), absl::StatusCode::kUnavailable) << far.status();
  EXPECT_EQ(kernels::CreateBackend("cuda:x", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  // The CPU backend still works either way.
  EXPECT_TRUE(kernels::CreateBackend("cpu", 1).ok());
}

}  // namespace
}  // namespace kvfold
