// Includes RocksDB on purpose: this is the in-process baseline the service is measured
// against (the only RocksDB user outside memory_svc/store/).
#include "tools/bench_memory_store/raw_rocksdb.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

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

}  // namespace kvfold::bench
