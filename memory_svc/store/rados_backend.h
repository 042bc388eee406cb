// Internal to memory_svc/store: the Ceph RADOS backend (librados C++ API), the only code in
// kvfold that includes librados. Object layout: rados_layout.h. Any number of processes may
// share a pool: the compare-and-set of a commit is one compound operation on the session's
// head object (cmpxattr on its generation, then the new record, version entries and
// generation), which RADOS applies atomically on every replica or not at all.
// rados_backend.cc: connection, single-object reads, helpers; rados_backend_ops.cc:
// commit, multi-object reads, listing, garbage collection.
#ifndef KVFOLD_MEMORY_SVC_STORE_RADOS_BACKEND_H_
#define KVFOLD_MEMORY_SVC_STORE_RADOS_BACKEND_H_

#include <rados/librados.hpp>

#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "memory_svc/store/backend.h"

namespace kvfold::memory_svc {

// A negative errno from librados -> absl::Status (the one translation; table in the .cc).
absl::Status FromRados(int r, absl::string_view what);

librados::bufferlist RadosBytes(absl::string_view s);
absl::string_view RadosView(const librados::bufferlist& bl);

class RadosBackend final : public StoreBackend {
 public:
  RadosBackend() = default;
  ~RadosBackend() override;

  absl::Status Open(const RadosOptions& options);

  absl::StatusOr<std::optional<SessionState>> ReadSession(
      absl::string_view tenant, absl::string_view session_id) const override;
  absl::StatusOr<bool> Commit(absl::string_view tenant, absl::string_view session_id,
                              const SessionCommit& commit) override;
  absl::StatusOr<std::optional<BlockRead>> ReadBlock(
      absl::string_view tenant, absl::string_view session_id, uint64_t version, bool with_payload,
      const PayloadGate& before_payload) const override;
  absl::StatusOr<std::optional<std::pair<SessionMeta, std::vector<VersionRecord>>>>
  ReadVersionRecords(absl::string_view tenant, absl::string_view session_id) const override;
  absl::StatusOr<std::vector<std::pair<std::string, SessionMeta>>> ScanSessions(
      absl::string_view tenant, absl::string_view after, uint32_t limit) const override;
  absl::StatusOr<std::vector<SessionEntry>> ScanAllSessions() const override;
  absl::Status ReclaimDeleted(absl::string_view, absl::string_view) override {
    return absl::OkStatus();  // removed objects are gone; the OSDs reclaim the space
  }
  absl::StatusOr<int> CollectGarbage(int64_t grace_ms) override;
  bool NeedsGarbageCollection() const override { return true; }
  absl::Status CorruptPayloadForTesting(absl::string_view tenant, absl::string_view session_id,
                                        uint64_t version) override;
  absl::Status Close() override;

 private:
  static absl::StatusOr<std::optional<SessionState>> DecodeHead(
      const std::map<std::string, librados::bufferlist>& attrs);
  uint64_t Nonce();
  // The nonces of the given versions on the head (absent ones are left out).
  absl::StatusOr<std::map<uint64_t, uint64_t>> ReadNonces(
      absl::string_view tenant, absl::string_view session_id,
      const std::set<uint64_t>& versions) const;
  // Every version entry's nonce on the head.
  absl::StatusOr<std::map<uint64_t, uint64_t>> ReadAllNonces(absl::string_view tenant,
                                                             absl::string_view session_id) const;
  // Best effort: what stays behind is unreferenced and the collector removes it.
  void RemoveObjects(const std::vector<std::string>& oids);
  absl::Status AddToIndex(absl::string_view tenant, absl::string_view session_id);
  void RemoveFromIndex(absl::string_view tenant, absl::string_view session_id);

  mutable librados::Rados cluster_;
  mutable librados::IoCtx io_;
  bool initialized_ = false;
  bool connected_ = false;
  absl::Mutex rng_mu_;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(rng_mu_){std::random_device{}()};
  absl::Mutex tenants_mu_;
  absl::flat_hash_set<std::string> known_tenants_ ABSL_GUARDED_BY(tenants_mu_);
};

}  // namespace kvfold::memory_svc

#endif  // KVFOLD_MEMORY_SVC_STORE_RADOS_BACKEND_H_
