#include "kernels/cpu/isa.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

namespace kvfold::kernels::cpu {
namespace {

bool Leaf7(unsigned* ebx, unsigned* ecx, unsigned* edx, unsigned sub = 0) {
  unsigned eax;
  return __get_cpuid_count(7, sub, &eax, ebx, ecx, edx) != 0;
}

// The OS saves the AVX-512 register state (XCR0 bits 1, 2, 5, 6, 7).
bool OsSavesZmm() {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 27))) return false;  // OSXSAVE
  unsigned lo, hi;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & 0xE6) == 0xE6;
}

Isa Detect() {
  unsigned eax, ebx, ecx, edx;
  // F16C: CPUID.1:ECX bit 29 (clang's __builtin_cpu_supports lacks "f16c").
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29));
  if (!f16c || !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    return Isa::kPortable;
  }
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && OsSavesZmm()) {
    return Isa::kAvx512;
  }
  return Isa::kAvx2;
}

Isa FromEnv(Isa best) {
  const char* env = std::getenv("KVFOLD_CPU_ISA");
  if (env == nullptr) return best;
  Isa want = best;
  if (std::strcmp(env, "portable") == 0) want = Isa::kPortable;
  if (std::strcmp(env, "avx2") == 0) want = Isa::kAvx2;
  return std::min(want, best);
}

std::atomic<int>& Active() {
  static std::atomic<int> active{static_cast<int>(FromEnv(CpuBestIsa()))};
  return active;
}

CpuIdentity Identify() {
  CpuIdentity id;
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return id;
  char vendor[13] = {};
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  id.vendor = vendor;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx)) {
    const int base_family = (eax >> 8) & 0xF, base_model = (eax >> 4) & 0xF;
    id.family =
        base_family == 0xF ? base_family + static_cast<int>((eax >> 20) & 0xFF) : base_family;
    id.model = base_family == 0x6 || base_family == 0xF
                   ? base_model | static_cast<int>(((eax >> 16) & 0xF) << 4)
                   : base_model;
    id.stepping = static_cast<int>(eax & 0xF);
  }
  if (__get_cpuid_max(0x80000000u, nullptr) >= 0x80000004u) {
    char brand[49] = {};
    for (unsigned leaf = 0; leaf < 3; ++leaf) {
      unsigned r[4];
      __get_cpuid(0x80000002u + leaf, &r[0], &r[1], &r[2], &r[3]);
      std::memcpy(brand + 16 * leaf, r, sizeof(r));
    }
    std::string b(brand);
    const size_t first = b.find_first_not_of(' ');
    id.brand =
        first == std::string::npos ? "" : b.substr(first, b.find_last_not_of(' ') - first + 1);
  }
  return id;
}

}  // namespace

const CpuIdentity& Cpu() {
  static const CpuIdentity id = Identify();
  return id;
}

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kPortable:
      return "portable";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

Isa CpuBestIsa() {
  static const Isa best = Detect();
  return best;
}

Isa ActiveIsa() { return static_cast<Isa>(Active().load(std::memory_order_relaxed)); }

void SetActiveIsaForTesting(Isa isa) {
  Active().store(static_cast<int>(std::min(isa, CpuBestIsa())), std::memory_order_relaxed);
}

bool CpuHasAvx512Vnni() {
  static const bool has = [] {
    unsigned ebx, ecx, edx;
    return CpuBestIsa() == Isa::kAvx512 && Leaf7(&ebx, &ecx, &edx) && (ecx & (1u << 11));
  }();
  return has;
}

bool CpuHasAvx512Bf16() {
  static const bool has = [] {
    unsigned eax, ebx, ecx, edx;
    return CpuBestIsa() == Isa::kAvx512 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) &&
           (eax & (1u << 5));
  }();
  return has;
}

bool CpuHasAmxInt8() {
  static const bool has = [] {
    unsigned ebx, ecx, edx;
    if (CpuBestIsa() != Isa::kAvx512 || !Leaf7(&ebx, &ecx, &edx)) return false;
    if (!(edx & (1u << 24)) || !(edx & (1u << 25))) return false;  // AMX-TILE, AMX-INT8
    unsigned lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) return false;  // XTILECFG, XTILEDATA
#ifdef SYS_arch_prctl
    constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
  }();
  return has;
}

namespace {
std::atomic<bool>& AmxWanted() {
  static std::atomic<bool> wanted{[] {
    const char* env = std::getenv("KVFOLD_CPU_AMX");
    return env == nullptr || std::strcmp(env, "0") != 0;
  }()};
  return wanted;
}
}  // namespace

bool AmxActive() {
  return ActiveIsa() == Isa::kAvx512 && AmxWanted().load(std::memory_order_relaxed) &&
         CpuHasAmxInt8() && CpuHasAvx512Vnni();
}

void SetAmxForTesting(bool enabled) { AmxWanted().store(enabled, std::memory_order_relaxed); }

bool RowPrefetchActive() {
  static const bool active = [] {
    const char* env = std::getenv("KVFOLD_CPU_ROW_PREFETCH");
    if (env != nullptr) return std::strcmp(env, "0") != 0;
    const CpuIdentity& id = Cpu();
    return !(id.vendor == "AuthenticAMD" && id.family == 26);
  }();
  return active;
}

}  // namespace kvfold::kernels::cpu
