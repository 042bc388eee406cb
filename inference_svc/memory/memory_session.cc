#include "inference_svc/memory/memory_session.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/fp16.h"
#include "kernels/backend.h"

namespace kvfold::memory {

using core::KvMode;
using engine::MaskKind;
using engine::RowSelect;
using engine::SequenceInput;
using engine::SequenceOutput;

engine::KvPolicy MemorySession::CachePolicy(KvMode mode, const ProjectorConfig& config) {
  engine::KvPolicy policy = engine::KvPolicy::Memory();
  // Sliding window policy: each row sees the memory and the last W window tokens, the
  // cache drops the older ones. memory_only grows (W = 0) or slides over its last
  // memory_only_window tokens.
  if (mode == KvMode::kMemory && config.window_policy == WindowPolicy::kSliding) {
    policy.window = config.window_size;
  }
  if (mode == KvMode::kMemoryOnly) policy.window = config.memory_only_window;
  // Sink tokens: the first S tokens of the sequence go to the prefix, causal, at position
  // 0 like the memory that follows them there.
  policy.auto_prefix_tokens = config.sink_tokens;
  // Prefix gap: window entry j at 1 + G + (j - lo), the prefix stays at position 0.
  policy.main_pos_base = 1 + config.prefix_gap;
  return policy;
}

absl::StatusOr<std::unique_ptr<MemorySession>> MemorySession::Create(
    engine::Engine* engine, const Projector* projector, const MemorySessionOptions& options) {
  if (options.mode != KvMode::kMemory && options.mode != KvMode::kMemoryOnly) {
    return absl::InvalidArgumentError(
        absl::StrCat("MemorySession: mode ", core::KvModeName(options.mode), " is not a memory mode"));
  }
  if (engine == nullptr || projector == nullptr) {
    return absl::InvalidArgumentError("MemorySession: memory modes need an engine and a projector");
  }
  const model::ModelConfig& config = engine->config();
  if (auto s = projector->CheckCompatible(engine->fingerprint(), config.hidden_size); !s.ok()) {
    return s;
  }
  if (projector->config().input_layers > config.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("MemorySession: projector reads ",
                                                   projector->config().input_layers,
                                                   " layers, the model has ", config.num_layers));
  }
  const ProjectorConfig& pc = projector->config();
  if (pc.prefix_gap > 0 &&
      int64_t{1} + pc.prefix_gap + pc.window_size + pc.chunk_size > config.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MemorySession: prefix_gap ", pc.prefix_gap, " + W ", pc.window_size, " + C ",
        pc.chunk_size, " places window tokens past the model's ",
        config.max_position_embeddings, " positions"));
  }
  if (pc.has_memory_kv()) {
    if (auto s = CheckMemoryKv(*engine, pc); !s.ok()) return s;
  }
  return std::unique_ptr<MemorySession>(new MemorySession(engine, projector, options));
}

absl::Status MemorySession::CheckMemoryKv(const engine::Engine& engine, const ProjectorConfig& pc) {
  const model::ModelConfig& config = engine.config();
  if (pc.memory_kv_layers != config.num_layers || pc.memory_kv_dim != config.kv_dim()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "MemorySession: the projector's memory K/V maps are for ", pc.memory_kv_layers,
        " layers of ", pc.memory_kv_dim, " K/V channels, the model has ", config.num_layers,
        " of ", config.kv_dim()));
  }
  // The maps are added to the expanded memory's cache rows through host copies, which
  // assumes an F32 cache whose Forward has finished when it returns (the CPU backends).
  if (engine.pool().dtype() != core::DType::kF32) {
    return absl::UnimplementedError(
        "MemorySession: per-layer memory K/V (projector memory_kv_layers) needs an F32 KV "
        "cache, not int8");
  }
  if (engine.backend().Name().rfind("cpu", 0) != 0) {
    return absl::UnimplementedError(absl::StrCat(
        "MemorySession: per-layer memory K/V (projector memory_kv_layers) runs on the CPU "
        "backends only, not on ", engine.backend().Name()));
  }
  return absl::OkStatus();
}

