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
