#include "memory_svc/client/store_client.h"

#include <algorithm>
#include <chrono>

#include <grpcpp/create_channel.h>

#include "absl/strings/str_cat.h"
#include "common/block_checksum.h"
#include "common/grpc_status.h"

namespace kvfold::memory_svc {
namespace {

constexpr size_t kMaxChunkBytes = 1 << 20;

std::string_view StdView(absl::string_view s) { return std::string_view(s.data(), s.size()); }

}  // namespace

grpc::ChannelArguments StoreChannelArguments() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 8 << 20);
  args.SetMaxReceiveMessageSize(64 << 20);  // headers of long full-mode sessions
  args.SetMaxSendMessageSize(64 << 20);
  return args;
}

std::shared_ptr<grpc::Channel> CreateStoreChannel(
    const std::string& target, const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  return grpc::CreateCustomChannel(target, credentials, StoreChannelArguments());
}

void SealBlockHeader(v1::MemoryBlockHeader* header, absl::string_view payload) {
  header->set_payload_size(payload.size());
  header->set_checksum(BlockChecksum(*header, StdView(payload)));
}

StoreClient::StoreClient(std::shared_ptr<grpc::Channel> channel, std::string bearer_token)
    : stub_(v1::MemoryStore::NewStub(std::move(channel))),
      authorization_(bearer_token.empty() ? "" : absl::StrCat("Bearer ", bearer_token)) {}

void StoreClient::Prepare(grpc::ClientContext* context, const StoreCallOptions& options) const {
  context->set_deadline(std::chrono::system_clock::now() +
                        absl::ToChronoMilliseconds(options.timeout));
  context->set_wait_for_ready(options.wait_for_ready);
  if (options.bearer_token.has_value()) {
    if (!options.bearer_token->empty()) {
      context->AddMetadata("authorization", absl::StrCat("Bearer ", *options.bearer_token));
    }
  } else if (!authorization_.empty()) {
    context->AddMetadata("authorization", authorization_);
  }
}

