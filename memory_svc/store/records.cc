#include "memory_svc/store/records.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/checksum.h"

namespace kvfold::memory_svc {
namespace {

void PutU64(std::string* out, uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) out->push_back(static_cast<char>(v >> shift));
}

void PutU32(std::string* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<char>(v >> shift));
}

// Reads big-endian integers from a byte view; any overrun latches `ok = false`.
class Reader {
 public:
  explicit Reader(absl::string_view bytes) : bytes_(bytes) {}
  uint64_t U64() { return Read(8); }
  uint32_t U32() { return static_cast<uint32_t>(Read(4)); }
  bool ok() const { return ok_; }
  size_t pos() const { return pos_; }

 private:
  uint64_t Read(size_t n) {
    if (!ok_ || bytes_.size() - pos_ < n) {
      ok_ = false;
      return 0;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v = (v << 8) | static_cast<unsigned char>(bytes_[pos_ + i]);
    pos_ += n;
    return v;
  }
  absl::string_view bytes_;
  size_t pos_ = 0;
  bool ok_ = true;
};

constexpr char kMetaMagic[2] = {'S', 0x01};
constexpr char kVersionMagic[2] = {'V', 0x01};

}  // namespace

std::string SessionKey(absl::string_view tenant, absl::string_view session_id) {
  std::string key;
  key.reserve(tenant.size() + 1 + session_id.size());
  key.append(tenant.data(), tenant.size()).push_back('\0');
  key.append(session_id.data(), session_id.size());
  return key;
}

std::string TenantPrefix(absl::string_view tenant) {
  std::string key(tenant.data(), tenant.size());
  key.push_back('\0');
  return key;
}

std::string VersionPrefix(absl::string_view tenant, absl::string_view session_id) {
  std::string key = SessionKey(tenant, session_id);
  key.push_back('\0');
  return key;
}

std::string VersionPrefixEnd(absl::string_view tenant, absl::string_view session_id) {
  std::string key = SessionKey(tenant, session_id);
  key.push_back('\x01');
  return key;
}

std::string VersionKey(absl::string_view tenant, absl::string_view session_id, uint64_t version) {
  std::string key = VersionPrefix(tenant, session_id);
  PutU64(&key, version);
  return key;
}

bool SessionMeta::HasVersion(uint64_t version) const {
  return std::binary_search(versions.begin(), versions.end(), version);
}

bool SessionMeta::IsPinned(uint64_t version) const {
  return std::binary_search(pinned.begin(), pinned.end(), version);
}

std::string EncodeSessionMeta(const SessionMeta& meta) {
  std::string out(kMetaMagic, 2);
  PutU64(&out, meta.head_version);
  PutU64(&out, meta.latest_version);
  PutU64(&out, static_cast<uint64_t>(meta.created_unix_ms));
  PutU64(&out, static_cast<uint64_t>(meta.updated_unix_ms));
  PutU64(&out, meta.total_tokens);
  PutU32(&out, static_cast<uint32_t>(meta.versions.size()));
  for (uint64_t v : meta.versions) PutU64(&out, v);
  PutU32(&out, static_cast<uint32_t>(meta.pinned.size()));
  for (uint64_t v : meta.pinned) PutU64(&out, v);
  PutU64(&out, Xxh3(out.data(), out.size()));
  return out;
}

absl::StatusOr<SessionMeta> DecodeSessionMeta(absl::string_view bytes) {
  if (bytes.size() < 2 + 8 || bytes.substr(0, 2) != absl::string_view(kMetaMagic, 2)) {
    return absl::DataLossError("session record: unknown format");
  }
  absl::string_view body = bytes.substr(0, bytes.size() - 8);
  Reader tail(bytes.substr(bytes.size() - 8));
  if (tail.U64() != Xxh3(body.data(), body.size())) {
    return absl::DataLossError("session record: checksum mismatch");
  }
  Reader r(body.substr(2));
  SessionMeta meta;
  meta.head_version = r.U64();
  meta.latest_version = r.U64();
  meta.created_unix_ms = static_cast<int64_t>(r.U64());
  meta.updated_unix_ms = static_cast<int64_t>(r.U64());
  meta.total_tokens = r.U64();
  const uint32_t num_versions = r.U32();
  for (uint32_t i = 0; r.ok() && i < num_versions; ++i) meta.versions.push_back(r.U64());
  const uint32_t num_pinned = r.U32();
  for (uint32_t i = 0; r.ok() && i < num_pinned; ++i) meta.pinned.push_back(r.U64());
  if (!r.ok() || r.pos() != body.size() - 2) {
    return absl::DataLossError("session record: truncated or trailing bytes");
  }
  return meta;
}

std::string EncodeVersionRecord(const VersionRecord& record) {
  std::string out(kVersionMagic, 2);
  PutU64(&out, static_cast<uint64_t>(record.created_unix_ms));
  record.header.AppendToString(&out);
  return out;
}

absl::StatusOr<VersionRecord> DecodeVersionRecord(absl::string_view bytes) {
  if (bytes.size() < 10 || bytes.substr(0, 2) != absl::string_view(kVersionMagic, 2)) {
    return absl::DataLossError("version record: unknown format");
  }
  VersionRecord record;
  Reader r(bytes.substr(2, 8));
  record.created_unix_ms = static_cast<int64_t>(r.U64());
  const absl::string_view header_bytes = bytes.substr(10);
  if (!record.header.ParseFromArray(header_bytes.data(), static_cast<int>(header_bytes.size()))) {
    return absl::DataLossError("version record: header does not parse");
  }
  return record;
}

std::vector<uint64_t> RetentionVictims(const SessionMeta& meta, uint32_t versions_kept) {
  std::vector<uint64_t> victims;
  const size_t n = meta.versions.size();
  const size_t keep_from = n > versions_kept ? n - versions_kept : 0;
  for (size_t i = 0; i < keep_from; ++i) {
    const uint64_t v = meta.versions[i];
    if (v != meta.head_version && !meta.IsPinned(v)) victims.push_back(v);
  }
  return victims;
}

}  // namespace kvfold::memory_svc
