// MemoryStore: open/close, Put and the reads. The backend (backend.h) stores; this file
// decides (ids, checks, compare-and-set, retention).
#include "memory_svc/store/memory_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/block_checksum.h"
#include "memory_svc/store/records.h"
#include "memory_svc/store/store_impl.h"
#include "memory_svc/store/validation.h"

namespace kvfold::memory_svc {

MemoryStore::MemoryStore(StoreOptions options, std::unique_ptr<Impl> impl)
    : options_(std::move(options)), impl_(std::move(impl)) {}

MemoryStore::~MemoryStore() { Close().IgnoreError(); }

absl::StatusOr<std::unique_ptr<MemoryStore>> MemoryStore::Open(StoreOptions options) {
  if (options.versions_kept < 1) return absl::InvalidArgumentError("versions_kept must be >= 1");
  if (options.idle_ttl_seconds < 0) {
    return absl::InvalidArgumentError("idle_ttl_seconds must be >= 0");
  }
  if (options.max_block_bytes == 0) {
    return absl::InvalidArgumentError("max_block_bytes must be > 0");
  }
  if (options.orphan_grace_seconds <= 0) {
    return absl::InvalidArgumentError("orphan_grace_seconds must be > 0");
  }
  if (!options.clock_ms) {
    options.clock_ms = [] { return absl::ToUnixMillis(absl::Now()); };
  }
  auto impl = std::make_unique<Impl>();
  absl::StatusOr<std::unique_ptr<StoreBackend>> backend =
      options.backend == BackendKind::kRados ? OpenRadosBackend(options)
                                             : OpenRocksDbBackend(options);
  if (!backend.ok()) return backend.status();
  impl->backend = *std::move(backend);

  std::unique_ptr<MemoryStore> store(new MemoryStore(std::move(options), std::move(impl)));
  const StoreOptions& o = store->options_;
  const bool ttl = o.idle_ttl_seconds > 0;
  const bool gc = store->impl_->backend->NeedsGarbageCollection();
  if (ttl || gc) {
    int64_t interval_ms = o.sweep_interval_ms;
    if (interval_ms <= 0) {
      interval_ms = ttl ? std::min<int64_t>(o.idle_ttl_seconds * 500, 60'000)
                        : std::min<int64_t>(o.orphan_grace_seconds * 1000, 60'000);
    }
    MemoryStore* self = store.get();
    store->impl_->sweeper = std::thread([self, interval_ms, ttl, gc] {
      Impl& impl = *self->impl_;
      const int64_t gc_every_ms = self->options_.orphan_grace_seconds * 1000;
      int64_t last_gc_ms = self->options_.clock_ms();
      absl::MutexLock lock(&impl.sweep_mu);
      while (!impl.stop_sweeper) {
        impl.sweep_cv.WaitWithTimeout(&impl.sweep_mu, absl::Milliseconds(interval_ms));
        if (impl.stop_sweeper) break;
        impl.sweep_mu.Unlock();
        if (ttl) self->SweepExpiredSessions().IgnoreError();  // retried next period
        const int64_t now = self->options_.clock_ms();
        if (gc && now - last_gc_ms >= gc_every_ms) {
          self->CollectGarbage(self->options_.orphan_grace_seconds).IgnoreError();
          last_gc_ms = now;
        }
        impl.sweep_mu.Lock();
      }
    });
  }
  return store;
}

absl::Status MemoryStore::Close() {
  {
    absl::MutexLock lock(&impl_->sweep_mu);
    impl_->stop_sweeper = true;
    impl_->sweep_cv.SignalAll();
  }
  if (impl_->sweeper.joinable()) impl_->sweeper.join();
  absl::WriterMutexLock lock(&impl_->open_mu);
  if (impl_->closed) return absl::OkStatus();
  impl_->closed = true;
  return impl_->backend->Close();
}

absl::StatusOr<v1::PutBlockResponse> MemoryStore::Put(absl::string_view tenant,
                                                      absl::string_view session_id,
                                                      uint64_t expected_head_version,
                                                      const v1::MemoryBlockHeader& header,
                                                      absl::string_view payload, bool pin) {
  if (absl::Status s = CheckIds(tenant, session_id); !s.ok()) return s;
  if (absl::Status s = ValidateVersion(expected_head_version, "expected_head_version"); !s.ok()) {
    return s;
  }
  if (absl::Status s = ValidateBlockHeader(header, options_.max_block_bytes); !s.ok()) return s;
  if (payload.size() != header.payload_size()) {
    return absl::InvalidArgumentError(absl::StrCat("payload is ", payload.size(),
                                                   " bytes but header.payload_size is ",
                                                   header.payload_size()));
  }
  const uint64_t checksum = BlockChecksum(header, std::string_view(payload.data(), payload.size()));
  if (checksum != header.checksum()) {
    return absl::DataLossError(absl::StrCat("block checksum mismatch: header says ",
                                            header.checksum(), ", data hashes to ", checksum));
  }
  if (!TurnRecordIntact(header)) {
    return absl::DataLossError("header.turn fails its checksum");
  }
  KVFOLD_STORE_OPEN_OR_RETURN();
  StoreBackend& backend = *impl_->backend;
  for (int attempt = 0; attempt < kMaxCommitAttempts; ++attempt) {
    absl::StatusOr<std::optional<SessionState>> old = backend.ReadSession(tenant, session_id);
    if (!old.ok()) return old.status();
    const int64_t now = options_.clock_ms();
    const bool stale = old->has_value() && Expired(options_, (*old)->meta, now);
    const bool exists = old->has_value() && !stale;
    if (!exists && expected_head_version != 0) return SessionNotFound(session_id);
    if (exists && (*old)->meta.head_version != expected_head_version) {
      return absl::AbortedError(absl::StrCat("session '", session_id, "': head is ",
                                             (*old)->meta.head_version, ", expected ",
                                             expected_head_version));
    }
    SessionCommit commit;
    SessionMeta meta;
    if (old->has_value()) commit.expected_token = (*old)->cas_token;
    if (exists) {
      meta = (*old)->meta;
    } else {
      meta.created_unix_ms = now;
      commit.drop_all_versions = stale;
    }
    const uint64_t version = meta.latest_version + 1;
    meta.latest_version = version;
    meta.head_version = version;
    meta.updated_unix_ms = now;
    meta.total_tokens = header.total_tokens();
    meta.versions.push_back(version);
    if (pin) meta.pinned.push_back(version);
    for (uint64_t victim : RetentionVictims(meta, options_.versions_kept)) {
      commit.retired_versions.push_back(victim);
      meta.versions.erase(std::find(meta.versions.begin(), meta.versions.end(), victim));
    }
    commit.new_versions.push_back(NewVersion{version, {now, header}, payload});
    commit.meta = std::move(meta);
    absl::StatusOr<bool> committed = backend.Commit(tenant, session_id, commit);
    if (!committed.ok()) return committed.status();
    if (!*committed) continue;  // the record changed since it was read: decide again
    v1::PutBlockResponse response;
    response.set_session_id(std::string(session_id));
    response.set_version(version);
    response.set_payload_size(header.payload_size());
    response.set_checksum(header.checksum());
    return response;
  }
  return TooMuchContention(session_id);
}

absl::StatusOr<StoredBlock> MemoryStore::Get(absl::string_view tenant, absl::string_view session_id,
                                             uint64_t version,
                                             const PayloadGate& before_payload) const {
  if (absl::Status s = CheckIds(tenant, session_id); !s.ok()) return s;
  if (absl::Status s = ValidateVersion(version, "version"); !s.ok()) return s;
  KVFOLD_STORE_OPEN_OR_RETURN();
  absl::StatusOr<std::optional<BlockRead>> read =
      impl_->backend->ReadBlock(tenant, session_id, version, /*with_payload=*/true, before_payload);
  if (!read.ok()) return read.status();
  if (!read->has_value() || Expired(options_, (*read)->meta, options_.clock_ms())) {
    return SessionNotFound(session_id);
  }
  BlockRead& r = **read;
  if (!r.record.has_value()) {
    return absl::NotFoundError(absl::StrCat("session '", session_id, "' has no version ",
                                            r.version, " (latest ", r.meta.latest_version, ")"));
  }
  if (r.payload.size() != r.record->header.payload_size() ||
      BlockChecksum(r.record->header, r.payload) != r.record->header.checksum() ||
      !TurnRecordIntact(r.record->header)) {
    return absl::DataLossError(absl::StrCat("session '", session_id, "' version ", r.version,
                                            ": stored block fails its checksum"));
  }
  StoredBlock block;
  block.info = MakeVersionInfo(r.version, r.meta, *r.record);
  block.header = std::move(r.record->header);
  block.payload = std::move(r.payload);
  return block;
}

absl::StatusOr<v1::SessionInfo> MemoryStore::GetSessionInfo(absl::string_view tenant,
                                                            absl::string_view session_id) const {
  // The same record ListSessions and ListVersions return: the meta plus the head's header
  // fields (mode, sizes, fingerprints), read without payloads.
  absl::StatusOr<v1::ListVersionsResponse> list = ListVersions(tenant, session_id);
  if (!list.ok()) return list.status();
  return std::move(*list->mutable_session());
}

absl::StatusOr<v1::ListVersionsResponse> MemoryStore::ListVersions(
    absl::string_view tenant, absl::string_view session_id) const {
  if (absl::Status s = CheckIds(tenant, session_id); !s.ok()) return s;
  KVFOLD_STORE_OPEN_OR_RETURN();
  auto read = impl_->backend->ReadVersionRecords(tenant, session_id);
  if (!read.ok()) return read.status();
  if (!read->has_value() || Expired(options_, (*read)->first, options_.clock_ms())) {
    return SessionNotFound(session_id);
  }
  const auto& [meta, records] = **read;
  v1::ListVersionsResponse response;
  const VersionRecord* head = nullptr;
  for (size_t i = 0; i < meta.versions.size(); ++i) {
    if (meta.versions[i] == meta.head_version) head = &records[i];
  }
  *response.mutable_session() = MakeSessionInfo(session_id, meta, head);
  for (size_t i = meta.versions.size(); i-- > 0;) {
    *response.add_versions() = MakeVersionInfo(meta.versions[i], meta, records[i]);
  }
  return response;
}

}  // namespace kvfold::memory_svc
