// What one core of this CPU sustains on the instructions the Q8 and F32 kernels are made
// of, beside what the engine's 16-row Q8 MatMul reaches (docs/engine-measurements.md, "A Zen 4
// host: the 16-row q8 step against the core's instruction mix"). Register-only loops of independent
// chains, one thread, best of three runs; G/s = instructions per nanosecond:
//   int_add_chain      dependent 64-bit adds (one per cycle: the core's clock, roughly)
//   fma_zmm            vfmadd231ps on 512-bit registers, 12 chains
//   vpdpbusd_zmm       vpdpbusd on 512-bit registers, 8 chains
//   vpdpbusd_q8_block  vpdpbusd in the VNNI panel kernel's mix: per row and Q8 block,
//                      eight dependent vpdpbusd, then one convert, multiply and fma
//                      (matmul_q8_panels.cc), eight rows interleaved
// and q8_panel_16_rows: MatMulOptimized of 16 rows by a Q8 768 x 768 matrix whose panels
// sit in L2 (the stories110m shape's square products), as GMAC/s and vpdpbusd G/s (64
// multiply-adds each), and per_cpu: on each CPU of the process's affinity mask in turn,
// a thread bound to it runs the add chain (best of three), the two register loops (the
// median of nine runs: what the core sustains, not its best moment) and read_gb_s (one
// thread reading a 128 MiB buffer the calling thread filled, one load per 64-byte line,
// median of five passes), so that a core that delivers less than its siblings (a virtual
// CPU whose host core is shared with a busy neighbour, say) shows. Entries the CPU lacks
// the instructions for are null; the loops run on what the CPU has (cpu_best_isa,
// avx512_vnni), whatever KVFOLD_CPU_ISA caps the kernels to.
#ifndef KVFOLD_TOOLS_BENCH_ENGINE_ISA_PROBE_H_
#define KVFOLD_TOOLS_BENCH_ENGINE_ISA_PROBE_H_

#include "nlohmann/json.hpp"

namespace kvfold::bench {

// {"cpu_best_isa", "avx512_vnni", "int_add_chain_g_s", "fma_zmm_g_s", "vpdpbusd_zmm_g_s",
//  "vpdpbusd_q8_block_g_s", "q8_panel_16_rows": {"path", "gmac_s", "vpdpbusd_g_s",
//  "over_q8_block_mix"}, "per_cpu": [{"cpu", "int_add_chain_g_s", "fma_zmm_g_s",
//  "vpdpbusd_zmm_g_s", "read_gb_s"}]}.
nlohmann::json IsaProbe();

}  // namespace kvfold::bench

#endif  // KVFOLD_TOOLS_BENCH_ENGINE_ISA_PROBE_H_
