// KV-cache capacity planner: bytes per token, resident KV per kvfold mode, and how many
// sessions fit in a GPU's KV pool under the admission policy. Formulas: docs/planner.md.
//
//   bytes = 2 (K and V) * L * B * T * Hkv * D * s,   B = batch_size * num_beams
//
// Every number is an exact uint64 (element sizes below 1 byte are handled per group, see
// DtypeInfo); any overflow is InvalidArgument.
#ifndef KVFOLD_INFERENCE_SVC_PLANNER_KV_PLANNER_H_
#define KVFOLD_INFERENCE_SVC_PLANNER_KV_PLANNER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/dtype.h"
#include "core/kv_mode.h"
#include "inference_svc/planner/model_spec.h"

namespace kvfold::planner {

// Dtypes and modes are the shared vocabulary (core/dtype.h, core/kv_mode.h: one enum and
// one name table each).
using core::DType;
using core::KvMode;

// Weights in int8/int4 carry one fp16 scale per group of kQuantGroup consecutive
// parameters (the flat parameter list); fp8 (e4m3) uses per-tensor scales, a constant few
// bytes not counted. KV caches follow the engine's pool layout (core/kv_bytes.h).
inline constexpr uint64_t kQuantGroup = 32;
inline constexpr uint64_t kQuantScaleBytes = 2;  // fp16 scale

struct PlanOptions {
  uint64_t batch_size = 1;            // independent sequences per request.  Default: 1
  uint64_t num_beams = 1;             // beams per sequence.                Default: 1
  DType kv_dtype = DType::kF16;       // Default: f16
  DType weight_dtype = DType::kBF16;  // Default: bf16
  // Window W of sliding / sink / memory modes. 0 = the model's sliding_window if it has
  // one, else 1024.
  uint64_t window_size = 0;
  uint64_t sink_tokens = 4;   // S, sink mode.          Default: 4
  uint64_t mem_slots = 96;    // M, memory modes.       Default: 96
  uint64_t chunk_size = 256;  // C, memory modes.       Default: 256
  // Capacity: 0 = no capacity answer.
  uint64_t gpu_memory_bytes = 0;
  // Activation / workspace reserve. 0 = reserve_percent of gpu_memory_bytes.
  uint64_t activation_reserve_bytes = 0;
  uint64_t reserve_percent = 10;  // Default: 10 (% of GPU memory)
};

// Fills defaults (window from the model) and checks every field: InvalidArgument for zero
// batch/beams/sink/mem_slots/chunk or reserve_percent >= 100.
absl::StatusOr<PlanOptions> ResolveOptions(const ModelSpec& model, PlanOptions options);

// KV bytes one token adds for one sequence, all layers, K and V: core::KvBytesPerToken
// of the model (kv_dim = Hkv * D) in the engine's default pool layout (blocks of 16
// tokens, int8/int4 value scales per 32 channels). Float dtypes: 2 * L * Hkv * D * bytes.
// InvalidArgument for a dtype that is not a KV dtype (q8, int32) or on overflow.
absl::StatusOr<uint64_t> KvBytesPerToken(const ModelSpec& model, DType kv_dtype);

// params * bits / 8 (+ ceil(params / 32) fp16 scales for int8/int4), rounded up.
absl::StatusOr<uint64_t> WeightBytes(uint64_t parameter_count, DType weight_dtype);

struct ModeEstimate {
  KvMode mode = KvMode::kFull;
  uint64_t context_tokens = 0;   // T
  uint64_t window_tokens = 0;    // main-segment tokens resident (peak) per sequence
  uint64_t prefix_tokens = 0;    // sink tokens or memory slots resident per sequence
  uint64_t resident_tokens = 0;  // window_tokens + prefix_tokens
  uint64_t bytes_per_token = 0;  // per sequence
  uint64_t kv_bytes = 0;         // resident_tokens * bytes_per_token * B
  uint64_t memory_kv_bytes =
      0;  // M * bytes_per_token per sequence (memory modes, after the first fold)
  uint64_t memory_block_bytes = 0;  // M * hidden_size * 2 per sequence (memory modes)
  uint64_t session_bytes = 0;       // kv_bytes + B * memory_block_bytes: what admission reserves
  uint64_t full_kv_bytes = 0;       // full mode's kv_bytes at the same T (saturates at 2^64-1)
  uint64_t folds = 0;               // folds a session of T tokens has done (memory modes)
  // Extra prefill tokens per token caused by folds: W / C in memory mode once folding has
  // started (T >= W + C); 0 before that, in memory_only (W = 0) and in the other modes.
  double fold_prefill_tokens_per_token = 0;
  // Memory expansion after each fold: M tokens per C tokens (memory modes, once folding).
  double memory_expand_tokens_per_token = 0;
  // Capacity (0 without GPU memory): sessions of context T admitted before the pool
  // reaches each admission threshold (see admission.h): < 70 % (unthrottled), < 85 %,
  // < 95 % (sessions_fit: the most the policy admits).
  uint64_t sessions_unthrottled = 0;
  uint64_t sessions_before_single_beam = 0;
  uint64_t sessions_fit = 0;
  bool exceeds_max_position = false;  // T > the model's max_position_embeddings
};

struct Plan {
  ModelSpec model;
  PlanOptions options;  // resolved
  uint64_t parameter_count = 0;
  uint64_t weight_bytes = 0;
  uint64_t bytes_per_token = 0;  // per sequence
  uint64_t activation_reserve_bytes = 0;
  uint64_t kv_pool_bytes = 0;           // gpu - weights - reserve (0 if they do not fit)
  bool weights_fit = true;              // false: weights + reserve exceed the GPU memory
  std::vector<ModeEstimate> estimates;  // contexts-major order: for each T, each mode
};

// The estimate for one mode at context T (> 0). InvalidArgument on T == 0 or overflow.
absl::StatusOr<ModeEstimate> EstimateMode(const ModelSpec& model, const PlanOptions& resolved,
                                          KvMode mode, uint64_t context_tokens);

// The whole plan. `options` is resolved here; contexts and modes must be non-empty.
absl::StatusOr<Plan> MakePlan(const ModelSpec& model, const PlanOptions& options,
                              const std::vector<uint64_t>& contexts,
                              const std::vector<KvMode>& modes);

}  // namespace kvfold::planner

#endif  // KVFOLD_INFERENCE_SVC_PLANNER_KV_PLANNER_H_
