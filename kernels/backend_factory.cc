// CreateBackend: the one place that names every backend. Built into kvfold::kernels, which
// links the CUDA backend when this build has one (KVFOLD_HAVE_CUDA).
#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "kernels/backend.h"

namespace kvfold::kernels {

#ifndef KVFOLD_HAVE_CUDA
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device) {
  return absl::UnavailableError("this kvfold build has no CUDA backend (KVFOLD_CUDA=OFF)");
}
#endif

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const std::string& name,
                                                       int num_threads) {
  if (name == "cpu" || name == "cpu-ref") {
    CpuBackendOptions options;
    options.num_threads = num_threads;
    options.reference = name == "cpu-ref";
    return CreateCpuBackend(options);
  }
  if (name == "cuda") return CreateCudaBackend(0);
  if (name.rfind("cuda:", 0) == 0) {
    int device = 0;
    if (!absl::SimpleAtoi(name.substr(5), &device) || device < 0) {
      return absl::InvalidArgumentError(absl::StrCat("bad backend name '", name, "'"));
    }
    return CreateCudaBackend(device);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown backend '", name, "' (expected cpu, cpu-ref, cuda[:N])"));
}

}  // namespace kvfold::kernels
