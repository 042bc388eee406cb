#include "memory_svc/store/rados_layout.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace kvfold::memory_svc::rados_layout {
namespace {

std::string Hex16(uint64_t v) { return absl::StrFormat("%016x", v); }

// Reads "<decimal length>." then that many bytes; advances `rest`.
std::optional<std::string> TakeCounted(absl::string_view* rest) {
  const size_t dot = rest->find('.');
  if (dot == absl::string_view::npos || dot == 0 || dot > 6) return std::nullopt;
  size_t len = 0;
  if (!absl::SimpleAtoi(rest->substr(0, dot), &len)) return std::nullopt;
  rest->remove_prefix(dot + 1);
  if (rest->size() < len) return std::nullopt;
  std::string out(rest->substr(0, len));
  rest->remove_prefix(len);
  return out;
}

std::optional<uint64_t> TakeHex16(absl::string_view* rest) {
  if (rest->size() < 16) return std::nullopt;
  uint64_t v = 0;
  for (char c : rest->substr(0, 16)) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      return std::nullopt;
    }
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  rest->remove_prefix(16);
  return v;
}

}  // namespace

std::string HeadObject(absl::string_view tenant, absl::string_view session_id) {
  return absl::StrCat("h.", tenant.size(), ".", tenant, ".", session_id);
}

std::string IndexObject(absl::string_view tenant) { return absl::StrCat("t.", tenant); }

std::string PayloadObject(absl::string_view tenant, absl::string_view session_id,
                          uint64_t version, uint64_t nonce) {
  return absl::StrCat("p.", tenant.size(), ".", tenant, ".", session_id.size(), ".", session_id,
                      ".", Hex16(version), ".", Hex16(nonce));
}

std::string VersionKey(uint64_t version) { return absl::StrCat("v", Hex16(version)); }

std::optional<PayloadName> ParsePayloadObject(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, "p.")) return std::nullopt;
  PayloadName out;
  std::optional<std::string> tenant = TakeCounted(&name);
  if (!tenant || !absl::ConsumePrefix(&name, ".")) return std::nullopt;
  std::optional<std::string> session = TakeCounted(&name);
  if (!session || !absl::ConsumePrefix(&name, ".")) return std::nullopt;
  std::optional<uint64_t> version = TakeHex16(&name);
  if (!version || !absl::ConsumePrefix(&name, ".")) return std::nullopt;
  std::optional<uint64_t> nonce = TakeHex16(&name);
  if (!nonce || !name.empty()) return std::nullopt;
  return PayloadName{*std::move(tenant), *std::move(session), *version, *nonce};
}

std::string EncodeVersionEntry(uint64_t nonce, const VersionRecord& record) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(nonce >> (56 - 8 * i));
  out += EncodeVersionRecord(record);
  return out;
}

absl::StatusOr<uint64_t> DecodeVersionNonce(absl::string_view bytes) {
  if (bytes.size() < 8) return absl::DataLossError("version entry is truncated");
  uint64_t nonce = 0;
  for (int i = 0; i < 8; ++i) nonce = (nonce << 8) | static_cast<unsigned char>(bytes[i]);
  return nonce;
}

absl::StatusOr<VersionEntry> DecodeVersionEntry(absl::string_view bytes) {
  absl::StatusOr<uint64_t> nonce = DecodeVersionNonce(bytes);
  if (!nonce.ok()) return nonce.status();
  absl::StatusOr<VersionRecord> record = DecodeVersionRecord(bytes.substr(8));
  if (!record.ok()) return record.status();
  return VersionEntry{*nonce, *std::move(record)};
}

}  // namespace kvfold::memory_svc::rados_layout
