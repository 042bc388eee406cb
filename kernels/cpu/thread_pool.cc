#include "kernels/cpu/thread_pool.h"

#include <immintrin.h>

#include <algorithm>

namespace kvfold::kernels::cpu {
namespace {

constexpr int kSpinIterations = 2000;

// Spins until pred() or the budget runs out; true when pred() held.
template <typename Pred>
bool SpinUntil(Pred pred) {
  for (int i = 0; i < kSpinIterations; ++i) {
    if (pred()) return true;
    _mm_pause();
  }
  return pred();
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) {
    workers_.emplace_back([this, i] { WorkerLoop(i); });
  }
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  { std::lock_guard<std::mutex> lock(mu_); }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::Run(int64_t n, int64_t grain, Trampoline fn, void* ctx) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t units = (n + grain - 1) / grain;
  const int threads = static_cast<int>(std::min<int64_t>(num_threads_, units));
  if (threads <= 1) {
    fn(ctx, 0, n, 0);
    return;
  }
  const int64_t chunk = ((units + threads - 1) / threads) * grain;
  fn_ = fn;
  ctx_ = ctx;
  n_ = n;
  chunk_ = chunk;
  pending_.store(num_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  // A worker either sees the new generation before it blocks (it checks under mu_) or is
  // already waiting and gets this notification.
  { std::lock_guard<std::mutex> lock(mu_); }
  work_cv_.notify_all();
  fn(ctx, 0, std::min(n, chunk), 0);
  auto done = [this] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!SpinUntil(done)) {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, done);
  }
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  while (true) {
    auto ready = [&] {
      return stop_.load(std::memory_order_acquire) ||
             generation_.load(std::memory_order_acquire) != seen;
    };
    if (!SpinUntil(ready)) {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, ready);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    const int64_t begin = std::min(n_, chunk_ * index);
    const int64_t end = std::min(n_, begin + chunk_);
    if (begin < end) fn_(ctx_, begin, end, index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      { std::lock_guard<std::mutex> lock(mu_); }
      done_cv_.notify_one();
    }
  }
}

}  // namespace kvfold::kernels::cpu
