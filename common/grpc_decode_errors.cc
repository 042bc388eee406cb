#include "common/grpc_decode_errors.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace kvfold {
namespace {

// For unary and server-streaming methods gRPC deserializes the one request before the
// handler runs; when that fails, the POST_RECV_MESSAGE hook sees no message, the handler is
// skipped and the status sent is INTERNAL. Client-streaming handlers read their messages
// themselves (Read() returns false on a bad one) and choose their own status.
class DecodeErrorInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit DecodeErrorInterceptor(grpc::experimental::ServerRpcInfo* info)
      : method_(info->method() == nullptr ? "" : info->method()),
        single_request_(info->type() == grpc::experimental::ServerRpcInfo::Type::UNARY ||
                        info->type() == grpc::experimental::ServerRpcInfo::Type::SERVER_STREAMING) {
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using Hook = grpc::experimental::InterceptionHookPoints;
    if (single_request_ && methods->QueryInterceptionHookPoint(Hook::POST_RECV_MESSAGE)) {
      request_undecodable_ = methods->GetRecvMessage() == nullptr;
    }
    if (request_undecodable_ && methods->QueryInterceptionHookPoint(Hook::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      if (status.error_code() == grpc::StatusCode::INTERNAL) {
        methods->ModifySendStatus(grpc::Status(
            grpc::StatusCode::INVALID_ARGUMENT,
            absl::StrCat("the request is not a valid message for ", method_,
                         " (undecodable protobuf, or a string field that is not UTF-8)")));
      }
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
  const bool single_request_;
  bool request_undecodable_ = false;
};

class DecodeErrorInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new DecodeErrorInterceptor(info);
  }
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
MakeDecodeErrorInterceptorFactory() {
  return std::make_unique<DecodeErrorInterceptorFactory>();
}

}  // namespace kvfold
