#include "inference_svc/runtime/sampling.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>

namespace kvfold::runtime {
namespace {

TEST(SamplingTest, Validate) {
  SamplingSpec p;
  EXPECT_TRUE(ValidateSampling(p, 32, 100).ok());
  p.temperature = -0.1f;
  EXPECT_EQ(ValidateSampling(p, 32, 100).code(), absl::StatusCode::kInvalidArgument);
  p.temperature = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(ValidateSampling(p, 32, 100).code(), absl::StatusCode::kInvalidArgument);
  p.temperature = 0.7f;
  p.top_p = 1.5f;
  EXPECT_EQ(ValidateSampling(p, 32, 100).code(), absl::StatusCode::kInvalidArgument);
  p.top_p = 0.9f;
  p.top_k = -1;
  EXPECT_EQ(ValidateSampling(p, 32, 100).code(), absl::StatusCode::kInvalidArgument);
  p.top_k = 5;
  p.max_new_tokens = 101;
  EXPECT_EQ(ValidateSampling(p, 32, 100).code(), absl::StatusCode::kInvalidArgument);
  p.max_new_tokens = -1;
  EXPECT_EQ(ValidateSampling(p, 32, 100).code(), absl::StatusCode::kInvalidArgument);
  p.max_new_tokens = 100;
  p.stop_token_ids = {32};
  EXPECT_EQ(ValidateSampling(p, 32, 100).code(), absl::StatusCode::kInvalidArgument);
  p.stop_token_ids = {31};
  EXPECT_TRUE(ValidateSampling(p, 32, 100).ok());
  p.presence_penalty = 2.0f;
  p.frequency_penalty = -2.0f;
  p.repetition_penalty = 1.5f;
  EXPECT_TRUE(ValidateSampling(p, 32, 100).ok());
  p.presence_penalty = 2.01f;
  EXPECT_EQ(ValidateSampling(p, 32, 100).code(), absl::StatusCode::kInvalidArgument);
  p.presence_penalty = 0;
  p.frequency_penalty = std::numeric_limits<float>::infinity();
  EXPECT_EQ(ValidateSampling(p, 32, 100).code(), absl::StatusCode::kInvalidArgument);
  p.frequency_penalty = 0;
  p.repetition_penalty = -0.5f;
  EXPECT_EQ(ValidateSampling(p, 32, 100).code(), absl::StatusCode::kInvalidArgument);
  p.repetition_penalty = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(ValidateSampling(p, 32, 100).code(), absl::StatusCode::kInvalidArgument);
}

TEST(SamplingTest, LogitBiasAndMinPValidateMergeAndResolve) {
  SamplingSpec p;
  p.min_p = 0.1f;
  p.logit_bias = {{0, -100.0f}, {31, 100.0f}};
  EXPECT_TRUE(ValidateSampling(p, 32, 100).ok());
  p.logit_bias = {{32, 1.0f}};
  EXPECT_THAT(std::string(ValidateSampling(p, 32, 100).message()),
              ::testing::HasSubstr("logit_bias token id 32 outside [0, 32)"));
  p.logit_bias = {{3, 1.0f}, {3, 2.0f}};
  EXPECT_THAT(std::string(ValidateSampling(p, 32, 100).message()),
              ::testing::HasSubstr("names token id 3 twice"));
  p.logit_bias = {{3, std::numeric_limits<float>::infinity()}};
  EXPECT_EQ(ValidateSampling(p, 32, 100).code(), absl::StatusCode::kInvalidArgument);
  p.logit_bias.clear();
  p.min_p = -0.1f;
  EXPECT_EQ(ValidateSampling(p, 32, 100).code(), absl::StatusCode::kInvalidArgument);

  SamplingSpec defaults;
  defaults.min_p = 0.2f;
  defaults.logit_bias = {{5, -1.0f}};
  SamplingSpec o;
  o.logit_bias = {{6, 2.0f}};
  SamplingSpec m = MergeSampling(defaults, o);
  EXPECT_FLOAT_EQ(m.min_p, 0.2f);
  EXPECT_EQ(m.logit_bias, (std::vector<std::pair<int32_t, float>>{{6, 2.0f}}));
  engine::SamplingParams r = ResolveSampling(m, 17);
  EXPECT_FLOAT_EQ(r.min_p, 0.2f);
  EXPECT_EQ(r.logit_bias, m.logit_bias);
  EXPECT_TRUE(r.AdjustsLogits());
  EXPECT_FALSE(ResolveSampling(SamplingSpec(), 17).AdjustsLogits());
}

TEST(SamplingTest, PenaltiesMergeAndResolve) {
  SamplingSpec defaults;
  defaults.frequency_penalty = 0.5f;
  defaults.repetition_penalty = 1.2f;
  SamplingSpec o;
  o.presence_penalty = -1.0f;
  SamplingSpec m = MergeSampling(defaults, o);
  EXPECT_FLOAT_EQ(m.presence_penalty, -1.0f);
  EXPECT_FLOAT_EQ(m.frequency_penalty, 0.5f);
  EXPECT_FLOAT_EQ(m.repetition_penalty, 1.2f);
  engine::SamplingParams r = ResolveSampling(m, 17);
  EXPECT_FLOAT_EQ(r.presence_penalty, -1.0f);
  EXPECT_FLOAT_EQ(r.frequency_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.repetition_penalty, 1.2f);
  // Unset repetition is off (1), and nothing set means no penalties at all.
  EXPECT_FLOAT_EQ(ResolveSampling(SamplingSpec(), 17).repetition_penalty, 1.0f);
  EXPECT_FALSE(ResolveSampling(SamplingSpec(), 17).HasPenalties());
  EXPECT_TRUE(r.Validate().ok());
}

TEST(SamplingTest, MergeOverridesSetFieldsAndResolveFillsDefaults) {
  SamplingSpec defaults;
  defaults.temperature = 0.5f;
  defaults.top_k = 10;
  defaults.max_new_tokens = 20;
  defaults.stop_token_ids = {3};
  SamplingSpec o;
  o.top_k = 4;
  o.seed = 99;
  SamplingSpec m = MergeSampling(defaults, o);
  EXPECT_FLOAT_EQ(m.temperature, 0.5f);
  EXPECT_EQ(m.top_k, 4);
  EXPECT_EQ(m.seed, 99u);
  EXPECT_EQ(m.max_new_tokens, 20);
  EXPECT_EQ(m.stop_token_ids, std::vector<int32_t>({3}));
  engine::SamplingParams r = ResolveSampling(SamplingSpec(), 17);
  EXPECT_EQ(r.max_new_tokens, 17);
  EXPECT_FLOAT_EQ(r.top_p, 1.0f);
  EXPECT_EQ(ResolveSampling(m, 17).max_new_tokens, 20);
}

}  // namespace
}  // namespace kvfold::runtime
