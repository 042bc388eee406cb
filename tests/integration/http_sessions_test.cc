// kvfold's stored sessions over HTTP (GET /v1/kvfold/sessions[/{id}], DELETE
// /v1/kvfold/sessions/{id}) on real replicas: the same Session the gRPC API describes, a
// paged listing, deletion that the next turn sees on either replica, and errors.
#include <nlohmann/json.hpp>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/http_api_fixture.h"

namespace kvfold::testing {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

TEST_F(HttpApiTest, StoredSessionsOverHttpAreTheGrpcApisSessions) {
  json chat = kChat;
  chat["kvfold_session"] = "http-admin-a";
  for (int turn = 0; turn < 2; ++turn) {
    HttpReply r = Post(turn, "/v1/chat/completions", chat);
    ASSERT_EQ(r.status, 200) << r.body;
  }
  chat["kvfold_session"] = "http-admin/b?c";  // an id that needs escaping in a path
  ASSERT_EQ(Post(0, "/v1/chat/completions", chat).status, 200);

  HttpReply got = HttpCall(port_[1], "GET", "/v1/kvfold/sessions/http-admin-a", "", kAuth);
  ASSERT_EQ(got.status, 200) << got.body;
  const json session = Body(got);
  v1::Session grpc_session;
  grpc::ClientContext context;
  context.AddMetadata("authorization", std::string("Bearer ") + kToken);
  v1::GetSessionRequest request;
  request.set_session_id("http-admin-a");
  ASSERT_TRUE(cluster_->stub(0).GetSession(&context, request, &grpc_session).ok());
  EXPECT_EQ(session["session_id"], "http-admin-a");
  // 64-bit integers are strings in protobuf's JSON mapping.
  EXPECT_EQ(session["head_version"], std::to_string(grpc_session.head_version()));
  EXPECT_EQ(grpc_session.head_version(), 3u);  // created, then two turns
  EXPECT_EQ(session["total_tokens"], std::to_string(grpc_session.total_tokens()));
  EXPECT_EQ(session["config"]["mode"], "KV_MODE_MEMORY");
  EXPECT_EQ(session["kv_bytes_resident"], std::to_string(grpc_session.kv_bytes_resident()));
  HttpReply escaped =
      HttpCall(port_[0], "GET", "/v1/kvfold/sessions/http-admin%2Fb%3Fc", "", kAuth);
  ASSERT_EQ(escaped.status, 200) << escaped.body;
  EXPECT_EQ(Body(escaped)["session_id"], "http-admin/b?c");

  // Pages of one: every session once, these among them.
  std::set<std::string> seen;
  std::string token;
  for (int page = 0; page < 1000; ++page) {
    HttpReply r =
        HttpCall(port_[0], "GET",
                 "/v1/kvfold/sessions?page_size=1" + (token.empty() ? "" : "&page_token=" + token),
                 "", kAuth);
    ASSERT_EQ(r.status, 200) << r.body;
    const json body = Body(r);
    ASSERT_LE(body["sessions"].size(), 1u);
    for (const json& s : body["sessions"]) {
      EXPECT_TRUE(seen.insert(s["session_id"].get<std::string>()).second) << s.dump();
    }
    token = body["next_page_token"];
    if (token.empty()) break;
  }
  EXPECT_TRUE(seen.contains("http-admin-a"));
  EXPECT_TRUE(seen.contains("http-admin/b?c"));

  // Deleted: every version, on the replica that cached it too; the next turn starts anew.
  HttpReply deleted = HttpCall(port_[1], "DELETE", "/v1/kvfold/sessions/http-admin-a", "", kAuth);
  ASSERT_EQ(deleted.status, 200) << deleted.body;
  EXPECT_EQ(Body(deleted)["versions_deleted"], 3);
  EXPECT_EQ(HttpCall(port_[0], "GET", "/v1/kvfold/sessions/http-admin-a", "", kAuth).status, 404);
  EXPECT_EQ(HttpCall(port_[0], "DELETE", "/v1/kvfold/sessions/http-admin-a", "", kAuth).status,
            404);
  chat["kvfold_session"] = "http-admin-a";
  HttpReply again = Post(1, "/v1/chat/completions", chat);
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(Body(again)["usage"]["kvfold"]["version"], 2);  // created anew, one turn
}

TEST_F(HttpApiTest, StoredSessionsErrors) {
  const struct {
    const char* method;
    std::string path;
    int status;
    const char* message;
  } cases[] = {
      {"GET", "/v1/kvfold/sessions?page_size=1001", 400, "'page_size' is '1001'"},
      {"GET", "/v1/kvfold/sessions?page_size=-1", 400, "'page_size' is '-1'"},
      {"GET", "/v1/kvfold/sessions?page_size=%zz", 400, "malformed escape in 'page_size'"},
      {"GET", "/v1/kvfold/sessions/%zz", 400, "malformed escape in the session id"},
      {"GET", "/v1/kvfold/sessions/" + std::string(300, 'x'), 400, "session"},
      {"GET", "/v1/kvfold/sessions/no-such-session", 404, "no-such-session"},
      {"POST", "/v1/kvfold/sessions/x", 405, "no route"},
      {"DELETE", "/v1/kvfold/sessions", 405, "no route"},
      {"GET", "/v1/kvfold/sessions/", 404, "no route"},
  };
  for (const auto& c : cases) {
    HttpReply r = HttpCall(port_[0], c.method, c.path, "", kAuth);
    EXPECT_EQ(r.status, c.status) << c.method << " " << c.path << ": " << r.body;
    EXPECT_THAT(Body(r)["error"]["message"].get<std::string>(), HasSubstr(c.message)) << c.path;
  }
  EXPECT_EQ(HttpCall(port_[0], "GET", "/v1/kvfold/sessions", "").status, 401);
  EXPECT_EQ(HttpCall(port_[0], "DELETE", "/v1/kvfold/sessions/x", "").status, 401);
}

}  // namespace
}  // namespace kvfold::testing
