#include "memory_svc/store/validation.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace kvfold::memory {
namespace {

absl::Status ValidateName(absl::string_view value, absl::string_view what, bool allow_space) {
  if (value.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " is empty"));
  if (value.size() > kMaxSessionIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is ", value.size(),
                                                   " bytes; the limit is ", kMaxSessionIdBytes));
  }
  for (size_t i = 0; i < value.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(value[i]);
    const bool ok = c <= 0x7e && (c > 0x20 || (allow_space && c == 0x20));
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " has a non-printable character (byte 0x", absl::Hex(c), ") at offset ", i));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateSessionId(absl::string_view session_id) {
  return ValidateName(session_id, "session id", /*allow_space=*/true);
}

absl::Status ValidateTenant(absl::string_view tenant) {
  return ValidateName(tenant, "tenant", /*allow_space=*/false);
}

absl::Status ValidateVersion(uint64_t version, absl::string_view field) {
  if (version > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " ", static_cast<int64_t>(version), " is negative"));
  }
  return absl::OkStatus();
}

absl::Status ExpectedPayloadBytes(const v1::MemoryBlockHeader& header, uint64_t* bytes) {
  const unsigned __int128 elements =
      static_cast<unsigned __int128>(header.mem_slots()) * header.hidden_size();
  unsigned __int128 total = 0;
  switch (header.dtype()) {
    case v1::DTYPE_UNSPECIFIED:
    case v1::DTYPE_FP16:
    case v1::DTYPE_BF16: total = elements * 2; break;
    case v1::DTYPE_FP32: total = elements * 4; break;
    case v1::DTYPE_FP8:
    case v1::DTYPE_INT8: total = elements; break;
    case v1::DTYPE_INT4: total = (elements + 1) / 2; break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("header.dtype ", header.dtype(), " is unknown"));
  }
  if (total > std::numeric_limits<uint64_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "header mem_slots ", header.mem_slots(), " x hidden_size ", header.hidden_size(), " x ",
        v1::Dtype_Name(header.dtype()), " overflows 64 bits"));
  }
  *bytes = static_cast<uint64_t>(total);
  return absl::OkStatus();
}

absl::Status ValidateBlockHeader(const v1::MemoryBlockHeader& header, uint64_t max_block_bytes) {
  if (header.format_version() != kBlockFormatVersion) {
    return absl::InvalidArgumentError(absl::StrCat("header.format_version ",
                                                   header.format_version(), " is not supported (",
                                                   kBlockFormatVersion, " is)"));
  }
  uint64_t expected = 0;
  if (absl::Status s = ExpectedPayloadBytes(header, &expected); !s.ok()) return s;
  if (header.payload_size() != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "header.payload_size ", header.payload_size(), " disagrees with mem_slots ",
        header.mem_slots(), " x hidden_size ", header.hidden_size(), " x ",
        v1::Dtype_Name(header.dtype()), " = ", expected, " bytes"));
  }
  // The limit bounds what the block costs the store: the header (which lists a full-mode
  // session's history and can dwarf the payload) plus the payload.
  const uint64_t header_bytes = header.ByteSizeLong();
  if (header.payload_size() > max_block_bytes ||
      header_bytes > max_block_bytes - header.payload_size()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "block of ", header_bytes, " header + ", header.payload_size(),
        " payload bytes exceeds the store's limit of ", max_block_bytes, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace kvfold::memory
