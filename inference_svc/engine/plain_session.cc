// Sessions for the plain KV modes: full, sliding window, sink + window. The KvCache's
// policy does all the windowing; this class tracks the ids that mirror the cache.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/session_geometry.h"
#include "core/status_macros.h"
#include "inference_svc/engine/prefill_cursor.h"
#include "inference_svc/engine/session.h"

namespace kvfold::engine {
namespace {

class PlainSession : public Session {
 public:
  PlainSession(Engine* engine, const SessionOptions& options, std::unique_ptr<KvCache> cache)
      : engine_(engine), options_(options), cache_(std::move(cache)) {
    logits_.reserve(engine->config().vocab_size);
    if (options.mode != KvMode::kFull) window_ids_.reserve(2 * options.window_size + 16);
    sink_ids_.reserve(options.sink_tokens);
  }

  KvMode mode() const override { return options_.mode; }

  absl::Status Prefill(std::span<const int32_t> token_ids) override {
    if (token_ids.empty()) return absl::InvalidArgumentError("Prefill: no tokens");
    if (!row_observer()) return Feed(token_ids, RowSelect::kLast);
    // Every row's logits, a bounded number of rows per forward (the bits do not depend on
    // how a prompt is split: docs/contracts.md, "Bitwise rule").
    for (size_t fed = 0; fed < token_ids.size(); fed += kObservedRows) {
      const auto ids =
          token_ids.subspan(fed, std::min<size_t>(kObservedRows, token_ids.size() - fed));
      if (absl::Status s = Feed(ids, RowSelect::kAll); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // A decode step: never observed.
  absl::Status Append(int32_t token_id) override {
    return Feed(std::span<const int32_t>(&token_id, 1), RowSelect::kLast);
  }

  // In pieces (session.h): a cursor per prompt, dropped once it is fed. An observed prompt
  // takes the default path (whole-token chunks through Prefill), which has every row's
  // logits.
  absl::Status StartPrefill(std::span<const int32_t> token_ids) override {
    observed_pieces_ = static_cast<bool>(row_observer());
    if (observed_pieces_) return Session::StartPrefill(token_ids);
    if (cursor_ == nullptr) {
      auto cursor = PrefillCursor::Create(engine_);
      if (!cursor.ok()) return cursor.status();
      cursor_ = std::move(*cursor);
    }
    if (absl::Status s = cursor_->Start(cache_.get(), token_ids); !s.ok()) return s;
    cursor_ids_ = token_ids;
    return absl::OkStatus();
  }

  absl::StatusOr<bool> ContinuePrefill(double budget_ms) override {
    if (observed_pieces_) return Session::ContinuePrefill(budget_ms);
    if (cursor_ == nullptr || !cursor_->active()) {
      return absl::FailedPreconditionError("ContinuePrefill: no prefill started");
    }
    absl::StatusOr<bool> done = cursor_->Run(budget_ms);
    if (!done.ok() || !*done) return done;
    Record(cursor_ids_, cursor_->logits());
    cursor_.reset();  // its activations are only needed while a prompt is in flight
    return true;
  }

  std::span<const float> Logits() const override { return logits_; }
  int64_t TotalTokens() const override { return total_; }
  int64_t ResidentTokens() const override { return cache_->resident_tokens(); }
  size_t KvBytesResident() const override { return cache_->ResidentBytes(); }

  absl::StatusOr<SessionState> ExportState() const override {
    SessionState st;
    st.mode = options_.mode;
    st.window_size = options_.mode == KvMode::kFull ? 0 : options_.window_size;
    st.sink_tokens = options_.mode == KvMode::kSink ? options_.sink_tokens : 0;
    st.total_tokens = total_;
    st.window_token_ids.assign(window_ids_.begin() + window_front_, window_ids_.end());
    st.sink_token_ids = sink_ids_;
    return st;
  }

  absl::Status ImportState(const SessionState& st) override {
    if (total_ != 0) return absl::FailedPreconditionError("ImportState: session is not fresh");
    if (st.mode != options_.mode) {
      return absl::InvalidArgumentError(absl::StrCat("ImportState: state is mode ",
                                                     KvModeName(st.mode), ", session is ",
                                                     KvModeName(options_.mode)));
    }
    if (options_.mode != KvMode::kFull && st.window_size != options_.window_size) {
      return absl::InvalidArgumentError("ImportState: window_size differs");
    }
    if (options_.mode == KvMode::kSink && st.sink_tokens != options_.sink_tokens) {
      return absl::InvalidArgumentError("ImportState: sink_tokens differs");
    }
    if (options_.mode != KvMode::kSink && !st.sink_token_ids.empty()) {
      return absl::InvalidArgumentError("ImportState: sink ids for a non-sink session");
    }
    if (static_cast<int64_t>(st.sink_token_ids.size() + st.window_token_ids.size()) >
        st.total_tokens) {
      return absl::InvalidArgumentError("ImportState: more ids than total_tokens");
    }
    std::vector<int32_t> ids = st.sink_token_ids;
    ids.insert(ids.end(), st.window_token_ids.begin(), st.window_token_ids.end());
    if (!ids.empty()) {
      if (absl::Status s = Feed(ids, RowSelect::kLast); !s.ok()) {
        cache_->Clear();
        window_ids_.clear();
        window_front_ = 0;
        sink_ids_.clear();
        total_ = 0;
        logits_.clear();
        return s;
      }
    }
    total_ = st.total_tokens;
    return absl::OkStatus();
  }

  absl::Status CopyPrefixFrom(const Session& other_session, int64_t tokens) override {
    const auto* other = dynamic_cast<const PlainSession*>(&other_session);
    if (other == nullptr || other->engine_ != engine_ || other->options_.mode != options_.mode ||
        (options_.mode != KvMode::kFull && other->options_.window_size != options_.window_size) ||
        (options_.mode == KvMode::kSink && other->options_.sink_tokens != options_.sink_tokens)) {
      return absl::FailedPreconditionError(
          "CopyFrom: the other session differs in kind, engine, mode or geometry");
    }
    KVFOLD_RETURN_IF_ERROR(CheckCopy(*other, tokens));
    const bool whole = tokens == other->total_;
    // A windowed session's prefix: while it has evicted nothing its cache is full mode's
    // (sinks in their own segment, copied whole), and the first tokens' entries are those
    // a session fed only them holds.
    const int64_t sinks = static_cast<int64_t>(other->sink_ids_.size());
    if (!whole && options_.mode != KvMode::kFull &&
        (other->cache_->resident_tokens() != other->total_ || tokens <= sinks)) {
      return absl::FailedPreconditionError(
          absl::StrCat("CopyPrefixFrom: the first ", tokens, " of ", other->total_, " tokens of a ",
                       KvModeName(options_.mode), " session that ",
                       tokens <= sinks ? "ends among its sink tokens" : "has evicted entries",
                       " cannot be copied"));
    }
    const int main_len = whole ? other->cache_->main_len() : static_cast<int>(tokens - sinks);
    if (absl::Status s = cache_->CopyFrom(*other->cache_, main_len); !s.ok()) return s;
    const auto first =
        other->window_ids_.begin() + static_cast<std::ptrdiff_t>(other->window_front_);
    window_ids_.assign(first, whole ? other->window_ids_.end() : first + main_len);
    window_front_ = 0;
    sink_ids_ = other->sink_ids_;
    if (whole) {
      logits_ = other->logits_;
    } else {
      logits_.clear();
    }
    total_ = whole ? other->total_ : tokens;
    return absl::OkStatus();
  }

  absl::Status PrepareAppend(int32_t token_id, SequenceInput* input) override {
    pending_id_ = token_id;
    *input = SequenceInput();
    input->cache = cache_.get();
    input->token_ids = std::span<const int32_t>(&pending_id_, 1);
    input->logits = RowSelect::kLast;
    return absl::OkStatus();
  }

  absl::Status FinishAppend(const SequenceOutput& output) override {
    Record(std::span<const int32_t>(&pending_id_, 1), output.logits);
    return absl::OkStatus();
  }

 private:
  // Either path's prompt in pieces.
  bool PrefillInFlight() const override {
    return (cursor_ != nullptr && cursor_->active()) || Session::PrefillInFlight();
  }

  // One forward over `ids`; the observer sees its rows when `rows` is kAll.
  absl::Status Feed(std::span<const int32_t> ids, RowSelect rows) {
    SequenceInput in;
    in.cache = cache_.get();
    in.token_ids = ids;
    in.logits = rows;
    if (absl::Status s = engine_->Forward(std::span<const SequenceInput>(&in, 1), &result_);
        !s.ok()) {
      return s;
    }
    const SequenceOutput& out = result_.outputs[0];
    if (rows == RowSelect::kAll) ObserveRows(out);
    const size_t vocab = static_cast<size_t>(engine_->config().vocab_size);
    Record(ids, out.logits.last(vocab));
    return absl::OkStatus();
  }

  // Mirrors the cache: sink ids go to the prefix while main is empty; the main ids are
  // trimmed to the cache's resident main entries.
  void Record(std::span<const int32_t> ids, std::span<const float> logits) {
    for (int32_t id : ids) {
      if (options_.mode == KvMode::kSink && window_ids_.size() == window_front_ &&
          static_cast<int>(sink_ids_.size()) < options_.sink_tokens) {
        sink_ids_.push_back(id);
      } else {
        window_ids_.push_back(id);
      }
    }
    const size_t resident = static_cast<size_t>(cache_->main_len());
    if (window_ids_.size() - window_front_ > resident) {
      window_front_ = window_ids_.size() - resident;
    }
    if (window_front_ > 0 && window_front_ * 2 >= window_ids_.capacity()) {
      window_ids_.erase(window_ids_.begin(), window_ids_.begin() + window_front_);  // no realloc
      window_front_ = 0;
    }
    total_ += static_cast<int64_t>(ids.size());
    logits_.assign(logits.begin(), logits.end());
  }

  Engine* engine_;
  SessionOptions options_;
  std::unique_ptr<KvCache> cache_;
  std::vector<int32_t> window_ids_;  // [window_front_, end) mirror the main segment
  size_t window_front_ = 0;
  std::vector<int32_t> sink_ids_;
  std::vector<float> logits_;
  int64_t total_ = 0;
  int32_t pending_id_ = 0;
  ForwardResult result_;
  // Declared after cache_: destroyed first, so an abandoned prompt rolls the cache back.
  std::unique_ptr<PrefillCursor> cursor_;
  std::span<const int32_t> cursor_ids_;
  bool observed_pieces_ = false;  // the prompt in pieces runs the default path
};

}  // namespace

absl::StatusOr<std::unique_ptr<Session>> CreatePlainSession(Engine* engine,
                                                            const SessionOptions& options) {
  if (engine == nullptr) return absl::InvalidArgumentError("CreatePlainSession: null engine");
  if (core::IsMemoryMode(options.mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CreatePlainSession: mode ", KvModeName(options.mode),
        " is a memory mode (inference_svc/memory/ creates those sessions)"));
  }
  // Full mode ignores window_size; sink_tokens counts in sink mode only.
  const core::SessionGeometry geometry{
      .mode = options.mode,
      .window_size = options.mode == KvMode::kFull ? 0 : options.window_size,
      .sink_tokens = options.mode == KvMode::kSink ? options.sink_tokens : 0};
  if (absl::Status s = core::ValidateSessionGeometry(geometry); !s.ok()) return s;
  KvPolicy policy;
  switch (options.mode) {
    case KvMode::kFull:
      policy = KvPolicy::Full();
      break;
    case KvMode::kSliding:
      policy = KvPolicy::Sliding(options.window_size);
      break;
    case KvMode::kSink:
      policy = KvPolicy::Sink(options.sink_tokens, options.window_size);
      break;
    case KvMode::kMemory:
    case KvMode::kMemoryOnly:
      break;  // refused above
  }
  return std::unique_ptr<Session>(new PlainSession(engine, options, engine->NewCache(policy)));
}

}  // namespace kvfold::engine
