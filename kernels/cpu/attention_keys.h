// Where the keys of one attention row (kernels/attn_rows.h AttnRow) live in the paged
// cache: shared by the reference kernels (attention.cc, attention_int8.cc) and the tiled
// one (attention_tiled.cc), so every kernel reads the same entry at the same key index.
#ifndef KVFOLD_KERNELS_CPU_ATTENTION_KEYS_H_
#define KVFOLD_KERNELS_CPU_ATTENTION_KEYS_H_

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
      : row_(row), tables_(block_tables), block_size_(block_size) {}

  int num_keys() const { return row_.num_keys(); }

  // Entry of key index idx in [0, num_keys()): prefix entries first, then main.
  KeyEntry Locate(int idx) const {
    if (idx < row_.prefix_visible) {
      return {tables_[row_.prefix_table + idx / block_size_], idx % block_size_,
              row_.prefix_pos_base + idx * row_.prefix_pos_stride};
    }
    const int j = row_.main_lo + (idx - row_.prefix_visible);
    const int64_t s = int64_t{row_.main_front} + j;
    return {tables_[row_.main_table + s / block_size_], static_cast<int32_t>(s % block_size_),
            row_.main_pos_lo + (j - row_.main_lo)};
  }

 private:
  const AttnRow& row_;
  const int32_t* tables_;
  int block_size_;
};

}  // namespace kvfold::kernels::cpu

#endif  // KVFOLD_KERNELS_CPU_ATTENTION_KEYS_H_
