// Random documents of a Grammar, written byte by byte from what the matcher admits (with a
// pull towards closing once a document is long): what a model held to the grammar could
// write, for the tests to hand to independent JSON parsers and schema validators.
#ifndef KVFOLD_TESTS_INFERENCE_SVC_STRUCTURED_RANDOM_DOCUMENT_H_
#define KVFOLD_TESTS_INFERENCE_SVC_STRUCTURED_RANDOM_DOCUMENT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "inference_svc/structured/json_grammar.h"
#include "inference_svc/structured/json_matcher.h"

namespace kvfold::testing {

// nullopt when the matcher admitted no byte before the document was whole (a dead end),
// or the document passed `max_bytes` (then *too_long, when given, is set).
inline std::optional<std::string> RandomDocument(
    const std::shared_ptr<const structured::Grammar>& grammar, std::mt19937_64& rng,
    size_t soft_bytes = 48, size_t max_bytes = 8192, bool* too_long = nullptr) {
  structured::JsonMatcher m(grammar);
  structured::JsonMatcher next(grammar);
  std::string out;
  std::vector<uint8_t> admitted, preferred;
  auto pick = [&](const std::vector<uint8_t>& from) { return from[rng() % from.size()]; };
  // Whether the bytes so far end inside a string (a key or a value) and after a backslash:
  // there '}' and ']' are characters, and only '"' closes.
  bool in_string = false, escaped = false;
  while (out.size() < max_bytes) {
    if (m.IsComplete() && (!m.CanContinue() || out.size() > soft_bytes || rng() % 4 == 0)) {
      return out;
    }
    admitted.clear();
    for (int c = 0; c < 256; ++c) {
      if (m.AdvanceInto(static_cast<uint8_t>(c), &next)) admitted.push_back(c);
    }
    if (admitted.empty()) return std::nullopt;
    uint8_t c = 0;
    if (out.size() > soft_bytes) {
      // Close what is open: inside a string its quote, else any character but a
      // backslash; outside, brackets first, then anything but a comma or whitespace;
      // then anything.
      preferred.clear();
      for (uint8_t a : admitted) {
        if (in_string ? a == '"' : a == '}' || a == ']') preferred.push_back(a);
      }
      if (preferred.empty()) {
        for (uint8_t a : admitted) {
          const bool lengthens =
              in_string ? a == '\\' : a == ',' || a == ' ' || a == '\n' || a == '\t' || a == '\r';
          if (!lengthens) preferred.push_back(a);
        }
      }
      c = pick(preferred.empty() ? admitted : preferred);
    } else {
      c = pick(admitted);
    }
    m.Advance(std::string_view(reinterpret_cast<const char*>(&c), 1));
    out.push_back(static_cast<char>(c));
    if (in_string) {
      const bool was_escaped = escaped;
      escaped = !was_escaped && c == '\\';
      in_string = was_escaped || c != '"';
    } else {
      in_string = c == '"';
    }
  }
  if (too_long != nullptr) *too_long = true;
  return std::nullopt;
}

}  // namespace kvfold::testing

#endif  // KVFOLD_TESTS_INFERENCE_SVC_STRUCTURED_RANDOM_DOCUMENT_H_
