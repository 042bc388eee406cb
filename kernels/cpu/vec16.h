// 16-lane float vectors as GCC vector extensions, for kernels that must give identical
// bits on every ISA path (isa.h): plain vector arithmetic, compiled without FMA
// contraction (-ffp-contract=off), stamped out once per path with target attributes.
#ifndef KVFOLD_KERNELS_CPU_VEC16_H_
#define KVFOLD_KERNELS_CPU_VEC16_H_

#include <cstdint>

namespace kvfold::kernels::cpu {

typedef float V16 __attribute__((vector_size(64)));
typedef int32_t I16 __attribute__((vector_size(64)));

}  // namespace kvfold::kernels::cpu

// Defines `ATTR static inline void Exp16(V16* inout)`: Cephes expf on 16 lanes, as plain
// vector arithmetic (no FMA): identical bits on every ISA. Inputs are clamped to
// [-87.3, 88.3]: below, ~1e-38 instead of 0 (callers mask); above, ~2.2e38 instead of inf.
#define KVFOLD_EXP16(ATTR)                                                    \
  ATTR static inline void Exp16(V16* inout) {                                 \
    V16 x = *inout;                                                           \
    const V16 lo = V16{} - 87.3f, hi = V16{} + 88.3f;                         \
    x = x < lo ? lo : x;                                                      \
    x = x > hi ? hi : x;                                                      \
    const V16 fx0 = x * 1.44269504088896341f + 0.5f;                          \
    V16 fx = __builtin_convertvector(__builtin_convertvector(fx0, I16), V16); \
    fx = fx > fx0 ? fx - 1.0f : fx;                                           \
    x = x - fx * 0.693359375f;                                                \
    x = x - fx * -2.12194440e-4f;                                             \
    V16 y = V16{} + 1.9875691500e-4f;                                         \
    y = y * x + 1.3981999507e-3f;                                             \
    y = y * x + 8.3334519073e-3f;                                             \
    y = y * x + 4.1665795894e-2f;                                             \
    y = y * x + 1.6666665459e-1f;                                             \
    y = y * x + 5.0000001201e-1f;                                             \
    y = y * (x * x) + (x + 1.0f);                                             \
    const I16 e = (__builtin_convertvector(fx, I16) + 127) << 23;             \
    *inout = y * __builtin_bit_cast(V16, e);                                  \
  }

#endif  // KVFOLD_KERNELS_CPU_VEC16_H_
