// Session state <-> memory block, for every KV mode: what the service writes to
// memory_svc after each turn and reads back on any replica (docs/memory-block.md).
//
//   export: session->ExportState() + sampler -> ExportSessionBlock -> MemoryBlock
//   import: ValidateMemoryBlock + decode -> ImportSessionBlock -> SessionState (+ sampler)
//           -> fresh session (CreateSession, same mode) -> ImportState -> continues
#ifndef KVFOLD_INFERENCE_SVC_MEMORY_SESSION_BLOCK_H_
#define KVFOLD_INFERENCE_SVC_MEMORY_SESSION_BLOCK_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "inference_svc/engine/engine.h"
#include "inference_svc/engine/sampler.h"
#include "inference_svc/engine/session.h"
#include "inference_svc/memory/memory_block.h"
#include "inference_svc/memory/projector.h"
#include "kvfold/v1/common.pb.h"

namespace kvfold::memory {

// Sampler parameters + RNG words <-> SamplerState.
v1::SamplerState SamplerStateToProto(const engine::SamplingParams& params,
                                     const std::array<uint64_t, 4>& rng_state);
// INVALID_ARGUMENT when rng_state does not hold exactly 4 words (or all are zero, which
// xoshiro256** cannot leave) or the parameters are invalid.
absl::Status SamplerStateFromProto(const v1::SamplerState& proto, engine::SamplingParams* params,
                                   std::array<uint64_t, 4>* rng_state);

// Who wrote the block.
struct BlockIdentity {
  std::string model_fingerprint;
  int hidden_size = 0;
  std::string projector_fingerprint;  // memory modes only; ignored for plain modes
};

// Builds and seals the block for `state`. `dtype`: DTYPE_FP16 (default) or DTYPE_FP32.
// INVALID_ARGUMENT for another dtype or an inconsistent state.
absl::StatusOr<MemoryBlock> ExportSessionBlock(const engine::SessionState& state,
                                               const BlockIdentity& identity,
                                               const v1::SamplerState& sampler,
                                               v1::Dtype dtype = v1::DTYPE_FP16);

// ValidateMemoryBlock (all its codes) then the SessionState to ImportState into a fresh
// session; `sampler` (optional) receives the sampler state.
absl::StatusOr<engine::SessionState> ImportSessionBlock(const MemoryBlock& block,
                                                        const BlockExpectations& expected,
                                                        v1::SamplerState* sampler = nullptr);

// The identity this replica writes into blocks / the expectations it reads them with.
// `projector` may be null (a replica without memory modes).
BlockIdentity IdentityFor(const engine::Engine& engine, const Projector* projector);
BlockExpectations ExpectationsFor(const engine::Engine& engine, const Projector* projector);

}  // namespace kvfold::memory

#endif  // KVFOLD_INFERENCE_SVC_MEMORY_SESSION_BLOCK_H_
