// OpenRadosBackend in a build without librados (CMake did not find librados-dev and
// libradospp-dev).
#include "memory_svc/store/backend.h"

namespace kvfold::memory_svc {

absl::StatusOr<std::unique_ptr<StoreBackend>> OpenRadosBackend(const StoreOptions&) {
  return absl::UnimplementedError(
      "this kvfold-memory was built without librados (install librados-dev and "
      "libradospp-dev, then rebuild) and cannot use the rados backend");
}

}  // namespace kvfold::memory_svc
