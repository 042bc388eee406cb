#include "memory_svc/service/memory_service.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "memory_svc/store/validation.h"

namespace kvfold::memory_svc {

// One RPC: counts it as in flight (for Drain), records its metrics when it ends, and adds
// tenant, session and version to its request-log line.
class CallRecord {
 public:
  CallRecord(MemoryStoreService* service, std::string method, grpc::ServerContext* context)
      : service_(service),
        metrics_(service->metrics_),
        method_(std::move(method)),
        context_(context),
        start_(std::chrono::steady_clock::now()) {
    service_->in_flight_.fetch_add(1);
  }
  // For the request log; empty / 0 values leave the field out.
  void Note(const std::string& tenant, const std::string& session, uint64_t version) {
    if (service_->request_log_ == nullptr) return;
    service_->request_log_->Annotate(context_, [&](logging::RequestRecord* r) {
      if (!tenant.empty()) r->tenant = tenant;
      if (!session.empty()) r->session = session;
      if (version != 0) r->version = version;
    });
  }
  ~CallRecord() {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    metrics_->Record(method_, code_, seconds, bytes_in_, bytes_out_);
    service_->in_flight_.fetch_sub(1);
  }
  // Checked after the call is counted, so Drain() either waits for it or it sees draining.
  bool draining() const { return service_->draining_.load(); }
  grpc::Status Unavailable() {
    return Finish(absl::UnavailableError("kvfold-memory is draining; retry elsewhere"));
  }
  grpc::Status Finish(const absl::Status& status) {
    code_ = status.code();
    return ToGrpcStatus(status);
  }
  uint64_t bytes_in_ = 0;
  uint64_t bytes_out_ = 0;

