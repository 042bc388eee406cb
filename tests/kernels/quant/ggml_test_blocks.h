// Block-quantized ggml data for tests: every byte from a fixed linear congruential
// generator, the fp16 scale fields (and minima) overwritten with finite values, so any
// decoder sees every code, scale and bit pattern the layout allows. The same bytes are
// easy to rebuild in any language, which is how the golden values of ggml_blocks_test
// were computed with another implementation of the formats.
#ifndef KVFOLD_TESTS_KERNELS_QUANT_GGML_TEST_BLOCKS_H_
#define KVFOLD_TESTS_KERNELS_QUANT_GGML_TEST_BLOCKS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/gguf.h"

namespace kvfold::testing {

// Byte offsets of a block's fp16 fields: the scale first, then the minimum where there is one.
inline std::vector<int> GgmlHalfFields(uint32_t type) {
  switch (static_cast<gguf::TensorType>(type)) {
    case gguf::TensorType::kQ4_1:
    case gguf::TensorType::kQ5_1:
    case gguf::TensorType::kQ4_K:
    case gguf::TensorType::kQ5_K:
      return {0, 2};
    case gguf::TensorType::kQ2_K:
      return {80, 82};
    case gguf::TensorType::kQ3_K:
      return {108};
    case gguf::TensorType::kQ6_K:
      return {208};
    default:  // Q4_0, Q5_0, Q8_0
      return {0};
  }
}

// `elements` (a multiple of the type's block) elements of `type`: byte k of the stream is
// the top byte of the k-th state of x = x * 1664525 + 1013904223 (mod 2^32) from
// x = seed + type; block b's scale is fp16 bits 0x2000 + (37 b mod 0x1000) (1/128 to 1/8),
// its minimum 0x9C00 + (53 b mod 0x1000) (-1/256 to -1/16).
inline std::string PseudoRandomGgmlBlocks(uint32_t type, int64_t elements, uint32_t seed = 12345) {
  const gguf::BlockLayout block = *gguf::BlockOf(type);
  uint32_t x = seed + type;
  std::string out;
  for (int64_t b = 0; b < elements / block.elements; ++b) {
    std::string bytes(block.bytes, '\0');
    for (char& c : bytes) {
      x = x * 1664525u + 1013904223u;
      c = static_cast<char>(x >> 24);
    }
    const std::vector<int> fields = GgmlHalfFields(type);
    for (size_t f = 0; f < fields.size(); ++f) {
      const uint32_t bits = f == 0 ? 0x2000u + 37u * b % 0x1000u : 0x9C00u + 53u * b % 0x1000u;
      bytes[fields[f]] = static_cast<char>(bits & 0xFF);
      bytes[fields[f] + 1] = static_cast<char>(bits >> 8);
    }
    out += bytes;
  }
  return out;
}

}  // namespace kvfold::testing

#endif  // KVFOLD_TESTS_KERNELS_QUANT_GGML_TEST_BLOCKS_H_
