// PrefillCursor: one sequence's prompt through the engine in pieces of bounded work, so
// a scheduler can run other sessions' decode steps between them however long the prompt
// and its context are (docs/service.md, "The scheduler").
//
// The prompt runs in sub-chunks of a few rows (Engine::Forward's chunking with a smaller
// row count); a sub-chunk runs piece by piece: place and embed; per layer the attention
// inputs, the attention over slices of the keys (Backend::AttentionPart, the online
// softmax carried between slices), the output projection and feed-forward; the logits.
// Each weight piece costs about kPieceMacs multiply-adds and each attention slice about
// kPieceMs (timed), whatever the context. Where the backend
// cannot split attention (INT8 KV, the reference backend, CUDA) a layer's attention is
// one piece.
//
// Bits: sub-chunking is batch-invariant and slices give the bits of one attention call,
// so the logits and the cache equal Engine::Forward's over the same rows bit for bit
// (docs/contracts.md, "Bitwise rule"). Other Forwards may run between pieces: the cursor
// owns its activations, plan and softmax state, and nothing else touches the sequence's
// cache meanwhile (the caller's duty).
#ifndef KVFOLD_INFERENCE_SVC_ENGINE_PREFILL_CURSOR_H_
#define KVFOLD_INFERENCE_SVC_ENGINE_PREFILL_CURSOR_H_

#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "inference_svc/engine/engine.h"
#include "inference_svc/engine/kv_cache.h"

namespace kvfold::engine {

class PrefillCursor {
 public:
  // Work of one piece, in multiply-adds (weights: rows x parameters of a layer; attention:
  // rows x keys x 2 x q_dim).
  static constexpr int64_t kPieceMacs = int64_t{1} << 20;
  // Time of one slice of a layer's attention keys, measured as the prompt runs (the cost
  // of a key varies with the head size, the cache and the machine).
  static constexpr double kPieceMs = 0.25;

  // Allocates the cursor's activations (for at most the engine's max_batch_tokens rows)
  // and softmax state.
  static absl::StatusOr<std::unique_ptr<PrefillCursor>> Create(Engine* engine);
  // Rolls back the rows of a sub-chunk in flight (earlier sub-chunks stay fed).
  ~PrefillCursor();
  PrefillCursor(const PrefillCursor&) = delete;
  PrefillCursor& operator=(const PrefillCursor&) = delete;

  // Begins feeding `token_ids` as causal rows of `cache` (both must stay valid until the
  // prompt is fed). InvalidArgument for an empty prompt, ids out of range or a bidirectional
  // cache; FailedPrecondition while another prompt is in flight.
  absl::Status Start(KvCache* cache, std::span<const int32_t> token_ids);
  // Runs pieces until the prompt is fed or `budget_ms` has passed (at least one piece).
  // True once fed: logits() then hold the last row's logits. An error (e.g. the KV pool
  // ran out) ends the prompt; the cache keeps the sub-chunks fed before it.
  absl::StatusOr<bool> Run(double budget_ms);
  bool active() const;
  // The last row's logits [vocab_size], after Run returned true.
  std::span<const float> logits() const;
  // Rows of sub-chunks fed into the cache so far (all of them once Run returned true).
  int64_t fed() const;

 private:
  struct State;
  explicit PrefillCursor(std::unique_ptr<State> state);
  absl::Status Piece();
  absl::Status Place();
  absl::Status AttentionSlice();
  void SizeSlices();
  absl::Status FinishSubChunk();
  std::unique_ptr<State> st_;
};

}  // namespace kvfold::engine

#endif  // KVFOLD_INFERENCE_SVC_ENGINE_PREFILL_CURSOR_H_
