// Where the keys of one attention row (kernels/attn_rows.h AttnRow) live in the paged
// cache: shared by the reference kernels (attention.cc, attention_int8.cc) and the tiled
// one (attention_tiled.cc), so every kernel reads the same entry at the same key index.
#ifndef KVFOLD_KERNELS_CPU_ATTENTION_KEYS_H_
#define KVFOLD_KERNELS_CPU_ATTENTION_KEYS_H_

#include <bit>
#include <cstdint>

#include "kernels/attn_rows.h"

namespace kvfold::kernels::cpu {

// One visible entry: pool block, offset inside it, and the position its key is rotated by.
struct KeyEntry {
  int32_t block;
  int32_t offset;
  int32_t pos;
  // Physical slot (block * block_size + offset).
  int64_t Slot(int block_size) const { return int64_t{block} * block_size + offset; }
};

class RowKeys {
 public:
  RowKeys(const AttnRow& row, const int32_t* block_tables, int block_size)
      : row_(row),
        tables_(block_tables),
        block_size_(block_size),
        shift_(std::has_single_bit(static_cast<unsigned>(block_size))
                   ? std::countr_zero(static_cast<unsigned>(block_size))
                   : -1) {}

  int num_keys() const { return row_.num_keys(); }

  // Entry of key index idx in [0, num_keys()): prefix entries first, then main.
  KeyEntry Locate(int idx) const {
    if (idx < row_.prefix_visible) {
      const int64_t b = Div(idx);
      return {tables_[row_.prefix_table + b], static_cast<int32_t>(idx - b * block_size_),
              row_.prefix_pos_base + idx * row_.prefix_pos_stride};
    }
    const int j = row_.main_lo + (idx - row_.prefix_visible);
    const int64_t s = int64_t{row_.main_front} + j;
    const int64_t b = Div(s);
    return {tables_[row_.main_table + b], static_cast<int32_t>(s - b * block_size_),
            row_.main_pos_lo + (j - row_.main_lo)};
  }

 private:
  // v / block_size for v >= 0: a shift for the usual power-of-two block sizes (a division
  // per key and KV head showed in the decode profile).
  int64_t Div(int64_t v) const { return shift_ >= 0 ? v >> shift_ : v / block_size_; }

  const AttnRow& row_;
  const int32_t* tables_;
  int block_size_;
  int shift_;  // log2(block_size), or -1
};

}  // namespace kvfold::kernels::cpu

#endif  // KVFOLD_KERNELS_CPU_ATTENTION_KEYS_H_