 private:
  MemoryStoreService* service_;
  Metrics* metrics_;
  std::string method_;
  grpc::ServerContext* context_;
  std::chrono::steady_clock::time_point start_;
  absl::StatusCode code_ = absl::StatusCode::kUnknown;
};

namespace {

// The version a response names, for the request log (0: none).
uint64_t VersionOf(const v1::SessionInfo& r) { return r.head_version(); }
uint64_t VersionOf(const v1::VersionInfo& r) { return r.version(); }
template <typename Response>
uint64_t VersionOf(const Response&) {
  return 0;
}

// The call's deadline (InfiniteFuture when it has none).
absl::Time CallDeadline(const grpc::ServerContext& context) {
  const std::chrono::system_clock::time_point deadline = context.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(deadline);
}

// Runs a unary store call on `session_id`: authenticate, call `fn(tenant)`, copy the
// result out.
template <typename Response, typename Fn>
grpc::Status Unary(MemoryStoreService* service, const char* method, const TokenTable* tokens,
                   grpc::ServerContext* context, const std::string& session_id, Response* response,
                   Fn fn) {
  CallRecord record(service, method, context);
  if (record.draining()) return record.Unavailable();
  absl::StatusOr<std::string> tenant = AuthenticateTenant(tokens, *context);
  if (!tenant.ok()) return record.Finish(tenant.status());
  record.Note(*tenant, session_id, 0);
  absl::StatusOr<Response> result = fn(*tenant);
  if (!result.ok()) return record.Finish(result.status());
  *response = *std::move(result);
  record.Note("", "", VersionOf(*response));
  return record.Finish(absl::OkStatus());
}

}  // namespace

bool MemoryStoreService::Drain(absl::Duration timeout) {
  draining_ = true;
  const absl::Time deadline = absl::Now() + timeout;
  while (in_flight_.load() > 0) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

grpc::Status MemoryStoreService::PutBlock(grpc::ServerContext* context,
                                          grpc::ServerReader<v1::PutBlockRequest>* reader,
                                          v1::PutBlockResponse* response) {
  CallRecord record(this, "PutBlock", context);
  if (record.draining()) return record.Unavailable();
  absl::StatusOr<std::string> tenant = AuthenticateTenant(tokens_, *context);
  if (!tenant.ok()) return record.Finish(tenant.status());
  record.Note(*tenant, "", 0);
  absl::StatusOr<v1::PutBlockResponse> result = ReceiveAndPut(*tenant, context, reader);
  if (!result.ok()) return record.Finish(result.status());
  record.Note("", result->session_id(), result->version());
  record.bytes_in_ = result->payload_size();
  *response = *std::move(result);
  return record.Finish(absl::OkStatus());
}

absl::StatusOr<v1::PutBlockResponse> MemoryStoreService::ReceiveAndPut(
    const std::string& tenant, grpc::ServerContext* context,
    grpc::ServerReader<v1::PutBlockRequest>* reader) {
  StreamWatchdog::Watch watch = watchdog_->Start(context);
  v1::PutBlockRequest message;
  if (!reader->Read(&message)) {
    if (context->IsCancelled()) return Cancelled(watch, "PutBlock", "; nothing committed");
    return absl::InvalidArgumentError("PutBlock stream carried no message");
  }
  watch.Pause();
  if (!message.has_header()) {
    return absl::InvalidArgumentError("the first PutBlock message must carry the header");
  }
  const std::string session_id = message.session_id();
  const uint64_t expected_head = message.expected_head_version();
  const bool pin = message.pin();
  const v1::MemoryBlockHeader header = message.header();
  if (absl::Status s = ValidateSessionId(session_id); !s.ok()) return s;
  if (absl::Status s = ValidateVersion(expected_head, "expected_head_version"); !s.ok()) return s;
  if (absl::Status s = ValidateBlockHeader(header, store_->options().max_block_bytes); !s.ok()) {
    return s;
  }
  // The whole block is buffered before it commits: lease it before reading the payload.
  absl::StatusOr<TransferBudget::Lease> lease = transfers_->Acquire(
      tenant, header.ByteSizeLong() + header.payload_size(), CallDeadline(*context));
  if (!lease.ok()) return lease.status();
  std::optional<QuotaLedger::Reservation> reservation;
  if (quotas_ != nullptr) {
    absl::StatusOr<QuotaLedger::Reservation> r =
        quotas_->Reserve(tenant, session_id, expected_head == 0, header.payload_size());
    if (!r.ok()) return r.status();
    reservation = *std::move(r);
  }
  absl::StatusOr<v1::PutBlockResponse> put = ReceivePayloadAndPut(
      tenant, session_id, expected_head, pin, header, context, reader, &message, &watch);
  if (reservation.has_value()) quotas_->Settle(*reservation, put.ok());
  return put;
}

absl::StatusOr<v1::PutBlockResponse> MemoryStoreService::ReceivePayloadAndPut(
    const std::string& tenant, const std::string& session_id, uint64_t expected_head, bool pin,
    const v1::MemoryBlockHeader& header, grpc::ServerContext* context,
    grpc::ServerReader<v1::PutBlockRequest>* reader, v1::PutBlockRequest* first_message,
    StreamWatchdog::Watch* watch) {
  v1::PutBlockRequest& message = *first_message;
  std::string payload;
  // Typical blocks (<= 2 MiB) get one allocation; a stream that only announces a huge block
  // does not get to reserve the memory before it sends the bytes.
  payload.reserve(std::min<uint64_t>(header.payload_size(), 2 << 20));
  bool first = true;
  do {
    watch->Progress();
    if (!first && message.has_header()) {
      return absl::InvalidArgumentError("only the first PutBlock message may carry a header");
    }
    first = false;
    if (message.offset() != payload.size()) {
      return absl::InvalidArgumentError(absl::StrCat("chunk at offset ", message.offset(),
                                                     " out of order: expected offset ",
                                                     payload.size()));
    }
    if (message.data().size() > kMaxChunkBytes) {
      return absl::InvalidArgumentError(absl::StrCat("chunk of ", message.data().size(),
                                                     " bytes exceeds the 1 MiB chunk limit"));
    }
    if (payload.size() + message.data().size() > header.payload_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("payload exceeds header.payload_size ", header.payload_size()));
    }
    payload.append(message.data());
  } while (reader->Read(&message));
  // The commit below is the server's work, not the client's: the watchdog must not cancel a
  // call whose block may already be committed.
  watch->Pause();
  if (context->IsCancelled()) return Cancelled(*watch, "PutBlock", "; nothing committed");
  if (payload.size() != header.payload_size()) {
    return absl::InvalidArgumentError(absl::StrCat("stream ended after ", payload.size(), " of ",
                                                   header.payload_size(),
                                                   " payload bytes; nothing committed"));
  }
  return store_->Put(tenant, session_id, expected_head, header, payload, pin);
}

absl::Status MemoryStoreService::Cancelled(const StreamWatchdog::Watch& watch, const char* method,
                                           const char* outcome) const {
  if (watch.fired()) {
    return absl::DeadlineExceededError(absl::StrCat(method, ": the client moved nothing for ",
                                                    absl::FormatDuration(watchdog_->idle()),
                                                    "; cancelled", outcome));
  }
  return absl::CancelledError(absl::StrCat(method, ": the client abandoned the stream", outcome));
}

grpc::Status MemoryStoreService::GetBlock(grpc::ServerContext* context,
                                          const v1::GetBlockRequest* request,
                                          grpc::ServerWriter<v1::GetBlockResponse>* writer) {
  CallRecord record(this, "GetBlock", context);
  if (record.draining()) return record.Unavailable();
  absl::StatusOr<std::string> tenant = AuthenticateTenant(tokens_, *context);
  if (!tenant.ok()) return record.Finish(tenant.status());
  record.Note(*tenant, request->session_id(), request->version());
  return record.Finish(StreamBlock(*tenant, context, *request, writer, &record.bytes_out_));
}

absl::Status MemoryStoreService::StreamBlock(const std::string& tenant,
                                             grpc::ServerContext* context,
                                             const v1::GetBlockRequest& request,
                                             grpc::ServerWriter<v1::GetBlockResponse>* writer,
                                             uint64_t* bytes_out) {
  if (absl::Status s = ValidateSessionId(request.session_id()); !s.ok()) return s;
  if (absl::Status s = ValidateVersion(request.version(), "version"); !s.ok()) return s;
  // The block stays in memory until the client has taken it: lease it once its header says
  // how large it is, before its payload is read.
  TransferBudget::Lease lease;
  const absl::Time deadline = CallDeadline(*context);
  absl::StatusOr<StoredBlock> block = store_->Get(
      tenant, request.session_id(), request.version(),
      [&](const v1::MemoryBlockHeader& header) -> absl::Status {
        const uint64_t bytes = header.ByteSizeLong() + header.payload_size();
        if (lease.bytes() >= bytes) return absl::OkStatus();  // a read retried
        lease.Release();
        absl::StatusOr<TransferBudget::Lease> got = transfers_->Acquire(tenant, bytes, deadline);
        if (!got.ok()) return got.status();
        lease = *std::move(got);
        return absl::OkStatus();
      });
  if (!block.ok()) return block.status();
  const size_t chunk = request.chunk_size() == 0
                           ? kDefaultChunkBytes
                           : std::min<size_t>(request.chunk_size(), kMaxChunkBytes);
  StreamWatchdog::Watch watch = watchdog_->Start(context);
  size_t offset = 0;
  do {
    v1::GetBlockResponse response;
    if (offset == 0) {
      *response.mutable_info() = std::move(block->info);
      *response.mutable_header() = std::move(block->header);
    }
    const size_t n = std::min(chunk, block->payload.size() - offset);
    response.set_offset(offset);
    response.set_data(block->payload.data() + offset, n);
    if (!writer->Write(response)) {
      *bytes_out = offset;
      return Cancelled(watch, "GetBlock", "");
    }
    watch.Progress();
    offset += n;
  } while (offset < block->payload.size());
  *bytes_out = offset;
  return absl::OkStatus();
}

grpc::Status MemoryStoreService::GetSessionInfo(grpc::ServerContext* context,
                                                const v1::GetSessionInfoRequest* request,
                                                v1::SessionInfo* response) {
  return Unary(this, "GetSessionInfo", tokens_, context, request->session_id(), response,
               [&](const std::string& tenant) {
                 return store_->GetSessionInfo(tenant, request->session_id());
               });
}

grpc::Status MemoryStoreService::ListVersions(grpc::ServerContext* context,
                                              const v1::ListVersionsRequest* request,
                                              v1::ListVersionsResponse* response) {
  return Unary(this, "ListVersions", tokens_, context, request->session_id(), response,
               [&](const std::string& tenant) {
                 return store_->ListVersions(tenant, request->session_id());
               });
}

grpc::Status MemoryStoreService::SetHead(grpc::ServerContext* context,
                                         const v1::SetHeadRequest* request,
                                         v1::SessionInfo* response) {
  return Unary(this, "SetHead", tokens_, context, request->session_id(), response,
               [&](const std::string& tenant) {
                 return store_->SetHead(tenant, request->session_id(), request->version(),
                                        request->expected_head_version());
               });
}

grpc::Status MemoryStoreService::PinVersion(grpc::ServerContext* context,
                                            const v1::PinVersionRequest* request,
                                            v1::VersionInfo* response) {
  return Unary(this, "PinVersion", tokens_, context, request->session_id(), response,
               [&](const std::string& tenant) {
                 return store_->PinVersion(tenant, request->session_id(), request->version(),
                                           request->pinned());
               });
}

grpc::Status MemoryStoreService::ForkSession(grpc::ServerContext* context,
                                             const v1::StoreForkSessionRequest* request,
                                             v1::SessionInfo* response) {
  return Unary(this, "ForkSession", tokens_, context, request->new_session_id(), response,
               [&](const std::string& tenant) -> absl::StatusOr<v1::SessionInfo> {
                 std::optional<QuotaLedger::Reservation> reservation;
                 if (quotas_ != nullptr) {
                   absl::StatusOr<uint64_t> bytes =
                       VersionBytes(tenant, request->source_session_id(), request->version());
                   if (!bytes.ok()) return bytes.status();
                   absl::StatusOr<QuotaLedger::Reservation> r =
                       quotas_->Reserve(tenant, request->new_session_id(), true, *bytes);
                   if (!r.ok()) return r.status();
                   reservation = *std::move(r);
                 }
                 absl::StatusOr<v1::SessionInfo> forked =
                     store_->Fork(tenant, request->source_session_id(), request->version(),
                                  request->new_session_id());
                 if (reservation.has_value()) quotas_->Settle(*reservation, forked.ok());
                 return forked;
               });
}

grpc::Status MemoryStoreService::DeleteSession(grpc::ServerContext* context,
                                               const v1::StoreDeleteSessionRequest* request,
                                               v1::StoreDeleteSessionResponse* response) {
  return Unary(this, "DeleteSession", tokens_, context, request->session_id(), response,
               [&](const std::string& tenant) -> absl::StatusOr<v1::StoreDeleteSessionResponse> {
                 absl::StatusOr<uint32_t> n = store_->Delete(tenant, request->session_id());
                 if (!n.ok()) return n.status();
                 if (quotas_ != nullptr) quotas_->Forget(tenant, request->session_id());
                 v1::StoreDeleteSessionResponse r;
                 r.set_versions_deleted(*n);
                 return r;
               });
}

grpc::Status MemoryStoreService::ListSessions(grpc::ServerContext* context,
                                              const v1::StoreListSessionsRequest* request,
                                              v1::StoreListSessionsResponse* response) {
  return Unary(this, "ListSessions", tokens_, context, "", response,
               [&](const std::string& tenant) -> absl::StatusOr<v1::StoreListSessionsResponse> {
                 const uint32_t page_size = request->page_size() == 0 ? 100 : request->page_size();
                 absl::StatusOr<SessionPage> page =
                     store_->ListSessions(tenant, page_size, request->page_token());
                 if (!page.ok()) return page.status();
                 v1::StoreListSessionsResponse r;
                 for (v1::SessionInfo& s : page->sessions) *r.add_sessions() = std::move(s);
                 r.set_next_page_token(page->next_page_token);
                 if (quotas_ != nullptr) {
                   std::optional<v1::TenantUsage> usage = quotas_->UsageOf(tenant);
                   if (usage.has_value()) *r.mutable_usage() = *std::move(usage);
                 }
                 return r;
               });
}

absl::StatusOr<uint64_t> MemoryStoreService::VersionBytes(const std::string& tenant,
                                                          const std::string& session_id,
                                                          uint64_t version) const {
  absl::StatusOr<v1::ListVersionsResponse> versions = store_->ListVersions(tenant, session_id);
  if (!versions.ok()) return versions.status();
  for (const v1::VersionInfo& v : versions->versions()) {
    if (version == 0 ? v.is_head() : v.version() == version) return v.payload_size();
  }
  return absl::NotFoundError(absl::StrCat("session '", session_id, "' has no version ", version));
}

}  // namespace kvfold::memory_svc
