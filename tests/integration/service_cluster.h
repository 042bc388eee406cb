// A local kvfold cluster for multi-process tests: one kvfold-memory and N kvfold-inference
// replicas on 127.0.0.1 (free ports), a small random model and projector, and client
// helpers for the InferenceService.
#ifndef KVFOLD_TESTS_INTEGRATION_SERVICE_CLUSTER_H_
#define KVFOLD_TESTS_INTEGRATION_SERVICE_CLUSTER_H_

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/create_channel.h>

#include "kvfold/v1/inference.grpc.pb.h"
#include "tests/integration/process_util.h"
#include "tests/testing/tiny_model.h"

namespace kvfold::testing {

struct TurnResult {
  grpc::Status status;
  std::vector<int32_t> tokens;
  v1::GenerateFinal final_message;
};

class Cluster {
 public:
  // Builds the model (make_random_model --shape tiny) and projector (M 8, W 16, C 8) in a
  // temp dir. Returns false with a message on failure.
  // `model_path` non-empty: use that model (e.g. stories260K) instead of the tiny one.
  bool Setup(int num_replicas, std::string* error, const std::vector<std::string>& extra_flags = {},
             const std::string& model_path = "") {
    MakeDir();
    model_ = model_path.empty() ? dir_ + "/model" : model_path;
    projector_ = dir_ + "/projector";
    extra_flags_ = extra_flags;
    if (model_path.empty()) {
      if (absl::Status s = WriteTinyModel(model_, 7); !s.ok()) {
        *error = "writing the tiny model failed: " + s.ToString();
        return false;
      }
    }
    if (RunCommand(std::string(KVFOLD_MAKE_RANDOM_PROJECTOR_BIN) + " --model " + model_ +
                   " --out " + projector_ +
                   " --mem-slots 8 --window 16 --chunk 8 --heads 4 --seed 3 > " + dir_ +
                   "/make_projector.log 2>&1") != 0) {
      *error = "make_random_projector failed";
      return false;
    }
    if (!StartStore()) {
      *error = "kvfold-memory did not start";
      return false;
    }
    replicas_.resize(num_replicas);
    for (int i = 0; i < num_replicas; ++i) {
      if (!StartReplica(i)) {
        *error = "kvfold-inference did not start (see " + dir_ + "/replica" + std::to_string(i) + ".log)";
        return false;
      }
    }
    return true;
  }

  // Extra kvfold-memory flags (e.g. a tokens file); call before Setup.
  void set_store_flags(std::vector<std::string> flags) { store_flags_ = std::move(flags); }
  // `authorization: Bearer <token>` on every call made after this ("" = none).
  void set_bearer_token(std::string token) { bearer_token_ = std::move(token); }

  bool StartStore() {
    store_ = std::make_unique<ServerProcess>();
    const std::string listen = store_address_.empty() ? "127.0.0.1:0" : store_address_;
    std::vector<std::string> args = {"--listen=" + listen, "--db-dir=" + dir_ + "/db",
                                     "--sync-writes=false", "--insecure-no-auth"};
    args.insert(args.end(), store_flags_.begin(), store_flags_.end());
    if (!store_->Start(KVFOLD_MEMORY_BIN, args, dir_ + "/memory.log")) {
      return false;
    }
    store_address_ = store_->address();
    return true;
  }

  bool StartReplica(int i) {
    auto& r = replicas_[i];
    r.process = std::make_unique<ServerProcess>();
    std::vector<std::string> args = {"--model=" + model_,
                                     "--projector=" + projector_,
                                     "--memory-store=" + store_address_,
                                     "--listen=127.0.0.1:0",
                                     "--threads=1",
                                     "--kv-pool-bytes=67108864",
                                     "--replica-name=replica-" + std::to_string(i),
                                     "--default-mode=memory",
                                     "--drain-timeout-s=20",
                                     "--insecure-no-auth"};
    for (const auto& f : extra_flags_) args.push_back(f);
    if (!r.process->Start(KVFOLD_INFERENCE_BIN, args,
                          dir_ + "/replica" + std::to_string(i) + ".log")) {
      return false;
    }
    r.channel = grpc::CreateChannel(r.process->address(), grpc::InsecureChannelCredentials());
    r.stub = v1::InferenceService::NewStub(r.channel);
    return true;
  }

  // The directory for the test's own files; exists before Setup.
  const std::string& MakeDir() {
    if (dir_.empty()) dir_ = MakeTempDir("kvfold-it-");
    return dir_;
  }
  const std::string& store_address() const { return store_address_; }

