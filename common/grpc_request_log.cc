#include "common/grpc_request_log.h"

#include <chrono>
#include <string>

#include "absl/status/status.h"

namespace kvfold::logging {

class GrpcRequestLog::Interceptor : public grpc::experimental::Interceptor {
 public:
  Interceptor(GrpcRequestLog* log, grpc::experimental::ServerRpcInfo* info)
      : log_(log), context_(info->server_context()), start_(std::chrono::steady_clock::now()) {
    record_.front = "grpc";
    record_.method = info->method() != nullptr ? info->method() : "";
    log_->Register(context_, &record_);
  }
  // A call that never reached its status (it was cancelled first) is finished here.
  ~Interceptor() override {
    if (!finished_) Finish();
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using grpc::experimental::InterceptionHookPoints;
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      // Only the trace context is read from the metadata: the authorization header and
      // every other entry stay out of the record.
      auto* metadata = methods->GetRecvInitialMetadata();
      if (metadata != nullptr) {
        auto it = metadata->find("traceparent");
        if (it != metadata->end()) {
          auto parsed = ParseTraceParent(std::string_view(it->second.data(), it->second.size()));
          if (parsed.has_value()) {
            std::lock_guard<std::mutex> lock(log_->mu_);
            record_.trace_id = parsed->trace_id;
            record_.parent_id = parsed->parent_id;
          }
        }
      }
      if (context_ != nullptr) {
        std::lock_guard<std::mutex> lock(log_->mu_);
        record_.peer = context_->peer();
      }
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      {
        std::lock_guard<std::mutex> lock(log_->mu_);
        record_.code = static_cast<absl::StatusCode>(status.error_code());
        record_.error = status.error_message();
      }
      // Logged and counted before the status leaves: a client that has its status finds
      // its call in the log and the metrics (the handler has returned, so the record is
      // complete).
      Finish();
    }
    methods->Proceed();
  }

 private:
  // Logs and counts the call, once.
  void Finish() {
    finished_ = true;
    record_.duration_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
            .count();
    log_->Finish(context_, record_);
  }

  GrpcRequestLog* const log_;
  const grpc::ServerContextBase* const context_;
  const std::chrono::steady_clock::time_point start_;
  RequestRecord record_;  // guarded by log_->mu_ while registered
  bool finished_ = false;
};

class GrpcRequestLog::Factory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit Factory(GrpcRequestLog* log) : log_(log) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new Interceptor(log_, info);
  }

 private:
  GrpcRequestLog* const log_;
};

GrpcRequestLog::GrpcRequestLog(RequestLogger* logger, Observer observer)
    : logger_(logger), observer_(std::move(observer)) {}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
GrpcRequestLog::MakeFactory() {
  return std::make_unique<Factory>(this);
}

void GrpcRequestLog::Register(const grpc::ServerContextBase* context, RequestRecord* record) {
  if (context == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  calls_[context] = record;
}

void GrpcRequestLog::Annotate(const grpc::ServerContextBase* context,
                              const std::function<void(RequestRecord*)>& fill) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = calls_.find(context);
  if (it != calls_.end()) fill(it->second);
}

void GrpcRequestLog::Finish(const grpc::ServerContextBase* context, const RequestRecord& record) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = calls_.find(context);
    if (it != calls_.end() && it->second == &record) calls_.erase(it);
  }
  if (logger_ != nullptr) logger_->Write(record);
  if (observer_) observer_(record);
}

}  // namespace kvfold::logging
