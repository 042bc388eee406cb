// A small fixed thread pool for the CPU backend: ParallelFor splits [0, n) into
// contiguous ranges, one per thread (the calling thread takes the first). Work never
// depends on the split for numerics: callers partition only independent outputs.
#ifndef KVFOLD_KERNELS_CPU_THREAD_POOL_H_
#define KVFOLD_KERNELS_CPU_THREAD_POOL_H_

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
  Trampoline fn_ = nullptr;
  void* ctx_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace kvfold::kernels::cpu

#endif  // KVFOLD_KERNELS_CPU_THREAD_POOL_H_
