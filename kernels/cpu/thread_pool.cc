#include "kernels/cpu/thread_pool.h"

#include <algorithm>

namespace kvfold::kernels::cpu {

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) {
    workers_.emplace_back([this, i] { WorkerLoop(i); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = fn;
    ctx_ = ctx;
    n_ = n;
    chunk_ = chunk;
    pending_ = num_threads_ - 1;
    ++generation_;
  }
  work_cv_.notify_all();
  fn(ctx, 0, std::min(n, chunk), 0);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return pending_ == 0; });
  fn_ = nullptr;
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  while (true) {
    Trampoline fn;
    void* ctx;
    int64_t begin, end;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      fn = fn_;
      ctx = ctx_;
      begin = std::min(n_, chunk_ * index);
      end = std::min(n_, begin + chunk_);
    }
    if (begin < end) fn(ctx, begin, end, index);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }
}

}  // namespace kvfold::kernels::cpu
