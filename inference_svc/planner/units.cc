#include "inference_svc/planner/units.h"

#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace kvfold::planner {
namespace {

using u128 = unsigned __int128;
constexpr u128 kMax = UINT64_MAX;

struct Number {
  u128 mantissa = 0;  // all digits, the decimal point removed
  u128 divisor = 1;   // 10^(digits after the point)
  std::string unit;   // the rest, lower-cased, spaces stripped
};

// Splits "1.5 GiB" into digits and unit. false on a missing number, a sign, or more than
// 24 digits (keeps the 128-bit arithmetic exact: 10^24 * 2^40 < 2^128).
bool SplitNumber(absl::string_view text, Number* out) {
  text = absl::StripAsciiWhitespace(text);
  size_t i = 0, digits = 0;
  bool point = false;
  for (; i < text.size(); ++i) {
    char ch = text[i];
    if (ch == '.' && !point) {
      point = true;
      continue;
    }
    if (!std::isdigit(static_cast<unsigned char>(ch))) break;
    if (++digits > 24) return false;
    out->mantissa = out->mantissa * 10 + (ch - '0');
    if (point) out->divisor *= 10;
  }
  if (digits == 0) return false;
  out->unit = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text.substr(i)));
  return true;
}

}  // namespace

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text, bool allow_zero) {
  Number n;
  if (!SplitNumber(text, &n)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad size '", text, "': expected e.g. 80GiB, 141GB, 4096 (no sign, at most 24 digits)"));
  }
  static const std::pair<const char*, u128> kUnits[] = {{"", 1},
                                                        {"b", 1},
                                                        {"k", u128{1} << 10},
                                                        {"kib", u128{1} << 10},
                                                        {"kb", 1000},
                                                        {"m", u128{1} << 20},
                                                        {"mib", u128{1} << 20},
                                                        {"mb", 1000000},
                                                        {"g", u128{1} << 30},
                                                        {"gib", u128{1} << 30},
                                                        {"gb", 1000000000},
                                                        {"t", u128{1} << 40},
                                                        {"tib", u128{1} << 40},
                                                        {"tb", 1000000000000}};
  for (const auto& [name, scale] : kUnits) {
    if (n.unit != name) continue;
    u128 bytes = n.mantissa * scale / n.divisor;
    if (bytes > kMax)
      return absl::InvalidArgumentError(absl::StrCat("size '", text, "' is too large"));
    if (bytes == 0 && !allow_zero) {
      return absl::InvalidArgumentError(absl::StrCat("size '", text, "' must be > 0"));
    }
    return static_cast<uint64_t>(bytes);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("bad size unit in '", text, "': use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB"));
}

absl::StatusOr<uint64_t> ParseTokenCount(absl::string_view text) {
  Number n;
  if (!SplitNumber(text, &n) || n.divisor != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad token count '", text, "': expected e.g. 20000, 20k, 128Ki (> 0)"));
  }
  u128 scale = 0;
  if (n.unit.empty()) scale = 1;
  if (n.unit == "k") scale = 1000;
  if (n.unit == "m") scale = 1000000;
  if (n.unit == "ki") scale = 1024;
  if (n.unit == "mi") scale = 1 << 20;
  if (scale == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad token count suffix in '", text, "': use k, m, Ki or Mi"));
  }
  u128 tokens = n.mantissa * scale;
  if (tokens > kMax)
    return absl::InvalidArgumentError(absl::StrCat("token count '", text, "' is too large"));
  if (tokens == 0)
    return absl::InvalidArgumentError(absl::StrCat("token count '", text, "' must be > 0"));
  return static_cast<uint64_t>(tokens);
}

absl::StatusOr<std::vector<uint64_t>> ParseTokenList(absl::string_view text) {
  std::vector<uint64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    absl::StatusOr<uint64_t> t = ParseTokenCount(part);
    if (!t.ok()) return t.status();
    out.push_back(*t);
  }
  return out;
}

absl::StatusOr<uint64_t> ParsePositive(absl::string_view flag, absl::string_view text,
                                       uint64_t max) {
  Number n;
  if (!SplitNumber(text, &n) || n.divisor != 1 || !n.unit.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": expected a positive integer, got '", text, "'"));
  }
  if (n.mantissa == 0) return absl::InvalidArgumentError(absl::StrCat(flag, " must be > 0"));
  if (n.mantissa > max) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " is too large (max ", max, ")"));
  }
  return static_cast<uint64_t>(n.mantissa);
}

std::string WithCommas(uint64_t value) {
  std::string digits = absl::StrCat(value);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

std::string HumanBytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 6) {
    v /= 1024;
    ++u;
  }
  return absl::StrFormat("%.2f %s", v, kUnits[u]);
}

std::string ShortTokens(uint64_t tokens) {
  if (tokens >= 1024 && tokens % 1024 == 0 && tokens % 1000 != 0) {
    if (tokens % (1 << 20) == 0) return absl::StrCat(tokens >> 20, "Mi");
    return absl::StrCat(tokens / 1024, "Ki");
  }
  if (tokens >= 1000000 && tokens % 1000000 == 0) return absl::StrCat(tokens / 1000000, "m");
  if (tokens >= 1000 && tokens % 1000 == 0) return absl::StrCat(tokens / 1000, "k");
  return absl::StrCat(tokens);
}

}  // namespace kvfold::planner
