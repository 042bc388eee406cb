// RunRadosGrid in a build without librados.
#include "tools/bench_memory_store/rados_bench.h"

namespace kvfold::bench {

absl::Status RunRadosGrid(const RadosGridOptions&, nlohmann::json*) {
  return absl::UnimplementedError("bench_memory_store was built without librados");
}

}  // namespace kvfold::bench
