// Host emulation of the few CUDA features the kvfold kernels use, so the kernels in
// kernels/cuda/*.cu are EXECUTED on a machine without a GPU (CTest label `emu`,
// tests/kernels/cuda/emu/CMakeLists.txt). Each CUDA thread of a block is a fiber
// (Boost.Context: a user-space stack switch, no system call) on one host thread; the blocks of a grid run one after another. A fiber runs
// until it finishes or reaches a barrier: __syncthreads waits for every live thread of the
// block, a warp shuffle for every live thread of its warp (threads that have exited do not
// count, as on sm_70+). __shared__ becomes `static` (one block at a time) and the dynamic
// shared memory one host buffer (filled with NaN so a read before a write shows). It checks
// the kernels' logic, indexing and barrier structure (and, built with
// KVFOLD_EMU_ASAN=ON, their bounds), not timing, occupancy or memory-model subtleties: a pass
// here is not a pass on a GPU.
#ifndef KVFOLD_TESTS_KERNELS_CUDA_EMU_CUDA_EMU_H_
#define KVFOLD_TESTS_KERNELS_CUDA_EMU_CUDA_EMU_H_
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <atomic>
#include <cstring>
#include <cmath>
#include <cstdint>
#include <memory>
#include <cstdio>
#include <functional>
#include <vector>

#include <boost/context/fiber.hpp>
#include <boost/context/fixedsize_stack.hpp>

#undef __shared__
#define __shared__ static
#undef __launch_bounds__
#define __launch_bounds__(...)
#undef __global__
#define __global__
#undef __device__
#define __device__
#undef __forceinline__
#define __forceinline__ inline

namespace emu {
// One emulated CUDA thread.
struct Fiber {
  boost::context::fiber self;  // resumed by the scheduler
  boost::context::fiber sink;  // the scheduler, resumed to park
  uint3 tid;
  int warp = 0;
  bool done = false;
  int wait = kRunning;  // kRunning, kAtBlockBarrier or kAtWarpBarrier
  static constexpr int kRunning = 0, kAtBlockBarrier = 1, kAtWarpBarrier = 2;
};
struct Warp {
  float f[32];
  int i[32];
};
inline constexpr size_t kFiberStackBytes = 64 * 1024;
inline std::vector<Fiber> g_fibers;
inline std::vector<Warp> g_warps;
inline int g_current = 0;
inline const std::function<void()>* g_body = nullptr;
inline uint3 tl_tid, tl_bid;
inline dim3 g_bdim, g_gdim;
inline std::vector<float> g_smem;

// Parks the running fiber at a barrier and returns to the scheduler.
inline void Park(int wait) {
  Fiber& f = g_fibers[g_current];
  f.wait = wait;
  f.sink = std::move(f.sink).resume();
}
}  // namespace emu

#define threadIdx (::emu::tl_tid)
#define blockIdx (::emu::tl_bid)
#define blockDim (::emu::g_bdim)
#define gridDim (::emu::g_gdim)

inline void __syncthreads() { emu::Park(emu::Fiber::kAtBlockBarrier); }
template <class T>
inline T EmuShuffleXor(T v, int o, T (emu::Warp::*slot)[32]) {
  emu::Warp& w = emu::g_warps[emu::g_fibers[emu::g_current].warp];
  const int lane = static_cast<int>(emu::tl_tid.x % 32);
  emu::Park(emu::Fiber::kAtWarpBarrier);  // nobody still reads the previous exchange
  (w.*slot)[lane] = v;
  emu::Park(emu::Fiber::kAtWarpBarrier);  // every lane has written
  return (w.*slot)[lane ^ o];
}
inline float __shfl_xor_sync(unsigned, float v, int o) { return EmuShuffleXor(v, o, &emu::Warp::f); }
inline int __shfl_xor_sync(unsigned, int v, int o) { return EmuShuffleXor(v, o, &emu::Warp::i); }
inline unsigned __float_as_uint(float x) {
  unsigned u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
}
template <class T>
inline T atomicMax(T* address, T value) {
  std::atomic_ref<T> a(*address);
  T old = a.load();
  while (old < value && !a.compare_exchange_weak(old, value)) {
  }
  return old;
}
template <class A, class B>
inline auto min(A a, B b) { using T = decltype(a + b); return std::min<T>(a, b); }
template <class A, class B>
inline auto max(A a, B b) { using T = decltype(a + b); return std::max<T>(a, b); }

