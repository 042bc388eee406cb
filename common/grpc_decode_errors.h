// A server interceptor that turns gRPC's answer to an undecodable request message
// (INTERNAL with an empty message: bytes that are not the method's protobuf, or a string
// field that is not valid UTF-8) into INVALID_ARGUMENT with a message naming the method.
// Status codes the handlers return themselves pass unchanged.
//
//   grpc::ServerBuilder builder;
//   std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> f;
//   f.push_back(kvfold::MakeDecodeErrorInterceptorFactory());
//   builder.experimental().SetInterceptorCreators(std::move(f));
#ifndef KVFOLD_COMMON_GRPC_DECODE_ERRORS_H_
#define KVFOLD_COMMON_GRPC_DECODE_ERRORS_H_

#include <grpcpp/support/server_interceptor.h>

#include <memory>

namespace kvfold {

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
MakeDecodeErrorInterceptorFactory();

}  // namespace kvfold

#endif  // KVFOLD_COMMON_GRPC_DECODE_ERRORS_H_
