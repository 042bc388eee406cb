#include "core/kv_mode.h"

#include <algorithm>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace kvfold::core {

const char* KvModeName(KvMode mode) {
  switch (mode) {
    case KvMode::kFull:
      return "full";
    case KvMode::kSliding:
      return "sliding";
    case KvMode::kSink:
      return "sink";
    case KvMode::kMemory:
      return "memory";
    case KvMode::kMemoryOnly:
      return "memory_only";
  }
  return "?";
}

absl::StatusOr<KvMode> ParseKvMode(std::string_view name) {
  const std::string n = absl::StrReplaceAll(
      absl::AsciiStrToLower(absl::StripAsciiWhitespace(std::string(name))), {{"-", "_"}});
  for (KvMode m : kAllKvModes) {
    if (n == KvModeName(m)) return m;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown mode '", std::string(name), "'; expected full, sliding, sink, memory or memory_only"));
}

absl::StatusOr<std::vector<KvMode>> ParseKvModeList(std::string_view list) {
  if (absl::AsciiStrToLower(absl::StripAsciiWhitespace(std::string(list))) == "all") {
    return std::vector<KvMode>(std::begin(kAllKvModes), std::end(kAllKvModes));
  }
  std::vector<KvMode> modes;
  for (absl::string_view part : absl::StrSplit(std::string(list), ',')) {
    absl::StatusOr<KvMode> m = ParseKvMode(std::string(part));
    if (!m.ok()) return m.status();
    if (std::find(modes.begin(), modes.end(), *m) == modes.end()) modes.push_back(*m);
  }
  return modes;
}

}  // namespace kvfold::core
