// StreamWatchdog: cancels streaming calls whose peer stopped moving.
//
// A sync-API handler blocked in ServerReader::Read or ServerWriter::Write waits for the
// peer as long as the connection lives: a client that opens PutBlock streams and sends
// nothing more (or a GetBlock reader that stops reading) would hold a server thread and
// its transfer lease for good. A watched call reports each message it moved; one that
// moved nothing for `idle` is cancelled (ServerContext::TryCancel), which ends the
// blocked Read or Write, and the handler then reports DEADLINE_EXCEEDED for it.
#ifndef KVFOLD_MEMORY_SVC_SERVICE_STREAM_WATCHDOG_H_
#define KVFOLD_MEMORY_SVC_SERVICE_STREAM_WATCHDOG_H_

#include <grpcpp/server_context.h>

#include <atomic>
#include <cstdint>
#include <list>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace kvfold::memory_svc {

class StreamWatchdog {
 private:
  struct Entry {
    grpc::ServerContext* context;
    std::atomic<int64_t> last_ns;  // absl::GetCurrentTimeNanos() of the last move
    std::atomic<bool> paused{false};
    std::atomic<bool> fired{false};
  };

 public:
  // Registration of one call; deregisters when destroyed (before the call's context goes).
  class Watch {
   public:
    Watch(const Watch&) = delete;
    Watch& operator=(const Watch&) = delete;
    ~Watch();
    // The peer moved a message.
    void Progress();
    // While paused the call is never idle (the server, not the peer, is waiting);
    // Progress() resumes.
    void Pause();
    // True once the watchdog cancelled the call.
    bool fired() const { return entry_ != nullptr && entry_->fired.load(); }

   private:
    friend class StreamWatchdog;
    Watch(StreamWatchdog* watchdog, std::list<Entry>::iterator entry);
    StreamWatchdog* watchdog_;
    std::list<Entry>::iterator it_;
    Entry* entry_;
  };

  // `idle` <= 0: nothing is ever cancelled (Watch() still works).
  explicit StreamWatchdog(absl::Duration idle);
  ~StreamWatchdog();
  StreamWatchdog(const StreamWatchdog&) = delete;
  StreamWatchdog& operator=(const StreamWatchdog&) = delete;

  Watch Start(grpc::ServerContext* context);
  absl::Duration idle() const { return idle_; }
  // Calls cancelled since the start.
  uint64_t cancelled() const { return cancelled_.load(); }

 private:
  void Loop();

  const absl::Duration idle_;
  absl::Mutex mu_;
  std::list<Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> cancelled_{0};
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace kvfold::memory_svc

#endif  // KVFOLD_MEMORY_SVC_SERVICE_STREAM_WATCHDOG_H_
