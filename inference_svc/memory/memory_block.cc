#include "inference_svc/memory/memory_block.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "common/block_checksum.h"
#include "common/fp16.h"
#include "common/proto_enums.h"
#include "core/session_geometry.h"

namespace kvfold::memory {
namespace {

constexpr char kFileMagic[4] = {'K', 'V', 'F', 'B'};
constexpr uint32_t kFileVersion = 1;

void PutLe32(uint32_t v, std::string* out) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t GetLe32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

absl::Status CheckIds(const google::protobuf::RepeatedField<int32_t>& ids, int vocab_size,
                      const char* what) {
  for (int32_t id : ids) {
    if (id < 0 || (vocab_size > 0 && id >= vocab_size)) {
      return absl::InvalidArgumentError(
          absl::StrCat("memory block: ", what, " token id ", id, " out of range"));
    }
  }
  return absl::OkStatus();
}

// The session geometry (core::ValidateSessionGeometry), then the mode-specific limits on
// the ids and the memory.
absl::Status CheckGeometry(const v1::MemoryBlockHeader& h, const BlockExpectations& expected) {
  absl::StatusOr<core::KvMode> mode = KvModeFromProto(h.kv_mode());
  if (!mode.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("memory block: ", mode.status().message()));
  }
  const core::SessionGeometry geometry{.mode = *mode,
                                       .window_size = h.window_size(),
                                       .sink_tokens = h.sink_tokens(),
                                       .chunk_size = h.chunk_size(),
                                       .mem_slots = h.mem_slots()};
  if (absl::Status s = core::ValidateSessionGeometry(geometry); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("memory block: ", s.message()));
  }
  const uint64_t window_ids = static_cast<uint64_t>(h.window_token_ids_size());
  if (!core::IsMemoryMode(*mode) && h.tokens_folded() != 0) {
    return absl::InvalidArgumentError("memory block: a plain-mode block carries memory");
  }
  if (*mode != core::KvMode::kSink && !core::IsMemoryMode(*mode) && h.sink_token_ids_size() != 0) {
    return absl::InvalidArgumentError("memory block: sink ids outside sink and memory modes");
  }
  if (static_cast<uint64_t>(h.sink_token_ids_size()) > h.sink_tokens()) {
    return absl::InvalidArgumentError("memory block: more sink ids than sink_tokens");
  }
  switch (h.kv_mode()) {
    case v1::KV_MODE_FULL:
      break;
    case v1::KV_MODE_SLIDING:
    case v1::KV_MODE_SINK:
      if (window_ids > h.window_size()) {
        return absl::InvalidArgumentError(absl::StrCat("memory block: ", window_ids,
                                                       " window ids for window_size ", h.window_size()));
      }
      break;
    case v1::KV_MODE_MEMORY:
    case v1::KV_MODE_MEMORY_ONLY: {
      if (expected.projector_fingerprint.empty()) {
        return absl::FailedPreconditionError(
            "memory block: a memory-mode session needs a projector; this replica has none");
      }
      if (h.projector_fingerprint() != expected.projector_fingerprint) {
        return absl::FailedPreconditionError(absl::StrCat(
            "memory block: made with projector ", h.projector_fingerprint(),
            ", this replica runs projector ", expected.projector_fingerprint));
      }
      if (h.mem_slots() != 0 && h.mem_slots() != static_cast<uint32_t>(expected.projector_mem_slots)) {
        return absl::FailedPreconditionError(absl::StrCat("memory block: mem_slots ", h.mem_slots(),
                                                          " != projector mem_slots ",
                                                          expected.projector_mem_slots));
      }
      if (window_ids > uint64_t{h.window_size()} + h.chunk_size()) {
        return absl::InvalidArgumentError(absl::StrCat("memory block: ", window_ids,
                                                       " window ids exceed W + C = ",
                                                       uint64_t{h.window_size()} + h.chunk_size()));
      }
      if (h.tokens_folded() % h.chunk_size() != 0 || (h.tokens_folded() > 0) != (h.mem_slots() > 0)) {
        return absl::InvalidArgumentError(absl::StrCat("memory block: tokens_folded ", h.tokens_folded(),
                                                       " inconsistent with chunk_size ", h.chunk_size(),
                                                       " and mem_slots ", h.mem_slots()));
      }
      // Memory modes keep their S sink ids (the projector's sink_tokens) besides the window.
      if (h.total_tokens() != h.tokens_folded() + window_ids + h.sink_token_ids_size()) {
        return absl::InvalidArgumentError(
            "memory block: total_tokens != tokens_folded + window + sinks");
      }
      break;
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat("memory block: unknown kv_mode ", h.kv_mode()));
  }
  if (h.total_tokens() < h.tokens_folded() + window_ids + h.sink_token_ids_size()) {
    return absl::InvalidArgumentError("memory block: total_tokens smaller than the tokens it holds");
  }
  return absl::OkStatus();
}

}  // namespace

