// Helpers the CPU kernel tests share: the two CPU backends, random inputs, a RoPE table,
// and running a test on every ISA path the CPU has (kernels/cpu/isa.h).
#ifndef KVFOLD_TESTS_KERNELS_CPU_CPU_TEST_UTIL_H_
#define KVFOLD_TESTS_KERNELS_CPU_CPU_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/isa.h"

namespace kvfold::kernels::testing {

// The reference CPU backend (1 thread) and the optimised one (2 threads), a stream each.
struct Rig {
  std::unique_ptr<Backend> ref = CreateCpuBackend({1, true});
  std::unique_ptr<Backend> opt = CreateCpuBackend({2, false});
  std::unique_ptr<Stream> s1 = ref->CreateStream();
  std::unique_ptr<Stream> s2 = opt->CreateStream();
};

inline Tensor T(void* p, DType dt, std::initializer_list<int64_t> shape) {
  return MakeTensor(p, dt, shape);
}

// An F32 or fp16 cache [blocks, kv_heads, bs, hd] (FloatKvIndex) holding `entries`
// [blocks * bs, kv_heads * hd] (an entry's heads side by side, as INT8 codes lie).
template <class E>
std::vector<E> HeadMajor(const std::vector<E>& entries, int64_t kv_heads, int64_t bs, int64_t hd) {
  const int64_t kv_dim = kv_heads * hd;
  std::vector<E> out(entries.size());
  for (int64_t slot = 0; slot < static_cast<int64_t>(entries.size()) / kv_dim; ++slot) {
    for (int64_t c = 0; c < kv_dim; ++c) {
      out[FloatKvIndex(slot, c / hd, c % hd, kv_heads, bs, hd)] = entries[slot * kv_dim + c];
    }
  }
  return out;
}

// n values uniform in [-scale, scale), reproducible from seed.
inline std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// The probe of the kept-panels tests: the weights `w` [m, k] were negated in their adopted
// buffer after `before` = x [n, k] @ w^T was computed; MatMul now gives `before` where it
// reads panels laid out before the change (kept), else exactly -before (negated weights
// negate every product and sum).
inline void ExpectKeptOrNegated(Rig& r, std::vector<float>& x, Tensor w, int n, int m, int k,
                                const std::vector<float>& before, bool kept) {
  std::vector<float> after(before.size());
  ASSERT_TRUE(r.opt
                  ->MatMul(*r.s2, T(x.data(), DType::kF32, {n, k}), w, Tensor(),
                           T(after.data(), DType::kF32, {n, m}))
                  .ok());
  for (size_t i = 0; i < before.size(); ++i) {
    ASSERT_EQ(after[i], kept ? before[i] : -before[i]) << i;
  }
}

// [rows, hd] cos | sin halves per position (backend.h's RoPE table), theta 10000.
inline std::vector<float> RopeTable(int rows, int hd) {
  std::vector<float> rope(static_cast<size_t>(rows) * hd);
  for (int p = 0; p < rows; ++p) {
    for (int i = 0; i < hd / 2; ++i) {
      const double a = p * std::pow(10000.0, -2.0 * i / hd);
      rope[p * hd + i] = static_cast<float>(std::cos(a));
      rope[p * hd + hd / 2 + i] = static_cast<float>(std::sin(a));
    }
  }
  return rope;
}

// Runs the kernels on one ISA path for the scope, then on the CPU's best again.
class IsaScope {
 public:
  explicit IsaScope(cpu::Isa isa) { cpu::SetActiveIsaForTesting(isa); }
  ~IsaScope() { cpu::SetActiveIsaForTesting(cpu::CpuBestIsa()); }
  IsaScope(const IsaScope&) = delete;
  IsaScope& operator=(const IsaScope&) = delete;
};

// Every ISA path this CPU can run, portable first.
inline std::vector<cpu::Isa> RunnableIsas() {
  std::vector<cpu::Isa> isas;
  for (int i = 0; i <= static_cast<int>(cpu::CpuBestIsa()); ++i) {
    isas.push_back(static_cast<cpu::Isa>(i));
  }
  return isas;
}

}  // namespace kvfold::kernels::testing

#endif  // KVFOLD_TESTS_KERNELS_CPU_CPU_TEST_UTIL_H_
