// Parsing and printing of sizes for the planner's CLI and docs.
#ifndef KVFOLD_INFERENCE_SVC_PLANNER_UNITS_H_
#define KVFOLD_INFERENCE_SVC_PLANNER_UNITS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvfold::planner {

// Bytes: an integer or decimal number with an optional unit: B, KB/MB/GB/TB (10^3n),
// KiB/MiB/GiB/TiB (2^10n); K/M/G/T alone are binary (GPU memory is quoted that way).
// Case-insensitive, e.g. "80GiB", "141 GB", "1.5T", "4096". The result is rounded down to a
// whole byte. InvalidArgument on anything else, on 0 unless `allow_zero`, on overflow.
absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text, bool allow_zero = false);

// Tokens: an integer with an optional suffix k (x1000), m (x10^6), Ki (x1024), Mi (x2^20),
// e.g. "20000", "20k", "128Ki" (= 131072). Must be > 0. InvalidArgument otherwise.
absl::StatusOr<uint64_t> ParseTokenCount(absl::string_view text);

// A comma-separated list of ParseTokenCount values.
absl::StatusOr<std::vector<uint64_t>> ParseTokenList(absl::string_view text);

// A positive integer (flags such as --batch). InvalidArgument naming `flag` on zero,
// negatives, garbage or values above `max`.
absl::StatusOr<uint64_t> ParsePositive(absl::string_view flag, absl::string_view text,
                                       uint64_t max = UINT64_MAX);

// 2621440000 -> "2,621,440,000".
std::string WithCommas(uint64_t value);
// 2621440000 -> "2.44 GiB"; below 1 KiB: "512 B".
std::string HumanBytes(uint64_t bytes);
// 20000 -> "20k", 131072 -> "128Ki", 1000 -> "1k", 777 -> "777".
std::string ShortTokens(uint64_t tokens);

}  // namespace kvfold::planner

#endif  // KVFOLD_INFERENCE_SVC_PLANNER_UNITS_H_
