// TransferBudget: bounds the block bytes kvfold-memory holds for transfers in flight.
//
// A PutBlock buffers its whole block (header + payload, up to --max-block-bytes) before it
// commits, and a GetBlock holds the block it streams until the client has taken it. Without
// a bound, a few hundred concurrent transfers of large blocks (or streams that announce a
// block and then stall) take the process past its memory and every tenant loses the store.
// Each transfer leases its bytes first: in total at most `total_bytes`, per tenant at most
// `tenant_bytes`, so one tenant's transfers can never take the whole budget. A lease that
// does not fit waits for others to end, up to `max_wait` (or the call's deadline, whichever
// is sooner), and is then refused with RESOURCE_EXHAUSTED: the client retries later.
#ifndef KVFOLD_MEMORY_SVC_SERVICE_TRANSFER_BUDGET_H_
#define KVFOLD_MEMORY_SVC_SERVICE_TRANSFER_BUDGET_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace kvfold::memory_svc {

class TransferBudget {
 public:
  struct Limits {
    // All transfers together. Default: 1 GiB.
    uint64_t total_bytes = uint64_t{1} << 30;
    // One tenant's transfers together. Default: 256 MiB.
    uint64_t tenant_bytes = uint64_t{256} << 20;
    // The longest a lease waits for room. Default: 10 s.
    absl::Duration max_wait = absl::Seconds(10);
  };

  // Releases its bytes when destroyed. Movable; a moved-from or default lease holds none.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept { *this = std::move(other); }
    Lease& operator=(Lease&& other) noexcept;
    ~Lease() { Release(); }
    uint64_t bytes() const { return bytes_; }
    void Release();

   private:
    friend class TransferBudget;
    Lease(TransferBudget* budget, std::string tenant, uint64_t bytes)
        : budget_(budget), tenant_(std::move(tenant)), bytes_(bytes) {}
    TransferBudget* budget_ = nullptr;
    std::string tenant_;
    uint64_t bytes_ = 0;
  };

  // INVALID_ARGUMENT when a limit is 0 or tenant_bytes > total_bytes.
  static absl::Status Validate(const Limits& limits);
  explicit TransferBudget(Limits limits) : limits_(limits) {}
  TransferBudget(const TransferBudget&) = delete;
  TransferBudget& operator=(const TransferBudget&) = delete;

  // A lease of `bytes` for `tenant`, once they fit both limits; waits at most until
  // `deadline` or max_wait from now. A lease larger than a limit fits once nothing else
  // holds that limit's bytes (a block stored under a larger --max-block-bytes stays
  // readable). RESOURCE_EXHAUSTED, naming the limit, when it did not fit in time.
  absl::StatusOr<Lease> Acquire(const std::string& tenant, uint64_t bytes, absl::Time deadline);

  // Bytes leased now (all tenants), and the leases refused since the start.
  uint64_t leased_bytes() const;
  uint64_t refusals() const;
  const Limits& limits() const { return limits_; }

 private:
  bool Fits(const std::string& tenant, uint64_t bytes) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Return(const std::string& tenant, uint64_t bytes);

  const Limits limits_;
  mutable absl::Mutex mu_;
  uint64_t leased_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, uint64_t> by_tenant_ ABSL_GUARDED_BY(mu_);  // no zero entries
  uint64_t refusals_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvfold::memory_svc

#endif  // KVFOLD_MEMORY_SVC_SERVICE_TRANSFER_BUDGET_H_
