// kvfold-memory's request log through the real server: one JSON line per call with
// method, tenant, session, version, status, duration and trace id; levels; no tokens.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/memory_svc/server_fixture.h"

namespace kvfold::memory_svc::testing {
namespace {

using json = nlohmann::json;

constexpr char kTraceParent[] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

class RequestLogTest : public ServerFixture {
 protected:
  void SetUp() override {
    sink_ = std::tmpfile();
    ASSERT_NE(sink_, nullptr);
    config_.tokens_file = WriteFile("tokens", "tok-alice alice\n");
    config_.log_sink = sink_;
  }
  void TearDown() override {
    ServerFixture::TearDown();
    if (sink_ != nullptr) std::fclose(sink_);
  }

  // Every line written so far, parsed (each must be one JSON object).
  std::vector<json> Lines() {
    std::fflush(sink_);
    std::rewind(sink_);
    std::vector<json> out;
    char buf[4096];
    while (std::fgets(buf, sizeof(buf), sink_) != nullptr) {
      raw_ += buf;
      json j = json::parse(buf, nullptr, false);
      EXPECT_TRUE(j.is_object()) << buf;
      out.push_back(std::move(j));
    }
    return out;
  }

  static const json* Find(const std::vector<json>& lines, const std::string& method,
                          const std::string& code) {
    for (const json& j : lines) {
      if (j.value("method", "") == "/kvfold.v1.MemoryStore/" + method &&
          j.value("code", "") == code)
        return &j;
    }
    return nullptr;
  }

  std::FILE* sink_ = nullptr;
  std::string raw_;
};

TEST_F(RequestLogTest, EveryCallWritesOneLineWithoutSecrets) {
  StartServer();
  StoreClient alice = Client("tok-alice");
  const TestBlock b = MakeBlock(1);
  ASSERT_TRUE(alice.Put("logged", 0, b.header, b.payload).ok());
  ASSERT_TRUE(alice.Get("logged").ok());
  EXPECT_EQ(alice.GetSessionInfo("missing").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Client("tok-mallory").GetSessionInfo("logged").status().code(),
            absl::StatusCode::kUnauthenticated);
  {
    auto stub = v1::MemoryStore::NewStub(Channel());
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer tok-alice");
    context.AddMetadata("traceparent", kTraceParent);
    v1::GetSessionInfoRequest request;
    request.set_session_id("logged");
    v1::SessionInfo info;
    ASSERT_TRUE(stub->GetSessionInfo(&context, request, &info).ok());
  }
  ASSERT_TRUE(server_->Shutdown(absl::Seconds(5)).ok());  // every call has ended and logged
  const std::vector<json> lines = Lines();

  const json* put = Find(lines, "PutBlock", "OK");
  ASSERT_NE(put, nullptr) << raw_;
  EXPECT_EQ((*put)["level"], "info");
  EXPECT_EQ((*put)["front"], "grpc");
  EXPECT_EQ((*put)["tenant"], "alice");
  EXPECT_EQ((*put)["session"], "logged");
  EXPECT_EQ((*put)["version"], 1);
  EXPECT_GE((*put)["duration_ms"].get<double>(), 0);
  const json* get = Find(lines, "GetBlock", "OK");
  ASSERT_NE(get, nullptr) << raw_;
  EXPECT_EQ((*get)["session"], "logged");
  const json* missing = Find(lines, "GetSessionInfo", "NOT_FOUND");
  ASSERT_NE(missing, nullptr) << raw_;
  EXPECT_EQ((*missing)["level"], "info");
  EXPECT_EQ((*missing)["session"], "missing");
  const json* denied = Find(lines, "GetSessionInfo", "UNAUTHENTICATED");
  ASSERT_NE(denied, nullptr) << raw_;
  EXPECT_EQ((*denied)["level"], "warn");
  EXPECT_FALSE(denied->contains("tenant"));
  int traced = 0;
  for (const json& j : lines) {
    if (j.value("trace_id", "") != "0af7651916cd43dd8448eb211c80319c") continue;
    ++traced;
    EXPECT_EQ(j["parent_id"], "b7ad6b7169203331");
    EXPECT_EQ(j["version"], 1);  // the head the call read
  }
  EXPECT_EQ(traced, 1) << raw_;
  EXPECT_EQ(raw_.find("tok-alice"), std::string::npos);
  EXPECT_EQ(raw_.find("tok-mallory"), std::string::npos);
}

TEST_F(RequestLogTest, LevelFiltersLinesAndABadLevelFailsToStart) {
  config_.log_level = "warn";
  StartServer();
  StoreClient alice = Client("tok-alice");
  EXPECT_EQ(alice.GetSessionInfo("missing").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Client("tok-mallory").GetSessionInfo("x").status().code(),
            absl::StatusCode::kUnauthenticated);
  ASSERT_TRUE(server_->Shutdown(absl::Seconds(5)).ok());
  const std::vector<json> lines = Lines();
  ASSERT_EQ(lines.size(), 1u) << raw_;
  EXPECT_EQ(lines[0]["code"], "UNAUTHENTICATED");

  ServerConfig bad = config_;
  bad.log_level = "loud";
  bad.listen = "127.0.0.1:0";
  bad.store.db_dir = dir_.path() + "/db2";
  EXPECT_EQ(MemoryServer::Start(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvfold::memory_svc::testing
