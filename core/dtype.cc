#include "core/dtype.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace kvfold::core {
namespace {

struct NameEntry {
  std::string_view name;
  DType dtype;
};

// Printed names first (DTypeName returns the first entry of each dtype), then aliases.
constexpr NameEntry kNames[] = {
    {"f32", DType::kF32},       {"f16", DType::kF16},      {"bf16", DType::kBF16},
    {"int32", DType::kI32},     {"int8", DType::kI8},      {"q8", DType::kQ8},
    {"f8", DType::kF8},         {"int4", DType::kI4},      {"fp32", DType::kF32},
    {"float32", DType::kF32},   {"fp16", DType::kF16},     {"float16", DType::kF16},
    {"half", DType::kF16},      {"bfloat16", DType::kBF16}, {"i32", DType::kI32},
    {"i8", DType::kI8},         {"fp8", DType::kF8},       {"fp8_e4m3", DType::kF8},
    {"i4", DType::kI4},
};

}  // namespace

const char* DTypeName(DType dtype) {
  for (const NameEntry& e : kNames) {
    if (e.dtype == dtype) return e.name.data();
  }
  return "?";
}

absl::StatusOr<DType> ParseDType(std::string_view name) {
  const std::string lower = absl::AsciiStrToLower(absl::StripAsciiWhitespace(std::string(name)));
  for (const NameEntry& e : kNames) {
    if (e.name == lower) return e.dtype;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown dtype '", std::string(name), "'; expected f32, f16, bf16, f8, int8, int4, q8 or int32"));
}

}  // namespace kvfold::core