MemorySession::MemorySession(engine::Engine* engine, const Projector* projector,
                             const MemorySessionOptions& options)
    : engine_(engine),
      projector_(projector),
      mode_(options.mode),
      fp16_memory_(options.fp16_memory),
      window_size_(options.mode == KvMode::kMemoryOnly ? projector->config().memory_only_window
                                                       : projector->config().window_size),
      chunk_size_(projector->config().chunk_size),
      mem_slots_(projector->config().mem_slots),
      hidden_size_(engine->config().hidden_size),
      vocab_size_(engine->config().vocab_size),
      input_layers_(projector->config().input_layers),
      hidden_width_(projector->config().input_width()),
      sink_tokens_(projector->config().sink_tokens),
      cache_(engine->NewCache(CachePolicy(options.mode, projector->config()))) {
  sinks_.reserve(sink_tokens_);
  window_.reserve(window_size_ + chunk_size_);
  memory_.reserve(static_cast<size_t>(mem_slots_) * hidden_size_);
  new_memory_.resize(static_cast<size_t>(mem_slots_) * hidden_size_);
  chunk_hidden_.resize(static_cast<size_t>(chunk_size_) * hidden_width_);
  logits_.resize(vocab_size_);
  const ProjectorConfig& pc = projector->config();
  if (pc.has_memory_kv()) {
    memory_kv_.resize(static_cast<size_t>(pc.memory_kv_layers) * 2 * mem_slots_ * pc.memory_kv_dim);
    kv_rows_.resize(memory_kv_.size());
    kv_stream_ = engine->backend().CreateStream();
  }
}

absl::Status MemorySession::CheckIds(std::span<const int32_t> token_ids) const {
  for (int32_t id : token_ids) {
    if (id < 0 || id >= vocab_size_) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " out of range [0, ", vocab_size_, ")"));
    }
  }
  return absl::OkStatus();
}

std::span<const float> MemorySession::Logits() const {
  if (!has_logits_) return {};
  return logits_;
}

// ---- The algorithm (docs/memory-mode.md) ---------------------------------------------

absl::Status MemorySession::Prefill(std::span<const int32_t> token_ids) {
  if (token_ids.empty()) return absl::InvalidArgumentError("Prefill: no tokens");
  if (auto s = CheckIds(token_ids); !s.ok()) return s;
  // Step 5: a prompt takes the same path as generated tokens, in chunks that fill the
  // window up to W + C, folding in between.
  // An observer (session.h) sees every row: forwards of at most kObservedRows rows (the
  // folds fall where they would anyway: FoldIfFull only folds a full window).
  const bool observed = static_cast<bool>(row_observer());
  auto rows = [&](bool last) {
    return observed ? RowSelect::kAll : last ? RowSelect::kLast : RowSelect::kNone;
  };
  size_t fed = 0;
  if (sinks_.size() < static_cast<size_t>(sink_tokens_)) {
    fed = std::min(static_cast<size_t>(sink_tokens_) - sinks_.size(), token_ids.size());
    const auto ids = token_ids.first(fed);
    if (auto s = ForwardSinks(ids, rows(fed == token_ids.size())); !s.ok()) return s;
    sinks_.insert(sinks_.end(), ids.begin(), ids.end());
    total_tokens_ += static_cast<int64_t>(fed);
  }
  while (fed < token_ids.size()) {
    if (auto s = FoldIfFull(); !s.ok()) return s;
    const size_t room = static_cast<size_t>(window_size_ + chunk_size_) - window_.size();
    const size_t n = std::min(
        {room, token_ids.size() - fed, observed ? size_t{kObservedRows} : token_ids.size()});
    const auto ids = token_ids.subspan(fed, n);
    const int first = static_cast<int>(window_.size());
    if (auto s = ForwardWindow(ids, first, rows(fed + n == token_ids.size())); !s.ok()) {
      return s;
    }
    window_.insert(window_.end(), ids.begin(), ids.end());
    total_tokens_ += static_cast<int64_t>(n);
    fed += n;
  }
  return absl::OkStatus();
}

