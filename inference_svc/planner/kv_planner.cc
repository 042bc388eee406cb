#include "inference_svc/planner/kv_planner.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/block_rules.h"
#include "core/kv_bytes.h"
#include "inference_svc/planner/admission.h"
#include "inference_svc/planner/checked_math.h"

namespace kvfold::planner {
namespace {

constexpr uint64_t kDefaultWindow = 1024;

// Bytes of n weights of `dtype`: packed data rounded up to a byte, plus one fp16 scale per
// started group of kQuantGroup elements for the integer formats.
absl::StatusOr<uint64_t> WeightElementBytes(uint64_t n, DType dtype) {
  if (dtype == DType::kI32) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight dtype ", core::DTypeName(dtype), " is not supported by the planner"));
  }
  KVFOLD_ASSIGN_OR_RETURN(
      uint64_t bits, CheckedMul("weight bytes", {n, static_cast<uint64_t>(core::DTypeBits(dtype))}));
  uint64_t bytes = CeilDiv(bits, 8);
  if (!core::IsQuantizedDType(dtype)) return bytes;
  return CheckedAdd("weight bytes", {bytes, CeilDiv(n, kQuantGroup) * kQuantScaleBytes});
}

}  // namespace

absl::StatusOr<PlanOptions> ResolveOptions(const ModelSpec& model, PlanOptions o) {
  const std::pair<const char*, uint64_t> positive[] = {{"batch_size", o.batch_size},
                                                       {"num_beams", o.num_beams},
                                                       {"sink_tokens", o.sink_tokens},
                                                       {"mem_slots", o.mem_slots},
                                                       {"chunk_size", o.chunk_size}};
  for (const auto& [field, value] : positive) {
    if (value == 0) return absl::InvalidArgumentError(absl::StrCat(field, " must be > 0"));
  }
  if (o.window_size == 0) {
    o.window_size = model.sliding_window > 0 ? model.sliding_window : kDefaultWindow;
  }
  if (o.reserve_percent >= 100) {
    return absl::InvalidArgumentError("the activation reserve must be below 100% of GPU memory");
  }
  if (o.gpu_memory_bytes > 0 && o.activation_reserve_bytes == 0) {
    o.activation_reserve_bytes = static_cast<uint64_t>(
        static_cast<unsigned __int128>(o.gpu_memory_bytes) * o.reserve_percent / 100);
  }
  KVFOLD_ASSIGN_OR_RETURN(
      uint64_t sequences, CheckedMul("batch_size * num_beams", {o.batch_size, o.num_beams}));
  (void)sequences;
  return o;
}

absl::StatusOr<uint64_t> KvBytesPerToken(const ModelSpec& model, DType kv_dtype) {
  KVFOLD_ASSIGN_OR_RETURN(uint64_t kv_dim,
                                  CheckedMul("KV dim", {model.num_kv_heads, model.head_dim}));
  return core::KvBytesPerToken({.num_layers = model.num_layers, .kv_dim = kv_dim, .dtype = kv_dtype});
}

absl::StatusOr<uint64_t> WeightBytes(uint64_t parameter_count, DType weight_dtype) {
  return WeightElementBytes(parameter_count, weight_dtype);
}