int PayloadElementBytes(v1::Dtype dtype) {
  absl::StatusOr<core::DType> d = DTypeFromProto(dtype);
  if (!d.ok() || !core::IsBlockPayloadDType(*d)) return 0;
  return static_cast<int>(core::DTypeSize(*d));
}

absl::StatusOr<std::string> EncodeMemoryPayload(std::span<const float> memory, v1::Dtype dtype) {
  const int elem = PayloadElementBytes(dtype);
  if (elem == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory block: payload dtype ", v1::Dtype_Name(dtype), " is not supported"));
  }
  std::string out(memory.size() * elem, '\0');
  for (size_t i = 0; i < memory.size(); ++i) {
    uint32_t bits;
    if (elem == 2) {
      bits = Fp32ToFp16(memory[i]);
    } else {
      std::memcpy(&bits, &memory[i], 4);
    }
    for (int b = 0; b < elem; ++b) out[i * elem + b] = static_cast<char>((bits >> (8 * b)) & 0xff);
  }
  return out;
}

void SealMemoryBlock(MemoryBlock* block) {
  block->header.set_format_version(kMemoryBlockFormatVersion);
  if (block->header.has_turn()) {
    block->header.mutable_turn()->set_checksum(TurnRecordChecksum(block->header.turn()));
  }
  block->header.set_payload_size(block->payload.size());
  block->header.set_checksum(0);
  block->header.set_checksum(BlockChecksum(block->header, block->payload));
}