absl::Status MemorySession::Append(int32_t token_id) {
  SequenceInput input;
  if (auto s = PrepareAppend(token_id, &input); !s.ok()) return s;
  const int prefix_len = cache_->prefix_len(), main_len = cache_->main_len();
  if (auto s = engine_->Forward({&input, 1}, &result_); !s.ok()) {
    cache_->Truncate(prefix_len, main_len);
    return s;
  }
  return FinishAppend(result_.outputs[0]);
}

absl::Status MemorySession::PrepareAppend(int32_t token_id, SequenceInput* input) {
  if (auto s = CheckIds({&token_id, 1}); !s.ok()) return s;
  if (auto s = FoldIfFull(); !s.ok()) return s;
  pending_token_ = token_id;
  pending_sink_ = sinks_.size() < static_cast<size_t>(sink_tokens_);
  pending_hidden_ = !pending_sink_ && static_cast<int>(window_.size()) < chunk_size_;
  *input = SequenceInput{};
  input->cache = cache_.get();
  input->token_ids = {&pending_token_, 1};
  input->mask = MaskKind::kCausal;
  input->logits = RowSelect::kLast;
  input->hidden = pending_hidden_ ? RowSelect::kLast : RowSelect::kNone;
  input->hidden_layers = input_layers_;
  return absl::OkStatus();
}

absl::Status MemorySession::FinishAppend(const SequenceOutput& output) {
  if (output.num_logit_rows != 1 || output.logits.size() != logits_.size() ||
      (pending_hidden_ && output.num_hidden_rows != 1)) {
    return absl::InternalError("MemorySession: unexpected Forward output shape");
  }
  std::copy(output.logits.begin(), output.logits.end(), logits_.begin());
  has_logits_ = true;
  if (pending_hidden_) KeepHidden(output, static_cast<int>(window_.size()));
  if (pending_sink_) {
    sinks_.push_back(pending_token_);
  } else {
    window_.push_back(pending_token_);
  }
  ++total_tokens_;
  return absl::OkStatus();
}

absl::Status MemorySession::CopyPrefixFrom(const engine::Session& other_session, int64_t tokens) {
  const auto* other = dynamic_cast<const MemorySession*>(&other_session);
  if (other == nullptr || other->engine_ != engine_ || other->projector_ != projector_ ||
      other->mode_ != mode_ || other->fp16_memory_ != fp16_memory_) {
    return absl::FailedPreconditionError(
        "CopyFrom: the other session differs in kind, engine, projector or mode");
  }
  if (auto s = CheckCopy(*other, tokens); !s.ok()) return s;
  if (tokens != other->total_tokens_) {
    return absl::FailedPreconditionError(absl::StrCat("CopyPrefixFrom: a ", core::KvModeName(mode_),
                                                      " session is copied whole, not its first ",
                                                      tokens, " tokens"));
  }
  if (auto s = cache_->CopyFrom(*other->cache_); !s.ok()) return s;
  memory_ = other->memory_;
  sinks_ = other->sinks_;
  window_ = other->window_;
  chunk_hidden_ = other->chunk_hidden_;
  logits_ = other->logits_;
  has_logits_ = other->has_logits_;
  cache_stale_ = other->cache_stale_;
  total_tokens_ = other->total_tokens_;
  tokens_folded_ = other->tokens_folded_;
  memory_kv_ = other->memory_kv_;
  return absl::OkStatus();
}

absl::Status MemorySession::RebuildIfStale() {
  if (!cache_stale_) return absl::OkStatus();
  // The same three steps as ImportState, so a fold and a restore build the same cache.
  cache_->Clear();
  if (!sinks_.empty()) {
    if (auto s = ForwardSinks(sinks_, RowSelect::kNone); !s.ok()) return s;
  }
  if (auto s = ExpandMemory(); !s.ok()) return s;
  if (!window_.empty()) {
    if (auto s = ForwardWindow(window_, 0, RowSelect::kNone); !s.ok()) return s;
  }
  cache_stale_ = false;
  return absl::OkStatus();
}

