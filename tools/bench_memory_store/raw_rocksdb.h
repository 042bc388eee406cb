// The benchmark's baseline: RocksDB used directly, in process, with the store's payload
// column-family options (BlobDB on or off), one key per (client, version), and the same
// retention (a WriteBatch that puts version v and deletes version v - versions_kept).
#ifndef KVFOLD_TOOLS_BENCH_MEMORY_STORE_RAW_ROCKSDB_H_
#define KVFOLD_TOOLS_BENCH_MEMORY_STORE_RAW_ROCKSDB_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kvfold::bench {

class RawRocksDb {
 public:
  struct Options {
    std::string dir;
    bool sync_writes = true;
    bool enable_blob_files = true;
    uint64_t min_blob_size = 64 << 10;
    uint64_t blob_cache_bytes = 256ull << 20;  // as MemoryStore; 0 = none
    uint32_t versions_kept = 16;
  };
  static absl::Status Open(const Options& options, std::unique_ptr<RawRocksDb>* out);
  ~RawRocksDb();

  absl::Status Put(int client, uint64_t version, absl::string_view payload);
  // Reads into *payload (reused buffer).
  absl::Status Get(int client, uint64_t version, std::string* payload);
  // Flushes the memtables and waits (up to 120 s) until no flush or compaction runs or is
  // pending, so that the bytes written so far include the LSM's background work.
  absl::Status FlushAndWaitIdle();

 private:
  struct Impl;
  explicit RawRocksDb(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvfold::bench

#endif  // KVFOLD_TOOLS_BENCH_MEMORY_STORE_RAW_ROCKSDB_H_
