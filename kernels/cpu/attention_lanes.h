// 16 x 16 lane movements of the tiled attention (attention_tiled.cc): a tile's 16 keys
// transposed for the one-lane-per-key scores of short heads, and the lane sums of the
// key-row scores of the others. GCC vector extensions, inlined into each ISA path; the
// transposition moves data only, the sums add in one fixed order.
#ifndef KVFOLD_KERNELS_CPU_ATTENTION_LANES_H_
#define KVFOLD_KERNELS_CPU_ATTENTION_LANES_H_

#include <cstring>

#include "kernels/cpu/vec16.h"

namespace kvfold::kernels::cpu {

inline constexpr int kTileKeys = 16;  // keys per attention tile, one per lane

// The lane masks of the four halving rounds (8, 4, 2, 1): LO takes a's lanes where the
// lane's bit S is clear and b's lanes l - S where it is set; HI takes a's lanes l + S and
// b's lanes where it is set.
#define KVFOLD_LO8 (I16{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23})
#define KVFOLD_HI8 (I16{8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31})
#define KVFOLD_LO4 (I16{0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27})
#define KVFOLD_HI4 (I16{4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31})
#define KVFOLD_LO2 (I16{0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29})
#define KVFOLD_HI2 (I16{2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31})
#define KVFOLD_LO1 (I16{0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30})
#define KVFOLD_HI1 (I16{1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31})

// Lane i of p[0] = the sum of p[i]'s 16 lanes, by a fixed tree: round S (8, 4, 2, 1) adds
// lanes l and l + S of a vector, two vectors' halves packed side by side in one (the
// transposition's shuffles, with an add in place of the second output). p is overwritten.
[[gnu::always_inline]] inline void SumLanes(V16 (&p)[kTileKeys]) {
#define KVFOLD_SUM_ROUND(S, LO, HI)                                   \
  for (int i = 0; i < (S); ++i) {                                     \
    const V16 a = p[i], b = p[i + (S)];                               \
    p[i] = __builtin_shuffle(a, b, LO) + __builtin_shuffle(a, b, HI); \
  }
  KVFOLD_SUM_ROUND(8, KVFOLD_LO8, KVFOLD_HI8)
  KVFOLD_SUM_ROUND(4, KVFOLD_LO4, KVFOLD_HI4)
  KVFOLD_SUM_ROUND(2, KVFOLD_LO2, KVFOLD_HI2)
  KVFOLD_SUM_ROUND(1, KVFOLD_LO1, KVFOLD_HI1)
#undef KVFOLD_SUM_ROUND
}

// kt[d][i] = rows[i][d] for the tile's 16 keys (rows [kTileKeys, hd]): 16 x 16 blocks
// transposed in registers by four rounds of two-vector shuffles (round s swaps the
// off-diagonal s x s blocks), the rest (hd % 16 columns) one by one. Pure data movement.
// Inlined into each ISA's task; was one scalar store per key and dimension.
[[gnu::always_inline]] inline void TransposeKeys(const float* rows, int hd, float* kt) {
  int d0 = 0;
  for (; d0 + 16 <= hd; d0 += 16) {
    V16 m[kTileKeys];
    for (int i = 0; i < kTileKeys; ++i) std::memcpy(&m[i], rows + i * hd + d0, sizeof(V16));
#define KVFOLD_TRANSPOSE_ROUND(S, LO, HI)     \
  for (int i = 0; i < kTileKeys; ++i) {       \
    if ((i & (S)) != 0) continue;             \
    const V16 a = m[i], b = m[i + (S)];       \
    m[i] = __builtin_shuffle(a, b, LO);       \
    m[i + (S)] = __builtin_shuffle(a, b, HI); \
  }
    KVFOLD_TRANSPOSE_ROUND(8, KVFOLD_LO8, KVFOLD_HI8)
    KVFOLD_TRANSPOSE_ROUND(4, KVFOLD_LO4, KVFOLD_HI4)
    KVFOLD_TRANSPOSE_ROUND(2, KVFOLD_LO2, KVFOLD_HI2)
    KVFOLD_TRANSPOSE_ROUND(1, KVFOLD_LO1, KVFOLD_HI1)
#undef KVFOLD_TRANSPOSE_ROUND
    for (int l = 0; l < kTileKeys; ++l) std::memcpy(kt + (d0 + l) * kTileKeys, &m[l], sizeof(V16));
  }
  for (; d0 < hd; ++d0) {
    for (int i = 0; i < kTileKeys; ++i) kt[d0 * kTileKeys + i] = rows[i * hd + d0];
  }
}

// The masks are expanded above; they do not leak to the files including this header.
#undef KVFOLD_LO8
#undef KVFOLD_HI8
#undef KVFOLD_LO4
#undef KVFOLD_HI4
#undef KVFOLD_LO2
#undef KVFOLD_HI2
#undef KVFOLD_LO1
#undef KVFOLD_HI1

}  // namespace kvfold::kernels::cpu

#endif  // KVFOLD_KERNELS_CPU_ATTENTION_LANES_H_
