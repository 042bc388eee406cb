// Includes RocksDB on purpose: this is the in-process baseline the service is measured
// against (the only RocksDB user outside memory_svc/store/).
#include "tools/bench_memory_store/raw_rocksdb.h"

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <chrono>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kvfold::bench {
namespace {

absl::Status Check(const rocksdb::Status& s) {
  return s.ok() ? absl::OkStatus() : absl::InternalError(s.ToString());
}

std::string Key(int client, uint64_t version) {
  std::string key = absl::StrCat("c", client, "/");
  for (int shift = 56; shift >= 0; shift -= 8) key.push_back(static_cast<char>(version >> shift));
  return key;
}

}  // namespace

struct RawRocksDb::Impl {
  Options options;
  rocksdb::DB* db = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::WriteOptions write_options;
};

RawRocksDb::RawRocksDb(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

RawRocksDb::~RawRocksDb() {
  for (auto* h : impl_->handles) impl_->db->DestroyColumnFamilyHandle(h);
  impl_->db->Close();
  delete impl_->db;
}

absl::Status RawRocksDb::Open(const Options& options, std::unique_ptr<RawRocksDb>* out) {
  rocksdb::DBOptions db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  db_options.max_background_jobs = 2;
  rocksdb::ColumnFamilyOptions payload_cf;  // the same settings as MemoryStore's payloads
  payload_cf.enable_blob_files = options.enable_blob_files;
  payload_cf.min_blob_size = options.min_blob_size;
  payload_cf.blob_file_size = 256ull << 20;
  payload_cf.enable_blob_garbage_collection = true;
  payload_cf.compression = rocksdb::kNoCompression;
  payload_cf.blob_compression_type = rocksdb::kNoCompression;
  payload_cf.write_buffer_size = 64 << 20;
  if (options.enable_blob_files && options.blob_cache_bytes > 0) {
    payload_cf.blob_cache = rocksdb::NewLRUCache(options.blob_cache_bytes);
    payload_cf.prepopulate_blob_cache = rocksdb::PrepopulateBlobCache::kFlushOnly;
  }
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs = {
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
      {"payloads", payload_cf}};
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->write_options.sync = options.sync_writes;
  if (absl::Status s =
          Check(rocksdb::DB::Open(db_options, options.dir, cfs, &impl->handles, &impl->db));
      !s.ok()) {
    return s;
  }
  out->reset(new RawRocksDb(std::move(impl)));
  return absl::OkStatus();
}

absl::Status RawRocksDb::Put(int client, uint64_t version, absl::string_view payload) {
  rocksdb::WriteBatch batch;
  batch.Put(impl_->handles[1], Key(client, version),
            rocksdb::Slice(payload.data(), payload.size()));
  if (version > impl_->options.versions_kept) {
    batch.Delete(impl_->handles[1], Key(client, version - impl_->options.versions_kept));
  }
  return Check(impl_->db->Write(impl_->write_options, &batch));
}

absl::Status RawRocksDb::Get(int client, uint64_t version, std::string* payload) {
  return Check(impl_->db->Get(rocksdb::ReadOptions(), impl_->handles[1], Key(client, version),
                              payload));
}

absl::Status RawRocksDb::FlushAndWaitIdle() {
  rocksdb::FlushOptions flush;
  flush.wait = true;
  if (absl::Status s = Check(impl_->db->Flush(flush, impl_->handles)); !s.ok()) return s;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    uint64_t running = 0, pending = 0, flushes = 0;
    impl_->db->GetIntProperty("rocksdb.num-running-compactions", &running);
    impl_->db->GetIntProperty("rocksdb.num-running-flushes", &flushes);
    for (auto* h : impl_->handles) {
      uint64_t p = 0;
      impl_->db->GetIntProperty(h, "rocksdb.compaction-pending", &p);
      pending += p;
    }
    if (running == 0 && pending == 0 && flushes == 0) return absl::OkStatus();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return absl::DeadlineExceededError("background work did not finish in 120 s");
}

}  // namespace kvfold::bench
