// The CPU backend's registry of adopted weights and the data derived from them.
#ifndef KVFOLD_KERNELS_CPU_ADOPTED_WEIGHTS_H_
#define KVFOLD_KERNELS_CPU_ADOPTED_WEIGHTS_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/thread_pool.h"

namespace kvfold::kernels::cpu {

// Adopted weights are read-only for their buffer's life (backend.h AdoptWeights), so data
// derived from them stays valid until the buffer goes: the panels of a Q8 or F32 matrix
// (cpu_ops.h panels) are laid out, on the pool's threads, by the backend's
// PrepareMatMulWeight or else its first MatMul on a panel path, and kept here beside the buffer's
// entry, which its buffer drops (a second copy of the matrix; the rows stay for Gather and the
// other paths). Lookups are by address range (a weight tensor may view part of a buffer).
// Thread-safe: buffers may be destroyed on any thread.
class AdoptedWeights {
 public:
  // Registers the buffer [data, data + bytes). Buffers adopting the same host memory
  // share one entry, dropped (with its panels) by the last Remove.
  void Add(const void* data, size_t bytes);
  void Remove(const void* data);
  // The panels of `kind` of the matrix at w [m, k] when it lies in an adopted buffer
  // (laid out on first use, on `pool`); nullptr when it does not, or when they cannot be
  // allocated (the matmul then lays them out in its scratch).
  const uint8_t* Panels(ThreadPool& pool, PanelKind kind, const void* w, int64_t m, int64_t k);

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  struct Entry {
    int buffers = 0;
    size_t bytes = 0;
    std::map<std::tuple<PanelKind, uintptr_t, int64_t, int64_t>, std::unique_ptr<uint8_t, Free>>
        panels;
  };
  std::mutex mu_;
  std::map<uintptr_t, Entry> buffers_;  // by start address
};

}  // namespace kvfold::kernels::cpu

#endif  // KVFOLD_KERNELS_CPU_ADOPTED_WEIGHTS_H_