absl::Status MemorySession::FoldIfFull() {
  if (auto s = RebuildIfStale(); !s.ok()) return s;
  if (static_cast<int>(window_.size()) < window_size_ + chunk_size_) return absl::OkStatus();
  const auto start = std::chrono::steady_clock::now();
  // mem <- Projector(concat(mem, H)), H = hidden states of the oldest C window tokens.
  if (auto s = projector_->Forward(memory_, chunk_hidden_, new_memory_, &projector_scratch_);
      !s.ok()) {
    return s;
  }
  const auto projected = std::chrono::steady_clock::now();
  stats_.projector_seconds += std::chrono::duration<double>(projected - start).count();
  if (fp16_memory_) {
    for (float& v : new_memory_) v = Fp16ToFp32(Fp32ToFp16(v));
  }
  memory_.assign(new_memory_.begin(), new_memory_.end());
  // Drop the folded ids; the remaining W keep positions 1..W after the re-prefill.
  window_.erase(window_.begin(), window_.begin() + chunk_size_);
  tokens_folded_ += chunk_size_;
  // The state (mem, w) is now final; the caches below are derived from it. If deriving
  // fails (KV pool exhausted), they are rebuilt on the next call.
  cache_stale_ = true;
  if (auto s = RebuildIfStale(); !s.ok()) return s;
  ++stats_.num_folds;
  stats_.refill_tokens += static_cast<int64_t>(sinks_.size() + window_.size());
  stats_.fold_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return absl::OkStatus();
}

absl::Status MemorySession::ExpandMemory() {
  if (memory_.empty()) return absl::OkStatus();
  const auto start = std::chrono::steady_clock::now();
  SequenceInput input;
  input.cache = cache_.get();
  input.embeddings = memory_;
  input.mask = MaskKind::kBidirectionalPrefix;  // position 0, memory <-> memory only
  input.logits = RowSelect::kNone;
  input.hidden = RowSelect::kNone;
  absl::Status status = engine_->Forward({&input, 1}, &result_);
  if (status.ok() && projector_->config().has_memory_kv()) status = AddMemoryKv();
  stats_.expand_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return status;
}

absl::Status MemorySession::AddMemoryKv() {
  if (auto s = projector_->MemoryKv(memory_, memory_kv_, &projector_scratch_); !s.ok()) return s;
  engine::BlockPool& pool = engine_->pool();
  kernels::Backend& backend = engine_->backend();
  const int bs = pool.block_size(), kv_dim = projector_->config().memory_kv_dim;
  const int first = cache_->prefix_len() - mem_slots_;  // the memory follows the sinks
  const auto& blocks = cache_->prefix_blocks();
  // Visits the memory's cache rows in memory_kv_'s order [L, 2 (K, V), M, kv_dim], each
  // head of a row (a block holds its entries head by head: [heads, bs, head_dim]) with its
  // place in kv_rows_.
  auto each_row = [&](auto&& fn) -> absl::Status {
    float* host = kv_rows_.data();
    for (int layer = 0; layer < projector_->config().memory_kv_layers; ++layer) {
      for (const kernels::Tensor& cache : {pool.k_cache(layer), pool.v_cache(layer)}) {
        // heads * hd == kv_dim: the projector's width was checked against the model's.
        const int heads = static_cast<int>(cache.dim(1)), hd = static_cast<int>(cache.dim(3));
        for (int j = 0; j < mem_slots_; ++j, host += kv_dim) {
          const int entry = first + j;
          const kernels::Tensor block = cache.Rows(blocks[entry / bs], 1).Reshape({heads * bs, hd});
          for (int h = 0; h < heads; ++h) {
            if (absl::Status s = fn(block.Rows(h * bs + entry % bs, 1), host + h * hd); !s.ok()) {
              return s;
            }
          }
        }
      }
    }
    return absl::OkStatus();
  };
  absl::Status s = each_row([&](const kernels::Tensor& row, float* host) {
    return backend.CopyToHost(*kv_stream_, row, host);
  });
  if (s.ok()) s = backend.Synchronize(*kv_stream_);
  if (!s.ok()) return s;
  for (size_t i = 0; i < kv_rows_.size(); ++i) kv_rows_[i] += memory_kv_[i];
  s = each_row([&](const kernels::Tensor& row, float* host) {
    return backend.CopyToDevice(*kv_stream_, host, row);
  });
  if (s.ok()) s = backend.Synchronize(*kv_stream_);
  return s;
}