  ServerProcess& store() { return *store_; }
  ServerProcess& replica_process(int i) { return *replicas_[i].process; }
  v1::InferenceService::Stub& stub(int i) { return *replicas_[i].stub; }
  const std::string& dir() const { return dir_; }
  const std::string& model_dir() const { return model_; }
  // The replicas' random projector (written by Setup).
  const std::string& projector_dir() const { return projector_; }

  grpc::Status Create(int replica, const std::string& session_id, v1::KvMode mode,
                      v1::Session* out = nullptr, uint32_t window = 0) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    Authorize(&context);
    v1::CreateSessionRequest request;
    request.set_session_id(session_id);
    request.mutable_config()->set_mode(mode);
    request.mutable_config()->set_window_size(window);
    v1::Session session;
    grpc::Status s = stub(replica).CreateSession(&context, request, &session);
    if (out != nullptr) *out = session;
    return s;
  }

  // Greedy turn with prompt ids. first_token (optional) is set once a delta arrived.
  TurnResult Generate(int replica, const std::string& session_id,
                      const std::vector<int32_t>& prompt, int max_new_tokens,
                      std::atomic<bool>* first_token = nullptr, double deadline_s = 120) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(static_cast<int64_t>(deadline_s * 1000)));
    Authorize(&context);
    v1::GenerateRequest request;
    request.set_session_id(session_id);
    for (int32_t id : prompt) request.add_prompt_token_ids(id);
    request.mutable_sampling()->set_max_new_tokens(max_new_tokens);
    request.mutable_sampling()->set_ignore_eos(true);
    auto reader = stub(replica).Generate(&context, request);
    TurnResult result;
    v1::GenerateResponse response;
    while (reader->Read(&response)) {
      if (response.has_delta()) {
        for (int32_t id : response.delta().token_ids()) result.tokens.push_back(id);
        if (first_token != nullptr) first_token->store(true);
      } else if (response.has_final()) {
        result.final_message = response.final();
      }
    }
    result.status = reader->Finish();
    return result;
  }

  // Greedy turn with a text prompt; returns the streamed text in `text`.
  TurnResult GenerateText(int replica, const std::string& session_id, const std::string& prompt,
                          int max_new_tokens, std::string* text) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    Authorize(&context);
    v1::GenerateRequest request;
    request.set_session_id(session_id);
    request.set_prompt(prompt);
    request.mutable_sampling()->set_max_new_tokens(max_new_tokens);
    auto reader = stub(replica).Generate(&context, request);
    TurnResult result;
    v1::GenerateResponse response;
    while (reader->Read(&response)) {
      if (response.has_delta()) {
        for (int32_t id : response.delta().token_ids()) result.tokens.push_back(id);
        text->append(response.delta().text());
      } else if (response.has_final()) {
        result.final_message = response.final();
      }
    }
    result.status = reader->Finish();
    return result;
  }

  grpc::Status GetSession(int replica, const std::string& session_id, v1::Session* out) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    Authorize(&context);
    v1::GetSessionRequest request;
    request.set_session_id(session_id);
    return stub(replica).GetSession(&context, request, out);
  }

  ~Cluster() {
    for (auto& r : replicas_) {
      if (r.process) r.process->Kill(SIGKILL);
    }
    if (store_) store_->Kill(SIGKILL);
    if (!dir_.empty() && std::getenv("KVFOLD_KEEP_TEST_DIRS") == nullptr) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }

 private:
  void Authorize(grpc::ClientContext* context) const {
    if (!bearer_token_.empty()) context->AddMetadata("authorization", "Bearer " + bearer_token_);
  }

  struct Replica {
    std::unique_ptr<ServerProcess> process;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<v1::InferenceService::Stub> stub;
  };
  std::string dir_, model_, projector_, store_address_;
  std::vector<std::string> extra_flags_, store_flags_;
  std::string bearer_token_;
  std::unique_ptr<ServerProcess> store_;
  std::vector<Replica> replicas_;
};

// Deterministic prompt ids in [3, vocab) for turn `turn` of session `salt`.
inline std::vector<int32_t> PromptFor(int salt, int turn, int length = 5, int vocab = 256) {
  std::vector<int32_t> ids;
  uint64_t x = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(salt * 131 + turn + 1);
  for (int i = 0; i < length; ++i) {
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    ids.push_back(static_cast<int32_t>(3 + x % static_cast<uint64_t>(vocab - 3)));
  }
  return ids;
}

}  // namespace kvfold::testing

#endif  // KVFOLD_TESTS_INTEGRATION_SERVICE_CLUSTER_H_
