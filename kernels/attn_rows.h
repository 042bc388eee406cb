// The per-row records the engine's batch planner writes and every attention kernel (CPU
// reference, CPU tiled, CUDA) reads: one layout, one set of names, no field indexes.
// Plain int32 structs, so a [n] array of them is a [n, k] I32 tensor on any backend and
// travels through Backend::CopyToDevice unchanged. Row placement (which entries a row
// sees, at which positions): docs/contracts.md, "Row placement".
#ifndef KVFOLD_KERNELS_ATTN_ROWS_H_
#define KVFOLD_KERNELS_ATTN_ROWS_H_

#include <cstdint>
#include <type_traits>

#if defined(__CUDACC__)
#define KVFOLD_HOST_DEVICE __host__ __device__
#else
#define KVFOLD_HOST_DEVICE
#endif

namespace kvfold::kernels {

// One query row of an Attention call. The row sees prefix entries [0, prefix_visible) and
// then main entries [main_lo, main_hi), in that order ("key index" 0, 1, ... below).
// Prefix entry j sits at physical slot j of the prefix block table, logical main entry j
// at physical slot main_front + j of the main block table; physical slot s lives in block
// table[s / block_size] at offset s % block_size.
struct AttnRow {
  int32_t prefix_table = 0;       // offset of the prefix block table in block_tables
  int32_t prefix_visible = 0;     // prefix entries [0, prefix_visible) are visible
  int32_t prefix_pos_base = 0;    // position of prefix entry j = base + j * stride
  int32_t prefix_pos_stride = 0;  //   (memory modes: 0 and 0; sink: 0 and 1)
  int32_t main_table = 0;         // offset of the main block table in block_tables
  int32_t main_front = 0;         // physical slot of logical main entry 0
  int32_t main_lo = 0;            // main entries [main_lo, main_hi) are visible
  int32_t main_hi = 0;
  int32_t main_pos_lo = 0;  // position of main entry lo; entry j: pos_lo + (j - lo)
  int32_t reserved = 0;     // keeps the record 40 bytes; always 0

  KVFOLD_HOST_DEVICE int num_keys() const {
    return prefix_visible + (main_hi > main_lo ? main_hi - main_lo : 0);
  }
  // Rows with the same layout see the same entry at every key index they both have (rows
  // of one sequence in one call): kernels may share located / rotated keys among them.
  KVFOLD_HOST_DEVICE bool SameKeyLayout(const AttnRow& o) const {
    return prefix_table == o.prefix_table && prefix_visible == o.prefix_visible &&
           prefix_pos_base == o.prefix_pos_base && prefix_pos_stride == o.prefix_pos_stride &&
           main_table == o.main_table && main_front == o.main_front && main_lo == o.main_lo &&
           main_pos_lo == o.main_pos_lo;
  }
};

// Per query row of an AttentionInt8 call (INT8 KV, docs/engine.md "INT8 KV"): the row's OWN
// block (the pool block holding its own entry) is read F32 from `page`; every other entry
// from its block's int8 codes. `sealed` != 0 when the StoreKvInt8 before the call quantized
// the own block (its codes are valid for the other rows); 0 for the open last block of a
// segment, which only its own rows can see.
struct AttnOwnBlock {
  int32_t block = -1;
  int32_t page = -1;
  int32_t sealed = 0;
};

// One block to quantize in a StoreKvInt8 call: entries [0, count) of `page` become the
// codes and scales of pool block `block`.
struct SealEntry {
  int32_t block = 0;
  int32_t page = 0;
  int32_t count = 0;
};

// F32 and fp16 KV caches are [num_blocks, num_kv_heads, block_size, head_dim]: a block
// holds its entries head by head, each KV head's entries contiguous (docs/engine.md, "KV
// block layout"). The element index of channel d of KV head kvh of the entry at `offset`
// in `block`, and of the entry at physical slot `slot` (block * block_size + offset).
// INT8 codes keep [num_blocks, block_size, kv_dim] (Backend's KvCacheI8).
KVFOLD_HOST_DEVICE inline int64_t FloatKvIndex(int64_t block, int64_t offset, int64_t kvh,
                                               int64_t d, int64_t num_kv_heads, int64_t block_size,
                                               int64_t head_dim) {
  return ((block * num_kv_heads + kvh) * block_size + offset) * head_dim + d;
}
KVFOLD_HOST_DEVICE inline int64_t FloatKvIndex(int64_t slot, int64_t kvh, int64_t d,
                                               int64_t num_kv_heads, int64_t block_size,
                                               int64_t head_dim) {
  return FloatKvIndex(slot / block_size, slot % block_size, kvh, d, num_kv_heads, block_size,
                      head_dim);
}

inline constexpr int kAttnRowFields = sizeof(AttnRow) / sizeof(int32_t);
inline constexpr int kAttnOwnFields = sizeof(AttnOwnBlock) / sizeof(int32_t);
inline constexpr int kSealFields = sizeof(SealEntry) / sizeof(int32_t);
static_assert(kAttnRowFields == 10 && kAttnOwnFields == 3 && kSealFields == 3);
static_assert(std::is_standard_layout_v<AttnRow> && std::is_trivially_copyable_v<AttnRow>);
static_assert(std::is_standard_layout_v<AttnOwnBlock> &&
              std::is_trivially_copyable_v<AttnOwnBlock>);
static_assert(std::is_standard_layout_v<SealEntry> && std::is_trivially_copyable_v<SealEntry>);

}  // namespace kvfold::kernels

#endif  // KVFOLD_KERNELS_ATTN_ROWS_H_
