// RuntimeTurnPort: the HTTP front's TurnPort (http/turn_port.h) on this replica's runtime —
// no gRPC in between. Authentication is the gRPC service's (the same token table and
// store credential rule), turns are runtime turns, session forks and heads go to the store
// gateway.
//
// Threads: a turn's progress notifications are drained by `drain_threads` threads and its
// Finish (the checkpoint, a store round trip) runs on `finish_threads` threads; neither
// grows with the number of streams, and a turn waiting for the scheduler holds none.
#ifndef KVFOLD_INFERENCE_SVC_SERVICE_HTTP_TURN_PORT_H_
#define KVFOLD_INFERENCE_SVC_SERVICE_HTTP_TURN_PORT_H_

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/auth.h"
#include "inference_svc/http/turn_port.h"
#include "inference_svc/runtime/runtime.h"
#include "inference_svc/service/inference_metrics.h"
#include "inference_svc/service/session_admin.h"
#include "inference_svc/service/store_gateway.h"

namespace kvfold::service {

// A fixed set of threads running queued tasks in order of arrival.
class TaskPool {
 public:
  explicit TaskPool(int threads);
  ~TaskPool();  // runs what is queued, then joins
  void Post(std::function<void()> task);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

struct RuntimeTurnPortDeps {
  runtime::Runtime* runtime = nullptr;
  StoreGateway* store = nullptr;
  const TokenTable* tokens = nullptr;  // null: auth off
  std::string store_token;             // the store credential of callers without a token
  http::ModelCard model;
  uint64_t kv_bytes_per_token = 0;  // what a resident token costs the KV pool
  std::string replica;             // reported in usage
  std::function<absl::Status()> ready;  // the replica's readiness
  std::function<bool()> draining;  // true once the replica refuses new calls
  InferenceMetrics* metrics = nullptr;  // turns' admission, restores, tokens, TTFT; null = none
};

class RuntimeTurnPort final : public http::TurnPort {
 public:
  explicit RuntimeTurnPort(RuntimeTurnPortDeps deps, int drain_threads = 2, int finish_threads = 8);
  // Drain(0): cancels what still runs and waits for the ends.
  ~RuntimeTurnPort() override;

  // Lets the turns in flight run up to `timeout`, then cancels the rest; returns once every
  // turn it started has ended (its observer got OnDone), or after 30 s more.
  void Drain(absl::Duration timeout);

  absl::StatusOr<http::Caller> Authenticate(std::string_view authorization) override;
  http::ModelCard Model() override { return deps_.model; }
  absl::Status Ready() override { return deps_.ready(); }
  absl::Status CreateSession(const http::Caller& caller, const std::string& session_id) override;
  absl::StatusOr<uint64_t> HeadVersion(const http::Caller& caller,
                                       const std::string& session_id) override;
  absl::Status ForkSession(const http::Caller& caller, const std::string& source, uint64_t version,
                           const std::string& new_id) override;
  absl::StatusOr<http::StoredTurn> StoredTurnOf(const http::Caller& caller,
                                                const std::string& session_id,
                                                uint64_t version) override;
  absl::StatusOr<http::SessionTail> TailOf(const http::Caller& caller,
                                           const std::string& session_id,
                                           uint64_t version) override;
  absl::StatusOr<std::string> SessionCall(const http::Caller& caller, http::SessionOp op,
                                          const std::string& session_id,
                                          const std::string& request_json) override;
  std::shared_ptr<http::PromptGroup> GroupPrompt(int turns) override;
  absl::StatusOr<std::shared_ptr<http::RunningTurn>> StartTurn(
      const http::Caller& caller, const http::TurnSpec& spec,
      std::shared_ptr<http::TurnObserver> observer) override;

 private:
  runtime::Caller ToRuntime(const http::Caller& caller) const;
  // Version `version` of the caller's session, its block checksum and turn record
  // verified (DataLoss otherwise).
  absl::StatusOr<memory::MemoryBlock> VerifiedBlock(const http::Caller& caller,
                                                    const std::string& session_id,
                                                    uint64_t version);

  const RuntimeTurnPortDeps deps_;
  const SessionAdmin sessions_;
  std::shared_ptr<std::atomic<int>> active_ = std::make_shared<std::atomic<int>>(0);
  std::mutex turns_mu_;
  std::vector<std::weak_ptr<http::RunningTurn>> turns_;
  // Declared last: destroyed (joined) first, while everything above still exists.
  TaskPool finish_pool_;
  TaskPool drain_pool_;
};

}  // namespace kvfold::service

#endif  // KVFOLD_INFERENCE_SVC_SERVICE_HTTP_TURN_PORT_H_
