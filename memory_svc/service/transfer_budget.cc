#include "memory_svc/service/transfer_budget.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kvfold::memory_svc {

TransferBudget::Lease& TransferBudget::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    Release();
    budget_ = std::exchange(other.budget_, nullptr);
    tenant_ = std::move(other.tenant_);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void TransferBudget::Lease::Release() {
  if (budget_ != nullptr) budget_->Return(tenant_, bytes_);
  budget_ = nullptr;
  bytes_ = 0;
}

absl::Status TransferBudget::Validate(const Limits& limits) {
  if (limits.total_bytes == 0 || limits.tenant_bytes == 0) {
    return absl::InvalidArgumentError("transfer budgets must be positive");
  }
  if (limits.tenant_bytes > limits.total_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a tenant's transfer budget (", limits.tenant_bytes,
                     " bytes) exceeds the total budget (", limits.total_bytes, " bytes)"));
  }
  return absl::OkStatus();
}

bool TransferBudget::Fits(const std::string& tenant, uint64_t bytes) const {
  auto it = by_tenant_.find(tenant);
  const uint64_t tenant_leased = it == by_tenant_.end() ? 0 : it->second;
  // An oversized lease counts as the whole limit: it fits once the limit is free.
  return leased_ + std::min(bytes, limits_.total_bytes) <= limits_.total_bytes &&
         tenant_leased + std::min(bytes, limits_.tenant_bytes) <= limits_.tenant_bytes;
}

absl::StatusOr<TransferBudget::Lease> TransferBudget::Acquire(const std::string& tenant,
                                                              uint64_t bytes, absl::Time deadline) {
  if (bytes == 0) return Lease();
  const absl::Time start = absl::Now();
  deadline = std::min(deadline, start + limits_.max_wait);
  absl::MutexLock lock(&mu_);
  const auto fits = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return Fits(tenant, bytes); };
  if (!mu_.AwaitWithDeadline(absl::Condition(&fits), deadline)) {
    ++refusals_;
    auto it = by_tenant_.find(tenant);
    const uint64_t tenant_leased = it == by_tenant_.end() ? 0 : it->second;
    const bool tenant_full =
        tenant_leased + std::min(bytes, limits_.tenant_bytes) > limits_.tenant_bytes;
    return absl::ResourceExhaustedError(absl::StrCat(
        "kvfold-memory is busy: a transfer of ", bytes, " bytes did not fit ",
        tenant_full ? absl::StrCat("the transfer budget of tenant '", tenant, "' (", tenant_leased,
                                   " of ", limits_.tenant_bytes, " bytes in flight)")
                    : absl::StrCat("the transfer budget (", leased_, " of ", limits_.total_bytes,
                                   " bytes in flight)"),
        " after waiting ",
        absl::FormatDuration(absl::Trunc(absl::Now() - start, absl::Milliseconds(1))),
        "; retry later"));
  }
  leased_ += bytes;
  by_tenant_[tenant] += bytes;
  return Lease(this, tenant, bytes);
}

void TransferBudget::Return(const std::string& tenant, uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  leased_ -= bytes;
  auto it = by_tenant_.find(tenant);
  if (it != by_tenant_.end() && (it->second -= bytes) == 0) by_tenant_.erase(it);
}

uint64_t TransferBudget::leased_bytes() const {
  absl::MutexLock lock(&mu_);
  return leased_;
}

uint64_t TransferBudget::refusals() const {
  absl::MutexLock lock(&mu_);
  return refusals_;
}

}  // namespace kvfold::memory_svc
