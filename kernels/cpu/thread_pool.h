// A small fixed thread pool for the CPU backend: ParallelFor hands out [0, n) in ranges of
// whole grains that the threads (the caller among them) claim as they go, largest first
// (guided scheduling: each claim takes half of what is left divided among the threads,
// down to one grain); ParallelForHomes gives each thread a contiguous home range to run in
// order and lets the threads done first take the others' tails. Work never depends on the
// split for numerics: callers partition only independent outputs.
//
// A call waits for the ranges that were claimed, never for a thread that claimed none: a
// worker the OS has not scheduled yet (the machine's cores busy with other threads of the
// process, such as the RPC threads of a server, or with other processes) misses the job
// and the threads that run do all of it. With a fixed share per thread, every op would
// wait for the slowest thread to be scheduled.
//
// Wake-up: a decode step runs ~100 parallel ops of a few microseconds each, so a
// sleep/wake pair per op (futex, ~10-50 us) would cost more than the op. Workers and the
// caller therefore spin on an atomic generation counter for a short while
// (kSpinIterations pause instructions, ~10-100 us by CPU) before blocking on a condition
// variable; an idle pool sleeps.
//
// Claims: one 64-bit word holds the job's generation (high half) and its next unclaimed
// grain (low half); a claim is a compare-and-swap on it, so a worker still holding an
// old generation can never claim work of a newer job. When every claimed range of a job
// has run, Run seals the word (low half all ones) before it writes the next job.
#ifndef KVFOLD_KERNELS_CPU_THREAD_POOL_H_
#define KVFOLD_KERNELS_CPU_THREAD_POOL_H_

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace kvfold::kernels::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls fn(begin, end, thread_index) over disjoint ranges covering [0, n), possibly
  // several ranges per thread and none for some. Ranges start on a multiple of `grain`
  // and are whole grains except the last. Blocks until all are done. Not reentrant.
  // Allocation-free (no std::function): the decode loop goes through here.
  template <typename Fn>
  void ParallelFor(int64_t n, int64_t grain, Fn& fn) {
    Run(n, grain, [](void* ctx, int64_t b, int64_t e, int t) { (*static_cast<Fn*>(ctx))(b, e, t); },
        &fn);
  }

  // Calls fn(u, u + 1, thread) once for every unit u of [0, units), for work whose units
  // run fastest in ascending order on one thread (streams that prefetch into the next
  // unit). Each thread has a home share, the t-th of num_threads() equal contiguous
  // ranges, and runs it unit by unit from its front; a thread whose home is done takes
  // units one at a time from the BACK of the others' unclaimed shares, so the owners'
  // streams stay whole and a thread that runs slower (a busier core) or starts late
  // hands only its share's tail to the others, where fixed halves made every call wait
  // for the slowest thread. A thread that never arrives leaves its whole share to the
  // others. Blocks until all units are done. Not reentrant.
  template <typename Fn>
  void ParallelForHomes(int64_t units, Fn& fn);

 private:
  using Trampoline = void (*)(void* ctx, int64_t begin, int64_t end, int thread);
  void Run(int64_t n, int64_t grain, Trampoline fn, void* ctx);
  void WorkerLoop(int index);
  // Claims and runs ranges of job `generation` until none is left or the job is gone.
  void Drain(uint64_t generation, int thread);

  // ParallelForHomes' shares: per thread, its unclaimed units [front, back) as
  // front | back << 32, each word on its own cache line (the owner claims from it unit by
  // unit; another thread touches it only when its own share is done).
  struct alignas(64) Share {
    std::atomic<uint64_t> word{0};
  };

  int num_threads_;
  std::unique_ptr<Share[]> shares_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  // The job, written by Run before it publishes a new generation. Sequentially consistent
  // atomics: a worker that read a newer job's field must also see the old job's seal.
  std::atomic<Trampoline> fn_{nullptr};
  std::atomic<void*> ctx_{nullptr};
  std::atomic<int64_t> n_{0};
  std::atomic<int64_t> grain_{1};
  std::atomic<int64_t> units_{0};  // grains in [0, n)
  std::atomic<int> claimers_{1};   // threads the claims are sized for
  alignas(64) std::atomic<uint64_t> claim_{0};
  alignas(64) std::atomic<int64_t> finished_{0};  // grains whose range has run
  alignas(64) std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
};

template <typename Fn>
void ThreadPool::ParallelForHomes(int64_t units, Fn& fn) {
  if (units <= 0) return;
  const int homes = static_cast<int>(std::min<int64_t>(num_threads_, units));
  if (homes <= 1 || units > int64_t{0xFFFFFFFF}) {  // one thread, or past a share word
    auto each = [&fn](int64_t b, int64_t e, int thread) {
      for (int64_t u = b; u < e; ++u) fn(u, u + 1, thread);
    };
    ParallelFor(units, 1, each);
    return;
  }
  for (int h = 0; h < homes; ++h) {
    const uint64_t front = static_cast<uint64_t>(units * h / homes);
    const uint64_t back = static_cast<uint64_t>(units * (h + 1) / homes);
    shares_[h].word.store(front | back << 32, std::memory_order_relaxed);
  }
  // Task h: home h from its front, then the other homes from their backs. Run publishes
  // the shares' words with the job (its stores are sequentially consistent).
  auto task = [this, homes, &fn](int64_t h, int64_t, int thread) {
    for (int k = 0; k < homes; ++k) {
      std::atomic<uint64_t>& share = shares_[(h + k) % homes].word;
      const bool own = k == 0;
      uint64_t w = share.load();
      while (static_cast<uint32_t>(w) < static_cast<uint32_t>(w >> 32)) {
        const uint64_t front = static_cast<uint32_t>(w), back = w >> 32;
        const uint64_t next = own ? w + 1 : front | (back - 1) << 32;
        if (!share.compare_exchange_weak(w, next)) continue;
        const int64_t u = static_cast<int64_t>(own ? front : back - 1);
        fn(u, u + 1, thread);
        w = share.load();
      }
    }
  };
  ParallelFor(homes, 1, task);
}

}  // namespace kvfold::kernels::cpu

#endif  // KVFOLD_KERNELS_CPU_THREAD_POOL_H_
