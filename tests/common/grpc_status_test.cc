#include "common/grpc_status.h"

#include <gtest/gtest.h>

namespace kvfold {
namespace {

TEST(GrpcStatusTest, EveryCodeRoundTripsWithItsMessage) {
  const absl::StatusCode codes[] = {
      absl::StatusCode::kCancelled,        absl::StatusCode::kUnknown,
      absl::StatusCode::kInvalidArgument,  absl::StatusCode::kDeadlineExceeded,
      absl::StatusCode::kNotFound,         absl::StatusCode::kAlreadyExists,
      absl::StatusCode::kPermissionDenied, absl::StatusCode::kResourceExhausted,
      absl::StatusCode::kFailedPrecondition, absl::StatusCode::kAborted,
      absl::StatusCode::kOutOfRange,       absl::StatusCode::kUnimplemented,
      absl::StatusCode::kInternal,         absl::StatusCode::kUnavailable,
      absl::StatusCode::kDataLoss,         absl::StatusCode::kUnauthenticated};
  for (absl::StatusCode code : codes) {
    absl::Status s(code, "why it failed");
    grpc::Status g = ToGrpcStatus(s);
    EXPECT_EQ(static_cast<int>(g.error_code()), static_cast<int>(code));
    EXPECT_EQ(g.error_message(), "why it failed");
    EXPECT_EQ(FromGrpcStatus(g), s);
  }
}

TEST(GrpcStatusTest, NamedCodesMatchTheDocumentedTable) {
  EXPECT_EQ(ToGrpcStatus(absl::AbortedError("head is 7")).error_code(), grpc::StatusCode::ABORTED);
  EXPECT_EQ(ToGrpcStatus(absl::DataLossError("x")).error_code(), grpc::StatusCode::DATA_LOSS);
  EXPECT_EQ(ToGrpcStatus(absl::FailedPreconditionError("x")).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
}

}  // namespace
}  // namespace kvfold