absl::StatusOr<v1::PutBlockResponse> StoreClient::Put(absl::string_view session_id,
                                                      uint64_t expected_head_version,
                                                      const v1::MemoryBlockHeader& header,
                                                      absl::string_view payload,
                                                      const StorePutOptions& options) {
  if (options.chunk_bytes < 1 || options.chunk_bytes > kMaxChunkBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk_bytes ", options.chunk_bytes, " is outside 1..1048576"));
  }
  grpc::ClientContext context;
  Prepare(&context, options.call);
  v1::PutBlockResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::PutBlockRequest>> writer =
      stub_->PutBlock(&context, &response);
  size_t offset = 0;
  do {
    v1::PutBlockRequest request;
    if (offset == 0) {
      request.set_session_id(session_id.data(), session_id.size());
      request.set_expected_head_version(expected_head_version);
      *request.mutable_header() = header;
      request.set_pin(options.pin);
    }
    const size_t n = std::min(options.chunk_bytes, payload.size() - offset);
    request.set_offset(offset);
    request.set_data(payload.data() + offset, n);
    offset += n;
    if (!writer->Write(request)) break;  // the server ended the call early
  } while (offset < payload.size());
  writer->WritesDone();
  grpc::Status status = writer->Finish();
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<StoreBlock> StoreClient::Get(absl::string_view session_id, uint64_t version,
                                            const StoreCallOptions& options,
                                            uint32_t chunk_bytes) {
  grpc::ClientContext context;
  Prepare(&context, options);
  v1::GetBlockRequest request;
  request.set_session_id(session_id.data(), session_id.size());
  request.set_version(version);
  request.set_chunk_size(chunk_bytes);
  std::unique_ptr<grpc::ClientReader<v1::GetBlockResponse>> reader =
      stub_->GetBlock(&context, request);
  StoreBlock block;
  v1::GetBlockResponse response;
  bool first = true;
  absl::Status protocol_error;
  while (reader->Read(&response)) {
    if (first) {
      block.info = response.info();
      block.header = response.header();
      block.payload.reserve(block.header.payload_size());
      first = false;
    }
    if (protocol_error.ok() && response.offset() != block.payload.size()) {
      protocol_error = absl::DataLossError(absl::StrCat("GetBlock chunk at offset ",
                                                        response.offset(), ", expected ",
                                                        block.payload.size()));
    }
    block.payload.append(response.data());
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) return FromGrpcStatus(status);
  if (!protocol_error.ok()) return protocol_error;
  if (first) return absl::DataLossError("GetBlock returned no message");
  if (block.payload.size() != block.header.payload_size() ||
      BlockChecksum(block.header, block.payload) != block.header.checksum()) {
    return absl::DataLossError(
        absl::StrCat("block of session '", session_id, "' version ", block.info.version(),
                     " fails its checksum on the client"));
  }
  return block;
}

#define KVFOLD_STORE_UNARY(Method, Request, Response)                          \
  grpc::ClientContext context;                                                \
  Prepare(&context, options);                                                 \
  Response response;                                                          \
  grpc::Status status = stub_->Method(&context, Request, &response);          \
  if (!status.ok()) return FromGrpcStatus(status);                            \
  return response

absl::StatusOr<v1::SessionInfo> StoreClient::GetSessionInfo(absl::string_view session_id,
                                                            const StoreCallOptions& options) {
  v1::GetSessionInfoRequest request;
  request.set_session_id(session_id.data(), session_id.size());
  KVFOLD_STORE_UNARY(GetSessionInfo, request, v1::SessionInfo);
}

absl::StatusOr<v1::ListVersionsResponse> StoreClient::ListVersions(
    absl::string_view session_id, const StoreCallOptions& options) {
  v1::ListVersionsRequest request;
  request.set_session_id(session_id.data(), session_id.size());
  KVFOLD_STORE_UNARY(ListVersions, request, v1::ListVersionsResponse);
}

absl::StatusOr<v1::SessionInfo> StoreClient::SetHead(absl::string_view session_id,
                                                     uint64_t version,
                                                     uint64_t expected_head_version,
                                                     const StoreCallOptions& options) {
  v1::SetHeadRequest request;
  request.set_session_id(session_id.data(), session_id.size());
  request.set_version(version);
  request.set_expected_head_version(expected_head_version);
  KVFOLD_STORE_UNARY(SetHead, request, v1::SessionInfo);
}

absl::StatusOr<v1::VersionInfo> StoreClient::PinVersion(absl::string_view session_id,
                                                        uint64_t version, bool pinned,
                                                        const StoreCallOptions& options) {
  v1::PinVersionRequest request;
  request.set_session_id(session_id.data(), session_id.size());
  request.set_version(version);
  request.set_pinned(pinned);
  KVFOLD_STORE_UNARY(PinVersion, request, v1::VersionInfo);
}

absl::StatusOr<v1::SessionInfo> StoreClient::Fork(absl::string_view source_session_id,
                                                  uint64_t version,
                                                  absl::string_view new_session_id,
                                                  const StoreCallOptions& options) {
  v1::StoreForkSessionRequest request;
  request.set_source_session_id(source_session_id.data(), source_session_id.size());
  request.set_version(version);
  request.set_new_session_id(new_session_id.data(), new_session_id.size());
  KVFOLD_STORE_UNARY(ForkSession, request, v1::SessionInfo);
}

absl::StatusOr<uint32_t> StoreClient::Delete(absl::string_view session_id,
                                             const StoreCallOptions& options) {
  v1::StoreDeleteSessionRequest request;
  request.set_session_id(session_id.data(), session_id.size());
  grpc::ClientContext context;
  Prepare(&context, options);
  v1::StoreDeleteSessionResponse response;
  grpc::Status status = stub_->DeleteSession(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response.versions_deleted();
}

absl::StatusOr<v1::StoreListSessionsResponse> StoreClient::ListSessions(
    uint32_t page_size, absl::string_view page_token, const StoreCallOptions& options) {
  v1::StoreListSessionsRequest request;
  request.set_page_size(page_size);
  request.set_page_token(page_token.data(), page_token.size());
  KVFOLD_STORE_UNARY(ListSessions, request, v1::StoreListSessionsResponse);
}

#undef KVFOLD_STORE_UNARY

}  // namespace kvfold::memory_svc