absl::Status MemorySession::ForwardSinks(std::span<const int32_t> ids, RowSelect logits) {
  SequenceInput input;
  input.cache = cache_.get();
  input.token_ids = ids;
  input.mask = MaskKind::kCausal;  // the policy's auto_prefix_tokens place them in the prefix
  input.logits = logits;
  input.hidden = RowSelect::kNone;
  const int prefix_len = cache_->prefix_len(), main_len = cache_->main_len();
  if (auto s = engine_->Forward({&input, 1}, &result_); !s.ok()) {
    cache_->Truncate(prefix_len, main_len);
    return s;
  }
  return TakeLogits(result_.outputs[0], logits, ids.size());
}

absl::Status MemorySession::TakeLogits(const SequenceOutput& out, RowSelect logits, size_t fed) {
  if (logits == RowSelect::kNone) return absl::OkStatus();
  const size_t rows = logits == RowSelect::kAll ? fed : 1;
  if (static_cast<size_t>(out.num_logit_rows) != rows ||
      out.logits.size() != logits_.size() * rows) {
    return absl::InternalError("MemorySession: unexpected logits shape");
  }
  if (logits == RowSelect::kAll) ObserveRows(out);
  const auto last = out.logits.last(logits_.size());
  std::copy(last.begin(), last.end(), logits_.begin());
  has_logits_ = true;
  return absl::OkStatus();
}

absl::Status MemorySession::ForwardWindow(std::span<const int32_t> ids, int first,
                                          RowSelect logits) {
  SequenceInput input;
  input.cache = cache_.get();
  input.token_ids = ids;
  input.mask = MaskKind::kCausal;  // positions 1 + main index (KvPolicy::Memory)
  input.logits = logits;
  // Only entries that a fold may read need their hidden states.
  input.hidden = first < chunk_size_ ? RowSelect::kAll : RowSelect::kNone;
  input.hidden_layers = input_layers_;
  const int prefix_len = cache_->prefix_len(), main_len = cache_->main_len();
  if (auto s = engine_->Forward({&input, 1}, &result_); !s.ok()) {
    cache_->Truncate(prefix_len, main_len);  // roll back rows of earlier internal chunks
    return s;
  }
  const SequenceOutput& out = result_.outputs[0];
  if (auto s = TakeLogits(out, logits, ids.size()); !s.ok()) return s;
  if (first < chunk_size_) KeepHidden(out, first);
  return absl::OkStatus();
}

void MemorySession::KeepHidden(const SequenceOutput& output, int first) {
  const int rows = std::min(output.num_hidden_rows, chunk_size_ - first);
  for (int r = 0; r < rows; ++r) {
    std::copy_n(output.hidden.begin() + static_cast<size_t>(r) * hidden_width_, hidden_width_,
                chunk_hidden_.begin() + static_cast<size_t>(first + r) * hidden_width_);
  }
}

// ---- Checkpoints ------------------------------------------------------------------------

absl::StatusOr<engine::SessionState> MemorySession::ExportState() const {
  engine::SessionState state;
  state.mode = mode_;
  state.window_size = window_size_;
  state.chunk_size = chunk_size_;
  state.total_tokens = total_tokens_;
  state.tokens_folded = tokens_folded_;
  state.window_token_ids = window_;
  state.sink_tokens = sink_tokens_;
  state.sink_token_ids = sinks_;
  state.mem_slots = memory_.empty() ? 0 : mem_slots_;
  state.memory = memory_;
  return state;
}

