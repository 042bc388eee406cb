// Internal to the CPU matmul: one tile computes out[i0 .. i0+R, j0 .. j0+C] completely
// (all of k), with the accumulation order of its ISA path (isa.h). The driver in
// matmul.cc decides only which tiles run where.
#ifndef KVFOLD_KERNELS_CPU_MATMUL_TILES_H_
#define KVFOLD_KERNELS_CPU_MATMUL_TILES_H_

#include <cstdint>

#include "kernels/cpu/cpu_ops.h"

namespace kvfold::kernels::cpu {

using TileFn = void (*)(const MatMulArgs& a, int64_t i0, int64_t j0);

// AVX-512 tiles: 1 <= rows <= 4, 1 <= cols <= kAvx512MaxCols; F32/F16/BF16/Q8 weights.
// Per output: 16 lane partial sums over k in steps of 16 (the last step masked), reduced
// by a fixed tree; never depends on rows/cols.
inline constexpr int kAvx512MaxCols = 8;
TileFn PickTileAvx512(DType w_dtype, int rows, int cols);

// Q8 tiles of the portable (avx2 = false) and AVX2 paths: 1 <= rows <= 4, 1 <= cols <= 4.
// Per output and block of kQ8Block: blk = the block's products summed in 8 lanes
// (portable: in the same lane order), acc = fma(blk, scale, acc) per lane, then the
// 8-lane tree of the F32 path.
TileFn PickTileQ8(bool avx2, int rows, int cols);

}  // namespace kvfold::kernels::cpu

#endif  // KVFOLD_KERNELS_CPU_MATMUL_TILES_H_
