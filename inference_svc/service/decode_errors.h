// A server interceptor that turns gRPC's answer to an undecodable request (INTERNAL with an
// empty message: malformed protobuf, or a string field that is not valid UTF-8) into
// INVALID_ARGUMENT with a message naming the method. Handlers never return INTERNAL with an
// empty message, so only decode failures match.
#ifndef KVFOLD_INFERENCE_SVC_SERVICE_DECODE_ERRORS_H_
#define KVFOLD_INFERENCE_SVC_SERVICE_DECODE_ERRORS_H_

#include <memory>

#include <grpcpp/support/server_interceptor.h>

namespace kvfold::service {

class DecodeErrorInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;
};

// For ServerBuilder::experimental().SetInterceptorCreators.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MakeDecodeErrorInterceptor();

}  // namespace kvfold::service

#endif  // KVFOLD_INFERENCE_SVC_SERVICE_DECODE_ERRORS_H_
