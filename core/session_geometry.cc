#include "core/session_geometry.h"

#include "absl/strings/str_cat.h"

namespace kvfold::core {
namespace {

// What a mode requires of one size.
enum class Need { kZero, kPositive, kAny };

absl::Status Check(const SessionGeometry& g, const char* field, int64_t value, Need need) {
  const char* mode = KvModeName(g.mode);
  if (value < 0 || value > kMaxGeometryTokens) {
    return absl::InvalidArgumentError(absl::StrCat(field, " ", value, " is outside [0, ",
                                                   kMaxGeometryTokens, "] (mode ", mode, ")"));
  }
  if (need == Need::kZero && value != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " must be 0 in mode ", mode, " (got ", value, ")"));
  }
  if (need == Need::kPositive && value < 1) {
    return absl::InvalidArgumentError(absl::StrCat(field, " must be >= 1 in mode ", mode));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateSessionGeometry(const SessionGeometry& g) {
  Need window = Need::kZero, sink = Need::kZero, chunk = Need::kZero, slots = Need::kZero;
  switch (g.mode) {
    case KvMode::kFull:
      break;
    case KvMode::kSliding:
      window = Need::kPositive;
      break;
    case KvMode::kSink:
      window = Need::kPositive;
      sink = Need::kAny;
      break;
    case KvMode::kMemory:
      window = Need::kPositive;
      sink = Need::kAny;
      chunk = Need::kPositive;
      slots = Need::kAny;
      break;
    case KvMode::kMemoryOnly:
      window = Need::kAny;
      sink = Need::kAny;
      chunk = Need::kPositive;
      slots = Need::kAny;
      break;
  }
  if (absl::Status s = Check(g, "window_size", g.window_size, window); !s.ok()) return s;
  if (absl::Status s = Check(g, "sink_tokens", g.sink_tokens, sink); !s.ok()) return s;
  if (absl::Status s = Check(g, "chunk_size", g.chunk_size, chunk); !s.ok()) return s;
  if (absl::Status s = Check(g, "mem_slots", g.mem_slots, slots); !s.ok()) return s;
  if (g.mode == KvMode::kMemoryOnly && g.window_size > g.chunk_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("window_size ", g.window_size, " exceeds chunk_size ", g.chunk_size,
                     " in mode memory_only (its window is the last 0..C tokens)"));
  }
  return absl::OkStatus();
}

}  // namespace kvfold::core
