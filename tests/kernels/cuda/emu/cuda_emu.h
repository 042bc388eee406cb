// Host emulation of the few CUDA features the kvfold kernels use, so the kernels in
// kernels/cuda/*.cu can be EXECUTED on a machine without a GPU (run_emulated.sh). One
// std::thread per CUDA thread of a block (created once per launch); the blocks of a grid
// run one after another; __syncthreads = a block barrier; warp shuffles go through a
// per-warp barrier; __shared__ becomes `static` (only one block runs at a time) and the
// dynamic shared memory one host buffer. It checks the kernels' logic and indexing (and,
// built with -fsanitize=address, their bounds), not timing, occupancy or memory-model
// subtleties: a pass here is not a pass on a GPU. Slow (2 cores: minutes per test).
#ifndef KVFOLD_TESTS_KERNELS_CUDA_EMU_CUDA_EMU_H_
#define KVFOLD_TESTS_KERNELS_CUDA_EMU_CUDA_EMU_H_
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <atomic>
#include <cstring>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

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
struct Warp {
  std::barrier<> bar{32};
  float f[32];
  int i[32];
};
struct Block {
  explicit Block(int n) : bar(n), warps(n / 32) {}
  std::barrier<> bar;
  std::vector<Warp> warps;
};
inline thread_local Block* tl_block;
inline thread_local uint3 tl_tid, tl_bid;
inline dim3 g_bdim, g_gdim;
inline std::vector<float> g_smem;
}  // namespace emu

#define threadIdx (::emu::tl_tid)
#define blockIdx (::emu::tl_bid)
#define blockDim (::emu::g_bdim)
#define gridDim (::emu::g_gdim)

inline void __syncthreads() { emu::tl_block->bar.arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned, float v, int o) {
  auto& w = emu::tl_block->warps[emu::tl_tid.x / 32];
  const int lane = emu::tl_tid.x % 32;
  w.bar.arrive_and_wait();
  w.f[lane] = v;
  w.bar.arrive_and_wait();
  return w.f[lane ^ o];
}
inline int __shfl_xor_sync(unsigned, int v, int o) {
  auto& w = emu::tl_block->warps[emu::tl_tid.x / 32];
  const int lane = emu::tl_tid.x % 32;
  w.bar.arrive_and_wait();
  w.i[lane] = v;
  w.bar.arrive_and_wait();
  return w.i[lane ^ o];
}
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
struct Launcher {
  Launcher(dim3 g, dim3 b, size_t smem = 0, cudaStream_t = nullptr) : grid(g), block(b), smem(smem) {}
  template <class K, class... Args>
  void Run(K kernel, Args... args) {
    g_bdim = block;
    g_gdim = grid;
    const int n = block.x * block.y * block.z;
    g_smem.assign(smem / 4 + 1, NAN);
    Block blk(n);
    std::vector<std::thread> ts;
    for (int t = 0; t < n; ++t) {
      ts.emplace_back([&, t] {
        tl_block = &blk;
        tl_tid = {static_cast<unsigned>(t), 0, 0};
        for (unsigned z = 0; z < grid.z; ++z)
          for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) {
              tl_bid = {x, y, z};
              kernel(args...);
              blk.bar.arrive_and_wait();  // the block is done: static "shared" is reused
            }
      });
    }
    for (auto& th : ts) th.join();
  }
  dim3 grid, block;
  size_t smem;
};
}  // namespace emu

#endif  // KVFOLD_TESTS_KERNELS_CUDA_EMU_CUDA_EMU_H_
