// MemoryStore's session administration: roll back, pin, fork, delete, list, TTL sweep,
// garbage collection. Each mutation reads the session record, decides, and commits guarded
// by that record (backend.h); a commit that lost against a concurrent change decides again.
#include <algorithm>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "memory_svc/store/memory_store.h"
#include "memory_svc/store/records.h"
#include "memory_svc/store/store_impl.h"
#include "memory_svc/store/validation.h"

namespace kvfold::memory_svc {
namespace {

// The record of a version that `state` lists; nullopt when it was retired since `state`
// was read (the caller's commit would lose, so it decides again).
absl::StatusOr<std::optional<VersionRecord>> ReadListedRecord(const StoreBackend& backend,
                                                              absl::string_view tenant,
                                                              absl::string_view session_id,
                                                              uint64_t version) {
  absl::StatusOr<std::optional<BlockRead>> read =
      backend.ReadBlock(tenant, session_id, version, /*with_payload=*/false, {});
  if (!read.ok()) return read.status();
  if (!read->has_value()) return std::optional<VersionRecord>();
  return std::move((*read)->record);
}

absl::Status NoSuchVersion(absl::string_view session_id, uint64_t version) {
  return absl::NotFoundError(absl::StrCat("session '", session_id, "' has no version ", version));
}

// A change of a session's record that concerns one retained version (roll back, pin).
struct RecordChange {
  SessionMeta meta;  // as committed
  uint64_t version = 0;
  VersionRecord record;
};

// Reads the live session and version `version` (0 = head), checks the head against
// `expected_head` (0 = any), lets `change` edit the record, and commits it guarded by what
// was read; decides again when a concurrent commit got in between.
absl::StatusOr<RecordChange> ChangeSessionRecord(
    StoreBackend& backend, const StoreOptions& options, absl::string_view tenant,
    absl::string_view session_id, uint64_t version, uint64_t expected_head,
    const std::function<void(SessionMeta&, const RecordChange&, int64_t)>& change) {
  for (int attempt = 0; attempt < kMaxCommitAttempts; ++attempt) {
    const int64_t now = options.clock_ms();
    absl::StatusOr<SessionState> state = ReadLiveSession(backend, options, tenant, session_id, now);
    if (!state.ok()) return state.status();
    RecordChange out;
    out.meta = std::move(state->meta);
    if (expected_head != 0 && out.meta.head_version != expected_head) {
      return absl::AbortedError(absl::StrCat("session '", session_id, "': head is ",
                                             out.meta.head_version, ", expected ", expected_head));
    }
    out.version = version == 0 ? out.meta.head_version : version;
    if (!out.meta.HasVersion(out.version)) return NoSuchVersion(session_id, out.version);
    absl::StatusOr<std::optional<VersionRecord>> record =
        ReadListedRecord(backend, tenant, session_id, out.version);
    if (!record.ok()) return record.status();
    if (!record->has_value()) continue;
    out.record = **std::move(record);
    change(out.meta, out, now);
    SessionCommit commit;
    commit.expected_token = state->cas_token;
    commit.meta = out.meta;
    absl::StatusOr<bool> committed = backend.Commit(tenant, session_id, commit);
    if (!committed.ok()) return committed.status();
    if (*committed) return out;
  }
  return TooMuchContention(session_id);
}

}  // namespace

absl::StatusOr<v1::SessionInfo> MemoryStore::SetHead(absl::string_view tenant,
                                                     absl::string_view session_id,
                                                     uint64_t version,
                                                     uint64_t expected_head_version) {
  if (absl::Status s = CheckIds(tenant, session_id); !s.ok()) return s;
  if (absl::Status s = ValidateVersion(version, "version"); !s.ok()) return s;
  if (absl::Status s = ValidateVersion(expected_head_version, "expected_head_version"); !s.ok()) {
    return s;
  }
  if (version == 0) return absl::InvalidArgumentError("SetHead needs a version >= 1");
  KVFOLD_STORE_OPEN_OR_RETURN();
  absl::StatusOr<RecordChange> done = ChangeSessionRecord(
      *impl_->backend, options_, tenant, session_id, version, expected_head_version,
      [](SessionMeta& m, const RecordChange& c, int64_t now) {
        m.head_version = c.version;
        m.total_tokens = c.record.header.total_tokens();
        m.updated_unix_ms = now;
      });
  if (!done.ok()) return done.status();
  return MakeSessionInfo(session_id, done->meta);
}

absl::StatusOr<v1::VersionInfo> MemoryStore::PinVersion(absl::string_view tenant,
                                                        absl::string_view session_id,
                                                        uint64_t version, bool pinned) {
  if (absl::Status s = CheckIds(tenant, session_id); !s.ok()) return s;
  if (absl::Status s = ValidateVersion(version, "version"); !s.ok()) return s;
  KVFOLD_STORE_OPEN_OR_RETURN();
  absl::StatusOr<RecordChange> done = ChangeSessionRecord(
      *impl_->backend, options_, tenant, session_id, version, /*expected_head=*/0,
      [pinned](SessionMeta& m, const RecordChange& c, int64_t now) {
        auto it = std::lower_bound(m.pinned.begin(), m.pinned.end(), c.version);
        const bool was_pinned = it != m.pinned.end() && *it == c.version;
        if (pinned && !was_pinned) m.pinned.insert(it, c.version);
        if (!pinned && was_pinned) m.pinned.erase(it);
        m.updated_unix_ms = now;
      });
  if (!done.ok()) return done.status();
  return MakeVersionInfo(done->version, done->meta, done->record);
}

absl::StatusOr<v1::SessionInfo> MemoryStore::Fork(absl::string_view tenant,
                                                  absl::string_view source_session_id,
                                                  uint64_t version,
                                                  absl::string_view new_session_id) {
  if (absl::Status s = CheckIds(tenant, new_session_id); !s.ok()) return s;
  // Get() validates the source id and version and verifies the checksum, so a damaged
  // block is never copied.
  absl::StatusOr<StoredBlock> source = Get(tenant, source_session_id, version);
  if (!source.ok()) return source.status();
  KVFOLD_STORE_OPEN_OR_RETURN();
  StoreBackend& backend = *impl_->backend;
  for (int attempt = 0; attempt < kMaxCommitAttempts; ++attempt) {
    absl::StatusOr<std::optional<SessionState>> old = backend.ReadSession(tenant, new_session_id);
    if (!old.ok()) return old.status();
    const int64_t now = options_.clock_ms();
    SessionCommit commit;
    if (old->has_value()) {
      if (!Expired(options_, (*old)->meta, now)) {
        return absl::AlreadyExistsError(
            absl::StrCat("session '", new_session_id, "' already exists"));
      }
      commit.expected_token = (*old)->cas_token;
      commit.drop_all_versions = true;
    }
    SessionMeta meta;
    meta.head_version = 1;
    meta.latest_version = 1;
    meta.created_unix_ms = now;
    meta.updated_unix_ms = now;
    meta.total_tokens = source->header.total_tokens();
    meta.versions = {1};
    commit.new_versions.push_back(NewVersion{1, {now, source->header}, source->payload});
    commit.meta = meta;
    absl::StatusOr<bool> committed = backend.Commit(tenant, new_session_id, commit);
    if (!committed.ok()) return committed.status();
    if (*committed) return MakeSessionInfo(new_session_id, meta);
  }
  return TooMuchContention(new_session_id);
}

absl::StatusOr<uint32_t> MemoryStore::Delete(absl::string_view tenant,
                                             absl::string_view session_id) {
  if (absl::Status s = CheckIds(tenant, session_id); !s.ok()) return s;
  KVFOLD_STORE_OPEN_OR_RETURN();
  StoreBackend& backend = *impl_->backend;
  for (int attempt = 0; attempt < kMaxCommitAttempts; ++attempt) {
    absl::StatusOr<std::optional<SessionState>> state = backend.ReadSession(tenant, session_id);
    if (!state.ok()) return state.status();
    if (!state->has_value()) return SessionNotFound(session_id);
    const bool expired = Expired(options_, (*state)->meta, options_.clock_ms());
    SessionCommit commit;
    commit.expected_token = (*state)->cas_token;
    absl::StatusOr<bool> committed = backend.Commit(tenant, session_id, commit);
    if (!committed.ok()) return committed.status();
    if (!*committed) continue;
    if (absl::Status s = backend.ReclaimDeleted(tenant, session_id); !s.ok()) return s;
    if (expired) return SessionNotFound(session_id);  // gone already as far as callers know
    return static_cast<uint32_t>((*state)->meta.versions.size());
  }
  return TooMuchContention(session_id);
}

absl::StatusOr<SessionPage> MemoryStore::ListSessions(absl::string_view tenant,
                                                      uint32_t page_size,
                                                      absl::string_view page_token) const {
  if (absl::Status s = ValidateTenant(tenant); !s.ok()) return s;
  if (page_size < 1 || page_size > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size ", page_size, " is outside 1..1000"));
  }
  if (!page_token.empty()) {
    if (absl::Status s = ValidateSessionId(page_token); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("page_token is invalid: ", s.message()));
    }
  }
  KVFOLD_STORE_OPEN_OR_RETURN();
  const int64_t now = options_.clock_ms();
  SessionPage page;
  std::string after(page_token);
  // One more than a page tells whether another page follows; expired sessions are skipped,
  // so scan on until the page is full or the tenant ends.
  while (true) {
    auto batch = impl_->backend->ScanSessions(tenant, after, page_size + 1);
    if (!batch.ok()) return batch.status();
    for (auto& [id, meta] : *batch) {
      if (Expired(options_, meta, now)) continue;
      if (page.sessions.size() == page_size) {
        page.next_page_token = page.sessions.back().session_id();
        return page;
      }
      // The head's header (no payload) for its mode and sizes; record and header are one
      // consistent read. A session deleted since the scan is left out.
      auto head = impl_->backend->ReadBlock(tenant, id, 0, /*with_payload=*/false, {});
      if (!head.ok()) return head.status();
      if (!head->has_value() || !(*head)->record.has_value()) continue;
      page.sessions.push_back(MakeSessionInfo(id, (*head)->meta, &*(*head)->record));
    }
    if (batch->size() < page_size + 1) return page;
    after = batch->back().first;
  }
}

