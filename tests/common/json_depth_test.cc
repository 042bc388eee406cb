#include "common/json_depth.h"

#include <gtest/gtest.h>

#include <string>

namespace kvfold {
namespace {

std::string Nest(int levels, const std::string& open, const std::string& close) {
  std::string out;
  for (int i = 0; i < levels; ++i) out += open;
  out += "1";
  for (int i = 0; i < levels; ++i) out += close;
  return out;
}

TEST(JsonDepthTest, CountsArraysAndObjectsInsideOneAnother) {
  EXPECT_TRUE(JsonDepthWithin("", 0));
  EXPECT_TRUE(JsonDepthWithin("1", 0));
  EXPECT_FALSE(JsonDepthWithin("[]", 0));
  EXPECT_TRUE(JsonDepthWithin("[]", 1));
  EXPECT_TRUE(JsonDepthWithin("[1] [2] {\"a\": 3}", 1));  // siblings do not add up
  EXPECT_FALSE(JsonDepthWithin(R"({"a": [1]})", 1));
  EXPECT_TRUE(JsonDepthWithin(R"({"a": [1]})", 2));
  EXPECT_TRUE(JsonDepthWithin(Nest(kMaxJsonDepth, "{\"k\":", "}")));
  EXPECT_FALSE(JsonDepthWithin(Nest(kMaxJsonDepth + 1, "{\"k\":", "}")));
  EXPECT_TRUE(JsonDepthWithin(Nest(kMaxJsonDepth, "[", "]")));
  EXPECT_FALSE(JsonDepthWithin(Nest(kMaxJsonDepth + 1, "[", "]")));
  EXPECT_FALSE(JsonDepthWithin(std::string(8 << 20, '[')));  // an unclosed body too
}

TEST(JsonDepthTest, BracketsInsideStringsDoNotCount) {
  EXPECT_TRUE(JsonDepthWithin(R"(["[[[[", "{{{{"])", 1));
  // An escaped quote does not end the string; an escaped backslash does not escape it.
  EXPECT_TRUE(JsonDepthWithin(R"(["a\"[[[", 1])", 1));
  EXPECT_FALSE(JsonDepthWithin(R"(["a\\", [[1]]])", 1));
  EXPECT_TRUE(JsonDepthWithin(R"(["a\\", "[[1]]"])", 1));
  // A string that never closes hides what follows it (the parser refuses such text).
  EXPECT_TRUE(JsonDepthWithin("[\"" + std::string(1000, '['), 1));
}

TEST(JsonDepthTest, CheckNamesWhatIsTooDeep) {
  EXPECT_TRUE(CheckJsonDepth("[[1]]", "a tool").ok());
  const absl::Status deep = CheckJsonDepth(std::string(101, '['), "tools[3]");
  EXPECT_EQ(deep.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(deep.message(), "tools[3] nests arrays and objects deeper than 100 levels");
}

}  // namespace
}  // namespace kvfold
