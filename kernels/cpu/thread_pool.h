// A small fixed thread pool for the CPU backend: ParallelFor hands out [0, n) in ranges of
// whole grains that the threads (the caller among them) claim as they go, largest first
// (guided scheduling: each claim takes half of what is left divided among the threads,
// down to one grain). Work never depends on the split for numerics: callers partition
// only independent outputs.
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

  // Calls fn(begin, end, thread_index) over disjoint ranges covering [0, n), possibly
  // several ranges per thread and none for some. Ranges start on a multiple of `grain`
  // and are whole grains except the last. Blocks until all are done. Not reentrant.
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
  // Claims and runs ranges of job `generation` until none is left or the job is gone.
  void Drain(uint64_t generation, int thread);

  int num_threads_;
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

}  // namespace kvfold::kernels::cpu

#endif  // KVFOLD_KERNELS_CPU_THREAD_POOL_H_
