#include "inference_svc/planner/planner_format.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "inference_svc/planner/admission.h"
#include "inference_svc/planner/units.h"
#include "nlohmann/json.hpp"

namespace kvfold::planner {

std::string AttentionKind(const ModelSpec& m) {
  if (m.num_kv_heads == m.num_heads) return "MHA";
  if (m.num_kv_heads == 1) return "MQA";
  return "GQA";
}

std::string QuantizationNote(DType dtype) {
  switch (dtype) {
    case DType::kI8:
    case DType::kI4:
      return "fp16 key scales per channel per 16-token block, value scales per 32 channels per "
             "token, counted";
    case DType::kF8:
      return "per-tensor fp32 scales (constant, not per token)";
    default:
      return "none";
  }
}

std::string RenderTable(const Plan& plan) {
  const ModelSpec& m = plan.model;
  const PlanOptions& o = plan.options;
  const bool capacity = o.gpu_memory_bytes > 0;
  std::string out;
  absl::StrAppend(&out, "model ", m.name, " (", m.source, ")\n");
  absl::StrAppendFormat(&out, "  %d layers, %d kv heads of %d (%s), head_dim %d, hidden %d",
                        m.num_layers, m.num_kv_heads, m.num_heads, AttentionKind(m), m.head_dim,
                        m.hidden_size);
  if (m.sliding_window > 0) absl::StrAppend(&out, ", model sliding window ", m.sliding_window);
  absl::StrAppend(&out, "\n  parameters ", WithCommas(plan.parameter_count), ", weights ",
                  core::DTypeName(o.weight_dtype), " ", WithCommas(plan.weight_bytes), " B (",
                  HumanBytes(plan.weight_bytes), ")\n");
  absl::StrAppend(&out, "  KV ", core::DTypeName(o.kv_dtype), ": ",
                  WithCommas(plan.bytes_per_token),
                  " B per token per sequence (scales: ", QuantizationNote(o.kv_dtype),
                  "); sequences = batch ", o.batch_size, " x beams ", o.num_beams, "\n");
  absl::StrAppendFormat(&out,
                        "  window %d, sink %d, mem_slots %d, chunk %d\n  memory folds: W/C = "
                        "%.2f extra prefill tokens per token (+ M/C = %.2f to expand memory)\n",
                        o.window_size, o.sink_tokens, o.mem_slots, o.chunk_size,
                        static_cast<double>(o.window_size) / o.chunk_size,
                        static_cast<double>(o.mem_slots) / o.chunk_size);
  if (capacity) {
    absl::StrAppend(&out, "  GPU ", HumanBytes(o.gpu_memory_bytes), " - weights ",
                    HumanBytes(plan.weight_bytes), " - reserve ",
                    HumanBytes(plan.activation_reserve_bytes), " = KV pool ",
                    WithCommas(plan.kv_pool_bytes), " B (", HumanBytes(plan.kv_pool_bytes), ")",
                    plan.weights_fit ? "" : "  ** weights + reserve exceed GPU memory **", "\n");
  }
  out += "\n";
  absl::StrAppendFormat(&out, "%-12s %8s %9s %17s %11s %9s %7s %5s", "mode", "context", "resident",
                        "kv_bytes", "kv", "block_B", "vs_full", "fold");
  if (capacity) absl::StrAppendFormat(&out, " %9s %9s", "fit<70%", "fit<95%");
  out += "\n";
  for (const ModeEstimate& e : plan.estimates) {
    double vs_full = e.full_kv_bytes ? 100.0 * e.session_bytes / e.full_kv_bytes : 0;
    absl::StrAppendFormat(&out, "%-12s %8s %9s %17s %11s %9s %6.1f%% %5.2f", core::KvModeName(e.mode),
                          ShortTokens(e.context_tokens), WithCommas(e.resident_tokens),
                          WithCommas(e.kv_bytes), HumanBytes(e.kv_bytes),
                          e.prefix_tokens && e.memory_block_bytes
                              ? WithCommas(e.memory_block_bytes * o.batch_size * o.num_beams)
                              : "-",
                          vs_full, e.fold_prefill_tokens_per_token);
    if (capacity) {
      absl::StrAppendFormat(&out, " %9s %9s", WithCommas(e.sessions_unthrottled),
                            WithCommas(e.sessions_fit));
    }
    if (e.exceeds_max_position) out += "  (T > max_position_embeddings)";
    out += "\n";
  }
  out +=
      "\nresident: peak tokens held per sequence (memory modes: W + C window, + M slots once "
      "folding).\nkv_bytes: resident * bytes per token * sequences.  block_B: persisted memory "
      "blocks\n(M * hidden_size * 2 B each).  vs_full: (kv + blocks) / full-mode kv.  fold: "
      "extra prefill tokens per token.\n";
  if (capacity) {
    out +=
        "fit<70%: sessions admitted unthrottled.  fit<95%: sessions admitted before\n"
        "RESOURCE_EXHAUSTED (from 70 % degraded, see docs/planner.md).\n";
  }
  return out;
}

std::string RenderJson(const Plan& plan) {
  using Json = nlohmann::ordered_json;
  const ModelSpec& m = plan.model;
  const PlanOptions& o = plan.options;
  const AdmissionPolicy policy;
  Json model = {{"name", m.name},
                {"source", m.source},
                {"attention", AttentionKind(m)},
                {"hidden_size", m.hidden_size},
                {"num_layers", m.num_layers},
                {"num_heads", m.num_heads},
                {"num_kv_heads", m.num_kv_heads},
                {"head_dim", m.head_dim},
                {"vocab_size", m.vocab_size},
                {"intermediate_size", m.intermediate_size},
                {"sliding_window", m.sliding_window},
                {"max_position_embeddings", m.max_position_embeddings},
                {"tie_word_embeddings", m.tie_word_embeddings}};
  Json j = {{"model", model},
            {"parameter_count", plan.parameter_count},
            {"weight_dtype", core::DTypeName(o.weight_dtype)},
            {"weight_bytes", plan.weight_bytes},
            {"kv_dtype", core::DTypeName(o.kv_dtype)},
            {"kv_scale_overhead", QuantizationNote(o.kv_dtype)},
            {"bytes_per_token", plan.bytes_per_token},
            {"batch_size", o.batch_size},
            {"num_beams", o.num_beams},
            {"sequences", o.batch_size * o.num_beams},
            {"window_size", o.window_size},
            {"sink_tokens", o.sink_tokens},
            {"mem_slots", o.mem_slots},
            {"chunk_size", o.chunk_size},
            {"gpu_memory_bytes", o.gpu_memory_bytes},
            {"activation_reserve_bytes", plan.activation_reserve_bytes},
            {"kv_pool_bytes", plan.kv_pool_bytes},
            {"weights_fit", plan.weights_fit},
            {"admission_percent",
             {{"degrade", policy.degrade_bp / 100.0},
              {"single_beam", policy.single_beam_bp / 100.0},
              {"reject", policy.reject_bp / 100.0}}}};
  Json estimates = Json::array();
  for (const ModeEstimate& e : plan.estimates) {
    estimates.push_back({{"mode", core::KvModeName(e.mode)},
                         {"context_tokens", e.context_tokens},
                         {"window_tokens", e.window_tokens},
                         {"prefix_tokens", e.prefix_tokens},
                         {"resident_tokens", e.resident_tokens},
                         {"bytes_per_token", e.bytes_per_token},
                         {"kv_bytes", e.kv_bytes},
                         {"memory_kv_bytes", e.memory_kv_bytes},
                         {"memory_block_bytes", e.memory_block_bytes},
                         {"session_bytes", e.session_bytes},
                         {"full_kv_bytes", e.full_kv_bytes},
                         {"folds", e.folds},
                         {"fold_prefill_tokens_per_token", e.fold_prefill_tokens_per_token},
                         {"memory_expand_tokens_per_token", e.memory_expand_tokens_per_token},
                         {"sessions_unthrottled", e.sessions_unthrottled},
                         {"sessions_before_single_beam", e.sessions_before_single_beam},
                         {"sessions_fit", e.sessions_fit},
                         {"exceeds_max_position", e.exceeds_max_position}});
  }
  j["estimates"] = std::move(estimates);
  // Names come from user files: replace invalid UTF-8 rather than throw.
  return j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace kvfold::planner
