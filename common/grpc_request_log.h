// GrpcRequestLog: a gRPC server interceptor that writes one RequestLogger line per finished
// call (method, status, duration, peer, trace id from the `traceparent` metadata) and hands
// the same record to an observer (the replica's request metrics). Handlers add what only
// they know (tenant, session, version, token counts) with Annotate.
//
//   GrpcRequestLog log(&logger, [&](const RequestRecord& r) { ... });
//   std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> f;
//   f.push_back(log.MakeFactory());
//   builder.experimental().SetInterceptorCreators(std::move(f));
//
// The GrpcRequestLog must outlive the gRPC server.
#ifndef KVFOLD_COMMON_GRPC_REQUEST_LOG_H_
#define KVFOLD_COMMON_GRPC_REQUEST_LOG_H_

#include <grpcpp/server_context.h>
#include <grpcpp/support/server_interceptor.h>

#include <functional>
#include <memory>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "common/request_log.h"

namespace kvfold::logging {

class GrpcRequestLog {
 public:
  using Observer = std::function<void(const RequestRecord&)>;
  // `logger` may be null (no lines, the observer still runs). Both must outlive this.
  GrpcRequestLog(RequestLogger* logger, Observer observer);

  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MakeFactory();

  // Runs `fill` on the record of the call `context` belongs to (a no-op for a call this
  // log does not see, e.g. in tests that call a handler directly). Handler threads only.
  void Annotate(const grpc::ServerContextBase* context,
                const std::function<void(RequestRecord*)>& fill);

 private:
  class Interceptor;
  class Factory;
  void Register(const grpc::ServerContextBase* context, RequestRecord* record);
  void Finish(const grpc::ServerContextBase* context, const RequestRecord& record);

  RequestLogger* const logger_;
  const Observer observer_;
  std::mutex mu_;
  absl::flat_hash_map<const grpc::ServerContextBase*, RequestRecord*> calls_;
};

}  // namespace kvfold::logging

#endif  // KVFOLD_COMMON_GRPC_REQUEST_LOG_H_
