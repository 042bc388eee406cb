// Private parts of Engine shared by engine.cc (construction) and forward.cc.
#ifndef KVFOLD_INFERENCE_SVC_ENGINE_ENGINE_INTERNAL_H_
#define KVFOLD_INFERENCE_SVC_ENGINE_ENGINE_INTERNAL_H_

#include <memory>
#include <vector>

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

// Preallocated for EngineOptions::max_batch_tokens rows (T). Host vectors only grow.
struct Engine::Scratch {
  static constexpr int kLogitRows = 32;  // logits computed in sub-batches of this many rows
  std::unique_ptr<kernels::Buffer> act_buffer;
  Tensor x, h, q, k, v, att, o, gate, up;  // [T, ...] F32
  Tensor sel, sel_norm;                    // [T, d]
  Tensor logits;                           // [kLogitRows, vocab_size]
  std::unique_ptr<kernels::Buffer> int_buffer;
  Tensor ids, slots, positions, rows, sel_idx;  // I32
  Tensor own, pages, seal;  // int8 KV: [T, kAttnI8Fields], [T], [2T, kSealFields] I32
  std::unique_ptr<kernels::Buffer> table_buffer;
  int64_t table_capacity = 0;  // int32 entries

  std::vector<int32_t> h_ids, h_slots, h_positions, h_rows, h_tables, h_sel;
  std::vector<int32_t> h_own, h_pages, h_seal;  // int8 KV (h_seal: kSealFields per block)
  std::vector<float> h_hidden;
  // Per chunk: index of each row's sequence and its rows in the chunk.
  std::vector<int> piece_begin, piece_count, piece_offset;
  std::vector<int> before_prefix, before_main;
  std::vector<int> logit_row_offset, hidden_row_offset;  // per input, into the result
  std::vector<int> hidden_src, hidden_dst, hidden_col;   // per selected hidden row
};

}  // namespace kvfold::engine

#endif  // KVFOLD_INFERENCE_SVC_ENGINE_ENGINE_INTERNAL_H_
