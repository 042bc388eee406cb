// The KV a turn may hold at most, in pool blocks: what admission reserves before the
// turn's first token, so an admitted turn never finds the pool empty (docs/service.md,
// "Admission").
#ifndef KVFOLD_INFERENCE_SVC_RUNTIME_KV_RESERVATION_H_
#define KVFOLD_INFERENCE_SVC_RUNTIME_KV_RESERVATION_H_

#include <cstdint>

#include "inference_svc/runtime/live_session.h"

namespace kvfold::runtime {

struct KvGeometry {
  int block_size = 16;       // entries per pool block
  // Most rows one Forward appends to a sliding/sink window before it drops the ones no
  // later row sees: the scheduler's prefill chunk (a window import feeds at most the
  // window itself).
  int transient_tokens = 256;
  int mem_slots = 0;         // memory modes: M (prefix entries)
  int chunk_size = 0;        // memory modes: C (window holds at most W + C)
};

// Upper bound of the blocks a session of `spec` holds while `tokens_after_turn` tokens
// (resident now + prompt + max_new_tokens) pass through it, `prompt_tokens` of them as
// prefill: full keeps all of them; sliding W plus one forward's rows (the smaller of the
// prompt and transient_tokens, at least 1); sink S + the same; memory M + W + C;
// memory_only M + C. Each segment counts a partial block at either end. Saturates at
// INT32_MAX.
int ReserveBlocks(const SessionSpec& spec, const KvGeometry& geometry, int64_t tokens_after_turn,
                  int64_t prompt_tokens);

// Upper bound of the blocks an idle session with `resident_tokens` entries holds.
int HeldBlocks(const KvGeometry& geometry, int64_t resident_tokens);

}  // namespace kvfold::runtime

#endif  // KVFOLD_INFERENCE_SVC_RUNTIME_KV_RESERVATION_H_
