// Rendering of a Plan: the human table `kvfold plan` prints, and its --json form.
#ifndef KVFOLD_INFERENCE_SVC_PLANNER_PLANNER_FORMAT_H_
#define KVFOLD_INFERENCE_SVC_PLANNER_PLANNER_FORMAT_H_

#include <string>

#include "inference_svc/planner/kv_planner.h"

namespace kvfold::planner {

// "MHA" (num_kv_heads == num_heads), "MQA" (1), else "GQA".
std::string AttentionKind(const ModelSpec& model);

// How a KV dtype's scale overhead is counted (core/kv_bytes.h).
std::string QuantizationNote(DType dtype);

// A header describing the model and options, then one row per (context, mode).
std::string RenderTable(const Plan& plan);

// Pretty-printed JSON (2-space indent, trailing newline). Field names: docs/planner.md.
std::string RenderJson(const Plan& plan);

}  // namespace kvfold::planner

#endif  // KVFOLD_INFERENCE_SVC_PLANNER_PLANNER_FORMAT_H_
