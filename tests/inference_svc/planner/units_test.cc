#include "inference_svc/planner/units.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvfold::planner {
namespace {

using ::testing::HasSubstr;

TEST(ParseByteSizeTest, UnitsAndFractions) {
  EXPECT_EQ(*ParseByteSize("4096"), 4096u);
  EXPECT_EQ(*ParseByteSize("80GiB"), 80ULL << 30);
  EXPECT_EQ(*ParseByteSize("80 gib"), 80ULL << 30);
  EXPECT_EQ(*ParseByteSize("80G"), 80ULL << 30);
  EXPECT_EQ(*ParseByteSize("141GB"), 141000000000ULL);
  EXPECT_EQ(*ParseByteSize("1.5TiB"), 3ULL << 39);
  EXPECT_EQ(*ParseByteSize("512MiB"), 512ULL << 20);
  EXPECT_EQ(*ParseByteSize("2KB"), 2000u);
  EXPECT_EQ(*ParseByteSize("7b"), 7u);
  EXPECT_EQ(*ParseByteSize("0", /*allow_zero=*/true), 0u);
  EXPECT_EQ(*ParseByteSize("15TiB"), 15ULL << 40);
}

TEST(ParseByteSizeTest, BadInput) {
  EXPECT_THAT(ParseByteSize("0").status().message(), HasSubstr("must be > 0"));
  EXPECT_THAT(ParseByteSize("-80GiB").status().message(), HasSubstr("no sign"));
  EXPECT_THAT(ParseByteSize("GiB").status().message(), HasSubstr("bad size"));
  EXPECT_THAT(ParseByteSize("80 furlongs").status().message(), HasSubstr("bad size unit"));
  EXPECT_THAT(ParseByteSize("20000000TiB").status().message(), HasSubstr("too large"));
  EXPECT_THAT(ParseByteSize("99999999999999999999999999").status().message(),
              HasSubstr("at most 24 digits"));
  EXPECT_EQ(ParseByteSize("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ParseTokenCountTest, Suffixes) {
  EXPECT_EQ(*ParseTokenCount("20000"), 20000u);
  EXPECT_EQ(*ParseTokenCount("20k"), 20000u);
  EXPECT_EQ(*ParseTokenCount("128k"), 128000u);
  EXPECT_EQ(*ParseTokenCount("128Ki"), 131072u);
  EXPECT_EQ(*ParseTokenCount("1m"), 1000000u);
  EXPECT_EQ(*ParseTokenCount("1Mi"), 1048576u);
  std::vector<uint64_t> list = *ParseTokenList("1k,8k,20k,100k,128k");
  EXPECT_EQ(list, (std::vector<uint64_t>{1000, 8000, 20000, 100000, 128000}));
  EXPECT_THAT(ParseTokenCount("0").status().message(), HasSubstr("must be > 0"));
  EXPECT_THAT(ParseTokenCount("-5").status().message(), HasSubstr("bad token count"));
  EXPECT_THAT(ParseTokenCount("1.5k").status().message(), HasSubstr("bad token count"));
  EXPECT_THAT(ParseTokenCount("20x").status().message(), HasSubstr("suffix"));
  EXPECT_THAT(ParseTokenCount("99999999999999999999m").status().message(), HasSubstr("too large"));
  EXPECT_FALSE(ParseTokenList("1k,,2k").ok());
}

TEST(ParsePositiveTest, Bounds) {
  EXPECT_EQ(*ParsePositive("--batch", "8"), 8u);
  EXPECT_THAT(ParsePositive("--batch", "0").status().message(), HasSubstr("--batch must be > 0"));
  EXPECT_THAT(ParsePositive("--batch", "-1").status().message(), HasSubstr("positive integer"));
  EXPECT_THAT(ParsePositive("--batch", "2k").status().message(), HasSubstr("positive integer"));
  EXPECT_THAT(ParsePositive("--batch", "18446744073709551616").status().message(),
              HasSubstr("too large"));
  EXPECT_THAT(ParsePositive("--pct", "100", 99).status().message(), HasSubstr("too large"));
}

TEST(FormatTest, CommasHumanAndShortTokens) {
  EXPECT_EQ(WithCommas(0), "0");
  EXPECT_EQ(WithCommas(999), "999");
  EXPECT_EQ(WithCommas(2621440000ULL), "2,621,440,000");
  EXPECT_EQ(HumanBytes(512), "512 B");
  EXPECT_EQ(HumanBytes(2621440000ULL), "2.44 GiB");
  EXPECT_EQ(HumanBytes(1048576), "1.00 MiB");
  EXPECT_EQ(ShortTokens(20000), "20k");
  EXPECT_EQ(ShortTokens(131072), "128Ki");
  EXPECT_EQ(ShortTokens(1000000), "1m");
  EXPECT_EQ(ShortTokens(777), "777");
}

}  // namespace
}  // namespace kvfold::planner
