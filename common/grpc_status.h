// The one place where absl::Status and grpc::Status are translated.
//
// Code table (absl -> grpc, and back, one to one):
//   OK, Cancelled, Unknown, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists,
//   PermissionDenied, ResourceExhausted, FailedPrecondition, Aborted, OutOfRange,
//   Unimplemented, Internal, Unavailable, DataLoss, Unauthenticated
// map to the grpc::StatusCode of the same name. The message is kept verbatim.
#ifndef KVFOLD_COMMON_GRPC_STATUS_H_
#define KVFOLD_COMMON_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace kvfold {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace kvfold

#endif  // KVFOLD_COMMON_GRPC_STATUS_H_
