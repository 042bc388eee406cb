// Small string utilities shared by the tokenizers. Debian's Abseil has its own
// absl::string_view class (not std::string_view), so these use the standard library.
#ifndef KVFOLD_INFERENCE_SVC_TOKENIZER_STRING_MAP_H_
#define KVFOLD_INFERENCE_SVC_TOKENIZER_STRING_MAP_H_

#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace kvfold::tokenizer_internal {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// std::string -> V with lookups by std::string_view (no temporary strings).
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

inline std::string ReplaceAll(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (true) {
    const size_t hit = from.empty() ? std::string_view::npos : s.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(s.substr(pos));
  return out;
}

}  // namespace kvfold::tokenizer_internal

#endif  // KVFOLD_INFERENCE_SVC_TOKENIZER_STRING_MAP_H_
