#include "inference_svc/runtime/kv_reservation.h"

#include <algorithm>
#include <limits>

namespace kvfold::runtime {
namespace {

// Blocks of one segment of n entries that may start mid-block.
int64_t SegmentBlocks(int64_t n, int block_size) {
  if (n <= 0) return 0;
  return (n + block_size - 1) / block_size + 1;
}

int Saturate(int64_t v) {
  return static_cast<int>(std::min<int64_t>(v, std::numeric_limits<int32_t>::max()));
}

}  // namespace

int ReserveBlocks(const SessionSpec& spec, const KvGeometry& g, int64_t tokens_after_turn,
                  int64_t prompt_tokens) {
  const int64_t n = std::max<int64_t>(0, tokens_after_turn);
  const int64_t rows = std::max<int64_t>(1, std::min<int64_t>(prompt_tokens, g.transient_tokens));
  const int64_t windowed = static_cast<int64_t>(spec.window_size) + rows;
  int64_t prefix = 0, main = 0;
  switch (spec.mode) {
    case core::KvMode::kFull:
      main = n;
      break;
    case core::KvMode::kSliding:
      main = std::min(n, windowed);
      break;
    case core::KvMode::kSink:
      prefix = std::min<int64_t>(n, spec.sink_tokens);
      main = std::min(n, windowed);
      break;
    case core::KvMode::kMemory:
    case core::KvMode::kMemoryOnly:
      prefix = g.mem_slots;
      main = std::min<int64_t>(n, static_cast<int64_t>(spec.window_size) + g.chunk_size);
      break;
  }
  return Saturate(SegmentBlocks(prefix, g.block_size) + SegmentBlocks(main, g.block_size));
}

int HeldBlocks(const KvGeometry& g, int64_t resident_tokens) {
  // Two segments, each possibly with a partial block at both ends.
  return Saturate(SegmentBlocks(std::max<int64_t>(0, resident_tokens), g.block_size) + 1);
}

}  // namespace kvfold::runtime
