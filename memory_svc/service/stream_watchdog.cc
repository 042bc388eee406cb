#include "memory_svc/service/stream_watchdog.h"

#include <algorithm>

#include "absl/time/clock.h"

namespace kvfold::memory_svc {

StreamWatchdog::Watch::Watch(StreamWatchdog* watchdog, std::list<Entry>::iterator it)
    : watchdog_(watchdog), it_(it), entry_(&*it) {}

StreamWatchdog::Watch::~Watch() {
  absl::MutexLock lock(&watchdog_->mu_);
  watchdog_->entries_.erase(it_);
}

void StreamWatchdog::Watch::Progress() {
  entry_->last_ns.store(absl::GetCurrentTimeNanos(), std::memory_order_relaxed);
  entry_->paused.store(false, std::memory_order_release);
}

void StreamWatchdog::Watch::Pause() { entry_->paused.store(true, std::memory_order_release); }

StreamWatchdog::StreamWatchdog(absl::Duration idle) : idle_(idle) {
  if (idle_ > absl::ZeroDuration()) thread_ = std::thread([this] { Loop(); });
}

StreamWatchdog::~StreamWatchdog() {
  stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

StreamWatchdog::Watch StreamWatchdog::Start(grpc::ServerContext* context) {
  absl::MutexLock lock(&mu_);
  entries_.emplace_back();
  Entry& entry = entries_.back();
  entry.context = context;
  entry.last_ns.store(absl::GetCurrentTimeNanos(), std::memory_order_relaxed);
  return Watch(this, std::prev(entries_.end()));
}

void StreamWatchdog::Loop() {
  // A call is cancelled between `idle` and `idle` + one period after its last move.
  const absl::Duration period = std::clamp(idle_ / 4, absl::Milliseconds(10), absl::Seconds(1));
  const int64_t idle_ns = absl::ToInt64Nanoseconds(idle_);
  while (!stop_.WaitForNotificationWithTimeout(period)) {
    const int64_t now = absl::GetCurrentTimeNanos();
    absl::MutexLock lock(&mu_);
    for (Entry& entry : entries_) {
      if (entry.fired.load() || entry.paused.load(std::memory_order_acquire)) continue;
      if (now - entry.last_ns.load(std::memory_order_relaxed) < idle_ns) continue;
      entry.fired.store(true);
      cancelled_.fetch_add(1);
      // Ends the handler's blocked Read or Write; the entry stays until its Watch goes, so
      // the context is alive here.
      entry.context->TryCancel();
    }
  }
}

}  // namespace kvfold::memory_svc