namespace emu {
// Releases the barriers every live fiber of the block (or of a warp) has reached. Returns
// false when nothing could be released: a barrier some live thread never reaches.
inline bool ReleaseBarriers() {
  const int warps = static_cast<int>(g_warps.size());
  std::vector<int> live(warps, 0), at_warp(warps, 0);
  int live_all = 0, at_block = 0;
  for (const Fiber& f : g_fibers) {
    if (f.done) continue;
    ++live_all;
    ++live[f.warp];
    if (f.wait == Fiber::kAtBlockBarrier) ++at_block;
    if (f.wait == Fiber::kAtWarpBarrier) ++at_warp[f.warp];
  }
  bool released = false;
  for (Fiber& f : g_fibers) {
    if (f.done) continue;
    if ((f.wait == Fiber::kAtWarpBarrier && at_warp[f.warp] == live[f.warp]) ||
        (f.wait == Fiber::kAtBlockBarrier && at_block == live_all)) {
      f.wait = Fiber::kRunning;
      released = true;
    }
  }
  return released;
}

// Runs one block: every fiber until it finishes or parks, then the barriers, until done.
inline void RunBlock() {
  const int n = static_cast<int>(g_fibers.size());
  for (int t = 0; t < n; ++t) {
    Fiber& f = g_fibers[t];
    f.done = false;
    f.wait = Fiber::kRunning;
    f.self = boost::context::fiber(
        std::allocator_arg, boost::context::fixedsize_stack(kFiberStackBytes),
        [t](boost::context::fiber&& sink) {
          g_fibers[t].sink = std::move(sink);
          (*g_body)();
          g_fibers[t].done = true;
          return std::move(g_fibers[t].sink);
        });
  }
  for (;;) {
    bool any_live = false;
    for (int t = 0; t < n; ++t) {
      Fiber& f = g_fibers[t];
      if (f.done || f.wait != Fiber::kRunning) {
        any_live |= !f.done;
        continue;
      }
      g_current = t;
      tl_tid = f.tid;
      f.self = std::move(f.self).resume();
      any_live |= !f.done;
    }
    if (!any_live) return;
    if (!ReleaseBarriers()) {
      std::fprintf(stderr, "cuda_emu: deadlock: a barrier that some live thread never reaches\n");
      std::abort();
    }
  }
}

struct Launcher {
  Launcher(dim3 g, dim3 b, size_t smem = 0, cudaStream_t = nullptr) : grid(g), block(b), smem(smem) {}
  template <class K, class... Args>
  void Run(K kernel, Args... args) {
    g_bdim = block;
    g_gdim = grid;
    const int n = static_cast<int>(block.x * block.y * block.z);
    g_smem.assign(smem / 4 + 1, NAN);
    g_fibers.clear();
    g_fibers.resize(n);
    g_warps.assign((n + 31) / 32, Warp{});
    for (int t = 0; t < n; ++t) {
      g_fibers[t].tid = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
      g_fibers[t].warp = t / 32;
    }
    const std::function<void()> body = [&] { kernel(args...); };
    g_body = &body;
    for (unsigned z = 0; z < grid.z; ++z)
      for (unsigned y = 0; y < grid.y; ++y)
        for (unsigned x = 0; x < grid.x; ++x) {
          tl_bid = {x, y, z};
          RunBlock();
        }
    g_body = nullptr;
  }
  dim3 grid, block;
  size_t smem;
};
}  // namespace emu

#endif  // KVFOLD_TESTS_KERNELS_CUDA_EMU_CUDA_EMU_H_
