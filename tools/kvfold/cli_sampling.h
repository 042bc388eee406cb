// Sampling flags that `generate` (the engine's sampler) and `chat` (a replica's, through
// gRPC) share beyond temperature, top-k, top-p and seed: one spelling, one parser.
#ifndef KVFOLD_TOOLS_KVFOLD_CLI_SAMPLING_H_
#define KVFOLD_TOOLS_KVFOLD_CLI_SAMPLING_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvfold::cli {

struct LogitAdjustFlags {
  double presence_penalty = 0;
  double frequency_penalty = 0;
  double repetition_penalty = 0;  // 0 = unset (off)
  double min_p = 0;
  std::string logit_bias;  // "ID=BIAS,ID=BIAS"
};

// --presence-penalty, --frequency-penalty, --repetition-penalty, --min-p and --logit-bias.
// Values are validated where they are used (engine::SamplingParams::Validate, or the
// replica).
void AddLogitAdjustFlags(CLI::App& app, LogitAdjustFlags& flags);

// "13=-100,42=2.5" -> {(13, -100), (42, 2.5)}, sorted by id; "" -> {}. InvalidArgument,
// naming --logit-bias, for a piece that is not ID=NUMBER or an id given twice.
absl::StatusOr<std::vector<std::pair<int32_t, float>>> ParseLogitBias(absl::string_view text);

}  // namespace kvfold::cli

#endif  // KVFOLD_TOOLS_KVFOLD_CLI_SAMPLING_H_
