#include "inference_svc/service/store_gateway.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>


#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/grpc_status.h"
#include "memory_svc/client/store_client.h"

namespace kvfold::service {
namespace {

// One channel and one memory_svc::StoreClient for every caller: the caller's token travels as per-call
// metadata (memory_svc::StoreCallOptions::bearer_token), so nothing is kept per token and a flood of
// distinct tokens costs no memory beyond the calls in flight.
class StoreGatewayImpl final : public StoreGateway {
 public:
  StoreGatewayImpl(std::shared_ptr<grpc::Channel> channel, double timeout_s)
      : client_(std::move(channel)) {
    call_.timeout = absl::Seconds(timeout_s);
  }

  absl::StatusOr<v1::SessionInfo> GetSessionInfo(const std::string& token,
                                                 const std::string& session_id) override {
    return client_.GetSessionInfo(session_id, Call(token));
  }

  absl::StatusOr<memory::MemoryBlock> GetBlock(const std::string& token,
                                               const std::string& session_id, uint64_t version,
                                               v1::VersionInfo* info) override {
    auto block = client_.Get(session_id, version, Call(token));
    if (!block.ok()) return block.status();
    if (info != nullptr) *info = block->info;
    memory::MemoryBlock out;
    out.header = std::move(block->header);
    out.payload = std::move(block->payload);
    return out;
  }

  absl::StatusOr<uint64_t> PutBlock(const std::string& token, const std::string& session_id,
                                    uint64_t expected_head_version,
                                    const memory::MemoryBlock& block) override {
    memory_svc::StorePutOptions options;
    options.call = Call(token);
    auto put = client_.Put(session_id, expected_head_version, block.header, block.payload, options);
    if (!put.ok()) return put.status();
    return put->version();
  }

  absl::StatusOr<v1::SessionInfo> SetHead(const std::string& token, const std::string& session_id,
                                          uint64_t version) override {
    return client_.SetHead(session_id, version, 0, Call(token));
  }

  absl::StatusOr<v1::SessionInfo> Fork(const std::string& token,
                                       const std::string& source_session_id, uint64_t version,
                                       const std::string& new_session_id) override {
    return client_.Fork(source_session_id, version, new_session_id, Call(token));
  }

  absl::StatusOr<uint32_t> Delete(const std::string& token, const std::string& session_id) override {
    return client_.Delete(session_id, Call(token));
  }

  absl::StatusOr<v1::StoreListSessionsResponse> ListSessions(const std::string& token,
                                                             uint32_t page_size,
                                                             const std::string& page_token) override {
    return client_.ListSessions(page_size, page_token, Call(token));
  }

  absl::Status CheckHealth() override {
    // Any answer but UNAVAILABLE / DEADLINE_EXCEEDED means the store is up and serving
    // (a probe id is NOT_FOUND, or UNAUTHENTICATED without a token).
    memory_svc::StoreCallOptions probe;
    probe.timeout = absl::Seconds(2);
    auto info = client_.GetSessionInfo("kvfold-health-probe", probe);
    if (info.ok()) return absl::OkStatus();
    const absl::StatusCode code = info.status().code();
    if (code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kDeadlineExceeded) {
      return info.status();
    }
    return absl::OkStatus();
  }

 private:
  memory_svc::StoreCallOptions Call(const std::string& token) const {
    memory_svc::StoreCallOptions call = call_;
    call.bearer_token = token;
    return call;
  }

  memory_svc::StoreClient client_;  // thread-safe; no token of its own
  memory_svc::StoreCallOptions call_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<StoreGateway>> StoreGateway::Create(
    const StoreGatewayOptions& options) {
  if (options.address.empty()) return absl::InvalidArgumentError("store address is empty");
  if (options.tls_cert.empty() != options.tls_key.empty()) {
    return absl::InvalidArgumentError("a store client certificate needs its key, and back");
  }
  if (!options.tls_cert.empty() && options.tls_ca.empty()) {
    return absl::InvalidArgumentError("a store client certificate needs the store's TLS CA");
  }
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (!options.tls_ca.empty()) {
    grpc::SslCredentialsOptions ssl;
    absl::StatusOr<std::string> ca = ReadFileToString(options.tls_ca);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *std::move(ca);
    if (!options.tls_cert.empty()) {
      absl::StatusOr<std::string> cert = ReadFileToString(options.tls_cert);
      if (!cert.ok()) return cert.status();
      absl::StatusOr<std::string> key = ReadFileToString(options.tls_key);
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = *std::move(cert);
      ssl.pem_private_key = *std::move(key);
    }
    creds = grpc::SslCredentials(ssl);
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  // Reconnect quickly after the store restarts.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  auto channel = grpc::CreateCustomChannel(options.address, creds, args);
  return std::unique_ptr<StoreGateway>(new StoreGatewayImpl(channel, options.call_timeout_s));
}

}  // namespace kvfold::service
