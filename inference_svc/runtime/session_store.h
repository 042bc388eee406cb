// What the runtime needs from durable storage, in engine types: the head version of a
// session, the checkpoint at a version, and a compare-and-set commit. The replica's
// implementation (inference_svc/service/store_sessions.h) speaks to kvfold-memory and
// converts checkpoints to and from memory blocks (docs/memory-block.md).
#ifndef KVFOLD_INFERENCE_SVC_RUNTIME_SESSION_STORE_H_
#define KVFOLD_INFERENCE_SVC_RUNTIME_SESSION_STORE_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "inference_svc/engine/session.h"
#include "inference_svc/runtime/sampling.h"

namespace kvfold::runtime {

// Who a call acts for. The store scopes every call by `store_credential` (the bearer token
// forwarded to it, "" = none); `tenant` is what the front resolved locally. Cached state is
// keyed by both (Runtime::CacheKey), so it never crosses identities.
struct Caller {
  std::string tenant;
  std::string store_credential;
};

// What the turn that wrote a version produced (MemoryBlockHeader.turn), kept for an API
// that shows the turn again. Not part of the session state: a checkpoint restores alike
// with or without it.
struct TurnRecord {
  std::string front_record;  // the front's own record of the turn, opaque here
  uint32_t prompt_tokens = 0;
  uint32_t cached_prompt_tokens = 0;
  uint32_t generated_tokens = 0;
  uint32_t tokens_folded = 0;
  std::string finish_reason;  // "stop" or "length"
  std::string replica;        // the replica that ran the turn
};

// A session's durable state: the engine state plus the sampler (the session's default
// sampling and the RNG words, so a resumed session draws what the uninterrupted one would).
// `turn`: the record of the turn that writes it, kept with the version when its front
// keeps one (Commit); Load leaves it empty (a restore does not need it).
struct Checkpoint {
  engine::SessionState state;
  SamplingSpec sampling;
  std::array<uint64_t, 4> rng_state{};
  std::optional<TurnRecord> turn;
};

class SessionStore {
 public:
  virtual ~SessionStore() = default;

  // The head version (>= 1). NOT_FOUND for an unknown session (or another tenant's);
  // UNAVAILABLE when the store cannot be reached.
  virtual absl::StatusOr<uint64_t> HeadVersion(const Caller& caller,
                                               const std::string& session_id) = 0;
  // The checkpoint stored at `version`, verified for this replica: DATA_LOSS for a corrupt
  // block, FAILED_PRECONDITION for one made for another model or projector.
  virtual absl::StatusOr<Checkpoint> Load(const Caller& caller, const std::string& session_id,
                                          uint64_t version) = 0;
  // Writes a new version if the head still equals `expected_head` (0 = create the session).
  // Returns the new version; ABORTED when the head moved, ALREADY_EXISTS when creating an
  // id that exists.
  virtual absl::StatusOr<uint64_t> Commit(const Caller& caller, const std::string& session_id,
                                          uint64_t expected_head,
                                          const Checkpoint& checkpoint) = 0;
};

}  // namespace kvfold::runtime

#endif  // KVFOLD_INFERENCE_SVC_RUNTIME_SESSION_STORE_H_
