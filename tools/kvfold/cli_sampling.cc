#include "tools/kvfold/cli_sampling.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kvfold::cli {

void AddLogitAdjustFlags(CLI::App& app, LogitAdjustFlags& flags) {
  app.add_option("--presence-penalty", flags.presence_penalty,
                 "subtracted from the logit of every token generated so far in the turn "
                 "([-2, 2], 0 = off)");
  app.add_option("--frequency-penalty", flags.frequency_penalty,
                 "subtracted once per occurrence of a token generated so far ([-2, 2], 0 = off)");
  app.add_option("--repetition-penalty", flags.repetition_penalty,
                 "divides positive (multiplies negative) logits of the prompt's and generated "
                 "tokens (> 0; 0 or 1 = off)");
  app.add_option("--min-p", flags.min_p,
                 "drop tokens less likely than this times the most likely one ([0, 1], 0 = off)");
  app.add_option("--logit-bias", flags.logit_bias,
                 "added to token logits before sampling, e.g. 13=-100,42=2.5 ([-100, 100])");
}

absl::StatusOr<std::vector<std::pair<int32_t, float>>> ParseLogitBias(absl::string_view text) {
  std::vector<std::pair<int32_t, float>> out;
  if (absl::StripAsciiWhitespace(text).empty()) return out;
  for (absl::string_view piece : absl::StrSplit(text, ',')) {
    piece = absl::StripAsciiWhitespace(piece);
    const std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(piece, '=');
    int32_t id = 0;
    float bias = 0;
    if (!absl::SimpleAtoi(kv.first, &id) || !absl::SimpleAtof(kv.second, &bias)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--logit-bias: \"", piece, "\" is not ID=NUMBER"));
    }
    out.emplace_back(id, bias);
  }
  std::sort(out.begin(), out.end());
  for (size_t i = 1; i < out.size(); ++i) {
    if (out[i].first == out[i - 1].first) {
      return absl::InvalidArgumentError(
          absl::StrCat("--logit-bias: token id ", out[i].first, " is given twice"));
    }
  }
  return out;
}

}  // namespace kvfold::cli
