// The gRPC MemoryStore service: a thin adapter (authenticate, validate, call the store,
// translate the status). Uses the synchronous API: every handler runs on one of gRPC's
// server threads, so blocking on RocksDB never stalls a completion-queue poller.
//
// PutBlock stream rules (INVALID_ARGUMENT unless noted): the first message carries the
// session id, header and expected head; a stream without messages or without a header is
// rejected; each chunk's offset must equal the bytes received so far, chunks are at most
// 1 MiB, and the total must equal header.payload_size; a header over the server's limit is
// RESOURCE_EXHAUSTED before any payload is read; a checksum mismatch is DATA_LOSS. Nothing
// is committed unless the whole stream arrived intact (an abandoned stream: CANCELLED).
//
// Transfers (transfer_budget.h, stream_watchdog.h): a PutBlock leases its header + payload
// bytes once its header passed validation, a GetBlock once the stored header is read and
// before the payload is; a lease that does not fit in time is RESOURCE_EXHAUSTED (nothing
// read or committed). A PutBlock stream that sends nothing, or a GetBlock whose client takes
// nothing, for the watchdog's idle time is cancelled: DEADLINE_EXCEEDED, nothing committed.
//
// Quotas (tenant_quotas.h): PutBlock and ForkSession that would take a tenant over one of
// its limits are RESOURCE_EXHAUSTED (for PutBlock before any payload is read);
// ListSessions reports the caller's usage and limits.
#ifndef KVFOLD_MEMORY_SVC_SERVICE_MEMORY_SERVICE_H_
#define KVFOLD_MEMORY_SVC_SERVICE_MEMORY_SERVICE_H_

#include <atomic>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/auth.h"
#include "common/grpc_request_log.h"
#include "kvfold/v1/memory_store.grpc.pb.h"
#include "memory_svc/service/metrics.h"
#include "memory_svc/service/stream_watchdog.h"
#include "memory_svc/service/tenant_quotas.h"
#include "memory_svc/service/transfer_budget.h"
#include "memory_svc/store/memory_store.h"

namespace kvfold::memory_svc {

inline constexpr size_t kMaxChunkBytes = 1 << 20;
inline constexpr size_t kDefaultChunkBytes = 256 << 10;

class MemoryStoreService final : public v1::MemoryStore::Service {
 public:
  // Every pointer must outlive the service. `tokens` nullptr = auth off; `quotas` nullptr =
  // no per-tenant limits; `request_log`: the log whose records calls annotate with tenant,
  // session and version (nullptr = none).
  MemoryStoreService(MemoryStore* store, const TokenTable* tokens, Metrics* metrics,
                     TransferBudget* transfers, StreamWatchdog* watchdog, QuotaLedger* quotas,
                     logging::GrpcRequestLog* request_log)
      : store_(store),
        tokens_(tokens),
        metrics_(metrics),
        transfers_(transfers),
        watchdog_(watchdog),
        quotas_(quotas),
        request_log_(request_log) {}

  // Makes every new call fail with UNAVAILABLE ("draining") and waits up to `timeout` for
  // the calls in flight to finish. Returns true when none is left.
  bool Drain(absl::Duration timeout);
  // Calls whose handler is running now (for drain tests and metrics).
  int calls_in_flight() const { return in_flight_.load(); }

  grpc::Status PutBlock(grpc::ServerContext* context,
                        grpc::ServerReader<v1::PutBlockRequest>* reader,
                        v1::PutBlockResponse* response) override;
  grpc::Status GetBlock(grpc::ServerContext* context, const v1::GetBlockRequest* request,
                        grpc::ServerWriter<v1::GetBlockResponse>* writer) override;
  grpc::Status GetSessionInfo(grpc::ServerContext* context,
                              const v1::GetSessionInfoRequest* request,
                              v1::SessionInfo* response) override;
  grpc::Status ListVersions(grpc::ServerContext* context, const v1::ListVersionsRequest* request,
                            v1::ListVersionsResponse* response) override;
  grpc::Status SetHead(grpc::ServerContext* context, const v1::SetHeadRequest* request,
                       v1::SessionInfo* response) override;
  grpc::Status PinVersion(grpc::ServerContext* context, const v1::PinVersionRequest* request,
                          v1::VersionInfo* response) override;
  grpc::Status ForkSession(grpc::ServerContext* context,
                           const v1::StoreForkSessionRequest* request,
                           v1::SessionInfo* response) override;
  grpc::Status DeleteSession(grpc::ServerContext* context,
                             const v1::StoreDeleteSessionRequest* request,
                             v1::StoreDeleteSessionResponse* response) override;
  grpc::Status ListSessions(grpc::ServerContext* context,
                            const v1::StoreListSessionsRequest* request,
                            v1::StoreListSessionsResponse* response) override;

 private:
  absl::StatusOr<v1::PutBlockResponse> ReceiveAndPut(
      const std::string& tenant, grpc::ServerContext* context,
      grpc::ServerReader<v1::PutBlockRequest>* reader);
  // The rest of ReceiveAndPut once the header passed validation and quotas.
  absl::StatusOr<v1::PutBlockResponse> ReceivePayloadAndPut(
      const std::string& tenant, const std::string& session_id, uint64_t expected_head, bool pin,
      const v1::MemoryBlockHeader& header, grpc::ServerContext* context,
      grpc::ServerReader<v1::PutBlockRequest>* reader, v1::PutBlockRequest* first_message,
      StreamWatchdog::Watch* watch);
  // The status of a stream that ended because its call was cancelled: DEADLINE_EXCEEDED
  // when the watchdog cancelled it, else CANCELLED. `outcome` ends the message.
  absl::Status Cancelled(const StreamWatchdog::Watch& watch, const char* method,
                         const char* outcome) const;
  // Payload bytes of a stored version (0 = head).
  absl::StatusOr<uint64_t> VersionBytes(const std::string& tenant, const std::string& session_id,
                                        uint64_t version) const;
  absl::Status StreamBlock(const std::string& tenant, grpc::ServerContext* context,
                           const v1::GetBlockRequest& request,
                           grpc::ServerWriter<v1::GetBlockResponse>* writer,
                           uint64_t* bytes_out);

  friend class CallRecord;  // counts calls in flight

  MemoryStore* store_;
  const TokenTable* tokens_;
  Metrics* metrics_;
  TransferBudget* transfers_;
  StreamWatchdog* watchdog_;
  QuotaLedger* quotas_;
  logging::GrpcRequestLog* request_log_;
  std::atomic<int> in_flight_{0};
  std::atomic<bool> draining_{false};
};

}  // namespace kvfold::memory_svc

#endif  // KVFOLD_MEMORY_SVC_SERVICE_MEMORY_SERVICE_H_
