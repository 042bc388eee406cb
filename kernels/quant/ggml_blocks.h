// ggml's block-quantized tensor types, as GGUF files store them, decoded on the CPU:
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (blocks of 32 elements: an fp16 scale, for the _1 types an
// fp16 minimum, 4, 5 or 8-bit codes), the K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K
// (super-blocks of 256: sub-blocks of 16 or 32 with 4 to 8-bit scales under fp16
// super-scales), and IQ4_NL / IQ4_XS (4-bit indices into 16 fixed int8 levels, blocks of 32
// or super-blocks of 256).
// Layouts and formulas: docs/model-format.md, "GGUF quantized tensors". kvfold computes
// with its own Q8 rows (core/dtype.h kQ8), so a model loader either repacks a row
// (Q4_0, Q5_0, Q8_0: value = fp16 scale * small integer, the same numbers) or decodes it
// here and quantizes it again (kernels/quant/weight_q8.h).
#ifndef KVFOLD_KERNELS_QUANT_GGML_BLOCKS_H_
#define KVFOLD_KERNELS_QUANT_GGML_BLOCKS_H_

#include <cstdint>

namespace kvfold::quant {

// True for the block-quantized ggml types above (gguf::TensorType numbers).
bool IsGgmlBlockType(uint32_t type);

// Writes the `n` elements of `src` (n / block elements consecutive blocks of `type`, whose
// layout gguf::BlockOf gives) to `out` as floats, each computed as ggml computes it in
// float arithmetic. `type` must be one IsGgmlBlockType accepts and `n` a multiple of its
// block (CHECK: the loader validated both).
void DequantizeGgmlBlocks(uint32_t type, const uint8_t* src, int64_t n, float* out);

// True for Q4_0, Q5_0, Q8_0 and IQ4_NL, whose every block is an fp16 scale times int8
// codes: a kvfold Q8 row holds the same numbers.
bool RepacksToQ8Exactly(uint32_t type);

// A row of `cols` elements (a multiple of 32) of such a type as one kvfold Q8 row
// (core::Q8RowBytes(cols) bytes): per block the same fp16 scale, codes q - 8 (Q4_0),
// q - 16 (Q5_0), q (Q8_0) or level[q] (IQ4_NL). CHECKs RepacksToQ8Exactly(type).
void RepackGgmlRowToQ8(uint32_t type, const uint8_t* src, int64_t cols, uint8_t* row);

}  // namespace kvfold::quant

#endif  // KVFOLD_KERNELS_QUANT_GGML_BLOCKS_H_
