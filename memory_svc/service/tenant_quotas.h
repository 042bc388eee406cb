// Per-tenant quotas of kvfold-memory: live sessions, retained versions and stored payload
// bytes. Writes that would exceed a limit fail with RESOURCE_EXHAUSTED naming the limit.
//
// Tenants file (--tenants-file), one tenant per line, '#' starts a comment:
//   <tenant> [sessions=N] [versions=N] [bytes=N[K|M|G]]
// "*" as the tenant sets the limits of every tenant without a line of its own. A limit
// left out (or 0) is unlimited. K/M/G are binary (KiB, MiB, GiB).
//
// Usage is counted per tenant from the store itself when the tenant is first written
// (ListSessions + ListVersions), then kept current: every write reserves its predicted
// growth before the payload is read (so concurrent writers cannot overshoot together) and,
// once committed, the session's real usage (after retention) is read back. Before a write
// is refused the tenant is recounted, so sessions that expired meanwhile do not count.
// Only tenants with limits are tracked. Thread-safe.
#ifndef KVFOLD_MEMORY_SVC_SERVICE_TENANT_QUOTAS_H_
#define KVFOLD_MEMORY_SVC_SERVICE_TENANT_QUOTAS_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kvfold/v1/common.pb.h"
#include "memory_svc/store/memory_store.h"

namespace kvfold::memory_svc {

struct TenantLimits {
  uint64_t max_sessions = 0;  // 0 = unlimited
  uint64_t max_versions = 0;  // retained versions over all of the tenant's sessions
  uint64_t max_bytes = 0;     // payload bytes of those versions
  bool any() const { return max_sessions != 0 || max_versions != 0 || max_bytes != 0; }
};

class TenantLimitTable {
 public:
  // INVALID_ARGUMENT naming the line; NOT_FOUND when the file cannot be read.
  static absl::StatusOr<TenantLimitTable> Parse(const std::string& text);
  static absl::StatusOr<TenantLimitTable> LoadFile(const std::string& path);
  // The tenant's own line, else the "*" line, else unlimited.
  TenantLimits For(absl::string_view tenant) const;

 private:
  absl::flat_hash_map<std::string, TenantLimits> limits_;
  TenantLimits default_;
};

class QuotaLedger {
 public:
  // One admitted write. Settle() it exactly once.
  struct Reservation {
    std::string tenant;
    std::string session_id;
    uint64_t sessions = 0, versions = 0, bytes = 0;
    bool tracked = false;  // false: the tenant has no limits
  };

  // `store` must outlive the ledger. tenants_file empty = no limits (every call admits).
  static absl::StatusOr<std::unique_ptr<QuotaLedger>> Create(MemoryStore* store,
                                                             const std::string& tenants_file);

  // Re-reads the tenants file (SIGHUP); the limits in force stay when it fails to parse.
  absl::Status Reload();

  // Admits a write that adds a version of `payload_bytes` to `session_id` (creating it when
  // `creates_session`), or returns RESOURCE_EXHAUSTED naming the tenant, the limit and the
  // usage. UNAVAILABLE/INTERNAL when counting the tenant's usage failed.
  absl::StatusOr<Reservation> Reserve(absl::string_view tenant, absl::string_view session_id,
                                      bool creates_session, uint64_t payload_bytes);
  // Ends a reservation; when the write committed, the session's usage is read back.
  void Settle(const Reservation& reservation, bool committed);
  // The session is gone (deleted): its usage no longer counts.
  void Forget(absl::string_view tenant, absl::string_view session_id);

  // Usage and limits of a tenant with limits; nullopt for one without (not tracked).
  std::optional<v1::TenantUsage> UsageOf(absl::string_view tenant);
  // Gauges kvfold_memory_tenant_{sessions,versions,bytes}{tenant} and their _limit, for
  // every tracked tenant, in the Prometheus text format.
  std::string RenderPrometheus() const;

 private:
  struct SessionUsage {
    uint64_t versions = 0, bytes = 0;
  };
  struct Tenant {
    bool counted = false;
    int64_t counted_at_ms = 0;
    absl::flat_hash_map<std::string, SessionUsage> sessions;
    uint64_t versions = 0, bytes = 0;  // committed
    uint64_t reserved_sessions = 0, reserved_versions = 0, reserved_bytes = 0;
  };

  QuotaLedger(MemoryStore* store, std::string path, TenantLimitTable limits)
      : store_(store), path_(std::move(path)), limits_(std::move(limits)) {}
  // Caller holds mu_. Recounts the tenant from the store.
  absl::Status CountLocked(const std::string& tenant, Tenant* t);
  // Caller holds mu_. The reason the write does not fit, or OK.
  absl::Status CheckLocked(const std::string& tenant, const Tenant& t, const TenantLimits& limits,
                           const Reservation& r) const;
  void SetSessionLocked(Tenant* t, const std::string& session_id,
                        std::optional<SessionUsage> usage);

  MemoryStore* store_;
  const std::string path_;
  mutable std::mutex mu_;
  TenantLimitTable limits_;                           // guarded by mu_
  absl::flat_hash_map<std::string, Tenant> tenants_;  // guarded by mu_
};

}  // namespace kvfold::memory_svc

#endif  // KVFOLD_MEMORY_SVC_SERVICE_TENANT_QUOTAS_H_
