#include "inference_svc/planner/planner_proto.h"

#include "absl/strings/str_cat.h"
#include "common/proto_enums.h"
#include "inference_svc/planner/checked_math.h"

namespace kvfold::planner {
namespace {

absl::StatusOr<ModelSpec> RequestModel(const v1::EstimateKvCacheRequest& r,
                                       const ModelSpec* served_model) {
  if (!r.preset().empty() && !r.config_json().empty()) {
    return absl::InvalidArgumentError("set preset or config_json, not both");
  }
  if (!r.preset().empty()) {
    absl::StatusOr<ModelSpec> preset = FindPreset(r.preset());
    if (!preset.ok()) return absl::InvalidArgumentError(preset.status().message());
    return preset;
  }
  if (!r.config_json().empty()) return ParseHfConfig(r.config_json());
  if (served_model == nullptr) {
    return absl::InvalidArgumentError(
        "no preset or config_json given and no served model to plan for");
  }
  return *served_model;
}

absl::StatusOr<DType> DtypeOr(v1::Dtype dtype, DType default_value) {
  if (dtype == v1::DTYPE_UNSPECIFIED) return default_value;
  return DTypeFromProto(dtype);
}

}  // namespace

absl::StatusOr<v1::EstimateKvCacheResponse> EstimateKvCache(const v1::EstimateKvCacheRequest& r,
                                                            const ModelSpec* served_model) {
  KVFOLD_ASSIGN_OR_RETURN(ModelSpec model, RequestModel(r, served_model));
  if (r.context_tokens() == 0) return absl::InvalidArgumentError("context_tokens must be > 0");
  PlanOptions o;
  if (r.batch_size() > 0) o.batch_size = r.batch_size();
  if (r.num_beams() > 0) o.num_beams = r.num_beams();
  KVFOLD_ASSIGN_OR_RETURN(o.kv_dtype, DtypeOr(r.kv_dtype(), DType::kF16));
  KVFOLD_ASSIGN_OR_RETURN(o.weight_dtype, DtypeOr(r.weight_dtype(), DType::kBF16));
  o.window_size = r.window_size();  // 0 resolves to the model's window or 1024
  if (r.sink_tokens() > 0) o.sink_tokens = r.sink_tokens();
  if (r.mem_slots() > 0) o.mem_slots = r.mem_slots();
  if (r.chunk_size() > 0) o.chunk_size = r.chunk_size();
  o.gpu_memory_bytes = r.gpu_memory_bytes();
  o.activation_reserve_bytes = r.activation_reserve_bytes();

  std::vector<KvMode> modes(std::begin(core::kAllKvModes), std::end(core::kAllKvModes));
  KVFOLD_ASSIGN_OR_RETURN(Plan plan, MakePlan(model, o, {r.context_tokens()}, modes));

  v1::EstimateKvCacheResponse response;
  response.set_model(plan.model.name);
  response.set_parameter_count(plan.parameter_count);
  response.set_weight_bytes(plan.weight_bytes);
  response.set_kv_pool_bytes(plan.kv_pool_bytes);
  for (const ModeEstimate& e : plan.estimates) {
    v1::ModeEstimate* out = response.add_modes();
    out->set_mode(KvModeToProto(e.mode));
    out->set_bytes_per_token(e.bytes_per_token);
    out->set_resident_tokens(e.resident_tokens);
    out->set_kv_bytes(e.kv_bytes);
    out->set_memory_kv_bytes(e.memory_kv_bytes);
    out->set_memory_block_bytes(e.memory_block_bytes);
    out->set_sessions_fit(e.sessions_fit);
    out->set_fold_prefill_tokens_per_token(e.fold_prefill_tokens_per_token);
  }
  return response;
}

}  // namespace kvfold::planner
