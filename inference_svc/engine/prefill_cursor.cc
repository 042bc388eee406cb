// PrefillCursor (prefill_cursor.h): Engine::ForwardChunk's steps, one piece per call of
// Piece(), with the chunk's state kept here between calls.
#include "inference_svc/engine/prefill_cursor.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "inference_svc/engine/engine_internal.h"

namespace kvfold::engine {

#define KVFOLD_RETURN_IF_ERROR(expr) \
  do {                               \
    absl::Status _s = (expr);        \
    if (!_s.ok()) return _s;         \
  } while (0)

namespace {

enum class Step { kPlace, kAttentionIn, kAttention, kLayerOut, kLogits };

}  // namespace

struct PrefillCursor::State {
  Engine* engine = nullptr;
  std::unique_ptr<Engine::Scratch> scratch;
  std::unique_ptr<kernels::Buffer> softmax_buffer;
  kernels::Tensor softmax;  // [rows, num_heads * (head_dim + 2)] AttentionPart state
  int max_rows = 0;         // rows per sub-chunk
  bool split_attention = true;

  // The prompt in flight.
  KvCache* cache = nullptr;
  std::span<const int32_t> ids;
  int64_t fed = 0;
  bool active = false;
  bool done = false;  // the last prompt was fed whole: its logits are in `result`
  SequenceInput input;
  int row_begin = 0, row_count = 0, logit_offset = 0, hidden_offset = 0;
  ChunkSpec chunk;
  ForwardResult result;

  // The sub-chunk in flight.
  bool placed = false;
  Engine::Batch batch;
  Step next = Step::kPlace;
  int layer = 0;
  int64_t key = 0;       // next key index of the layer's attention
  int64_t max_keys = 0;  // the sub-chunk's largest row key count
  int64_t slice_keys = 0;
  // Measured cost of attention, ms per (key x row) of a slice; 0 until a slice ran.
  double ms_per_key_row = 0;
};

PrefillCursor::PrefillCursor(std::unique_ptr<State> state) : st_(std::move(state)) {}

PrefillCursor::~PrefillCursor() {
  if (st_->placed) st_->scratch->plan.Abandon(st_->chunk);
}

absl::StatusOr<std::unique_ptr<PrefillCursor>> PrefillCursor::Create(Engine* engine) {
  if (engine == nullptr) return absl::InvalidArgumentError("PrefillCursor: null engine");
  const model::ModelConfig& c = engine->config();
  auto st = std::make_unique<State>();
  st->engine = engine;
  // Rows whose layer weights cost about one piece (the weight matmuls of a sub-chunk's
  // layer are one piece each).
  const int64_t layer_macs = int64_t{c.hidden_size} * (2 * c.q_dim() + 2 * c.kv_dim()) +
                             3 * int64_t{c.hidden_size} * c.intermediate_size;
  st->max_rows = static_cast<int>(std::clamp<int64_t>(
      kPieceMacs / std::max<int64_t>(1, layer_macs), 1, engine->options().max_batch_tokens));
  auto scratch = engine->NewScratch(st->max_rows);
  if (!scratch.ok()) return scratch.status();
  st->scratch = std::move(*scratch);
  const int64_t state_floats = int64_t{st->max_rows} * c.num_heads * (c.head_dim + 2);
  auto buffer = engine->backend().Allocate(state_floats * sizeof(float));
  if (!buffer.ok()) return buffer.status();
  st->softmax_buffer = std::move(*buffer);
  st->softmax = kernels::ViewOf(*st->softmax_buffer, 0, core::DType::kF32,
                                {st->max_rows, int64_t{c.num_heads} * (c.head_dim + 2)});
  st->split_attention = engine->pool().dtype() != core::DType::kI8;
  st->result.logits_storage.resize(c.vocab_size);
  return std::unique_ptr<PrefillCursor>(new PrefillCursor(std::move(st)));
}

absl::Status PrefillCursor::Start(KvCache* cache, std::span<const int32_t> token_ids) {
  State& s = *st_;
  if (s.active) return absl::FailedPreconditionError("PrefillCursor: a prompt is in flight");
  if (cache == nullptr || token_ids.empty()) {
    return absl::InvalidArgumentError("PrefillCursor: no cache or no tokens");
  }
  const int vocab = s.engine->config().vocab_size;
  for (int32_t id : token_ids) {
    if (id < 0 || id >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("PrefillCursor: token id ", id, " outside [0, ", vocab, ")"));
    }
  }
  s.cache = cache;
  s.ids = token_ids;
  s.fed = 0;
  s.active = true;
  s.done = false;
  s.input = SequenceInput();
  s.input.cache = cache;
  s.input.token_ids = token_ids;
  s.input.logits = RowSelect::kLast;
  s.chunk = ChunkSpec{std::span<const SequenceInput>(&s.input, 1),
                      std::span<const int>(&s.row_begin, 1),
                      std::span<const int>(&s.row_count, 1),
                      std::span<const int>(&s.logit_offset, 1),
                      std::span<const int>(&s.hidden_offset, 1),
                      s.engine->config().hidden_size};
  s.next = Step::kPlace;
  return absl::OkStatus();
}

absl::StatusOr<bool> PrefillCursor::Run(double budget_ms) {
  State& s = *st_;
  if (!s.active) return absl::FailedPreconditionError("PrefillCursor: no prompt in flight");
  // Another Forward may have grown (moved) the RoPE table since the last piece.
  if (s.placed) s.batch.rope = s.engine->RopeView();
  const auto t0 = std::chrono::steady_clock::now();
  do {
    if (absl::Status status = Piece(); !status.ok()) {
      if (s.placed) s.scratch->plan.Abandon(s.chunk);
      s.placed = false;
      s.active = false;
      return status;
    }
    if (!s.active) return true;
  } while (std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
               .count() < budget_ms);
  return false;
}

