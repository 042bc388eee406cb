#include "inference_svc/service/session_codec.h"

#include "inference_svc/memory/session_block.h"

namespace kvfold::service {

engine::KvMode FromProtoMode(v1::KvMode mode) {
  auto m = memory::FromProtoMode(mode);
  return m.ok() ? *m : engine::KvMode::kFull;
}

v1::KvMode ToProtoMode(engine::KvMode mode) { return memory::ToProtoMode(mode); }

bool IsMemoryMode(v1::KvMode mode) {
  return mode == v1::KV_MODE_MEMORY || mode == v1::KV_MODE_MEMORY_ONLY;
}

absl::StatusOr<memory::MemoryBlock> EncodeSessionBlock(const engine::SessionState& state,
                                                       const v1::SamplerState& sampler,
                                                       const std::string& model_fingerprint,
                                                       const std::string& projector_fingerprint,
                                                       int hidden_size) {
  memory::BlockIdentity identity;
  identity.model_fingerprint = model_fingerprint;
  identity.hidden_size = hidden_size;
  identity.projector_fingerprint = projector_fingerprint;
  return memory::ExportSessionBlock(state, identity, sampler, v1::DTYPE_FP16);
}

absl::StatusOr<engine::SessionState> DecodeSessionBlock(const memory::MemoryBlock& block,
                                                        const memory::BlockExpectations& expected) {
  return memory::ImportSessionBlock(block, expected, nullptr);
}

}  // namespace kvfold::service
