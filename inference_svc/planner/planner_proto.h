// The EstimateKvCache RPC's logic: proto request in, planner, proto response out. The
// service's handler is one call to EstimateKvCache().
#ifndef KVFOLD_INFERENCE_SVC_PLANNER_PLANNER_PROTO_H_
#define KVFOLD_INFERENCE_SVC_PLANNER_PLANNER_PROTO_H_

#include "absl/status/statusor.h"
#include "inference_svc/planner/kv_planner.h"
#include "kvfold/v1/common.pb.h"
#include "kvfold/v1/inference.pb.h"

namespace kvfold::planner {

// Request defaults (proto zero values): batch_size 1, num_beams 1, kv_dtype fp16,
// weight_dtype bf16, window_size the model's sliding_window or 1024, sink_tokens 4,
// mem_slots 96, chunk_size 256, no capacity when gpu_memory_bytes is 0, reserve 10 % of
// GPU memory. The response lists all five modes at context_tokens, in enum order.
//
// The model: `preset`, else `config_json`, else `served_model` (the replica's own model;
// may be null). Errors, all InvalidArgument: both preset and config_json set, unknown
// preset, malformed config, no model at all, context_tokens == 0, an unknown dtype enum,
// overflow on absurd sizes.
absl::StatusOr<v1::EstimateKvCacheResponse> EstimateKvCache(
    const v1::EstimateKvCacheRequest& request, const ModelSpec* served_model);

}  // namespace kvfold::planner

#endif  // KVFOLD_INFERENCE_SVC_PLANNER_PLANNER_PROTO_H_