absl::Status PrefillCursor::Piece() {
  State& s = *st_;
  Engine& e = *s.engine;
  switch (s.next) {
    case Step::kPlace:
      return Place();
    case Step::kAttentionIn:
      KVFOLD_RETURN_IF_ERROR(e.AttentionIn(s.layer, s.batch));
      s.key = 0;
      s.next = Step::kAttention;
      return absl::OkStatus();
    case Step::kAttention:
      return AttentionSlice();
    case Step::kLayerOut:
      KVFOLD_RETURN_IF_ERROR(e.LayerOut(s.layer, s.batch));
      s.next = ++s.layer < e.config().num_layers ? Step::kAttentionIn : Step::kLogits;
      return absl::OkStatus();
    case Step::kLogits:
      return FinishSubChunk();
  }
  return absl::InternalError("PrefillCursor: bad step");
}

// The next sub-chunk's rows: placed in the cache, uploaded, embedded.
absl::Status PrefillCursor::Place() {
  State& s = *st_;
  Engine& e = *s.engine;
  s.row_begin = static_cast<int>(s.fed);
  s.row_count = static_cast<int>(
      std::min<int64_t>(s.max_rows, static_cast<int64_t>(s.ids.size()) - s.fed));
  BatchPlan& plan = s.scratch->plan;
  KVFOLD_RETURN_IF_ERROR(plan.Place(s.chunk, e.pool()));
  s.placed = true;
  KVFOLD_RETURN_IF_ERROR(e.UploadPlan(*s.scratch, &s.batch));
  KVFOLD_RETURN_IF_ERROR(e.Embed(s.chunk, s.batch));
  s.max_keys = 0;
  for (int r = 0; r < plan.num_rows(); ++r) {
    s.max_keys = std::max<int64_t>(s.max_keys, plan.attn[r].num_keys());
  }
  SizeSlices();
  s.layer = 0;
  s.next = Step::kAttentionIn;
  return absl::OkStatus();
}

// One slice of the keys of this layer's attention (all of them where the backend or the
// cache cannot split it, or they fit one slice).
absl::Status PrefillCursor::AttentionSlice() {
  State& s = *st_;
  Engine& e = *s.engine;
  if (!s.split_attention || s.max_keys <= s.slice_keys) {
    KVFOLD_RETURN_IF_ERROR(e.Attend(s.layer, s.batch));
    s.next = Step::kLayerOut;
    return absl::OkStatus();
  }
  const Engine::Batch& b = s.batch;
  const int64_t n = b.n;
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status status = e.backend().AttentionPart(
      *e.stream_, b.q, e.pool().k_cache(s.layer), e.pool().v_cache(s.layer), b.rows, b.tables,
      b.rope, e.AttnShape(), s.key, s.key + s.slice_keys, s.softmax.Rows(0, n), b.att);
  if (absl::IsUnimplemented(status) && s.key == 0) {
    s.split_attention = false;  // this backend runs attention whole
    return AttentionSlice();
  }
  KVFOLD_RETURN_IF_ERROR(status);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const int64_t keys = std::min(s.slice_keys, s.max_keys - s.key);
  s.key += s.slice_keys;
  if (s.key >= s.max_keys) s.next = Step::kLayerOut;
  // The next slices' size from what this one cost. A sample counts at most 4x the running
  // estimate: a slice the OS preempted does not shrink the next ones to a few keys.
  if (keys > 0 && n > 0) {
    const double sample = ms / static_cast<double>(keys * n);
    const double est = s.ms_per_key_row;
    s.ms_per_key_row = est <= 0 ? sample : 0.75 * est + 0.25 * std::min(sample, 4 * est);
    SizeSlices();
  }
  return absl::OkStatus();
}

// Keys per attention slice: about kPieceMs by the measured cost once a slice ran (the
// multiply-add estimate can be off several times over: with small heads a key's softmax
// and rotation cost more than its dot products), about kPieceMacs before.
void PrefillCursor::SizeSlices() {
  State& s = *st_;
  const int64_t rows = std::max(1, s.scratch->plan.num_rows());
  constexpr int64_t kStep = kernels::kAttentionPartKeys;
  const int64_t keys =
      s.ms_per_key_row > 0
          ? static_cast<int64_t>(kPieceMs / (s.ms_per_key_row * static_cast<double>(rows)))
          : kPieceMacs / (rows * 2 * s.engine->config().q_dim());
  const int64_t most = std::max<int64_t>(kStep, (s.max_keys + kStep - 1) / kStep * kStep);
  s.slice_keys = std::clamp<int64_t>(keys / kStep * kStep, kStep, most);
}

// Logits (when the sub-chunk holds the prompt's last row), then the plan's finish.
absl::Status PrefillCursor::FinishSubChunk() {
  State& s = *st_;
  Engine& e = *s.engine;
  KVFOLD_RETURN_IF_ERROR(e.Logits(*s.scratch, s.batch, &s.result));
  KVFOLD_RETURN_IF_ERROR(e.backend().Synchronize(*e.stream_));
  s.scratch->plan.Finish(s.chunk, e.pool());
  s.placed = false;
  s.fed += s.row_count;
  if (s.fed == static_cast<int64_t>(s.ids.size())) {
    s.active = false;
    s.done = true;
  } else {
    s.next = Step::kPlace;
  }
  return absl::OkStatus();
}

bool PrefillCursor::active() const { return st_->active; }

std::span<const float> PrefillCursor::logits() const {
  return st_->done ? std::span<const float>(st_->result.logits_storage) : std::span<const float>();
}

int64_t PrefillCursor::fed() const { return st_->fed; }

}  // namespace kvfold::engine
