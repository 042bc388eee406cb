// bench_memory_store's RADOS grid: put/get of 48 KiB and 768 KiB blocks with 1/8/32 clients
// against MemoryStore on RocksDB, raw librados (one object per version), MemoryStore on
// RADOS, and the gRPC service on RADOS with 1 and with 2 kvfold-memory replicas (servers in
// this process, each with its own cluster connection), all in one run.
#ifndef KVFOLD_TOOLS_BENCH_MEMORY_STORE_RADOS_BENCH_H_
#define KVFOLD_TOOLS_BENCH_MEMORY_STORE_RADOS_BENCH_H_

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"

namespace kvfold::bench {

struct RadosGridOptions {
  std::string conf_file;  // ceph.conf of the cluster
  std::string pool;       // an existing pool; every cell uses a fresh namespace, emptied after
  double seconds = 2.0;   // per put and per get phase of a cell
  std::vector<int> clients = {1, 8, 32};
  std::string rocksdb_dir;  // scratch for the RocksDB variant
};

// Appends one JSON object per (op, variant, block, clients) to `results`. UNIMPLEMENTED in a
// build without librados.
absl::Status RunRadosGrid(const RadosGridOptions& options, nlohmann::json* results);

}  // namespace kvfold::bench

#endif  // KVFOLD_TOOLS_BENCH_MEMORY_STORE_RADOS_BENCH_H_
