// InferenceService in process: a real kvfold::memory_svc::MemoryServer and InferenceServer on
// 127.0.0.1 (free ports), a random tiny model. Golden equivalence against the engine run
// directly, and a bad-input test for every RPC.
#include <gtest/gtest.h>

#include <atomic>
#include <algorithm>
#include <filesystem>
#include <functional>
#include <thread>

#include <fstream>
#include <mutex>
#include <random>
#include <sstream>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "absl/time/time.h"
#include "core/kv_bytes.h"
#include "inference_svc/engine/engine.h"
#include "inference_svc/engine/sampler.h"
#include "inference_svc/engine/session.h"
#include "inference_svc/memory/projector.h"
#include "inference_svc/memory/random_projector.h"
#include "inference_svc/model/model_file.h"
#include "inference_svc/service/server.h"
#include "memory_svc/client/store_client.h"
#include "memory_svc/service/server.h"
#include "tests/common/health_check.h"
#include "tests/integration/process_util.h"
#include "tests/testing/tiny_model.h"

namespace kvfold::service {
namespace {

using ::kvfold::testing::MakeTempDir;
using ::kvfold::testing::RunCommand;

class ServiceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(MakeTempDir("kvfold-svc-"));
    absl::Status s = ::kvfold::testing::WriteTinyModel(*dir_ + "/model", 11);
    ASSERT_TRUE(s.ok()) << s;
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    std::filesystem::remove_all(*dir_, ec);
    delete dir_;
  }

  void SetUp() override {
    memory_svc::ServerConfig store_config;
    store_config.listen = "127.0.0.1:0";
    store_config.store.db_dir = MakeTempDir((*dir_) + "/db-");
    store_config.insecure_no_auth = true;
    auto store = memory_svc::MemoryServer::Start(store_config);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    StartReplica(/*kv_pool_bytes=*/64 << 20);
  }

