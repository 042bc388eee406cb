// Overflow-checked unsigned arithmetic for the planner. Every byte count the planner
// reports is an exact uint64; a product or sum that does not fit is an error, never a
// silently wrapped number.
#ifndef KVFOLD_INFERENCE_SVC_PLANNER_CHECKED_MATH_H_
#define KVFOLD_INFERENCE_SVC_PLANNER_CHECKED_MATH_H_

#include <cstdint>
#include <initializer_list>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/status_macros.h"

namespace kvfold::planner {

// a * b * ...; InvalidArgument naming `what` when the product exceeds 2^64 - 1.
inline absl::StatusOr<uint64_t> CheckedMul(absl::string_view what,
                                           std::initializer_list<uint64_t> factors) {
  uint64_t product = 1;
  for (uint64_t f : factors) {
    if (__builtin_mul_overflow(product, f, &product)) {
      return absl::InvalidArgumentError(
          absl::StrCat("overflow: ", what, " does not fit in 64 bits (sizes too large)"));
    }
  }
  return product;
}

// a + b + ...; InvalidArgument naming `what` on overflow.
inline absl::StatusOr<uint64_t> CheckedAdd(absl::string_view what,
                                           std::initializer_list<uint64_t> terms) {
  uint64_t sum = 0;
  for (uint64_t t : terms) {
    if (__builtin_add_overflow(sum, t, &sum)) {
      return absl::InvalidArgumentError(
          absl::StrCat("overflow: ", what, " does not fit in 64 bits (sizes too large)"));
    }
  }
  return sum;
}

inline constexpr uint64_t CeilDiv(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

}  // namespace kvfold::planner

#endif  // KVFOLD_INFERENCE_SVC_PLANNER_CHECKED_MATH_H_
