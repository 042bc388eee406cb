#include "memory_svc/service/tenant_quotas.h"

#include <chrono>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"

namespace kvfold::memory_svc {
namespace {

// A failed write is recounted from the store at most this often per tenant.
constexpr int64_t kRecountIntervalMs = 2000;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool ParseAmount(absl::string_view text, uint64_t* value) {
  uint64_t scale = 1;
  if (!text.empty()) {
    switch (absl::ascii_toupper(static_cast<unsigned char>(text.back()))) {
      case 'K':
        scale = 1ull << 10;
        break;
      case 'M':
        scale = 1ull << 20;
        break;
      case 'G':
        scale = 1ull << 30;
        break;
      default:
        break;
    }
    if (scale != 1) text.remove_suffix(1);
  }
  uint64_t n = 0;
  if (!absl::SimpleAtoi(text, &n) || n > UINT64_MAX / scale) return false;
  *value = n * scale;
  return true;
}

}  // namespace

absl::StatusOr<TenantLimitTable> TenantLimitTable::Parse(const std::string& text) {
  TenantLimitTable table;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    const size_t hash = line.find('#');
    if (hash != absl::string_view::npos) line = line.substr(0, hash);
    std::vector<absl::string_view> parts =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (parts.empty()) continue;
    TenantLimits limits;
    for (size_t i = 1; i < parts.size(); ++i) {
      const size_t eq = parts[i].find('=');
      const absl::string_view key = parts[i].substr(0, eq);
      uint64_t* field = key == "sessions"   ? &limits.max_sessions
                        : key == "versions" ? &limits.max_versions
                        : key == "bytes"    ? &limits.max_bytes
                                            : nullptr;
      if (eq == absl::string_view::npos || field == nullptr ||
          !ParseAmount(parts[i].substr(eq + 1), field)) {
        return absl::InvalidArgumentError(
            absl::StrCat("tenants file line ", line_no, ": '", parts[i],
                         "' is not sessions=N, versions=N or bytes=N[K|M|G]"));
      }
    }
    if (parts[0] == "*") {
      table.default_ = limits;
    } else if (!table.limits_.emplace(std::string(parts[0]), limits).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("tenants file line ", line_no, ": tenant '", parts[0], "' repeated"));
    }
  }
  return table;
}

absl::StatusOr<TenantLimitTable> TenantLimitTable::LoadFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path, "tenants file");
  if (!text.ok()) return text.status();
  absl::StatusOr<TenantLimitTable> table = Parse(*text);
  if (!table.ok()) {
    return absl::Status(table.status().code(), absl::StrCat(path, ": ", table.status().message()));
  }
  return table;
}

TenantLimits TenantLimitTable::For(absl::string_view tenant) const {
  auto it = limits_.find(tenant);
  return it == limits_.end() ? default_ : it->second;
}

absl::StatusOr<std::unique_ptr<QuotaLedger>> QuotaLedger::Create(MemoryStore* store,
                                                                 const std::string& tenants_file) {
  TenantLimitTable limits;
  if (!tenants_file.empty()) {
    absl::StatusOr<TenantLimitTable> loaded = TenantLimitTable::LoadFile(tenants_file);
    if (!loaded.ok()) return loaded.status();
    limits = *std::move(loaded);
  }
  return std::unique_ptr<QuotaLedger>(new QuotaLedger(store, tenants_file, std::move(limits)));
}

absl::Status QuotaLedger::Reload() {
  if (path_.empty()) return absl::OkStatus();
  absl::StatusOr<TenantLimitTable> loaded = TenantLimitTable::LoadFile(path_);
  if (!loaded.ok()) return loaded.status();
  std::lock_guard<std::mutex> lock(mu_);
  limits_ = *std::move(loaded);
  return absl::OkStatus();
}

absl::Status QuotaLedger::CountLocked(const std::string& tenant, Tenant* t) {
  t->sessions.clear();
  t->versions = t->bytes = 0;
  std::string page_token;
  do {
    absl::StatusOr<SessionPage> page = store_->ListSessions(tenant, 1000, page_token);
    if (!page.ok()) return page.status();
    for (const v1::SessionInfo& info : page->sessions) {
      absl::StatusOr<v1::ListVersionsResponse> versions =
          store_->ListVersions(tenant, info.session_id());
      if (!versions.ok()) {
        if (versions.status().code() == absl::StatusCode::kNotFound) continue;  // just expired
        return versions.status();
      }
      SessionUsage usage;
      for (const v1::VersionInfo& v : versions->versions()) {
        ++usage.versions;
        usage.bytes += v.payload_size();
      }
      SetSessionLocked(t, info.session_id(), usage);
    }
    page_token = page->next_page_token;
  } while (!page_token.empty());
  t->counted = true;
  t->counted_at_ms = NowMs();
  return absl::OkStatus();
}

void QuotaLedger::SetSessionLocked(Tenant* t, const std::string& session_id,
                                   std::optional<SessionUsage> usage) {
  auto it = t->sessions.find(session_id);
  if (it != t->sessions.end()) {
    t->versions -= it->second.versions;
    t->bytes -= it->second.bytes;
    if (!usage.has_value()) {
      t->sessions.erase(it);
      return;
    }
    it->second = *usage;
  } else if (usage.has_value()) {
    t->sessions.emplace(session_id, *usage);
  } else {
    return;
  }
  t->versions += usage->versions;
  t->bytes += usage->bytes;
}

