// Session state <-> memory block for the service: the engine's SessionState plus the
// sampler state (defaults + RNG words) and the fingerprints, through kvfold::memory's block
// primitives (memory_block.h: payload encoding, sealing, validation).
#ifndef KVFOLD_INFERENCE_SVC_SERVICE_SESSION_CODEC_H_
#define KVFOLD_INFERENCE_SVC_SERVICE_SESSION_CODEC_H_

#include <string>

#include "absl/status/statusor.h"
#include "inference_svc/engine/session.h"
#include "inference_svc/memory/memory_block.h"
#include "kvfold/v1/common.pb.h"

namespace kvfold::service {

engine::KvMode FromProtoMode(v1::KvMode mode);  // UNSPECIFIED -> kFull (callers resolve first)
v1::KvMode ToProtoMode(engine::KvMode mode);
bool IsMemoryMode(v1::KvMode mode);

// A sealed block (checksum set). payload dtype fp16.
absl::StatusOr<memory::MemoryBlock> EncodeSessionBlock(const engine::SessionState& state,
                                                       const v1::SamplerState& sampler,
                                                       const std::string& model_fingerprint,
                                                       const std::string& projector_fingerprint,
                                                       int hidden_size);

// Validates the block against `expected` (DATA_LOSS / FAILED_PRECONDITION /
// INVALID_ARGUMENT, see memory::ValidateMemoryBlock) and returns the state to import.
absl::StatusOr<engine::SessionState> DecodeSessionBlock(const memory::MemoryBlock& block,
                                                        const memory::BlockExpectations& expected);

}  // namespace kvfold::service

#endif  // KVFOLD_INFERENCE_SVC_SERVICE_SESSION_CODEC_H_
