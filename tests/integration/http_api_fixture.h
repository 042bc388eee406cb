// The fixture of the HTTP API tests: a kvfold-memory and two kvfold-inference replicas
// (stories260K, a random projector, a tokens file) serving the OpenAI API on loopback, and
// helpers to call them. Skips without stories260K.
#ifndef KVFOLD_TESTS_INTEGRATION_HTTP_API_FIXTURE_H_
#define KVFOLD_TESTS_INTEGRATION_HTTP_API_FIXTURE_H_

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/http_client.h"
#include "tests/integration/service_cluster.h"
#include "tests/testing/shared_dir.h"

namespace kvfold::testing {

inline constexpr char kToken[] = "tok-http-a";
inline const HttpHeaderList kAuth = {{"Authorization", std::string("Bearer ") + kToken}};

inline std::string SharedModel() { return Stories260K() + "/stories260K.bin"; }

inline int HttpPortOf(const ServerProcess& p) {
  const std::string marker = "http api on 127.0.0.1:";
  const size_t at = p.output().find(marker);
  return at == std::string::npos ? 0 : std::atoi(p.output().c_str() + at + marker.size());
}

// `context` carrying the test tenant's bearer token.
inline void Authorize(grpc::ClientContext* context) {
  context->AddMetadata("authorization", std::string("Bearer ") + kToken);
}

inline nlohmann::json Body(const HttpReply& r) {
  return nlohmann::json::parse(r.body, nullptr, false);
}

class HttpApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(SharedModel())) return;
    tokens_dir_ = new std::string(MakeTempDir("kvfold-http-tokens-"));
    std::ofstream(*tokens_dir_ + "/tokens") << kToken << " tenant-a\n";
    cluster_ = new Cluster();
    std::string error;
    if (!cluster_->Setup(2, &error,
                         {"--http-port=0", "--tokens-file=" + *tokens_dir_ + "/tokens",
                          "--metrics-listen=127.0.0.1:0"},
                         SharedModel())) {
      setup_error_ = new std::string(error);
    }
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
    if (tokens_dir_ != nullptr) std::filesystem::remove_all(*tokens_dir_);
    delete tokens_dir_;
  }
  void SetUp() override {
    if (cluster_ == nullptr) GTEST_SKIP() << MissingShared("models/stories260K/stories260K.bin");
    ASSERT_EQ(setup_error_, nullptr) << *setup_error_;
    port_[0] = HttpPortOf(cluster_->replica_process(0));
    port_[1] = HttpPortOf(cluster_->replica_process(1));
    ASSERT_GT(port_[0], 0) << cluster_->replica_process(0).output();
    ASSERT_GT(port_[1], 0);
  }

  HttpReply Post(int replica, const std::string& path, const nlohmann::json& body,
                 HttpHeaderList headers = kAuth) {
    return HttpCall(port_[replica], "POST", path, body.dump(), headers);
  }

  // Creates session `id` on `replica` over gRPC (mode unspecified: the replica's default).
  grpc::Status CreateGrpcSession(int replica, const std::string& id,
                                 v1::KvMode mode = v1::KV_MODE_UNSPECIFIED) {
    grpc::ClientContext context;
    Authorize(&context);
    v1::CreateSessionRequest create;
    create.set_session_id(id);
    create.mutable_config()->set_mode(mode);
    v1::Session created;
    return cluster_->stub(replica).CreateSession(&context, create, &created);
  }

  // Greedy token ids of the gRPC path for `prompt_ids` on a fresh session.
  std::vector<int32_t> GrpcGreedy(const std::string& session, const std::vector<int32_t>& ids,
                                  int max_new_tokens) {
    EXPECT_TRUE(CreateGrpcSession(0, session).ok());
    grpc::ClientContext gen_context;
    Authorize(&gen_context);
    v1::GenerateRequest request;
    request.set_session_id(session);
    for (int32_t id : ids) request.add_prompt_token_ids(id);
    request.mutable_sampling()->set_max_new_tokens(max_new_tokens);
    request.mutable_sampling()->set_top_k(1);
    request.mutable_sampling()->add_stop_token_ids(2);
    auto reader = cluster_->stub(0).Generate(&gen_context, request);
    std::vector<int32_t> out;
    v1::GenerateResponse response;
    while (reader->Read(&response)) {
      for (int32_t id : response.delta().token_ids()) out.push_back(id);
    }
    EXPECT_TRUE(reader->Finish().ok());
    return out;
  }

  // What replica `i` wrote on stderr so far (its request log among it).
  std::string ReplicaLog(int i) const {
    std::ifstream in(cluster_->dir() + "/replica" + std::to_string(i) + ".log");
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  inline static Cluster* cluster_ = nullptr;
  inline static std::string* tokens_dir_ = nullptr;
  inline static std::string* setup_error_ = nullptr;
  int port_[2] = {0, 0};
};

inline const nlohmann::json kChat = {
    {"model", "stories260K"},
    {"messages", {{{"role", "user"}, {"content", "Tell me about a cat."}}}},
    {"max_tokens", 12},
    {"temperature", 0}};

}  // namespace kvfold::testing

#endif  // KVFOLD_TESTS_INTEGRATION_HTTP_API_FIXTURE_H_
