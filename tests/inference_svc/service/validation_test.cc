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

TEST(ServiceConfigTest, ValidateRejectsBadFields) {
  ServiceConfig c;
  EXPECT_EQ(c.Validate().code(), absl::StatusCode::kInvalidArgument);  // no model
  const std::string model = "m", store = "127.0.0.1:1", cert = "cert.pem", key = "key.pem";
  c.model_path = model;
  c.memory_store = store;
  // Secure by default: neither a tokens file nor an explicit --insecure-no-auth.
  EXPECT_EQ(c.Validate().code(), absl::StatusCode::kInvalidArgument);
  c.insecure_no_auth = true;
  EXPECT_TRUE(c.Validate().ok());
  c.insecure_no_auth = false;
  c.tokens_file = "tokens.txt";
  EXPECT_TRUE(c.Validate().ok());
  c.memory_store_tls_cert = cert;  // without its key and a CA
  EXPECT_EQ(c.Validate().code(), absl::StatusCode::kInvalidArgument);
  c.memory_store_tls_key = key;
  EXPECT_EQ(c.Validate().code(), absl::StatusCode::kInvalidArgument);
  c.memory_store_tls_ca = "ca.pem";
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
