#include "core/kv_bytes.h"

#include <algorithm>
#include <initializer_list>
#include <limits>

#include "absl/strings/str_cat.h"

namespace kvfold::core {
namespace {

constexpr uint64_t kScaleBytes = 2;  // fp16

absl::StatusOr<uint64_t> Mul(std::initializer_list<uint64_t> factors) {
  unsigned __int128 p = 1;
  for (uint64_t f : factors) {
    p *= f;
    if (p > std::numeric_limits<uint64_t>::max()) {
      return absl::InvalidArgumentError("KV bytes overflow 64 bits");
    }
  }
  return static_cast<uint64_t>(p);
}

uint64_t CeilDiv(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

}  // namespace

absl::StatusOr<uint64_t> KvBytesPerBlock(const KvLayout& l) {
  if (l.num_layers == 0 || l.kv_dim == 0 || l.block_size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV layout needs positive sizes (layers ", l.num_layers, ", kv_dim ",
                     l.kv_dim, ", block_size ", l.block_size, ")"));
  }
  const uint64_t kv_dim = l.kv_dim;
  absl::StatusOr<uint64_t> entries = Mul({l.block_size, kv_dim});  // one of K or V
  if (!entries.ok()) return entries.status();
  uint64_t per_layer = 0;
  switch (l.dtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kF8: {
      absl::StatusOr<uint64_t> b = Mul({2, *entries, DTypeSize(l.dtype)});
      if (!b.ok()) return b.status();
      per_layer = *b;
      break;
    }
    case DType::kI8:
    case DType::kI4: {
      if (l.value_group == 0) return absl::InvalidArgumentError("KV value_group must be >= 1");
      absl::StatusOr<uint64_t> bits = Mul({*entries, static_cast<uint64_t>(DTypeBits(l.dtype))});
      if (!bits.ok()) return bits.status();
      const uint64_t group = std::min(l.value_group, kv_dim);
      absl::StatusOr<uint64_t> key_scales = Mul({kv_dim, kScaleBytes});
      absl::StatusOr<uint64_t> value_scales =
          Mul({l.block_size, CeilDiv(kv_dim, group), kScaleBytes});
      if (!key_scales.ok()) return key_scales.status();
      if (!value_scales.ok()) return value_scales.status();
      const unsigned __int128 sum =
          static_cast<unsigned __int128>(CeilDiv(*bits, 8)) * 2 + *key_scales + *value_scales;
      if (sum > std::numeric_limits<uint64_t>::max()) {
        return absl::InvalidArgumentError("KV bytes overflow 64 bits");
      }
      per_layer = static_cast<uint64_t>(sum);
      break;
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("dtype ", DTypeName(l.dtype), " is not a KV cache dtype"));
  }
  return Mul({l.num_layers, per_layer});
}

absl::StatusOr<uint64_t> KvBytesPerToken(const KvLayout& layout) {
  absl::StatusOr<uint64_t> block = KvBytesPerBlock(layout);
  if (!block.ok()) return block.status();
  return CeilDiv(*block, layout.block_size);
}

}  // namespace kvfold::core
