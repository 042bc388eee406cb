// Internal to memory_svc/store: MemoryStore's state (its backend, the open flag, the
// background sweeper) and helpers shared by its two implementation files.
#ifndef KVFOLD_MEMORY_SVC_STORE_STORE_IMPL_H_
#define KVFOLD_MEMORY_SVC_STORE_STORE_IMPL_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "memory_svc/store/backend.h"
#include "memory_svc/store/memory_store.h"
#include "memory_svc/store/records.h"
#include "memory_svc/store/validation.h"

namespace kvfold::memory_svc {

inline absl::Status SessionNotFound(absl::string_view session_id) {
  return absl::NotFoundError(absl::StrCat("session '", session_id, "' not found"));
}

// `head`: the head version's record, for the fields taken from its header (nullptr leaves
// them unset).
inline v1::SessionInfo MakeSessionInfo(absl::string_view session_id, const SessionMeta& meta,
                                       const VersionRecord* head = nullptr) {
  v1::SessionInfo info;
  info.set_session_id(std::string(session_id));
  info.set_head_version(meta.head_version);
  info.set_latest_version(meta.latest_version);
  info.set_num_versions(static_cast<uint32_t>(meta.versions.size()));
  info.set_created_unix_ms(meta.created_unix_ms);
  info.set_updated_unix_ms(meta.updated_unix_ms);
  info.set_total_tokens(meta.total_tokens);
  if (head != nullptr) {
    const v1::MemoryBlockHeader& h = head->header;
    info.set_kv_mode(h.kv_mode());
    info.set_window_size(h.window_size());
    info.set_sink_tokens(h.sink_tokens());
    info.set_tokens_folded(h.tokens_folded());
    info.set_resident_tokens(static_cast<uint64_t>(h.window_token_ids_size()) +
                             h.sink_token_ids_size() + h.mem_slots());
    info.set_payload_size(h.payload_size());
    info.set_model_fingerprint(h.model_fingerprint());
    info.set_projector_fingerprint(h.projector_fingerprint());
  }
  return info;
}

inline v1::VersionInfo MakeVersionInfo(uint64_t version, const SessionMeta& meta,
                                       const VersionRecord& record) {
  v1::VersionInfo info;
  info.set_version(version);
  info.set_payload_size(record.header.payload_size());
  info.set_checksum(record.header.checksum());
  info.set_pinned(meta.IsPinned(version));
  info.set_is_head(version == meta.head_version);
  info.set_created_unix_ms(record.created_unix_ms);
  info.set_total_tokens(record.header.total_tokens());
  info.set_tokens_folded(record.header.tokens_folded());
  return info;
}

struct MemoryStore::Impl {
  std::unique_ptr<StoreBackend> backend;

  // Readers hold it shared, Close() exclusive: no call runs on a closed backend.
  mutable absl::Mutex open_mu;
  bool closed ABSL_GUARDED_BY(open_mu) = false;

  absl::Mutex sweep_mu;
  absl::CondVar sweep_cv;
  bool stop_sweeper ABSL_GUARDED_BY(sweep_mu) = false;
  std::thread sweeper;
};

#define KVFOLD_STORE_OPEN_OR_RETURN()                                         \
  absl::ReaderMutexLock open_lock(&impl_->open_mu);                           \
  if (impl_->closed) return absl::UnavailableError("memory store is closed")

inline bool Expired(const StoreOptions& options, const SessionMeta& meta, int64_t now_ms) {
  return options.idle_ttl_seconds > 0 &&
         now_ms - meta.updated_unix_ms >= options.idle_ttl_seconds * 1000;
}

inline absl::Status CheckIds(absl::string_view tenant, absl::string_view session_id) {
  if (absl::Status s = ValidateTenant(tenant); !s.ok()) return s;
  return ValidateSessionId(session_id);
}

// The current, unexpired record of a session with its token, or NOT_FOUND.
inline absl::StatusOr<SessionState> ReadLiveSession(const StoreBackend& backend,
                                                    const StoreOptions& options,
                                                    absl::string_view tenant,
                                                    absl::string_view session_id,
                                                    int64_t now_ms) {
  absl::StatusOr<std::optional<SessionState>> state = backend.ReadSession(tenant, session_id);
  if (!state.ok()) return state.status();
  if (!state->has_value() || Expired(options, (*state)->meta, now_ms)) {
    return SessionNotFound(session_id);
  }
  return **std::move(state);
}

// A compare-and-set lost against a concurrent change that did not touch what the caller
// decided on (e.g. a pin) is decided again; this bounds how often.
inline constexpr int kMaxCommitAttempts = 64;

inline absl::Status TooMuchContention(absl::string_view session_id) {
  return absl::AbortedError(
      absl::StrCat("session '", session_id, "': too many concurrent changes, retry"));
}

}  // namespace kvfold::memory_svc

#endif  // KVFOLD_MEMORY_SVC_STORE_STORE_IMPL_H_
