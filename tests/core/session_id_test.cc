#include "core/session_id.h"

#include <gtest/gtest.h>

#include <string>

namespace kvfold::core {
namespace {

TEST(SessionIdTest, PrintableAsciiWithoutSpaces) {
  EXPECT_TRUE(ValidateSessionId("a").ok());
  EXPECT_TRUE(ValidateSessionId("agent-7/turn~x.y_z").ok());
  EXPECT_TRUE(ValidateSessionId(std::string(256, 'x')).ok());
  for (const std::string& bad :
       {std::string(), std::string(257, 'x'), std::string("a b"), std::string("tab\there"),
        std::string("nul\0x", 5), std::string("caf\xc3\xa9"), std::string("del\x7f")}) {
    EXPECT_EQ(ValidateSessionId(bad).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  const absl::Status s = ValidateSessionId("a b");
  EXPECT_NE(std::string(s.message()).find("byte 0x20 at offset 1"), std::string::npos) << s;
}

TEST(SessionIdTest, TenantsFollowTheSameRule) {
  EXPECT_TRUE(ValidateTenant("team-a").ok());
  const absl::Status s = ValidateTenant("team a");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("tenant"), std::string::npos) << s;
}

}  // namespace
}  // namespace kvfold::core
