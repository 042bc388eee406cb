#include "tools/bench_engine/isa_probe.h"

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/quant/weight_q8.h"
#include "tools/bench_stats.h"

namespace kvfold::bench {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// Loop iterations per timed run: ~0.1-0.3 s on a 3 GHz core for the loops below.
constexpr int64_t kIterations = 20'000'000;

// Instructions per nanosecond of each of `runs` runs of `body` (which runs kIterations
// iterations of `per_iteration` instructions).
template <class Body>
std::vector<double> Rates(int runs, int64_t per_iteration, Body body) {
  std::vector<double> rates;
  for (int run = 0; run < runs; ++run) {
    const auto start = Clock::now();
    body();
    const double ns = std::chrono::duration<double, std::nano>(Clock::now() - start).count();
    rates.push_back(static_cast<double>(per_iteration * kIterations) / ns);
  }
  return rates;
}

// The best of three runs: what the core retires at its best moment.
template <class Body>
double BestRate(int64_t per_iteration, Body body) {
  const std::vector<double> rates = Rates(3, per_iteration, body);
  return *std::max_element(rates.begin(), rates.end());
}

// The median of nine runs (~0.3 s): what the core sustains, which a shared host core's
// neighbours move while it runs.
template <class Body>
double MedianRate(int64_t per_iteration, Body body) {
  return Median(Rates(9, per_iteration, body));
}

double IntAddChain() {
  return BestRate(8, [] {
    uint64_t x = 1;
    for (int64_t i = 0; i < kIterations; ++i) {
      asm volatile(
          "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
          "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0"
          : "+r"(x));
    }
  });
}

#define KVFOLD_PROBE_AVX512 __attribute__((target("avx512f")))
#define KVFOLD_PROBE_VNNI __attribute__((target("avx512f,avx512vnni")))

KVFOLD_PROBE_AVX512 void FmaZmmLoop() {
  __m512 a0 = _mm512_set1_ps(1.0f), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0,
         a8 = a0, a9 = a0, a10 = a0, a11 = a0;
  const __m512 b = _mm512_set1_ps(0.5f), c = _mm512_set1_ps(0.25f);
  for (int64_t i = 0; i < kIterations; ++i) {
    asm volatile(
        "vfmadd231ps %[b], %[c], %[a0]\n\tvfmadd231ps %[b], %[c], %[a1]\n\t"
        "vfmadd231ps %[b], %[c], %[a2]\n\tvfmadd231ps %[b], %[c], %[a3]\n\t"
        "vfmadd231ps %[b], %[c], %[a4]\n\tvfmadd231ps %[b], %[c], %[a5]\n\t"
        "vfmadd231ps %[b], %[c], %[a6]\n\tvfmadd231ps %[b], %[c], %[a7]\n\t"
        "vfmadd231ps %[b], %[c], %[a8]\n\tvfmadd231ps %[b], %[c], %[a9]\n\t"
        "vfmadd231ps %[b], %[c], %[a10]\n\tvfmadd231ps %[b], %[c], %[a11]"
        : [a0] "+v"(a0), [a1] "+v"(a1), [a2] "+v"(a2), [a3] "+v"(a3), [a4] "+v"(a4), [a5] "+v"(a5),
          [a6] "+v"(a6), [a7] "+v"(a7), [a8] "+v"(a8), [a9] "+v"(a9), [a10] "+v"(a10),
          [a11] "+v"(a11)
        : [b] "v"(b), [c] "v"(c));
  }
}

KVFOLD_PROBE_VNNI void VpdpbusdZmmLoop() {
  __m512i a0 = _mm512_set1_epi32(0), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  const __m512i w = _mm512_set1_epi32(0x01010101), x = w;
  for (int64_t i = 0; i < kIterations; ++i) {
    asm volatile(
        "vpdpbusd %[w], %[x], %[a0]\n\tvpdpbusd %[w], %[x], %[a1]\n\t"
        "vpdpbusd %[w], %[x], %[a2]\n\tvpdpbusd %[w], %[x], %[a3]\n\t"
        "vpdpbusd %[w], %[x], %[a4]\n\tvpdpbusd %[w], %[x], %[a5]\n\t"
        "vpdpbusd %[w], %[x], %[a6]\n\tvpdpbusd %[w], %[x], %[a7]"
        : [a0] "+v"(a0), [a1] "+v"(a1), [a2] "+v"(a2), [a3] "+v"(a3), [a4] "+v"(a4), [a5] "+v"(a5),
          [a6] "+v"(a6), [a7] "+v"(a7)
        : [w] "v"(w), [x] "v"(x));
  }
}

// One row's block: eight dependent vpdpbusd into d, then acc += float(d) * (ws * xs).
#define KVFOLD_PROBE_BLOCK(d, acc)                                                          \
  "vpdpbusd %[w], %[x], " d "\n\tvpdpbusd %[w], %[x], " d "\n\tvpdpbusd %[w], %[x], " d     \
  "\n\tvpdpbusd %[w], %[x], " d "\n\tvpdpbusd %[w], %[x], " d "\n\tvpdpbusd %[w], %[x], " d \
  "\n\tvpdpbusd %[w], %[x], " d "\n\tvpdpbusd %[w], %[x], " d "\n\tvcvtdq2ps " d            \
  ", %%zmm24\n\tvmulps %[ws], %[xs], %%zmm25\n\tvfmadd231ps %%zmm24, %%zmm25, " acc "\n\t"

KVFOLD_PROBE_VNNI void VpdpbusdQ8BlockLoop() {
  const __m512i w = _mm512_set1_epi32(0x01010101), x = w;
  const __m512 ws = _mm512_set1_ps(0.5f), xs = _mm512_set1_ps(0.25f);
  for (int64_t i = 0; i < kIterations; ++i) {
    asm volatile(
        KVFOLD_PROBE_BLOCK("%%zmm0", "%%zmm8") KVFOLD_PROBE_BLOCK("%%zmm1", "%%zmm9")
            KVFOLD_PROBE_BLOCK("%%zmm2", "%%zmm10") KVFOLD_PROBE_BLOCK("%%zmm3", "%%zmm11")
                KVFOLD_PROBE_BLOCK("%%zmm4", "%%zmm12") KVFOLD_PROBE_BLOCK("%%zmm5", "%%zmm13")
                    KVFOLD_PROBE_BLOCK("%%zmm6", "%%zmm14") KVFOLD_PROBE_BLOCK("%%zmm7", "%%zmm15")
        :
        : [w] "v"(w), [x] "v"(x), [ws] "v"(ws), [xs] "v"(xs)
        : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
          "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm24", "xmm25");
  }
}
#undef KVFOLD_PROBE_BLOCK

// The engine's Q8 MatMul for 16 rows on one thread over a [m, 768] weight of quantized
// normals (rows past 768 repeat the first ones) with its kept panels: GMAC/s, best of three
// timed runs of `calls` calls after one that warms the caches and the scratch, and the
// panels it read.
struct Q8Rate {
  double gmac_s;
  kernels::cpu::PanelKind panels;
};
Q8Rate Q8Rows16(int64_t m, int calls) {
  namespace cpu = kernels::cpu;
  constexpr int64_t kRows = 16, kDim = 768;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  const size_t row_bytes = core::Q8RowBytes(kDim);
  std::vector<uint8_t> w(static_cast<size_t>(m) * row_bytes);
  std::vector<float> row(kDim);
  for (int64_t j = 0; j < m; ++j) {
    uint8_t* q = w.data() + j * row_bytes;
    if (j < kDim) {  // quantized normals; past them, copies of the first rows
      for (float& v : row) v = normal(rng);
      quant::QuantizeRowQ8(row.data(), kDim, q);
    } else {
      std::copy_n(w.data() + (j % kDim) * row_bytes, row_bytes, q);
    }
  }
  std::vector<float> x(kRows * kDim), out(static_cast<size_t>(kRows * m));
  for (float& v : x) v = normal(rng);
  cpu::ThreadPool pool(1);
  cpu::MatMulArgs a{x.data(), w.data(), core::DType::kQ8, nullptr, out.data(), kRows, m, kDim};
  const cpu::PanelKind kind = cpu::MatMulPanels(a);
  std::vector<uint8_t> panels;
  if (kind != cpu::PanelKind::kNone) {
    panels.resize(cpu::PanelBytes(kind, m, kDim));
    cpu::PackPanels(&pool, kind, w.data(), m, kDim, panels.data());
    a.w_panels = panels.data();
  }
  cpu::MatMulScratch scratch;
  double best_s = 1e30;
  for (int run = 0; run < 4; ++run) {
    const auto start = Clock::now();
    for (int c = 0; c < calls; ++c) cpu::MatMulOptimized(pool, a, scratch);
    if (run > 0)
      best_s = std::min(best_s, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return {static_cast<double>(kRows * m * kDim) * calls / best_s / 1e9, kind};
}

// The 16-row Q8 MatMul from L2 (768 x 768, 0.6 MB of codes) and streamed from memory
// (131072 x 768: 101 MB of codes, about a stories110m token's weights), one thread.
json Q8Panel16Rows(double q8_block_rate) {
  namespace cpu = kernels::cpu;
  const Q8Rate l2 = Q8Rows16(768, 2000);
  const double gmac_s = l2.gmac_s, streamed = Q8Rows16(131072, 1).gmac_s;
  json r;
  r["path"] = cpu::AmxActive()                                                   ? "amx"
              : l2.panels == cpu::PanelKind::kVnni                               ? "vnni_panels"
              : cpu::ActiveIsa() == cpu::Isa::kAvx512 && cpu::CpuHasAvx512Vnni() ? "vnni_lanes"
                                                                                 : "other";
  r["gmac_s"] = gmac_s;
  r["vpdpbusd_g_s"] = gmac_s / 64;
  r["over_q8_block_mix"] = q8_block_rate > 0 ? json(gmac_s / 64 / q8_block_rate) : json(nullptr);
  r["streamed_gmac_s"] = streamed;
  r["streamed_over_l2"] = streamed / gmac_s;
  return r;
}

// Bytes per second the calling thread reads through `words` (far larger than the caches),
// one 8-byte load per 64-byte line, so every line is filled from memory: the median of
// five passes after one that brings the lines' translations in.
double ReadGbS(const uint64_t* words, size_t count) {
  constexpr size_t kStride = 64 / sizeof(uint64_t);
  std::vector<double> rates;
  uint64_t sum = 0;
  for (int pass = 0; pass < 6; ++pass) {
    const auto start = Clock::now();
    for (size_t i = 0; i < count; i += kStride) sum += words[i];
    const double ns = std::chrono::duration<double, std::nano>(Clock::now() - start).count();
    if (pass > 0) rates.push_back(static_cast<double>(count * sizeof(uint64_t)) / ns);
  }
  asm volatile("" : : "r"(sum));
  return Median(rates);
}

// Runs fn on a thread of its own bound to `cpu`; false when the binding fails (a CPU
// outside the cgroup's set, say), and then fn does not run.
template <class Fn>
bool OnCpu(int cpu, Fn fn) {
  bool bound = false;
  std::thread t([&] {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    bound = pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
    if (bound) fn();
  });
  t.join();
  return bound;
}

// The probe's rates on each CPU the process may run on, one CPU at a time (~0.7 s each).
// The read goes through one 128 MiB buffer that the calling thread filled.
json PerCpu(bool avx512, bool vnni) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  json list = json::array();
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return list;
  constexpr size_t kWords = (size_t{128} << 20) / sizeof(uint64_t);
  const std::vector<uint64_t> words(kWords, 1);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed)) continue;
    json r;
    const bool bound = OnCpu(cpu, [&] {
      r["int_add_chain_g_s"] = IntAddChain();
      r["fma_zmm_g_s"] = avx512 ? json(MedianRate(12, FmaZmmLoop)) : json(nullptr);
      r["vpdpbusd_zmm_g_s"] = vnni ? json(MedianRate(8, VpdpbusdZmmLoop)) : json(nullptr);
      r["read_gb_s"] = ReadGbS(words.data(), words.size());
    });
    if (!bound) continue;
    r["cpu"] = cpu;
    list.push_back(std::move(r));
  }
  return list;
}

}  // namespace

json IsaProbe() {
  namespace cpu = kernels::cpu;
  json r;
  r["int_add_chain_g_s"] = IntAddChain();
  const bool avx512 = cpu::CpuBestIsa() == cpu::Isa::kAvx512;
  const bool vnni = avx512 && cpu::CpuHasAvx512Vnni();
  r["cpu_best_isa"] = cpu::IsaName(cpu::CpuBestIsa());
  r["avx512_vnni"] = vnni;
  r["fma_zmm_g_s"] = avx512 ? json(BestRate(12, FmaZmmLoop)) : json(nullptr);
  r["vpdpbusd_zmm_g_s"] = vnni ? json(BestRate(8, VpdpbusdZmmLoop)) : json(nullptr);
  const double q8_block = vnni ? BestRate(64, VpdpbusdQ8BlockLoop) : 0;
  r["vpdpbusd_q8_block_g_s"] = vnni ? json(q8_block) : json(nullptr);
  r["q8_panel_16_rows"] = Q8Panel16Rows(q8_block);
  r["per_cpu"] = PerCpu(avx512, vnni);
  return r;
}

}  // namespace kvfold::bench
