// LiveSession: one session resident on this replica (derived state only), and Turn: one
// Generate/CreateSession unit of work handed to the Scheduler.
//
// Threading: everything under "scheduler-owned" is touched only by the scheduler thread
// (the engine is single-threaded and its KV pool is not thread-safe, so engine sessions
// are created, fed, exported and destroyed on that thread: EngineSessionPtr's deleter
// hands the pointer back to the scheduler). The stats fields are atomics that gRPC
// handler threads may read at any time.
#ifndef KVFOLD_INFERENCE_SVC_SERVICE_LIVE_SESSION_H_
#define KVFOLD_INFERENCE_SVC_SERVICE_LIVE_SESSION_H_

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "inference_svc/engine/sampler.h"
#include "inference_svc/engine/session.h"
#include "kvfold/v1/inference.pb.h"

namespace kvfold::service {

// Destroys engine sessions on the scheduler thread (see the file comment).
struct EngineSessionDeleter {
  std::function<void(engine::Session*)> retire;
  void operator()(engine::Session* s) const {
    if (s == nullptr) return;
    if (retire) {
      retire(s);
    } else {
      delete s;
    }
  }
};
using EngineSessionPtr = std::unique_ptr<engine::Session, EngineSessionDeleter>;

struct LiveSession {
  std::string tenant;
  std::string session_id;
  v1::SessionConfig config;          // resolved: mode, window, sink never UNSPECIFIED/0
  v1::SamplingParams sampling;       // the session's defaults
  int64_t created_unix_ms = 0;

  // True while a turn runs on this copy: a second concurrent Generate for the same
  // session on this replica is ABORTED at once (it would lose the CAS anyway).
  std::atomic<bool> busy{false};

  // --- scheduler-owned -------------------------------------------------------------
  EngineSessionPtr engine_session;   // null until the first turn creates/imports it
  std::array<uint64_t, 4> rng_state{};

  // --- stats (written by the scheduler at the end of a turn) -----------------------
  std::atomic<uint64_t> version{0};  // store version the derived state equals
  std::atomic<int64_t> total_tokens{0};
  std::atomic<int64_t> tokens_folded{0};
  std::atomic<int64_t> resident_tokens{0};
  std::atomic<uint64_t> kv_bytes_resident{0};
};

// What the scheduler streams back to the handler of a turn.
struct TurnEvent {
  enum class Kind { kTokens, kDone, kError };
  Kind kind = Kind::kTokens;
  std::vector<int32_t> token_ids;  // kTokens
  absl::Status status;             // kError
};

class TurnEvents {
 public:
  void Push(TurnEvent event);
  // Waits up to `timeout` for events; moves all pending ones into `out`. Returns false
  // when nothing arrived in time.
  bool PopAll(std::chrono::milliseconds timeout, std::vector<TurnEvent>* out);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<TurnEvent> events_;
};

struct Turn {
  using Clock = std::chrono::steady_clock;

  // --- inputs, fixed before Submit ---------------------------------------------------
  std::shared_ptr<LiveSession> live;
  // Import this state into a fresh engine session before the prompt (a resume from the
  // store); nullopt with live->engine_session == null creates an empty session.
  std::optional<engine::SessionState> restore_state;
  std::vector<int32_t> prompt_ids;
  engine::SamplingParams sampling;   // resolved; max_new_tokens 0 = prefill only
  std::optional<uint64_t> reseed;    // set: the RNG restarts from this seed
  Clock::time_point submitted_at;

  // --- control -----------------------------------------------------------------------
  std::atomic<bool> cancelled{false};
  TurnEvents events;

  // --- results, valid after the kDone event -----------------------------------------
  engine::SessionState final_state;
  std::array<uint64_t, 4> final_rng_state{};
  v1::FinishReason finish_reason = v1::FINISH_REASON_UNSPECIFIED;
  uint32_t generated_tokens = 0;
  int64_t tokens_folded_in_turn = 0;
  double queue_ms = 0, restore_ms = 0, prefill_ms = 0, decode_ms = 0, ttft_ms = 0;
  double fold_ms = 0;  // part of prefill_ms/decode_ms spent folding (memory modes)
};

}  // namespace kvfold::service

#endif  // KVFOLD_INFERENCE_SVC_SERVICE_LIVE_SESSION_H_