absl::Status MemorySession::ImportState(const engine::SessionState& state) {
  if (total_tokens_ != 0 || !memory_.empty()) {
    return absl::FailedPreconditionError("ImportState: the session is not fresh");
  }
  if (state.mode != mode_ || state.window_size != window_size_ || state.chunk_size != chunk_size_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ImportState: state is ", core::KvModeName(state.mode), " W=", state.window_size,
        " C=", state.chunk_size, ", session is ", core::KvModeName(mode_), " W=", window_size_,
        " C=", chunk_size_));
  }
  const bool has_memory = state.mem_slots != 0;
  if ((has_memory && state.mem_slots != mem_slots_) ||
      state.memory.size() != static_cast<size_t>(state.mem_slots) * hidden_size_ ||
      has_memory != (state.tokens_folded > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("ImportState: memory of ", state.mem_slots,
                                                   " slots (", state.memory.size(),
                                                   " floats) does not fit M = ", mem_slots_,
                                                   ", d = ", hidden_size_));
  }
  const size_t num_sinks = state.sink_token_ids.size();
  if (state.sink_tokens != sink_tokens_ || num_sinks > static_cast<size_t>(sink_tokens_) ||
      (num_sinks < static_cast<size_t>(sink_tokens_) &&
       (!state.window_token_ids.empty() || has_memory))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ImportState: ", num_sinks, " sink ids of sink_tokens ", state.sink_tokens,
        " do not fit the projector's S = ", sink_tokens_, " (all S come before any window id)"));
  }
  if (state.window_token_ids.size() > static_cast<size_t>(window_size_ + chunk_size_) ||
      state.total_tokens != state.tokens_folded +
                                static_cast<int64_t>(num_sinks + state.window_token_ids.size())) {
    return absl::InvalidArgumentError("ImportState: window does not fit W + C or token counts differ");
  }
  if (auto s = CheckIds(state.sink_token_ids); !s.ok()) return s;
  if (auto s = CheckIds(state.window_token_ids); !s.ok()) return s;
  // Prefill the sinks, expand mem, prefill the window ids: the caches are exactly
  // Forward(sinks, mem, w) again.
  if (num_sinks > 0) {
    if (auto s = ForwardSinks(state.sink_token_ids,
                              state.window_token_ids.empty() ? RowSelect::kLast : RowSelect::kNone);
        !s.ok()) {
      return s;
    }
  }
  memory_ = state.memory;
  if (auto s = ExpandMemory(); !s.ok()) return s;
  if (!state.window_token_ids.empty()) {
    if (auto s = ForwardWindow(state.window_token_ids, 0, RowSelect::kLast); !s.ok()) return s;
  }
  sinks_ = state.sink_token_ids;
  window_ = state.window_token_ids;
  total_tokens_ = state.total_tokens;
  tokens_folded_ = state.tokens_folded;
  return absl::OkStatus();
}

// ---- Factory ----------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<engine::Session>> CreateSession(engine::Engine* engine,
                                                               const engine::SessionOptions& options,
                                                               const Projector* projector,
                                                               bool fp16_memory) {
  if (options.mode != KvMode::kMemory && options.mode != KvMode::kMemoryOnly) {
    return engine::CreatePlainSession(engine, options);
  }
  if (projector == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("mode ", core::KvModeName(options.mode),
                                                   " needs a projector (--projector DIR)"));
  }
  MemorySessionOptions memory_options;
  memory_options.mode = options.mode;
  memory_options.fp16_memory = fp16_memory;
  auto session = MemorySession::Create(engine, projector, memory_options);
  if (!session.ok()) return session.status();
  return std::unique_ptr<engine::Session>(std::move(*session));
}

}  // namespace kvfold::memory
