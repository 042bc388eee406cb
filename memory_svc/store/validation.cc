#include "memory_svc/store/validation.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "common/proto_enums.h"
#include "core/block_rules.h"

namespace kvfold::memory_svc {

absl::Status ValidateVersion(uint64_t version, absl::string_view field) {
  if (version > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    // Versions are stored as int64; a value this large is usually a negative number that
    // a client wrote into the uint64 field, so the message shows both readings.
    return absl::InvalidArgumentError(absl::StrCat(
        field, " ", version, " is out of range (at most ", std::numeric_limits<int64_t>::max(),
        "; as a signed number it reads ", static_cast<int64_t>(version), ")"));
  }
  return absl::OkStatus();
}

absl::Status ExpectedPayloadBytes(const v1::MemoryBlockHeader& header, uint64_t* bytes) {
  absl::StatusOr<core::DType> dtype = DTypeFromProto(header.dtype());
  if (!dtype.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("header.dtype: ", dtype.status().message(),
                                                   " (the payload is DTYPE_FP16 or DTYPE_FP32)"));
  }
  absl::StatusOr<uint64_t> total =
      core::BlockPayloadBytes(header.mem_slots(), header.hidden_size(), *dtype);
  if (!total.ok()) return total.status();
  *bytes = *total;
  return absl::OkStatus();
}

absl::Status ValidateBlockHeader(const v1::MemoryBlockHeader& header, uint64_t max_block_bytes) {
  if (header.format_version() != core::kBlockFormatVersion) {
    return absl::InvalidArgumentError(absl::StrCat("header.format_version ",
                                                   header.format_version(), " is not supported (",
                                                   core::kBlockFormatVersion, " is)"));
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

}  // namespace kvfold::memory_svc
