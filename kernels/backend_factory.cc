// CreateBackend: the one place that names every backend. Built into kvfold::kernels, which
// links the CUDA backend (CreateCudaBackend) when this build has one, else
// cuda_unavailable.cc.
#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "kernels/backend.h"

namespace kvfold::kernels {

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
