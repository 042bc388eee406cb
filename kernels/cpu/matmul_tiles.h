// Internal to the CPU matmul: one tile computes out[i0 .. i0+R, j0 .. j0+C] completely
// (all of k), with the accumulation order of its ISA path (isa.h). The driver in
// matmul.cc decides only which tiles run where.
#ifndef KVFOLD_KERNELS_CPU_MATMUL_TILES_H_
#define KVFOLD_KERNELS_CPU_MATMUL_TILES_H_

#include <cstdint>

#include "kernels/cpu/cpu_ops.h"

namespace kvfold::kernels::cpu {

using TileFn = void (*)(const MatMulArgs& a, int64_t i0, int64_t j0);
// Q8 weights take the quantized activations of a's x (cpu_ops.h Q8Activations).
using TileQ8Fn = void (*)(const MatMulArgs& a, const Q8Activations& xq, int64_t i0, int64_t j0);

// AVX-512 tiles: 1 <= rows <= 4, 1 <= cols <= kAvx512MaxCols; F32/F16/BF16 weights.
// Per output: 16 lane partial sums over k in steps of 16 (the last step masked), reduced
// by a fixed tree; never depends on rows/cols.
inline constexpr int kAvx512MaxCols = 8;
TileFn PickTileAvx512(DType w_dtype, int rows, int cols);

// AVX-512 VNNI Q8 tiles (needs CpuHasAvx512Vnni()): 1 <= rows <= 4, 1 <= cols <= 8.
// Per output: 16 lanes over pairs of blocks (lanes 0-7 the even block, 8-15 the odd),
// each lane acc = fma(float(4-code integer dot), x_scale * w_scale, acc); the F32 tree.
TileQ8Fn PickTileQ8Vnni(int rows, int cols);

// AMX Q8 (needs AmxActive(), isa.h) for weights with m % 16 == 0: a driver of its own.
// Per output: one exact integer dot per block of 32 codes (a TDPBSSD tile multiply
// computes 16 columns x 16 rows of them), then, block by block,
// acc = fma(float(dot), w_scale * x_scale, acc); the sum is acc. No lanes, no tree.
void MatMulQ8Amx(ThreadPool& pool, const MatMulArgs& a, const Q8Activations& xq,
                 PanelScratch& scratch);

// The panels of `kind` a call reads: the caller's kept ones (a.w_panels), else laid out
// for this call in scratch.panels.
const uint8_t* CallPanels(ThreadPool& pool, const MatMulArgs& a, PanelKind kind,
                          PanelScratch& scratch);

// AVX-512 F32 on F32 panels (m % 16 == 0): per output one fma chain over k in order,
// acc = fma(x[i, t], w[j, t], acc) for t = 0 .. k - 1, then + bias. No lane partial sums:
// the bits differ from the lane tiles' (which F16/BF16 weights and m % 16 != 0 take).
void MatMulF32Panels(ThreadPool& pool, const MatMulArgs& a, PanelScratch& scratch);

// AVX-512 VNNI Q8 on VNNI panels (CpuHasAvx512Vnni(), m % 16 == 0; used where AMX is not):
// the AMX path's block dots and float operations per output, so the same bits. xq needs
// Q8Offsets::kBlocks.
void MatMulQ8Vnni(ThreadPool& pool, const MatMulArgs& a, const Q8Activations& xq,
                  PanelScratch& scratch);
// MatMulQ8Vnni of 1 <= count <= kMaxQ8Products products of one x (same x, n and k; each
// a[p].w_panels its kept VNNI panels) in one pass of the pool over all their column
// blocks: each output as MatMulQ8Vnni computes it, so the same bits.
void MatMulQ8VnniProducts(ThreadPool& pool, const MatMulArgs* a, int count,
                          const Q8Activations& xq);

// Q8 tiles of the portable (avx2 = false) and AVX2 paths: 1 <= rows <= 4, 1 <= cols <= 4.
// Per output: 8 lanes, one block at a time, the same lane formula; the 8-lane tree of
// the F32 path. Portable and AVX2 give identical bits.
TileQ8Fn PickTileQ8(bool avx2, int rows, int cols);

}  // namespace kvfold::kernels::cpu

#endif  // KVFOLD_KERNELS_CPU_MATMUL_TILES_H_