absl::StatusOr<int> MemoryStore::SweepExpiredSessions() {
  if (options_.idle_ttl_seconds <= 0) return 0;
  std::vector<StoreBackend::SessionEntry> expired;
  {
    KVFOLD_STORE_OPEN_OR_RETURN();
    auto all = impl_->backend->ScanAllSessions();
    if (!all.ok()) return all.status();
    const int64_t now = options_.clock_ms();
    for (StoreBackend::SessionEntry& e : *all) {
      if (Expired(options_, e.meta, now)) expired.push_back(std::move(e));
    }
  }
  int swept = 0;
  for (const StoreBackend::SessionEntry& e : expired) {
    KVFOLD_STORE_OPEN_OR_RETURN();
    StoreBackend& backend = *impl_->backend;
    // Re-check: the session may have been rewritten since the scan; the commit is guarded
    // by the record that was found expired.
    absl::StatusOr<std::optional<SessionState>> state =
        backend.ReadSession(e.tenant, e.session_id);
    if (!state.ok()) return state.status();
    if (!state->has_value() || !Expired(options_, (*state)->meta, options_.clock_ms())) continue;
    SessionCommit commit;
    commit.expected_token = (*state)->cas_token;
    absl::StatusOr<bool> committed = backend.Commit(e.tenant, e.session_id, commit);
    if (!committed.ok()) return committed.status();
    if (!*committed) continue;
    if (absl::Status s = backend.ReclaimDeleted(e.tenant, e.session_id); !s.ok()) return s;
    ++swept;
  }
  return swept;
}

absl::StatusOr<int> MemoryStore::CollectGarbage(int64_t grace_seconds) {
  KVFOLD_STORE_OPEN_OR_RETURN();
  return impl_->backend->CollectGarbage(grace_seconds * 1000);
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> MemoryStore::ListAllSessions()
    const {
  KVFOLD_STORE_OPEN_OR_RETURN();
  auto all = impl_->backend->ScanAllSessions();
  if (!all.ok()) return all.status();
  const int64_t now = options_.clock_ms();
  std::vector<std::pair<std::string, std::string>> out;
  for (StoreBackend::SessionEntry& e : *all) {
    if (!Expired(options_, e.meta, now)) out.emplace_back(std::move(e.tenant), std::move(e.session_id));
  }
  return out;
}

absl::Status MemoryStore::CorruptPayloadForTesting(absl::string_view tenant,
                                                   absl::string_view session_id,
                                                   uint64_t version) {
  KVFOLD_STORE_OPEN_OR_RETURN();
  return impl_->backend->CorruptPayloadForTesting(tenant, session_id, version);
}

}  // namespace kvfold::memory_svc
