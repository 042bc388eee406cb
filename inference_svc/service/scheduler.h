// Scheduler: ONE thread that owns the engine and runs every turn on this replica.
//
// Each loop iteration does, in order:
//   1. destroys retired engine sessions (their KV blocks return to the pool),
//   2. admits queued turns (up to max_active_sessions) and drops cancelled ones,
//   3. ONE unit of prompt work for ONE turn, round robin: create/import a session (a
//      resume), or prefill the next prefill_chunk_tokens prompt tokens, so a long prompt
//      never stalls the sessions that are decoding,
//   4. ONE decode step for EVERY decoding turn: with batching on, a single ragged
//      Forward over all of them (engine::AppendBatch: shared matmuls); with batching off,
//      one Forward per session (the benchmark's baseline).
// Every sampled token is fed back into its session, the last one too, so a finished
// turn's state includes everything it emitted; the next turn starts from that state.
// A turn ends with kDone (final_state exported) or kError; a cancelled turn ends with
// kError(CANCELLED). gRPC handlers never run engine work.
#ifndef KVFOLD_INFERENCE_SVC_SERVICE_SCHEDULER_H_
#define KVFOLD_INFERENCE_SVC_SERVICE_SCHEDULER_H_

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "inference_svc/engine/engine.h"
#include "inference_svc/engine/session.h"
#include "inference_svc/service/live_session.h"

namespace kvfold::service {

struct SchedulerOptions {
  bool batching = true;
  int prefill_chunk_tokens = 256;
  int max_active_sessions = 64;
};

class Scheduler {
 public:
  // Builds a fresh engine session for a resolved SessionConfig (plain or memory mode).
  using SessionFactory =
      std::function<absl::StatusOr<std::unique_ptr<engine::Session>>(const v1::SessionConfig&)>;

  // `engine` must outlive the scheduler. Starts the thread.
  Scheduler(engine::Engine* engine, SessionFactory factory, const SchedulerOptions& options);
  ~Scheduler();  // Stop()

  // Queues a turn. Its events arrive on turn->events.
  void Submit(std::shared_ptr<Turn> turn);

  // Hands an engine session to the scheduler thread for destruction.
  void Retire(engine::Session* session);
  // A deleter that calls Retire (for LiveSession::engine_session).
  EngineSessionDeleter Deleter();

  // Finishes every queued and running turn, then joins the thread. Idempotent.
  void Stop();

  // KV pool utilisation, refreshed by the scheduler thread every iteration.
  uint64_t kv_used_bytes() const { return kv_used_bytes_.load(); }
  uint64_t kv_pool_bytes() const { return kv_pool_bytes_; }
  int active_turns() const { return active_count_.load(); }
  int queued_turns() const;
  // Decode steps and the tokens they produced (all sessions), for metrics.
  uint64_t decode_steps() const { return decode_steps_.load(); }
  uint64_t decoded_tokens() const { return decoded_tokens_.load(); }

 private:
  enum class Phase { kStart, kPrefill, kDecode, kFinish };
  struct Running {
    std::shared_ptr<Turn> turn;
    Phase phase = Phase::kStart;
    size_t prompt_pos = 0;
    int32_t pending_token = -1;  // sampled, emitted, not yet fed
    bool stop_after_feed = false;
    int64_t folded_at_start = 0;
    double fold_seconds_at_start = 0;  // memory modes: MemorySession::stats().fold_seconds
    std::optional<engine::Sampler> sampler;
    Turn::Clock::time_point started;
  };

  void Loop();
  // Step 3; returns false when no turn needed prompt work.
  void PromptStep();
  void DecodeStep();
  // Samples from the session's logits, emits the token and prepares it for feeding.
  void SampleAndEmit(Running& r);
  void Fail(Running& r, absl::Status status);
  void Complete(Running& r);
  void RefreshStats();

  engine::Engine* const engine_;
  const SessionFactory factory_;
  const SchedulerOptions options_;
  const uint64_t kv_pool_bytes_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Turn>> queue_;
  std::vector<engine::Session*> graveyard_;
  bool stop_ = false;

  // Scheduler thread only.
  std::vector<Running> running_;
  size_t prompt_cursor_ = 0;
  std::vector<engine::Session*> batch_sessions_;
  std::vector<int32_t> batch_ids_;
  std::vector<size_t> batch_index_;
  engine::ForwardResult forward_scratch_;

  std::atomic<uint64_t> kv_used_bytes_{0};
  std::atomic<int> active_count_{0};
  std::atomic<uint64_t> decode_steps_{0};
  std::atomic<uint64_t> decoded_tokens_{0};
  std::thread thread_;
};

}  // namespace kvfold::service

#endif  // KVFOLD_INFERENCE_SVC_SERVICE_SCHEDULER_H_
