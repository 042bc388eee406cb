// Token id lists on the command line and in files (`generate --prompt-ids`, `logits
// --tokens` / `--tokens-file`, `tokenize --ids`): one parser, so every subcommand takes the
// same spellings and refuses the same mistakes.
#ifndef KVFOLD_TOOLS_KVFOLD_CLI_TOKEN_IDS_H_
#define KVFOLD_TOOLS_KVFOLD_CLI_TOKEN_IDS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvfold::cli {

// "1,2, 3\n4", "[1, 2, 3]" and "1 2 3" -> {1, 2, 3}: decimal int32 ids separated by commas
// and/or whitespace, optionally inside one pair of brackets (a JSON array). InvalidArgument,
// naming `what` and the id's position (1-based), for a piece that is not an int32, for an
// empty piece between two commas ("1,,2") or at either end of the list ("1,2,"), and for a
// list without ids. Range against a vocabulary is the caller's check.
absl::StatusOr<std::vector<int32_t>> ParseTokenIds(absl::string_view text, absl::string_view what);

}  // namespace kvfold::cli

#endif  // KVFOLD_TOOLS_KVFOLD_CLI_TOKEN_IDS_H_
