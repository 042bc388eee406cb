// Private parts of Engine shared by engine.cc (construction) and forward.cc.
#ifndef KVFOLD_INFERENCE_SVC_ENGINE_ENGINE_INTERNAL_H_
#define KVFOLD_INFERENCE_SVC_ENGINE_ENGINE_INTERNAL_H_

#include <memory>
#include <vector>

#include "inference_svc/engine/batch_plan.h"
#include "inference_svc/engine/engine.h"
#include "kernels/backend.h"

namespace kvfold::engine {

using kernels::Tensor;

struct Engine::Weights {
  std::vector<std::unique_ptr<kernels::Buffer>> buffers;  // adopted weight memory
  Tensor embed;        // [vocab_size, hidden_size]
  Tensor final_norm;   // [hidden_size] F32
  Tensor lm_head;      // [vocab_size, hidden_size] (== embed when tied)
  struct Layer {
    Tensor attn_norm, ffn_norm;       // [hidden_size] F32
    Tensor wq, wk, wv, wo;            // [q_dim, d], [kv_dim, d], [kv_dim, d], [d, q_dim]
    Tensor bq, bk, bv;                // F32 biases or empty
    Tensor w_gate, w_up, w_down;      // [f, d], [f, d], [d, f]
  };
  std::vector<Layer> layers;
};

// One chunk on the device: the scratch's views for its n rows and the uploaded plan.
struct Engine::Batch {
  int n = 0;
  Tensor x, h, q, k, v, att, o, gate, up;  // [n, ...] F32 activations (Scratch)
  Tensor ids, slots, positions;            // [n] I32
  Tensor rows, own, pages;                 // [n, ...] I32 (own, pages: int8 KV)
  Tensor seal;                             // [num_seal, kSealFields] I32, or empty
  Tensor tables;                           // [*] I32 block tables
  Tensor rope;                             // [rope_rows, head_dim] F32
};

// Preallocated for EngineOptions::max_batch_tokens rows (T). Host vectors only grow.
struct Engine::Scratch {
  static constexpr int kLogitRows = 32;  // logits computed in sub-batches of this many rows
  Scratch(int max_rows, bool int8) : plan(max_rows, int8) {}

  // Activations (device), F32:
  std::unique_ptr<kernels::Buffer> act_buffer;
  Tensor x;          // [T, hidden_size] the residual stream
  Tensor h;          // [T, hidden_size] a sublayer's normed input
  Tensor q;          // [T, q_dim]
  Tensor k, v;       // [T, kv_dim] the chunk's new keys (un-rotated) and values
  Tensor att;        // [T, q_dim] attention output
  Tensor o;          // [T, hidden_size] a sublayer's output before the residual add
  Tensor gate, up;   // [T, intermediate_size]
  Tensor sel;        // [T, hidden_size] rows gathered for logits or hidden states
  Tensor sel_norm;   // [kLogitRows, hidden_size] (aliases h: free after the last layer)
  Tensor logits;     // [kLogitRows, vocab_size]

  // The chunk's plan (host) and its device copy, I32:
  BatchPlan plan;
  std::unique_ptr<kernels::Buffer> int_buffer;
  Tensor ids, slots, positions, sel_idx;  // [T]
  Tensor rows;                            // [T, kAttnRowFields] AttnRow records
  Tensor own;                             // [T, kAttnOwnFields] int8 KV
  Tensor pages;                           // [T] int8 KV
  Tensor seal;                            // [2T, kSealFields] int8 KV
  std::unique_ptr<kernels::Buffer> table_buffer;  // block tables, grown on demand
  int64_t table_capacity = 0;                     // int32 entries
  std::vector<int32_t> h_hidden_rows;             // [T] plan.hidden's chunk rows
  std::vector<float> h_hidden;                    // [T, hidden_size]

  // Forward's chunking, per input:
  std::vector<int> piece_begin, piece_count, rows_done;
  std::vector<int> logit_row_offset, hidden_row_offset;  // first output row in the result
};

}  // namespace kvfold::engine

#endif  // KVFOLD_INFERENCE_SVC_ENGINE_ENGINE_INTERNAL_H_
