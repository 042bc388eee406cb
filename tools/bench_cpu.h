// The processor a benchmark ran on, for its JSON: figures of the same command differ by
// core generation (docs/engine.md), so every run records which one it had.
#ifndef KVFOLD_TOOLS_BENCH_CPU_H_
#define KVFOLD_TOOLS_BENCH_CPU_H_

#include <nlohmann/json.hpp>

#include "kernels/cpu/isa.h"

namespace kvfold::bench {

// {"vendor", "family", "model", "stepping", "brand"}: cpuid's identity (the kernels'
// active path goes beside it, as "cpu_isa").
inline nlohmann::json CpuJson() {
  const kernels::cpu::CpuIdentity& id = kernels::cpu::Cpu();
  return {{"vendor", id.vendor},
          {"family", id.family},
          {"model", id.model},
          {"stepping", id.stepping},
          {"brand", id.brand}};
}

}  // namespace kvfold::bench

#endif  // KVFOLD_TOOLS_BENCH_CPU_H_