absl::StatusOr<ModeEstimate> EstimateMode(const ModelSpec& model, const PlanOptions& o, KvMode mode,
                                          uint64_t context_tokens) {
  if (context_tokens == 0) return absl::InvalidArgumentError("context must be > 0 tokens");
  const uint64_t t = context_tokens;
  const uint64_t w = o.window_size, c = o.chunk_size, m = o.mem_slots;
  ModeEstimate e;
  e.mode = mode;
  e.context_tokens = t;
  KVFOLD_ASSIGN_OR_RETURN(e.bytes_per_token, KvBytesPerToken(model, o.kv_dtype));
  KVFOLD_ASSIGN_OR_RETURN(
      uint64_t sequences, CheckedMul("batch_size * num_beams", {o.batch_size, o.num_beams}));

  // The model's own sliding window bounds the main segment in every mode.
  const uint64_t model_cap = model.sliding_window > 0 ? model.sliding_window : UINT64_MAX;
  switch (mode) {
    case KvMode::kFull:
      e.window_tokens = std::min(t, model_cap);
      break;
    case KvMode::kSliding:
      e.window_tokens = std::min({t, w, model_cap});
      break;
    case KvMode::kSink:
      e.prefix_tokens = std::min(t, o.sink_tokens);
      e.window_tokens = std::min({t - e.prefix_tokens, w, model_cap});
      break;
    case KvMode::kMemory:
    case KvMode::kMemoryOnly: {
      // The window grows to W + C tokens, then the oldest C fold into memory. Peak
      // resident: W + C window tokens plus M memory slots once the first fold happened.
      const uint64_t window = mode == KvMode::kMemory ? w : 0;
      KVFOLD_ASSIGN_OR_RETURN(uint64_t fold_at, CheckedAdd("window + chunk", {window, c}));
      const bool folded = t >= fold_at;
      e.window_tokens = std::min({t, fold_at, model_cap});
      e.prefix_tokens = folded ? m : 0;
      e.folds = folded ? (t - window) / c : 0;
      if (folded) {  // below W + C no fold has happened: no extra work yet
        e.fold_prefill_tokens_per_token = static_cast<double>(window) / static_cast<double>(c);
        e.memory_expand_tokens_per_token = static_cast<double>(m) / static_cast<double>(c);
      }
      KVFOLD_ASSIGN_OR_RETURN(e.memory_kv_bytes,
                                      CheckedMul("memory KV bytes", {m, e.bytes_per_token}));
      KVFOLD_ASSIGN_OR_RETURN(
          e.memory_block_bytes, core::BlockPayloadBytes(m, model.hidden_size, DType::kF16));
      break;
    }
  }
  e.resident_tokens = e.window_tokens + e.prefix_tokens;
  KVFOLD_ASSIGN_OR_RETURN(
      e.kv_bytes, CheckedMul("KV bytes", {e.resident_tokens, e.bytes_per_token, sequences}));
  // Only a comparison figure: saturates instead of failing the bounded modes at huge T.
  absl::StatusOr<uint64_t> full =
      CheckedMul("full-mode KV bytes", {std::min(t, model_cap), e.bytes_per_token, sequences});
  e.full_kv_bytes = full.ok() ? *full : UINT64_MAX;
  uint64_t block = 0;
  if (IsMemoryMode(mode) && e.prefix_tokens > 0) {
    KVFOLD_ASSIGN_OR_RETURN(block,
                                    CheckedMul("memory blocks", {e.memory_block_bytes, sequences}));
  }
  KVFOLD_ASSIGN_OR_RETURN(e.session_bytes,
                                  CheckedAdd("session bytes", {e.kv_bytes, block}));
  e.exceeds_max_position = model.max_position_embeddings > 0 && t > model.max_position_embeddings &&
                           mode == KvMode::kFull;
  return e;
}

absl::StatusOr<Plan> MakePlan(const ModelSpec& model, const PlanOptions& options,
                              const std::vector<uint64_t>& contexts,
                              const std::vector<KvMode>& modes) {
  if (absl::Status s = ValidateModelSpec(model); !s.ok()) return s;
  if (contexts.empty()) return absl::InvalidArgumentError("no context lengths given");
  if (modes.empty()) return absl::InvalidArgumentError("no modes given");
  Plan plan;
  plan.model = model;
  KVFOLD_ASSIGN_OR_RETURN(plan.options, ResolveOptions(model, options));
  const PlanOptions& o = plan.options;
  KVFOLD_ASSIGN_OR_RETURN(plan.parameter_count, ParameterCount(model));
  KVFOLD_ASSIGN_OR_RETURN(plan.weight_bytes,
                                  WeightBytes(plan.parameter_count, o.weight_dtype));
  KVFOLD_ASSIGN_OR_RETURN(plan.bytes_per_token, KvBytesPerToken(model, o.kv_dtype));
  plan.activation_reserve_bytes = o.activation_reserve_bytes;
  if (o.gpu_memory_bytes > 0) {
    KVFOLD_ASSIGN_OR_RETURN(
        uint64_t fixed,
        CheckedAdd("weights + reserve", {plan.weight_bytes, o.activation_reserve_bytes}));
    plan.weights_fit = fixed < o.gpu_memory_bytes;
    plan.kv_pool_bytes = plan.weights_fit ? o.gpu_memory_bytes - fixed : 0;
  }
  const AdmissionPolicy policy;
  for (uint64_t t : contexts) {
    for (KvMode mode : modes) {
      KVFOLD_ASSIGN_OR_RETURN(ModeEstimate e, EstimateMode(model, o, mode, t));
      e.sessions_unthrottled =
          SessionsBelow(plan.kv_pool_bytes, e.session_bytes, policy.degrade_bp);
      e.sessions_before_single_beam =
          SessionsBelow(plan.kv_pool_bytes, e.session_bytes, policy.single_beam_bp);
      e.sessions_fit = SessionsBelow(plan.kv_pool_bytes, e.session_bytes, policy.reject_bp);
      plan.estimates.push_back(e);
    }
  }
  return plan;
}

}  // namespace kvfold::planner