  void StartReplica(uint64_t kv_pool_bytes, const std::string& tokens_file = "",
                    const std::string& projector = "",
                    const std::function<void(ServiceConfig&)>& tweak = nullptr) {
    server_.reset();
    ServiceConfig config;
    config.model_path = *dir_ + "/model";
    config.memory_store = store_->address();
    config.listen = "127.0.0.1:0";
    config.threads = 1;
    config.kv_pool_bytes = kv_pool_bytes;
    config.default_mode = core::KvMode::kFull;
    config.max_prompt_tokens = 100;
    config.max_new_tokens_cap = 64;
    config.default_max_new_tokens = 16;
    config.tokens_file = tokens_file;
    config.insecure_no_auth = tokens_file.empty();
    config.projector_path = projector;
    if (tweak) tweak(config);
    auto server = InferenceServer::Start(config);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    stub_ = v1::InferenceService::NewStub(
        grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    server_.reset();
    if (store_) (void)store_->Shutdown(absl::ZeroDuration());
  }

  grpc::Status Create(const std::string& id, v1::KvMode mode, uint32_t window = 0) {
    grpc::ClientContext context;
    v1::CreateSessionRequest request;
    request.set_session_id(id);
    request.mutable_config()->set_mode(mode);
    request.mutable_config()->set_window_size(window);
    v1::Session session;
    return stub_->CreateSession(&context, request, &session);
  }

  // `streaming` (optional) turns true once the first delta arrived.
  grpc::Status Generate(const v1::GenerateRequest& request, std::vector<int32_t>* tokens,
                        v1::GenerateFinal* final_message = nullptr,
                        std::atomic<bool>* streaming = nullptr) {
    grpc::ClientContext context;
    auto reader = stub_->Generate(&context, request);
    v1::GenerateResponse response;
    while (reader->Read(&response)) {
      if (response.has_delta()) {
        for (int32_t id : response.delta().token_ids()) tokens->push_back(id);
        if (streaming != nullptr) streaming->store(true);
      } else if (final_message != nullptr) {
        *final_message = response.final();
      }
    }
    return reader->Finish();
  }

  // A turn whose deltas are only counted; `context` keeps the trailing metadata.
  grpc::Status CountDeltas(const v1::GenerateRequest& request, grpc::ClientContext* context,
                           int* deltas) {
    auto reader = stub_->Generate(context, request);
    v1::GenerateResponse response;
    while (reader->Read(&response)) *deltas += response.has_delta();
    return reader->Finish();
  }

  static v1::GenerateRequest Turn(const std::string& id, std::vector<int32_t> prompt, int max_new) {
    v1::GenerateRequest request;
    request.set_session_id(id);
    for (int32_t t : prompt) request.add_prompt_token_ids(t);
    request.mutable_sampling()->set_max_new_tokens(max_new);
    request.mutable_sampling()->set_ignore_eos(true);
    return request;
  }

  static std::string* dir_;
  std::unique_ptr<memory_svc::MemoryServer> store_;
  std::unique_ptr<InferenceServer> server_;
  std::unique_ptr<v1::InferenceService::Stub> stub_;
};

std::string* ServiceTest::dir_ = nullptr;

// Greedy decode with the engine directly: feed prompt, then argmax-and-feed max_new times.
std::vector<int32_t> EngineGreedy(const std::string& model_dir,
                                  const std::vector<std::vector<int32_t>>& prompts, int max_new) {
  auto model = model::LoadModel(model_dir);
  EXPECT_TRUE(model.ok());
  auto backend = kernels::CreateBackend("cpu", 1);
  EXPECT_TRUE(backend.ok());
  auto engine = engine::Engine::Create(*model, backend->get());
  EXPECT_TRUE(engine.ok());
  engine::SessionOptions options;
  options.mode = core::KvMode::kFull;
  options.window_size = 1 << 30;
  auto session = engine::CreatePlainSession(engine->get(), options);
  EXPECT_TRUE(session.ok());
  std::vector<int32_t> out;
  for (const auto& prompt : prompts) {
    EXPECT_TRUE((*session)->Prefill(prompt).ok());
    for (int i = 0; i < max_new; ++i) {
      const int32_t t = engine::Argmax((*session)->Logits());
      out.push_back(t);
      EXPECT_TRUE((*session)->Append(t).ok());
    }
  }
  return out;
}

TEST_F(ServiceTest, GreedyTurnsEqualTheEngineRunDirectly) {
  ASSERT_TRUE(Create("golden", v1::KV_MODE_FULL).ok());
  const std::vector<std::vector<int32_t>> prompts = {{1, 17, 33, 91}, {5, 6}, {200, 3, 77}};
  std::vector<int32_t> served;
  uint64_t expected_version = 2;
  for (const auto& p : prompts) {
    v1::GenerateFinal final_message;
    ASSERT_TRUE(Generate(Turn("golden", p, 13), &served, &final_message).ok());
    EXPECT_EQ(final_message.usage().memory_version(), expected_version++);
    EXPECT_EQ(final_message.usage().generated_tokens(), 13u);
    EXPECT_EQ(final_message.finish_reason(), v1::FINISH_REASON_LENGTH);
  }
  EXPECT_EQ(served, EngineGreedy(*dir_ + "/model", prompts, 13));
}

TEST_F(ServiceTest, RestoreAfterCacheLossContinuesExactly) {
  ASSERT_TRUE(Create("a", v1::KV_MODE_FULL).ok());
  std::vector<int32_t> first;
  ASSERT_TRUE(Generate(Turn("a", {1, 2, 3}, 9), &first).ok());
  StartReplica(64 << 20);  // a fresh replica: empty cache, same store
  std::vector<int32_t> second;
  v1::GenerateFinal final_message;
  ASSERT_TRUE(Generate(Turn("a", {4, 5}, 9), &second, &final_message).ok());
  EXPECT_TRUE(final_message.usage().restored_from_store());
  first.insert(first.end(), second.begin(), second.end());
  EXPECT_EQ(first, EngineGreedy(*dir_ + "/model", {{1, 2, 3}, {4, 5}}, 9));
}

TEST_F(ServiceTest, ForkRollbackDeleteAndList) {
  ASSERT_TRUE(Create("base", v1::KV_MODE_FULL).ok());
  std::vector<int32_t> t1, t2;
  ASSERT_TRUE(Generate(Turn("base", {9, 8, 7}, 5), &t1).ok());  // v2
  ASSERT_TRUE(Generate(Turn("base", {6}, 5), &t2).ok());         // v3
  {
    grpc::ClientContext context;
    v1::ForkSessionRequest request;
    request.set_source_session_id("base");
    request.set_version(2);
    request.set_new_session_id("branch");
    v1::Session branch;
    ASSERT_TRUE(stub_->ForkSession(&context, request, &branch).ok());
    EXPECT_EQ(branch.total_tokens(), 3u + 5u);
    EXPECT_EQ(branch.head_version(), 1u);
  }
  // The branch replays turn 2 exactly.
  std::vector<int32_t> replay;
  ASSERT_TRUE(Generate(Turn("branch", {6}, 5), &replay).ok());
  EXPECT_EQ(replay, t2);
  {
    grpc::ClientContext context;
    v1::RollbackSessionRequest request;
    request.set_session_id("base");
    request.set_version(2);
    v1::Session rolled;
    ASSERT_TRUE(stub_->RollbackSession(&context, request, &rolled).ok());
    EXPECT_EQ(rolled.head_version(), 2u);
    EXPECT_EQ(rolled.total_tokens(), 8u);
  }
  std::vector<int32_t> after_rollback;
  ASSERT_TRUE(Generate(Turn("base", {6}, 5), &after_rollback).ok());
  EXPECT_EQ(after_rollback, t2);
  {
    grpc::ClientContext context;
    v1::ListSessionsRequest request;
    v1::ListSessionsResponse response;
    ASSERT_TRUE(stub_->ListSessions(&context, request, &response).ok());
    ASSERT_EQ(response.sessions_size(), 2);
    EXPECT_EQ(response.sessions(0).session_id(), "base");
    EXPECT_EQ(response.sessions(1).session_id(), "branch");
  }
  {
    grpc::ClientContext context;
    v1::DeleteSessionRequest request;
    request.set_session_id("branch");
    v1::DeleteSessionResponse response;
    ASSERT_TRUE(stub_->DeleteSession(&context, request, &response).ok());
    EXPECT_EQ(response.versions_deleted(), 2u);
  }
  std::vector<int32_t> none;
  EXPECT_EQ(Generate(Turn("branch", {1}, 1), &none).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(ServiceTest, BadInputForEveryRpc) {
  ASSERT_TRUE(Create("ok", v1::KV_MODE_FULL).ok());
  // CreateSession
  EXPECT_EQ(Create("bad id", v1::KV_MODE_FULL).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Create(std::string(257, 'x'), v1::KV_MODE_FULL).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Create("ok", v1::KV_MODE_FULL).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(Create("mem", v1::KV_MODE_MEMORY).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);  // no projector on this replica
  EXPECT_EQ(Create("weird", static_cast<v1::KvMode>(42)).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  {
    grpc::ClientContext context;
    v1::CreateSessionRequest request;
    request.set_session_id("neg");
    request.mutable_sampling()->set_temperature(-1);
    v1::Session s;
    EXPECT_EQ(stub_->CreateSession(&context, request, &s).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  // Generate
  std::vector<int32_t> tokens;
  EXPECT_EQ(Generate(Turn("missing", {1}, 1), &tokens).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Generate(Turn("", {1}, 1), &tokens).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Generate(Turn("ok", {1}, 65), &tokens).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);  // over max_new_tokens_cap
  EXPECT_EQ(Generate(Turn("ok", std::vector<int32_t>(101, 1), 1), &tokens).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);  // over max_prompt_tokens
  EXPECT_EQ(Generate(Turn("ok", {256}, 1), &tokens).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);  // id outside the vocabulary
  {
    v1::GenerateRequest r = Turn("ok", {1}, 4);
    r.mutable_sampling()->set_top_p(2);
    EXPECT_EQ(Generate(r, &tokens).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    r = Turn("ok", {1}, 4);
    r.set_prompt("text");
    EXPECT_EQ(Generate(r, &tokens).error_code(), grpc::StatusCode::INVALID_ARGUMENT);  // both set
    r = Turn("ok", {}, 4);
    r.set_prompt("text");  // the random model has no tokenizer
    EXPECT_EQ(Generate(r, &tokens).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    // Texts longer than 16 bytes per token of the prompt limit (100 here) are refused
    // before anything would tokenize or render them.
    r.set_prompt(std::string(1601, 'a'));
    EXPECT_EQ(Generate(r, &tokens).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    r = Turn("ok", {}, 4);
    for (int i = 0; i < 2; ++i) {
      v1::ChatMessage* m = r.add_messages();
      m->set_role("user");
      m->set_content(std::string(801, 'a'));
    }
    grpc::ClientContext context;
    auto reader = stub_->Generate(&context, r);
    v1::GenerateResponse ignored;
    while (reader->Read(&ignored)) {
    }
    const grpc::Status long_messages = reader->Finish();
    // A request larger than any acceptable prompt is refused by gRPC before it is read
    // into the replica (4 MiB at this prompt limit).
    r = Turn("ok", {}, 4);
    r.set_prompt(std::string(5 << 20, 'a'));
    EXPECT_EQ(Generate(r, &tokens).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_EQ(long_messages.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(long_messages.error_message().find("messages are 1602 bytes, too long"),
              std::string::npos)
        << long_messages.error_message();
  }
  EXPECT_TRUE(tokens.empty());
  // GetSession / DeleteSession / RollbackSession / ForkSession
  {
    grpc::ClientContext c1, c2, c3, c4, c5, c6;
    v1::Session s;
    v1::GetSessionRequest get;
    get.set_session_id("missing");
    EXPECT_EQ(stub_->GetSession(&c1, get, &s).error_code(), grpc::StatusCode::NOT_FOUND);
    v1::DeleteSessionRequest del;
    del.set_session_id("a\tb");
    v1::DeleteSessionResponse dr;
    EXPECT_EQ(stub_->DeleteSession(&c2, del, &dr).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    v1::RollbackSessionRequest rb;
    rb.set_session_id("ok");
    rb.set_version(0);
    EXPECT_EQ(stub_->RollbackSession(&c3, rb, &s).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    rb.set_version(99);
    EXPECT_EQ(stub_->RollbackSession(&c4, rb, &s).error_code(), grpc::StatusCode::NOT_FOUND);
    v1::ForkSessionRequest fork;
    fork.set_source_session_id("ok");
    fork.set_version(99);
    EXPECT_EQ(stub_->ForkSession(&c5, fork, &s).error_code(), grpc::StatusCode::NOT_FOUND);
    fork.set_version(0);
    fork.set_new_session_id("ok");
    EXPECT_EQ(stub_->ForkSession(&c6, fork, &s).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  }
  // ListSessions / EstimateKvCache / GetModelInfo
  {
    grpc::ClientContext c1, c2, c3, c4;
    v1::ListSessionsRequest list;
    list.set_page_size(5000);
    v1::ListSessionsResponse lr;
    EXPECT_EQ(stub_->ListSessions(&c1, list, &lr).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    v1::EstimateKvCacheRequest est;
    est.set_preset("no-such-model");
    est.set_context_tokens(10);
    v1::EstimateKvCacheResponse er;
    EXPECT_EQ(stub_->EstimateKvCache(&c2, est, &er).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
    est.set_preset("llama-3.1-8b");
    est.set_context_tokens(20000);
    ASSERT_TRUE(stub_->EstimateKvCache(&c3, est, &er).ok());
    ASSERT_GE(er.modes_size(), 1);
    EXPECT_EQ(er.modes(0).bytes_per_token(), 131072u);  // fp16, full
    v1::ModelInfo info;
    ASSERT_TRUE(stub_->GetModelInfo(&c4, v1::GetModelInfoRequest(), &info).ok());
    EXPECT_EQ(info.hidden_size(), 64u);
    EXPECT_EQ(info.vocab_size(), 256u);
    EXPECT_EQ(info.model_fingerprint().size(), 64u);
    EXPECT_EQ(info.kv_bytes_per_token(), 2u * info.num_layers() * info.num_kv_heads() * info.head_dim() * 4);
  }
}

// GetModelInfo reports what a token costs in the pool's own KV dtype: with int8 KV the
// codes plus their share of the fp16 scales, not the f32 size (which overstated it ~3.7x);
// with f16 KV half the f32 size.
TEST_F(ServiceTest, KvBytesPerTokenFollowsTheKvDtype) {
  auto bytes_per_token = [this] {
    grpc::ClientContext context;
    v1::ModelInfo info;
    EXPECT_TRUE(stub_->GetModelInfo(&context, v1::GetModelInfoRequest(), &info).ok());
    return info;
  };
  const v1::ModelInfo f32 = bytes_per_token();
  const uint64_t kv_dim = uint64_t{f32.num_kv_heads()} * f32.head_dim();
  EXPECT_EQ(f32.kv_bytes_per_token(), 2u * f32.num_layers() * kv_dim * 4);
  StartReplica(64 << 20, "", "", [](ServiceConfig& c) { c.kv_dtype = core::DType::kI8; });
  const v1::ModelInfo int8 = bytes_per_token();
  const engine::EngineOptions defaults;
  const absl::StatusOr<uint64_t> expected = core::KvBytesPerToken(
      {.num_layers = f32.num_layers(),
       .kv_dim = kv_dim,
       .dtype = core::DType::kI8,
       .block_size = static_cast<uint64_t>(defaults.block_size),
       .value_group = static_cast<uint64_t>(defaults.kv_value_group)});
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_EQ(int8.kv_bytes_per_token(), *expected);
  EXPECT_GT(f32.kv_bytes_per_token(), 3 * int8.kv_bytes_per_token());
  StartReplica(64 << 20, "", "", [](ServiceConfig& c) { c.kv_dtype = core::DType::kF16; });
  EXPECT_EQ(bytes_per_token().kv_bytes_per_token(), f32.kv_bytes_per_token() / 2);
  // The f16 replica serves turns (its cache is used by every step).
  ASSERT_TRUE(Create("half", v1::KV_MODE_FULL).ok());
  grpc::ClientContext context;
  int deltas = 0;
  EXPECT_TRUE(CountDeltas(Turn("half", {1, 2, 3}, 5), &context, &deltas).ok());
  EXPECT_GT(deltas, 0);
}

// A turn whose reservation can never fit the pool is refused before any token, without a
// retry hint (retrying cannot help).
TEST_F(ServiceTest, AdmissionRefusesATurnLargerThanThePool) {
  StartReplica(/*kv_pool_bytes=*/64 << 10);  // 8 blocks of 16 tokens
  ASSERT_TRUE(Create("big", v1::KV_MODE_FULL).ok());
  grpc::ClientContext context;
  int deltas = 0;
  grpc::Status s = CountDeltas(Turn("big", std::vector<int32_t>(100, 3), 64), &context, &deltas);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find("cannot run on this replica"), std::string::npos);
  EXPECT_EQ(deltas, 0);
  EXPECT_EQ(context.GetServerTrailingMetadata().count("retry-after"), 0u);
}

// While an admitted turn holds most of the pool, another turn that does not fit next to it
// is refused before its first token with RESOURCE_EXHAUSTED and a retry-after hint; the
// admitted turn runs to its end, and an idle cached session is not evicted for a turn that
// could not fit anyway.
TEST_F(ServiceTest, AdmissionHoldsAndRejectsWithRetryAfter) {
  // 64 blocks of 16 tokens.
  StartReplica(64 * 8192, "", "", [](ServiceConfig& c) { c.max_new_tokens_cap = 2000; });
  for (const char* id : {"long", "short", "idle"}) ASSERT_TRUE(Create(id, v1::KV_MODE_FULL).ok());
  std::vector<int32_t> tokens;
  ASSERT_TRUE(Generate(Turn("idle", std::vector<int32_t>(20, 4), 4), &tokens).ok());  // 3 blocks
  // 100 + 840 tokens: 59 blocks + 1.
  std::atomic<bool> streaming{false};
  std::vector<int32_t> long_tokens;
  grpc::Status long_status;
  std::thread long_turn([&] {
    long_status = Generate(Turn("long", std::vector<int32_t>(100, 3), 840), &long_tokens,
                           nullptr, &streaming);
  });
  while (!streaming.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // 50 + 8 tokens: 5 blocks; 60 + 5 > 64 even without the idle session.
  grpc::ClientContext context;
  int deltas = 0;
  grpc::Status s = CountDeltas(Turn("short", std::vector<int32_t>(50, 5), 8), &context, &deltas);
  long_turn.join();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_EQ(deltas, 0);
  const auto& trailers = context.GetServerTrailingMetadata();
  ASSERT_EQ(trailers.count("retry-after"), 1u);
  EXPECT_GE(std::stoi(std::string(trailers.find("retry-after")->second.data(),
                                  trailers.find("retry-after")->second.size())),
            1);
  ASSERT_TRUE(long_status.ok()) << long_status.error_message();
  EXPECT_EQ(long_tokens.size(), 840u);
  v1::GenerateFinal final_message;
  tokens.clear();
  ASSERT_TRUE(Generate(Turn("idle", {9}, 2), &tokens, &final_message).ok());
  EXPECT_FALSE(final_message.usage().restored_from_store());  // still cached
  // Once the pool is free again the refused turn runs.
  tokens.clear();
  ASSERT_TRUE(Generate(Turn("short", std::vector<int32_t>(50, 5), 8), &tokens).ok());
  EXPECT_EQ(tokens.size(), 8u);
}

// Many concurrent turns of random sizes on a tiny pool, full and sliding sessions: every
// call either streams all its tokens and succeeds, or is RESOURCE_EXHAUSTED before its
// first token; the engine never runs out of KV under an admitted turn.
TEST_F(ServiceTest, AdmissionUnderATinyPoolNeverFailsAfterTokens) {
  StartReplica(/*kv_pool_bytes=*/128 << 10);  // 16 blocks of 16 tokens
  constexpr int kThreads = 6, kCalls = 12;
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_TRUE(Create("tiny-" + std::to_string(t), t % 2 ? v1::KV_MODE_SLIDING : v1::KV_MODE_FULL,
                       t % 2 ? 40 : 0)
                    .ok());
  }
  std::atomic<int> ok{0}, refused{0}, bad{0};
  std::mutex mu;
  std::vector<std::string> problems;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(100 + t);
      for (int c = 0; c < kCalls; ++c) {
        const int prompt = 1 + static_cast<int>(rng() % 60);
        const int max_new = 1 + static_cast<int>(rng() % 40);
        std::vector<int32_t> tokens;
        grpc::Status s = Generate(
            Turn("tiny-" + std::to_string(t), std::vector<int32_t>(prompt, 3 + t), max_new), &tokens);
        if (s.ok() && static_cast<int>(tokens.size()) == max_new) {
          ok.fetch_add(1);
        } else if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED && tokens.empty()) {
          refused.fetch_add(1);
        } else {
          bad.fetch_add(1);
          std::lock_guard<std::mutex> lock(mu);
          problems.push_back(std::to_string(s.error_code()) + " after " +
                             std::to_string(tokens.size()) + " tokens: " + s.error_message());
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0) << (problems.empty() ? "" : problems.front());
  EXPECT_GT(ok.load(), 0);
  EXPECT_GT(refused.load(), 0);  // full sessions outgrow the pool
  EXPECT_EQ(ok.load() + refused.load(), kThreads * kCalls);
}

TEST_F(ServiceTest, IdleCachedSessionsAreEvictedBeforeRejecting) {
  // 64 KiB pool = 8 blocks of 16 tokens (512 B per token on the tiny model).
  StartReplica(/*kv_pool_bytes=*/64 << 10);
  const std::vector<int32_t> prompt(40, 7);
  for (const char* id : {"idle-1", "idle-2", "third"}) {
    ASSERT_TRUE(Create(id, v1::KV_MODE_FULL).ok());
  }
  std::vector<int32_t> tokens;
  // Each turn reserves 48 tokens = 4 blocks; idle-1 and idle-2 stay cached and fill the pool.
  ASSERT_TRUE(Generate(Turn("idle-1", prompt, 8), &tokens).ok());
  ASSERT_TRUE(Generate(Turn("idle-2", prompt, 8), &tokens).ok());
  EXPECT_EQ(server_->runtime().sessions().cached_sessions(), 3u);  // with "third" (created)
  // "third" fits only once the least recently used idle session (idle-1) is evicted.
  v1::GenerateFinal final_message;
  ASSERT_TRUE(Generate(Turn("third", prompt, 8), &tokens, &final_message).ok());
  EXPECT_EQ(final_message.usage().generated_tokens(), 8u);
  // idle-2 is still cached; the evicted idle-1 is intact in the store and resumes.
  std::vector<int32_t> resumed;
  ASSERT_TRUE(Generate(Turn("idle-2", {9}, 2), &resumed, &final_message).ok());
  EXPECT_FALSE(final_message.usage().restored_from_store());
  ASSERT_TRUE(Generate(Turn("idle-1", {9}, 4), &resumed, &final_message).ok());
  EXPECT_TRUE(final_message.usage().restored_from_store());
  EXPECT_EQ(final_message.usage().generated_tokens(), 4u);
}

// Admission reserves what each mode keeps resident: a memory session's long turn needs at
// most M + W + C entries and runs; the same turn in full mode needs all of them and can
// never fit this pool.
TEST_F(ServiceTest, AdmissionCountsTheModesResidentCap) {
  auto model = model::LoadModel(*dir_ + "/model");
  ASSERT_TRUE(model.ok());
  memory::ProjectorConfig pc;
  pc.mem_slots = 8;
  pc.hidden_size = 64;
  pc.num_heads = 4;
  pc.chunk_size = 8;
  pc.window_size = 16;
  pc.model_fingerprint = model::Fingerprint(*model);
  const std::string projector = *dir_ + "/projector";
  ASSERT_TRUE(memory::SaveProjector(projector, pc, memory::RandomProjectorTensors(pc, 1.0f, 5)).ok());
  StartReplica(/*kv_pool_bytes=*/64 << 10, "", projector);  // 128 tokens of KV
  ASSERT_TRUE(Create("mem", v1::KV_MODE_MEMORY).ok());
  ASSERT_TRUE(Create("full", v1::KV_MODE_FULL).ok());
  const std::vector<int32_t> prompt(100, 5);
  std::vector<int32_t> tokens;
  v1::GenerateFinal final_message;
  ASSERT_TRUE(Generate(Turn("mem", prompt, 64), &tokens, &final_message).ok());
  EXPECT_EQ(final_message.usage().generated_tokens(), 64u);
  EXPECT_GT(final_message.usage().tokens_folded(), 0u);
  tokens.clear();
  EXPECT_EQ(Generate(Turn("full", prompt, 64), &tokens).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(tokens.empty());
  ASSERT_TRUE(Generate(Turn("full", std::vector<int32_t>(40, 5), 8), &tokens).ok());
  EXPECT_EQ(tokens.size(), 8u);
}

TEST_F(ServiceTest, HealthFollowsTheStore) {
  constexpr int kServing = kvfold::testing::kHealthServing;
  constexpr int kNotServing = kvfold::testing::kHealthNotServing;
  int status = 0;
  for (int i = 0; i < 50 && status != kServing; ++i) {
    status = kvfold::testing::HealthCheck(server_->address());
    if (status != kServing) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(status, kServing);
  // Probes that name the service get the same answer; an unknown name is not found.
  const std::string service = v1::InferenceService::service_full_name();
  EXPECT_EQ(kvfold::testing::HealthCheck(server_->address(), service), kServing);
  EXPECT_EQ(kvfold::testing::HealthCheck(server_->address(), "no.such.Service"), -1);
  (void)store_->Shutdown(absl::ZeroDuration());
  for (int i = 0; i < 50 && status != kNotServing; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    status = kvfold::testing::HealthCheck(server_->address());
  }
  EXPECT_EQ(status, kNotServing);
  EXPECT_EQ(kvfold::testing::HealthCheck(server_->address(), service), kNotServing);
  // Calls that need the store are UNAVAILABLE meanwhile.
  grpc::ClientContext context;
  v1::GetSessionRequest get;
  get.set_session_id("any");
  v1::Session s;
  grpc::Status unavailable = stub_->GetSession(&context, get, &s);
  EXPECT_EQ(unavailable.error_code(), grpc::StatusCode::UNAVAILABLE);
  // The client is not told where the store lives.
  const std::string store_port = store_->address().substr(store_->address().rfind(':') + 1);
  EXPECT_EQ(unavailable.error_message().find(store_port), std::string::npos)
      << unavailable.error_message();
  EXPECT_EQ(unavailable.error_message().find("127.0.0.1"), std::string::npos)
      << unavailable.error_message();
  std::vector<int32_t> tokens;
  grpc::Status generate = Generate(Turn("any", {1}, 1), &tokens);
  EXPECT_EQ(generate.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(generate.error_message().find(store_port), std::string::npos)
      << generate.error_message();
}

// With kv_populate (the default) a replica reports SERVING only once its whole KV pool is
// backed; without it the pool is backed as blocks are handed out, none before a turn.
TEST_F(ServiceTest, ReadyOnceTheKvPoolIsPopulated) {
  for (bool populate : {true, false}) {
    SCOPED_TRACE(populate ? "kv_populate" : "no kv_populate");
    StartReplica(64 << 20, "", "", [&](ServiceConfig& c) { c.kv_populate = populate; });
    int status = 0;
    for (int i = 0; i < 300 && status != kvfold::testing::kHealthServing; ++i) {
      status = kvfold::testing::HealthCheck(server_->address());
      if (status != kvfold::testing::kHealthServing) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    ASSERT_EQ(status, kvfold::testing::kHealthServing);
    EXPECT_TRUE(server_->Readiness().ok()) << server_->Readiness();
    const engine::BlockPool& pool = server_->engine().pool();
    EXPECT_EQ(pool.populated_blocks(), populate ? pool.num_blocks() : 0);
    std::vector<int32_t> tokens;
    const std::string id = populate ? "populated" : "lazy";
    ASSERT_TRUE(Create(id, v1::KV_MODE_FULL).ok());
    ASSERT_TRUE(Generate(Turn(id, {1, 2, 3}, 4), &tokens).ok());
    EXPECT_EQ(tokens.size(), 4u);
    EXPECT_GT(pool.populated_blocks(), 0);
  }
}

TEST_F(ServiceTest, TlsListener) {
  const std::string cert = *dir_ + "/cert.pem", key = *dir_ + "/key.pem";
  if (RunCommand("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
                 "-addext subjectAltName=IP:127.0.0.1 -keyout " + key + " -out " + cert +
                 " > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "openssl is not available to make a test certificate";
  }
  server_.reset();
  ServiceConfig config;
  config.model_path = *dir_ + "/model";
  config.memory_store = store_->address();
  config.listen = "127.0.0.1:0";
  config.threads = 1;
  config.tls_cert = cert;
  config.tls_key = key;
  config.insecure_no_auth = true;
  auto server = InferenceServer::Start(config);
  ASSERT_TRUE(server.ok()) << server.status();
  std::ifstream in(cert);
  std::stringstream pem;
  pem << in.rdbuf();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = pem.str();
  auto tls_stub = v1::InferenceService::NewStub(
      grpc::CreateChannel((*server)->address(), grpc::SslCredentials(ssl)));
  grpc::ClientContext c1;
  v1::ModelInfo info;
  grpc::Status s = tls_stub->GetModelInfo(&c1, v1::GetModelInfoRequest(), &info);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(info.hidden_size(), 64u);
  auto plain_stub = v1::InferenceService::NewStub(
      grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext c2;
  c2.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  EXPECT_FALSE(plain_stub->GetModelInfo(&c2, v1::GetModelInfoRequest(), &info).ok());
}

// A negative HTTP connection limit is refused before anything starts (the limit itself:
// http_server_test and, on a real replica, http_observe_test).
TEST_F(ServiceTest, CallsBeyondTheThreadLimitAreRefusedAtOnceAndTheReplicaKeepsServing) {
  StartReplica(64 << 20, "", "", [](ServiceConfig& c) {
    c.max_call_threads = 4;
    c.max_new_tokens_cap = 2000;
  });
  // Turns whose clients read nothing: each handler blocks writing its stream (2,000 tokens
  // with 20 alternatives each are more than the flow-control windows hold), holding its
  // thread until the client goes.
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>>> readers;
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(Create(absl::StrCat("held-", i), v1::KV_MODE_FULL).ok());
  for (int i = 0; i < 6; ++i) {
    const std::string id = absl::StrCat("held-", i);
    v1::GenerateRequest request = Turn(id, {1, 2, 3}, 2000);
    request.set_logprobs(true);
    request.set_top_logprobs(20);
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    readers.push_back(stub_->Generate(contexts.back().get(), request));
  }
  // The replica's threads are all taken: a call is refused, not queued.
  grpc::Status refused;
  for (int attempt = 0; attempt < 50; ++attempt) {
    grpc::ClientContext context;
    v1::ModelInfo info;
    refused = stub_->GetModelInfo(&context, v1::GetModelInfoRequest(), &info);
    if (!refused.ok()) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  // Once the clients go, their threads return and calls are served again.
  for (auto& context : contexts) context->TryCancel();
  for (auto& reader : readers) reader->Finish();
  grpc::Status served;
  for (int attempt = 0; attempt < 100; ++attempt) {
    grpc::ClientContext context;
    v1::ModelInfo info;
    served = stub_->GetModelInfo(&context, v1::GetModelInfoRequest(), &info);
    if (served.ok()) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(served.ok()) << served.error_message();
}

TEST_F(ServiceTest, LimitsOutOfRangeAreRefusedAtStart) {
  const struct {
    const char* flag;
    std::function<void(ServiceConfig&)> set;
  } cases[] = {
      {"--http-max-connections",
       [](ServiceConfig& c) {
         c.http_port = 0;
         c.http_max_connections = -1;
       }},
      {"--max-call-threads", [](ServiceConfig& c) { c.max_call_threads = 1; }},
  };
  for (const auto& bad_limit : cases) {
    ServiceConfig bad;
    bad.model_path = *dir_ + "/model";
    bad.memory_store = store_->address();
    bad.insecure_no_auth = true;
    bad_limit.set(bad);
    auto refused_start = InferenceServer::Start(bad);
    ASSERT_FALSE(refused_start.ok()) << bad_limit.flag;
    EXPECT_EQ(refused_start.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(refused_start.status().message().find(bad_limit.flag), std::string::npos)
        << refused_start.status();
  }
}

TEST_F(ServiceTest, TenantFlowsFromTheCallersTokenToTheStore) {
  const std::string tokens = *dir_ + "/tokens.txt";
  {
    FILE* f = std::fopen(tokens.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("tok-alice alice\ntok-bob bob\n", f);
    std::fclose(f);
  }
  server_.reset();
  (void)store_->Shutdown(absl::ZeroDuration());
  memory_svc::ServerConfig store_config;
  store_config.listen = "127.0.0.1:0";
  store_config.store.db_dir = MakeTempDir((*dir_) + "/db-auth-");
  store_config.tokens_file = tokens;
  auto store = memory_svc::MemoryServer::Start(store_config);
  ASSERT_TRUE(store.ok()) << store.status();
  store_ = std::move(*store);
  StartReplica(64 << 20, tokens);

  auto call = [&](const std::string& token, auto&& rpc) {
    grpc::ClientContext context;
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    return rpc(&context);
  };
  v1::Session session;
  v1::CreateSessionRequest create;
  create.set_session_id("shared-name");
  create.mutable_config()->set_mode(v1::KV_MODE_FULL);
  EXPECT_EQ(call("", [&](grpc::ClientContext* c) { return stub_->CreateSession(c, create, &session); })
                .error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call("tok-mallory",
                 [&](grpc::ClientContext* c) { return stub_->CreateSession(c, create, &session); })
                .error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  ASSERT_TRUE(
      call("tok-alice", [&](grpc::ClientContext* c) { return stub_->CreateSession(c, create, &session); })
          .ok());
  v1::GetSessionRequest get;
  get.set_session_id("shared-name");
  EXPECT_EQ(call("tok-bob", [&](grpc::ClientContext* c) { return stub_->GetSession(c, get, &session); })
                .error_code(),
            grpc::StatusCode::NOT_FOUND);  // bob cannot see alice's session
  // The same id is free in bob's namespace, and each tenant's turn lands in its own session.
  ASSERT_TRUE(
      call("tok-bob", [&](grpc::ClientContext* c) { return stub_->CreateSession(c, create, &session); })
          .ok());
  for (const char* token : {"tok-alice", "tok-alice", "tok-bob"}) {
    grpc::ClientContext context;
    context.AddMetadata("authorization", std::string("Bearer ") + token);
    auto reader = stub_->Generate(&context, Turn("shared-name", {1, 2}, 3));
    v1::GenerateResponse response;
    while (reader->Read(&response)) {
    }
    ASSERT_TRUE(reader->Finish().ok());
  }
  ASSERT_TRUE(call("tok-alice", [&](grpc::ClientContext* c) { return stub_->GetSession(c, get, &session); }).ok());
  EXPECT_EQ(session.head_version(), 3u);
  ASSERT_TRUE(call("tok-bob", [&](grpc::ClientContext* c) { return stub_->GetSession(c, get, &session); }).ok());
  EXPECT_EQ(session.head_version(), 2u);
}

}  // namespace
}  // namespace kvfold::service
