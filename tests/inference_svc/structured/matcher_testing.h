// Helpers of the structured-output tests: a grammar of a schema (the test fails where it
// is refused) and whether a text is one whole document of a grammar.
#ifndef KVFOLD_TESTS_INFERENCE_SVC_STRUCTURED_MATCHER_TESTING_H_
#define KVFOLD_TESTS_INFERENCE_SVC_STRUCTURED_MATCHER_TESTING_H_

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "inference_svc/structured/json_grammar.h"
#include "inference_svc/structured/json_matcher.h"
#include "nlohmann/json.hpp"

namespace kvfold::structured {

inline bool Complete(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  JsonMatcher m(g);
  return m.Advance(text) && m.IsComplete();
}

// [0, 1, ..., n - 1].
inline nlohmann::json Integers(int n) {
  nlohmann::json v = nlohmann::json::array();
  for (int i = 0; i < n; ++i) v.push_back(i);
  return v;
}

inline std::shared_ptr<const Grammar> Schema(const std::string& schema) {
  auto g = Grammar::FromSchema(schema);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *g : Grammar::JsonObject();
}

}  // namespace kvfold::structured

#endif  // KVFOLD_TESTS_INFERENCE_SVC_STRUCTURED_MATCHER_TESTING_H_
