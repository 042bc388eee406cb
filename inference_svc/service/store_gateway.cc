#include "inference_svc/service/store_gateway.h"

#include <fstream>
#include <mutex>
#include <sstream>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "memory_svc/client/store_client.h"

namespace kvfold::service {
namespace {

// One channel; one StoreClient per distinct bearer token (StoreClient binds its token).
class StoreGatewayImpl final : public StoreGateway {
 public:
  StoreGatewayImpl(std::shared_ptr<grpc::Channel> channel, double timeout_s)
      : channel_(std::move(channel)) {
    call_.timeout = absl::Seconds(timeout_s);
  }

  absl::StatusOr<v1::SessionInfo> GetSessionInfo(const std::string& token,
                                                 const std::string& session_id) override {
    return Client(token).GetSessionInfo(session_id, call_);
  }

  absl::StatusOr<memory::MemoryBlock> GetBlock(const std::string& token,
                                               const std::string& session_id, uint64_t version,
                                               v1::VersionInfo* info) override {
    auto block = Client(token).Get(session_id, version, call_);
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
    StorePutOptions options;
    options.call = call_;
    auto put = Client(token).Put(session_id, expected_head_version, block.header, block.payload,
                                 options);
    if (!put.ok()) return put.status();
    return put->version();
  }

  absl::StatusOr<v1::SessionInfo> SetHead(const std::string& token, const std::string& session_id,
                                          uint64_t version) override {
    return Client(token).SetHead(session_id, version, 0, call_);
  }

  absl::StatusOr<v1::SessionInfo> Fork(const std::string& token,
                                       const std::string& source_session_id, uint64_t version,
                                       const std::string& new_session_id) override {
    return Client(token).Fork(source_session_id, version, new_session_id, call_);
  }

  absl::StatusOr<uint32_t> Delete(const std::string& token, const std::string& session_id) override {
    return Client(token).Delete(session_id, call_);
  }

  absl::StatusOr<v1::StoreListSessionsResponse> ListSessions(const std::string& token,
                                                             uint32_t page_size,
                                                             const std::string& page_token) override {
    return Client(token).ListSessions(page_size, page_token, call_);
  }

  absl::Status CheckHealth() override {
    // Any answer but UNAVAILABLE / DEADLINE_EXCEEDED means the store is up and serving
    // (a probe id is NOT_FOUND, or UNAUTHENTICATED without a token).
    StoreCallOptions probe;
    probe.timeout = absl::Seconds(2);
    auto info = Client("").GetSessionInfo("kvfold-health-probe", probe);
    if (info.ok()) return absl::OkStatus();
    const absl::StatusCode code = info.status().code();
    if (code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kDeadlineExceeded) {
      return info.status();
    }
    return absl::OkStatus();
  }

 private:
  StoreClient& Client(const std::string& token) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& client = clients_[token];
    if (client == nullptr) client = std::make_unique<StoreClient>(channel_, token);
    return *client;
  }

  std::shared_ptr<grpc::Channel> channel_;
  StoreCallOptions call_;
  std::mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<StoreClient>> clients_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<StoreGateway>> StoreGateway::Create(
    const StoreGatewayOptions& options) {
  if (options.address.empty()) return absl::InvalidArgumentError("store address is empty");
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (!options.tls_ca.empty()) {
    std::ifstream in(options.tls_ca, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", options.tls_ca));
    std::stringstream ss;
    ss << in.rdbuf();
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ss.str();
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
