// ParseTokenIds (cli_token_ids.h).
#include "tools/kvfold/cli_token_ids.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kvfold::cli {

absl::StatusOr<std::vector<int32_t>> ParseTokenIds(absl::string_view text, absl::string_view what) {
  absl::string_view rest = absl::StripAsciiWhitespace(text);
  if (!rest.empty() && rest.front() == '[') {
    if (rest.back() != ']') {
      return absl::InvalidArgumentError(absl::StrCat(what, ": '[' without a closing ']'"));
    }
    rest = absl::StripAsciiWhitespace(rest.substr(1, rest.size() - 2));
  }
  std::vector<int32_t> ids;
  if (rest.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": no token ids"));
  // Commas separate ids; whitespace separates them too, and may surround a comma.
  for (absl::string_view field : absl::StrSplit(rest, ',')) {
    field = absl::StripAsciiWhitespace(field);
    if (field.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": empty id at position ",
                                                     ids.size() + 1,
                                                     " (two commas, or a "
                                                     "comma at an end)"));
    }
    for (absl::string_view piece :
         absl::StrSplit(field, absl::ByAnyChar(" \t\r\n"), absl::SkipEmpty())) {
      int32_t id = 0;
      if (!absl::SimpleAtoi(piece, &id)) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": '", piece, "' at position ",
                                                       ids.size() + 1, " is not a 32-bit integer"));
      }
      ids.push_back(id);
    }
  }
  return ids;
}

}  // namespace kvfold::cli
