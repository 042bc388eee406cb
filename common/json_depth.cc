#include "common/json_depth.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace kvfold {

bool JsonDepthWithin(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, a quote included
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

absl::Status CheckJsonDepth(std::string_view text, std::string_view what) {
  if (JsonDepthWithin(text)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      std::string(what), " nests arrays and objects deeper than ", kMaxJsonDepth, " levels"));
}

}  // namespace kvfold
