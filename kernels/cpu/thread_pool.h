// A small fixed thread pool for the CPU backend: ParallelFor splits [0, n) into
// contiguous ranges, one per thread (the calling thread takes the first). Work never
// depends on the split for numerics: callers partition only independent outputs.
//
// Wake-up: a decode step runs ~100 parallel ops of a few microseconds each, so a
// sleep/wake pair per op (futex, ~10-50 us) would cost more than the op. Workers and the
// caller therefore spin on an atomic generation counter for a short while
// (kSpinIterations pause instructions, ~10-100 us by CPU) before blocking on a condition
// variable; an idle pool sleeps.
#ifndef KVFOLD_KERNELS_CPU_THREAD_POOL_H_
#define KVFOLD_KERNELS_CPU_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
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

  // Calls fn(begin, end, thread_index) over disjoint ranges covering [0, n). Ranges are
  // multiples of `grain` except the last. Blocks until all are done. Not reentrant.
  // Allocation-free (no std::function): the decode loop goes through here.
  template <typename Fn>
  void ParallelFor(int64_t n, int64_t grain, Fn& fn) {
    Run(n, grain, [](void* ctx, int64_t b, int64_t e, int t) { (*static_cast<Fn*>(ctx))(b, e, t); },
        &fn);
  }

 private:
  using Trampoline = void (*)(void* ctx, int64_t begin, int64_t end, int thread);
  void Run(int64_t n, int64_t grain, Trampoline fn, void* ctx);
  void WorkerLoop(int index);

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  // The job: written by Run before it publishes a new generation (release), read by
  // workers after they observe it (acquire).
  Trampoline fn_ = nullptr;
  void* ctx_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace kvfold::kernels::cpu

#endif  // KVFOLD_KERNELS_CPU_THREAD_POOL_H_
