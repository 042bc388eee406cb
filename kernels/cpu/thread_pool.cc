#include "kernels/cpu/thread_pool.h"

#include <immintrin.h>

#include <algorithm>

namespace kvfold::kernels::cpu {
namespace {

constexpr int kSpinIterations = 2000;
constexpr uint64_t kLow = 0xFFFFFFFFull;
// Grains per job: the low half of the claim word, below the seal.
constexpr int64_t kMaxUnits = int64_t{1} << 31;

uint64_t Tag(uint64_t generation) { return (generation & kLow) << 32; }

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

ThreadPool::ThreadPool(int num_threads)
    : num_threads_(std::max(1, num_threads)), shares_(new Share[num_threads_]) {
  for (int i = 1; i < num_threads_; ++i) {
    workers_.emplace_back([this, i] { WorkerLoop(i); });
  }
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  { std::lock_guard<std::mutex> lock(mu_); }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::Run(int64_t n, int64_t grain, Trampoline fn, void* ctx) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  int64_t units = (n + grain - 1) / grain;
  if (units >= kMaxUnits) {  // coarser grains, still multiples of the caller's
    grain *= (units + kMaxUnits - 2) / (kMaxUnits - 1);
    units = (n + grain - 1) / grain;
  }
  const int threads = static_cast<int>(std::min<int64_t>(num_threads_, units));
  if (threads <= 1) {
    fn(ctx, 0, n, 0);
    return;
  }
  const uint64_t generation = generation_.load(std::memory_order_relaxed) + 1;
  fn_.store(fn);
  ctx_.store(ctx);
  n_.store(n);
  grain_.store(grain);
  units_.store(units);
  claimers_.store(threads);
  finished_.store(0);
  claim_.store(Tag(generation));
  generation_.store(generation, std::memory_order_release);
  // A worker either sees the new generation before it blocks (it checks under mu_) or is
  // already waiting and gets this notification.
  { std::lock_guard<std::mutex> lock(mu_); }
  work_cv_.notify_all();
  Drain(generation, 0);
  auto done = [this, units] { return finished_.load(std::memory_order_acquire) == units; };
  if (!SpinUntil(done)) {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, done);
  }
  claim_.store(Tag(generation) | kLow);  // sealed: no claim on this job succeeds any more
}

void ThreadPool::Drain(uint64_t generation, int thread) {
  const uint64_t tag = Tag(generation);
  uint64_t c = claim_.load();
  while ((c & ~kLow) == tag) {
    const int64_t first = static_cast<int64_t>(c & kLow);
    const int64_t units = units_.load();
    if (first >= units) return;  // all claimed, or sealed
    const int64_t take = std::max<int64_t>(1, (units - first) / (2 * claimers_.load()));
    if (!claim_.compare_exchange_weak(c, c + static_cast<uint64_t>(take))) continue;
    // The claim succeeded, so the job is not sealed: until this range is counted as
    // finished, Run cannot return and the job's fields stay those read here.
    const int64_t grain = grain_.load();
    const int64_t begin = first * grain;
    fn_.load()(ctx_.load(), begin, std::min(n_.load(), begin + take * grain), thread);
    if (finished_.fetch_add(take, std::memory_order_acq_rel) + take == units) {
      { std::lock_guard<std::mutex> lock(mu_); }
      done_cv_.notify_one();
    }
    c = claim_.load();
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
    Drain(seen, index);
  }
}

}  // namespace kvfold::kernels::cpu
