// A session's geometry: its KV mode and the sizes that bound what it keeps resident
// (docs/contracts.md, "Session geometry"). Engine sessions, the runtime, memory blocks and
// the planner all check it with the one validator below.
#ifndef KVFOLD_CORE_SESSION_GEOMETRY_H_
#define KVFOLD_CORE_SESSION_GEOMETRY_H_

#include <cstdint>

#include "absl/status/status.h"
#include "core/kv_mode.h"

namespace kvfold::core {

// Largest window, sink or chunk a session may ask for (bounds every allocation derived
// from a request).
inline constexpr int64_t kMaxGeometryTokens = int64_t{1} << 24;

struct SessionGeometry {
  KvMode mode = KvMode::kFull;
  int64_t window_size = 0;  // W: visible main entries (sliding, sink, memory; memory_only's
                            // memory_only_window, 0..C); 0 in full mode
  int64_t sink_tokens = 0;  // S: sink and memory modes
  int64_t chunk_size = 0;   // C: tokens folded at a time (memory modes only)
  int64_t mem_slots = 0;    // M: memory vectors (memory modes only; 0 before the first fold)
};

// InvalidArgument (the message names the field and the mode) unless, with every size in
// [0, kMaxGeometryTokens]:
//   full         W = 0, S = 0, C = 0, M = 0
//   sliding      W >= 1, S = 0, C = 0, M = 0
//   sink         W >= 1, S >= 0, C = 0, M = 0
//   memory       W >= 1, S >= 0, C >= 1, M >= 0
//   memory_only  0 <= W <= C, S >= 0, C >= 1, M >= 0
absl::Status ValidateSessionGeometry(const SessionGeometry& geometry);

}  // namespace kvfold::core

#endif  // KVFOLD_CORE_SESSION_GEOMETRY_H_
