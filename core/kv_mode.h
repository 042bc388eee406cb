// KV modes: how a session's KV cache grows (docs/architecture.md, docs/memory-mode.md) and
// the one name table every command line, service and report uses.
#ifndef KVFOLD_CORE_KV_MODE_H_
#define KVFOLD_CORE_KV_MODE_H_

#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvfold::core {

enum class KvMode { kFull, kSliding, kSink, kMemory, kMemoryOnly };
inline constexpr KvMode kAllKvModes[] = {KvMode::kFull, KvMode::kSliding, KvMode::kSink,
                                         KvMode::kMemory, KvMode::kMemoryOnly};

constexpr bool IsMemoryMode(KvMode mode) {
  return mode == KvMode::kMemory || mode == KvMode::kMemoryOnly;
}

// "full", "sliding", "sink", "memory", "memory_only".
const char* KvModeName(KvMode mode);

// A name KvModeName prints, case-insensitive, surrounding spaces ignored; "memory-only" is
// read as "memory_only". InvalidArgument naming the accepted names otherwise.
absl::StatusOr<KvMode> ParseKvMode(std::string_view name);

// "all" (every mode, in kAllKvModes order) or a comma-separated list of names (duplicates
// removed, order kept). InvalidArgument for an unknown or empty name.
absl::StatusOr<std::vector<KvMode>> ParseKvModeList(std::string_view list);

}  // namespace kvfold::core

#endif  // KVFOLD_CORE_KV_MODE_H_
