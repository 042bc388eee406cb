// The q/k row permutation of HF's convert_llama_weights_to_hf: checkpoints that rotate
// interleaved pairs (2i, 2i+1) of each head (llama2.c, GGUF's llama) become the engine's
// rotate_half pairs (i, i + head_dim / 2): new row (h, p, i) = old row (h, 2i + p).
#ifndef KVFOLD_INFERENCE_SVC_MODEL_ROTARY_ROWS_H_
#define KVFOLD_INFERENCE_SVC_MODEL_ROTARY_ROWS_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

namespace kvfold::model {

// The `heads * head_dim` rows of `w`, each `row_bytes` long (any dtype: rows move whole),
// permuted; the result owns its bytes.
inline std::shared_ptr<std::vector<uint8_t>> PermuteRotaryRows(const void* w, int heads,
                                                               int head_dim, size_t row_bytes) {
  auto out =
      std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(heads) * head_dim * row_bytes);
  const auto* src = static_cast<const uint8_t*>(w);
  const int half = head_dim / 2;
  for (int h = 0; h < heads; ++h)
    for (int p = 0; p < 2; ++p)
      for (int i = 0; i < half; ++i) {
        std::memcpy(out->data() + static_cast<size_t>(h * head_dim + p * half + i) * row_bytes,
                    src + static_cast<size_t>(h * head_dim + 2 * i + p) * row_bytes, row_bytes);
      }
  return out;
}

}  // namespace kvfold::model

#endif  // KVFOLD_INFERENCE_SVC_MODEL_ROTARY_ROWS_H_