absl::Status ValidateMemoryBlock(const v1::MemoryBlockHeader& h, std::string_view payload,
                                 const BlockExpectations& expected) {
  if (payload.size() != h.payload_size()) {
    return absl::DataLossError(absl::StrCat("memory block: payload is ", payload.size(),
                                            " bytes, header says ", h.payload_size()));
  }
  // A format this reader does not know is refused by its version, before the checksum,
  // which a later format may compute over fields this reader cannot see.
  if (h.format_version() != kMemoryBlockFormatVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("memory block: unsupported format_version ", h.format_version()));
  }
  if (BlockChecksum(h, payload) != h.checksum()) {
    return absl::DataLossError("memory block: checksum mismatch");
  }
  if (!TurnRecordIntact(h)) {
    return absl::DataLossError("memory block: the turn record fails its checksum");
  }
  if (h.model_fingerprint() != expected.model_fingerprint) {
    return absl::FailedPreconditionError(absl::StrCat("memory block: made for model ",
                                                      h.model_fingerprint(), ", this replica runs ",
                                                      expected.model_fingerprint));
  }
  if (h.hidden_size() != static_cast<uint32_t>(expected.hidden_size)) {
    return absl::FailedPreconditionError(absl::StrCat("memory block: hidden_size ", h.hidden_size(),
                                                      " != model hidden_size ", expected.hidden_size));
  }
  const int elem = PayloadElementBytes(h.dtype());
  if (elem == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory block: unsupported payload dtype ", v1::Dtype_Name(h.dtype())));
  }
  absl::StatusOr<uint64_t> payload_bytes =
      core::BlockPayloadBytes(h.mem_slots(), h.hidden_size(), DTypeFromProto(h.dtype()).value());
  if (!payload_bytes.ok()) return payload_bytes.status();
  const uint64_t expected_payload = *payload_bytes;
  if (expected_payload != h.payload_size()) {
    return absl::InvalidArgumentError(absl::StrCat("memory block: payload_size ", h.payload_size(),
                                                   " != mem_slots x hidden_size x ", elem, " = ",
                                                   expected_payload));
  }
  if (auto s = CheckGeometry(h, expected); !s.ok()) return s;
  if (auto s = CheckIds(h.window_token_ids(), expected.vocab_size, "window"); !s.ok()) return s;
  if (auto s = CheckIds(h.sink_token_ids(), expected.vocab_size, "sink"); !s.ok()) return s;
  auto memory = DecodeMemoryPayload(h, payload);
  if (!memory.ok()) return memory.status();
  for (float v : *memory) {
    if (!std::isfinite(v)) return absl::InvalidArgumentError("memory block: non-finite memory value");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> DecodeMemoryPayload(const v1::MemoryBlockHeader& h,
                                                       std::string_view payload) {
  const int elem = PayloadElementBytes(h.dtype());
  const uint64_t count = uint64_t{h.mem_slots()} * h.hidden_size();
  if (elem == 0 || count * elem != payload.size()) {
    return absl::InvalidArgumentError("memory block: payload does not match mem_slots x hidden_size");
  }
  std::vector<float> out(count);
  for (uint64_t i = 0; i < count; ++i) {
    uint32_t bits = 0;
    for (int b = elem - 1; b >= 0; --b) bits = (bits << 8) | static_cast<uint8_t>(payload[i * elem + b]);
    if (elem == 2) {
      out[i] = Fp16ToFp32(static_cast<uint16_t>(bits));
    } else {
      std::memcpy(&out[i], &bits, 4);
    }
  }
  return out;
}

std::string SerializeMemoryBlock(const MemoryBlock& block) {
  // The header as stored (checksum included), deterministically serialized.
  std::string header;
  {
    google::protobuf::io::StringOutputStream raw(&header);
    google::protobuf::io::CodedOutputStream coded(&raw);
    coded.SetSerializationDeterministic(true);
    block.header.SerializeToCodedStream(&coded);
  }
  std::string out(kFileMagic, 4);
  PutLe32(kFileVersion, &out);
  PutLe32(static_cast<uint32_t>(header.size()), &out);
  out += header;
  out += block.payload;
  return out;
}

absl::StatusOr<MemoryBlock> ParseMemoryBlock(std::string_view bytes) {
  const size_t magic_len = std::min<size_t>(4, bytes.size());
  if (bytes.substr(0, magic_len) != std::string_view(kFileMagic, magic_len)) {
    return absl::InvalidArgumentError("memory block file: bad magic (expected KVFB)");
  }
  if (bytes.size() < 12) return absl::DataLossError("memory block file: truncated");
  const uint32_t version = GetLe32(bytes.data() + 4);
  if (version != kFileVersion) {
    return absl::InvalidArgumentError(absl::StrCat("memory block file: unknown version ", version));
  }
  const uint64_t header_len = GetLe32(bytes.data() + 8);
  if (header_len > bytes.size() - 12) return absl::DataLossError("memory block file: truncated header");
  MemoryBlock block;
  if (!block.header.ParseFromArray(bytes.data() + 12, static_cast<int>(header_len))) {
    return absl::DataLossError("memory block file: unparsable header");
  }
  const uint64_t rest = bytes.size() - 12 - header_len;
  if (block.header.payload_size() != rest) {
    return absl::DataLossError(absl::StrCat("memory block file: ", rest,
                                            " payload bytes, header says ",
                                            block.header.payload_size()));
  }
  block.payload.assign(bytes.substr(12 + header_len));
  return block;
}

}  // namespace kvfold::memory
