// Runtime instruction-set dispatch for the CPU kernels. One binary carries every path
// (functions compiled with __attribute__((target(...)))); cpuid picks the best one the
// CPU has when the kernels first run. KVFOLD_CPU_ISA=portable|avx2|avx512 caps the choice
// (tests use it to exercise every path the machine can run; a cap above what the CPU
// has is lowered to the CPU's best).
//
// Numerics: each path has its own fixed per-output accumulation order (docs/engine.md,
// "Kernels and ISA dispatch"), so results are bit-identical for any batch size on one
// path, and agree with the reference within float rounding across paths.
#ifndef KVFOLD_KERNELS_CPU_ISA_H_
#define KVFOLD_KERNELS_CPU_ISA_H_

#include <string>

namespace kvfold::kernels::cpu {

enum class Isa : int {
  kPortable = 0,  // plain C++ (any CPU)
  kAvx2 = 1,      // AVX2 + FMA + F16C
  kAvx512 = 2,    // AVX-512 F/BW/VL/DQ (+ VNNI for int8 weights when present)
};

const char* IsaName(Isa isa);

// The best path this CPU supports (cpuid; cached).
Isa CpuBestIsa();

// The path the kernels use: CpuBestIsa() capped by KVFOLD_CPU_ISA (read once).
Isa ActiveIsa();

// For tests: run kernels on `isa` (capped at CpuBestIsa()) until the next call.
void SetActiveIsaForTesting(Isa isa);

// Extensions that refine a path.
bool CpuHasAvx512Vnni();
bool CpuHasAvx512Bf16();
// AMX-TILE + AMX-INT8 with the OS's tile state enabled and granted to this process
// (Linux: arch_prctl ARCH_REQ_XCOMP_PERM, asked once).
bool CpuHasAmxInt8();
// The Q8 matmul uses AMX tiles: the AVX-512 path is active, the CPU has AMX-INT8 (and
// AVX-512 VNNI, for single rows), and neither KVFOLD_CPU_AMX=0 nor SetAmxForTesting(false) turned it off.
bool AmxActive();
void SetAmxForTesting(bool enabled);

// Whether a single row's decode tiles (the F32 and VNNI panel kernels' one-row tiles, four
// weight streams) issue software prefetches into L2 ahead of their loads. They do, except
// on AMD family 26 (Zen 5), whose own L2 stream prefetchers keep those streams ahead: there
// the prefetch instructions made a one-row decode 7-11 % (f32) and 10-18 % (q8) slower at
// one thread, where on the earlier EPYC they made it 1.2-1.3x faster
// (docs/engine-measurements.md, "Software prefetch for one row, by core"). Batched tiles
// keep theirs. KVFOLD_CPU_ROW_PREFETCH=0|1 overrides (read once); numerics do not depend
// on it.
bool RowPrefetchActive();

// Which processor this is, from cpuid: the benchmarks record it beside their figures,
// because the same 2-vCPU machine type has come with different cores (an AMD EPYC of
// family 25 retires one 512-bit vpdpbusd per cycle, one of family 26 two; docs/engine.md).
// family and model are the displayed values (the base family plus the extended family
// when the base is 15; the extended model in the high nibble when the base family is 6
// or 15), as Linux prints them in /proc/cpuinfo.
struct CpuIdentity {
  std::string vendor;  // e.g. "AuthenticAMD", "GenuineIntel"; empty without cpuid
  int family = 0;
  int model = 0;
  int stepping = 0;
  std::string brand;  // the brand string, spaces trimmed; empty when the CPU has none
};
const CpuIdentity& Cpu();

}  // namespace kvfold::kernels::cpu

#endif  // KVFOLD_KERNELS_CPU_ISA_H_
