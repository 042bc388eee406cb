// The processor a benchmark ran on, for its JSON: figures of the same command differ by
// core generation (docs/engine.md), so every run records which one it had.
#ifndef KVFOLD_TOOLS_BENCH_CPU_H_
#define KVFOLD_TOOLS_BENCH_CPU_H_

#include <nlohmann/json.hpp>

#include "kernels/cpu/isa.h"

namespace kvfold::bench {

// Writes the processor into a benchmark's JSON: "cpu" = {"vendor", "family", "model",
// "stepping", "brand"} from cpuid, "cpu_isa" = the kernels' active path and
// "cpu_row_prefetch" = whether one-row decode tiles prefetch (kernels/cpu/isa.h).
inline void AddCpu(nlohmann::json& out) {
  const kernels::cpu::CpuIdentity& id = kernels::cpu::Cpu();
  out["cpu"] = {{"vendor", id.vendor},
                {"family", id.family},
                {"model", id.model},
                {"stepping", id.stepping},
                {"brand", id.brand}};
  out["cpu_isa"] = kernels::cpu::IsaName(kernels::cpu::ActiveIsa());
  out["cpu_row_prefetch"] = kernels::cpu::RowPrefetchActive();
}

}  // namespace kvfold::bench

#endif  // KVFOLD_TOOLS_BENCH_CPU_H_
