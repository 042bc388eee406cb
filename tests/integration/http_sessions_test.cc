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
  Authorize(&context);
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
      {"GET", "/v1/kvfold/sessions/x/fork", 405, "no route"},
      {"DELETE", "/v1/kvfold/sessions/x/rollback", 405, "no route"},
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

// Creating (with a mode, a system prompt), forking and rolling back over HTTP: the gRPC
// API's requests in JSON; a fork and a rollback to the same version continue alike.
TEST_F(HttpApiTest, StoredSessionsAreCreatedForkedAndRolledBackOverHttp) {
  auto call = [&](const char* method, const std::string& path, const json& body) {
    return HttpCall(port_[0], method, path, body.is_null() ? "" : body.dump(), kAuth);
  };
  HttpReply made = call("POST", "/v1/kvfold/sessions",
                        {{"session_id", "http-made"},
                         {"config", {{"mode", "KV_MODE_FULL"}}},
                         {"system_prompt", "A story about a cat."}});
  ASSERT_EQ(made.status, 200) << made.body;
  EXPECT_EQ(Body(made)["config"]["mode"], "KV_MODE_FULL");
  EXPECT_EQ(Body(made)["head_version"], "1");
  EXPECT_NE(Body(made)["total_tokens"], "0");  // the system prompt
  EXPECT_EQ(call("POST", "/v1/kvfold/sessions", {{"session_id", "http-made"}}).status, 409);
  HttpReply random = call("POST", "/v1/kvfold/sessions", nullptr);
  ASSERT_EQ(random.status, 200) << random.body;
  EXPECT_FALSE(Body(random)["session_id"].get<std::string>().empty());

  json chat = kChat;
  chat["kvfold_session"] = "http-made";
  HttpReply first = Post(1, "/v1/chat/completions", chat);  // the other replica
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(Body(first)["usage"]["kvfold"]["version"], 2);
  EXPECT_EQ(Body(first)["usage"]["kvfold"]["tokens_folded"], 0);  // full mode, as created

  HttpReply fork = call("POST", "/v1/kvfold/sessions/http-made/fork",
                        {{"version", 1}, {"new_session_id", "http-made-fork"}});
  ASSERT_EQ(fork.status, 200) << fork.body;
  EXPECT_EQ(Body(fork)["session_id"], "http-made-fork");
  EXPECT_EQ(Body(fork)["total_tokens"], Body(made)["total_tokens"]);
  HttpReply back = call("POST", "/v1/kvfold/sessions/http-made/rollback", {{"version", 1}});
  ASSERT_EQ(back.status, 200) << back.body;
  EXPECT_EQ(Body(back)["head_version"], "1");
  EXPECT_EQ(Body(back)["total_tokens"], Body(made)["total_tokens"]);
  // Both continue from version 1: the same greedy answer as the first turn had.
  HttpReply again = Post(0, "/v1/chat/completions", chat);
  chat["kvfold_session"] = "http-made-fork";
  HttpReply forked = Post(1, "/v1/chat/completions", chat);
  ASSERT_EQ(again.status, 200) << again.body;
  ASSERT_EQ(forked.status, 200) << forked.body;
  EXPECT_EQ(Body(again)["choices"][0]["message"]["content"],
            Body(first)["choices"][0]["message"]["content"]);
  EXPECT_EQ(Body(forked)["choices"][0]["message"]["content"],
            Body(first)["choices"][0]["message"]["content"]);

  const struct {
    std::string path;
    json body;
    int status;
    const char* message;
  } bad[] = {
      {"/v1/kvfold/sessions",
       {{"config", {{"mode", "KV_MODE_NOPE"}}}},
       400,
       "the body is not a CreateSessionRequest"},
      {"/v1/kvfold/sessions",
       {{"sesion_id", "typo"}},
       400,
       "the body is not a CreateSessionRequest"},
      {"/v1/kvfold/sessions/http-made/fork",
       {{"source_session_id", "other"}},
       400,
       "'source_session_id' is 'other' but the path names 'http-made'"},
      {"/v1/kvfold/sessions/http-made/rollback", {{"version", 0}}, 400, "version must be >= 1"},
      {"/v1/kvfold/sessions/http-made/rollback", {{"version", 99}}, 404, ""},
      {"/v1/kvfold/sessions/no-such/fork", {{"version", 1}}, 404, ""},
  };
  for (const auto& c : bad) {
    HttpReply r = call("POST", c.path, c.body);
    EXPECT_EQ(r.status, c.status) << c.path << " " << c.body.dump() << ": " << r.body;
    EXPECT_THAT(Body(r)["error"]["message"].get<std::string>(), HasSubstr(c.message)) << r.body;
  }
}

}  // namespace
}  // namespace kvfold::testing