absl::Status QuotaLedger::CheckLocked(const std::string& tenant, const Tenant& t,
                                      const TenantLimits& limits, const Reservation& r) const {
  struct Dimension {
    const char* name;
    uint64_t used, reserved, want, limit;
  };
  const Dimension dims[] = {
      {"sessions", t.sessions.size(), t.reserved_sessions, r.sessions, limits.max_sessions},
      {"versions", t.versions, t.reserved_versions, r.versions, limits.max_versions},
      {"bytes", t.bytes, t.reserved_bytes, r.bytes, limits.max_bytes},
  };
  for (const Dimension& d : dims) {
    if (d.limit == 0 || d.want == 0) continue;
    if (d.used + d.reserved + d.want > d.limit) {
      return absl::ResourceExhaustedError(
          absl::StrCat("tenant '", tenant, "' quota: ", d.name, " limit ", d.limit, ", in use ",
                       d.used + d.reserved, ", this write needs ", d.want, " more"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<QuotaLedger::Reservation> QuotaLedger::Reserve(absl::string_view tenant_view,
                                                              absl::string_view session_view,
                                                              bool creates_session,
                                                              uint64_t payload_bytes) {
  Reservation r;
  r.tenant = std::string(tenant_view);
  r.session_id = std::string(session_view);
  std::lock_guard<std::mutex> lock(mu_);
  const TenantLimits limits = limits_.For(r.tenant);
  if (!limits.any()) return r;
  Tenant& t = tenants_[r.tenant];
  if (!t.counted) {
    if (absl::Status s = CountLocked(r.tenant, &t); !s.ok()) return s;
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    // The growth this write causes: a new session; a version (unless retention retires one
    // of this session's); its bytes (less an average retired version's).
    auto it = t.sessions.find(r.session_id);
    const uint32_t kept = store_->options().versions_kept;
    const bool retires = !creates_session && it != t.sessions.end() && it->second.versions >= kept;
    r.sessions = creates_session && it == t.sessions.end() ? 1 : 0;
    r.versions = retires ? 0 : 1;
    const uint64_t retired_bytes = retires ? it->second.bytes / it->second.versions : 0;
    r.bytes = payload_bytes > retired_bytes ? payload_bytes - retired_bytes : 0;
    absl::Status fits = CheckLocked(r.tenant, t, limits, r);
    if (fits.ok()) break;
    // Sessions may have expired since the last count: recount once before refusing.
    if (attempt == 1 || NowMs() - t.counted_at_ms < kRecountIntervalMs) return fits;
    if (absl::Status s = CountLocked(r.tenant, &t); !s.ok()) return s;
  }
  t.reserved_sessions += r.sessions;
  t.reserved_versions += r.versions;
  t.reserved_bytes += r.bytes;
  r.tracked = true;
  return r;
}

void QuotaLedger::Settle(const Reservation& r, bool committed) {
  if (!r.tracked) return;
  // Read the session's real usage (after retention) outside the lock.
  std::optional<SessionUsage> usage;
  bool known = false;
  if (committed) {
    absl::StatusOr<v1::ListVersionsResponse> versions =
        store_->ListVersions(r.tenant, r.session_id);
    if (versions.ok()) {
      usage.emplace();
      for (const v1::VersionInfo& v : versions->versions()) {
        ++usage->versions;
        usage->bytes += v.payload_size();
      }
      known = true;
    } else {
      known = versions.status().code() == absl::StatusCode::kNotFound;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  Tenant& t = tenants_[r.tenant];
  t.reserved_sessions -= r.sessions;
  t.reserved_versions -= r.versions;
  t.reserved_bytes -= r.bytes;
  if (known) {
    SetSessionLocked(&t, r.session_id, usage);
  } else if (committed) {
    t.counted = false;  // could not read it back: recount on the next write
  }
}

void QuotaLedger::Forget(absl::string_view tenant, absl::string_view session_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tenants_.find(tenant);
  if (it != tenants_.end()) SetSessionLocked(&it->second, std::string(session_id), std::nullopt);
}

std::optional<v1::TenantUsage> QuotaLedger::UsageOf(absl::string_view tenant_view) {
  const std::string tenant(tenant_view);
  std::lock_guard<std::mutex> lock(mu_);
  const TenantLimits limits = limits_.For(tenant);
  if (!limits.any()) return std::nullopt;
  Tenant& t = tenants_[tenant];
  if (!t.counted && !CountLocked(tenant, &t).ok()) return std::nullopt;
  v1::TenantUsage usage;
  usage.set_sessions(t.sessions.size());
  usage.set_versions(t.versions);
  usage.set_bytes(t.bytes);
  usage.set_max_sessions(limits.max_sessions);
  usage.set_max_versions(limits.max_versions);
  usage.set_max_bytes(limits.max_bytes);
  return usage;
}

std::string QuotaLedger::RenderPrometheus() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  const char* const kinds[] = {"sessions", "versions", "bytes"};
  for (int k = 0; k < 6; ++k) {
    const bool limit = k % 2 == 1;
    const char* kind = kinds[k / 2];
    absl::StrAppend(&out, "# TYPE kvfold_memory_tenant_", kind, limit ? "_limit" : "", " gauge\n");
    for (const auto& [tenant, t] : tenants_) {
      if (!t.counted) continue;
      const TenantLimits limits = limits_.For(tenant);
      const uint64_t used[] = {t.sessions.size(), t.versions, t.bytes};
      const uint64_t max[] = {limits.max_sessions, limits.max_versions, limits.max_bytes};
      std::string label;  // tenants are printable ASCII; escape what the format requires
      for (char c : tenant) {
        if (c == '"' || c == '\\') label.push_back('\\');
        label.push_back(c);
      }
      absl::StrAppend(&out, "kvfold_memory_tenant_", kind, limit ? "_limit" : "", "{tenant=\"",
                      label, "\"} ", limit ? max[k / 2] : used[k / 2], "\n");
    }
  }
  return out;
}

}  // namespace kvfold::memory_svc
