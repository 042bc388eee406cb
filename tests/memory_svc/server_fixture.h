// An in-process kvfold-memory server on 127.0.0.1:0 over a temp RocksDB dir, plus helpers
// to reach it through the real gRPC stack.
#ifndef KVFOLD_TESTS_MEMORY_SVC_SERVER_FIXTURE_H_
#define KVFOLD_TESTS_MEMORY_SVC_SERVER_FIXTURE_H_

#include <grpcpp/create_channel.h>
#include <grpcpp/impl/codegen/client_unary_call.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/sync_stream.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "memory_svc/client/store_client.h"
#include "memory_svc/service/server.h"
#include "tests/common/http_get.h"
#include "tests/memory_svc/test_blocks.h"

namespace kvfold::memory_svc::testing {

class ServerFixture : public ::testing::Test {
 protected:
  // Starts the server; call from SetUp or a test after adjusting config_.
  void StartServer() {
    config_.listen = "127.0.0.1:0";
    config_.store.db_dir = dir_.path() + "/db";
    config_.store.sync_writes = false;
    // Tests that check authentication set config_.tokens_file, which takes precedence.
    config_.insecure_no_auth = config_.tokens_file.empty();
    absl::StatusOr<std::unique_ptr<MemoryServer>> server = MemoryServer::Start(config_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  void SetUp() override { StartServer(); }
  void TearDown() override {
    if (server_) {
      EXPECT_TRUE(server_->Shutdown(absl::Seconds(5)).ok());
    }
  }

  std::shared_ptr<grpc::Channel> Channel() {
    return grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
  }
  StoreClient Client(const std::string& token = "") { return StoreClient(Channel(), token); }

  // Replaces the file atomically (write aside, rename), so a server watching it never reads
  // it half-written (an empty tokens file would be a valid, empty table).
  std::string WriteFile(const std::string& name, const std::string& text) {
    const std::string path = dir_.path() + "/" + name;
    std::ofstream(path + ".tmp") << text;
    std::filesystem::rename(path + ".tmp", path);
    return path;
  }

  TempDir dir_;
  ServerConfig config_;
  std::unique_ptr<MemoryServer> server_;
};

using kvfold::testing::HttpGet;

// Sends `request` (raw bytes, not necessarily a valid message) to a unary method, e.g.
// "/kvfold.v1.MemoryStore/GetSessionInfo".
inline grpc::Status RawUnaryCall(grpc::Channel* channel, const std::string& method,
                                 const std::string& request) {
  grpc::Slice slice(request);
  grpc::ByteBuffer in(&slice, 1), out;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      channel, grpc::internal::RpcMethod(method.c_str(), grpc::internal::RpcMethod::NORMAL_RPC),
      &context, in, &out);
}

// grpc.health.v1.Health/Check through the generic byte-buffer path (no generated stubs
// for health.proto ship with Debian's gRPC). Returns the ServingStatus enum value, or -1
// when the call fails.
inline int HealthStatus(grpc::Channel* channel, const std::string& service) {
  std::string request;  // HealthCheckRequest { string service = 1; }
  if (!service.empty()) {
    request.push_back(0x0a);
    request.push_back(static_cast<char>(service.size()));
    request += service;
  }
  grpc::Slice slice(request);
  grpc::ByteBuffer in(&slice, 1), out;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Status status = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      channel,
      grpc::internal::RpcMethod("/grpc.health.v1.Health/Check",
                                grpc::internal::RpcMethod::NORMAL_RPC),
      &context, in, &out);
  if (!status.ok()) return -1;
  grpc::Slice reply;
  if (!out.TrySingleSlice(&reply).ok()) {
    if (!out.DumpToSingleSlice(&reply).ok()) return -1;
  }
  const std::string bytes(reinterpret_cast<const char*>(reply.begin()), reply.size());
  // HealthCheckResponse { ServingStatus status = 1; } (UNKNOWN = 0 is encoded as empty)
  if (bytes.empty()) return 0;
  return bytes.size() == 2 && bytes[0] == 0x08 ? bytes[1] : -1;
}

}  // namespace kvfold::memory_svc::testing

#endif  // KVFOLD_TESTS_MEMORY_SVC_SERVER_FIXTURE_H_
