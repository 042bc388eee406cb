// CreateCudaBackend in builds without CUDA (KVFOLD_CUDA=OFF or no nvcc): a clear error.
// Its own file, so a program that links its own CUDA backend (the emulated CUDA tests)
// takes that one instead and this member of the archive is never pulled in.
#include <memory>

#include "kernels/backend.h"

namespace kvfold::kernels {

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int /*device*/) {
  return absl::UnavailableError("this kvfold build has no CUDA backend (KVFOLD_CUDA=OFF)");
}

}  // namespace kvfold::kernels
