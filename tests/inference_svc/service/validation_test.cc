#include "inference_svc/service/validation.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "inference_svc/service/service_config.h"

namespace kvfold::service {
namespace {

TEST(ValidationTest, SessionIds) {
  EXPECT_TRUE(ValidateSessionId("abc-1_2.x").ok());
  EXPECT_TRUE(ValidateSessionId(std::string(256, 'a')).ok());
  EXPECT_EQ(ValidateSessionId("").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateSessionId(std::string(257, 'a')).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateSessionId("a b").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateSessionId("a\x01").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateSessionId("\xc3\xa9").code(), absl::StatusCode::kInvalidArgument);
  std::string id = NewSessionId();
  EXPECT_TRUE(ValidateSessionId(id).ok());
  EXPECT_NE(id, NewSessionId());
}

TEST(ValidationTest, Sampling) {
  v1::SamplingParams p;
  EXPECT_TRUE(ValidateSampling(p, 32, 100).ok());
  p.set_temperature(-0.1f);
  EXPECT_EQ(ValidateSampling(p, 32, 100).code(), absl::StatusCode::kInvalidArgument);
  p.set_temperature(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(ValidateSampling(p, 32, 100).code(), absl::StatusCode::kInvalidArgument);
  p.set_temperature(0.7f);
  p.set_top_p(1.5f);
  EXPECT_EQ(ValidateSampling(p, 32, 100).code(), absl::StatusCode::kInvalidArgument);
  p.set_top_p(0.9f);
  p.set_top_k(-1);
  EXPECT_EQ(ValidateSampling(p, 32, 100).code(), absl::StatusCode::kInvalidArgument);
  p.set_top_k(5);
  p.set_max_new_tokens(101);
  EXPECT_EQ(ValidateSampling(p, 32, 100).code(), absl::StatusCode::kInvalidArgument);
  p.set_max_new_tokens(-1);
  EXPECT_EQ(ValidateSampling(p, 32, 100).code(), absl::StatusCode::kInvalidArgument);
  p.set_max_new_tokens(100);
  p.add_stop_token_ids(32);
  EXPECT_EQ(ValidateSampling(p, 32, 100).code(), absl::StatusCode::kInvalidArgument);
  p.set_stop_token_ids(0, 31);
  EXPECT_TRUE(ValidateSampling(p, 32, 100).ok());
}

TEST(ValidationTest, MergeSamplingOverridesNonZeroFields) {
  v1::SamplingParams defaults;
  defaults.set_temperature(0.5f);
  defaults.set_top_k(10);
  defaults.set_max_new_tokens(20);
  defaults.add_stop_token_ids(3);
  v1::SamplingParams o;
  o.set_top_k(4);
  o.set_seed(99);
  v1::SamplingParams m = MergeSampling(defaults, o);
  EXPECT_FLOAT_EQ(m.temperature(), 0.5f);
  EXPECT_EQ(m.top_k(), 4);
  EXPECT_EQ(m.seed(), 99u);
  EXPECT_EQ(m.max_new_tokens(), 20);
  ASSERT_EQ(m.stop_token_ids_size(), 1);
  EXPECT_EQ(m.stop_token_ids(0), 3);
}

TEST(ServiceConfigTest, ValidateRejectsBadFields) {
  ServiceConfig c;
  EXPECT_EQ(c.Validate().code(), absl::StatusCode::kInvalidArgument);  // no model
  const std::string model = "m", store = "127.0.0.1:1", cert = "cert.pem", key = "key.pem";
  c.model_path = model;
  c.memory_store = store;
  EXPECT_TRUE(c.Validate().ok());
  c.tls_cert = cert;
  EXPECT_EQ(c.Validate().code(), absl::StatusCode::kInvalidArgument);
  c.tls_key = key;
  EXPECT_TRUE(c.Validate().ok());
  c.default_max_new_tokens = c.max_new_tokens_cap + 1;
  EXPECT_EQ(c.Validate().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvfold::service
