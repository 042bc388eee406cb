#include "inference_svc/service/decode_errors.h"

#include <string>

namespace kvfold::service {
namespace {

using grpc::experimental::InterceptionHookPoints;

class DecodeErrorInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit DecodeErrorInterceptor(const char* method) : method_(method ? method : "") {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      if (status.error_code() == grpc::StatusCode::INTERNAL && status.error_message().empty()) {
        methods->ModifySendStatus(grpc::Status(
            grpc::StatusCode::INVALID_ARGUMENT,
            "the request to " + method_ +
                " could not be decoded: malformed protobuf, or a string field (prompt, "
                "session id, ...) that is not valid UTF-8"));
      }
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
};

}  // namespace

grpc::experimental::Interceptor* DecodeErrorInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  return new DecodeErrorInterceptor(info->method());
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MakeDecodeErrorInterceptor() {
  return std::make_unique<DecodeErrorInterceptorFactory>();
}

}  // namespace kvfold::service
