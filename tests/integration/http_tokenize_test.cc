// vLLM's /tokenize and /detokenize on a real replica: the ids are exactly what a turn
// feeds for the same prompt or messages (the turn's usage and the chat template rendered
// in the test agree), detokenize inverts them, and bad input gets its error.
#include <filesystem>
#include <nlohmann/json.hpp>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inference_svc/tokenizer/chat_template.h"
#include "inference_svc/tokenizer/tokenizer.h"
#include "tests/integration/http_api_fixture.h"

namespace kvfold::testing {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

TEST_F(HttpApiTest, TokenizeGivesTheIdsATurnFeeds) {
  auto tokenizer = Tokenizer::Load(std::filesystem::path(SharedModel()).parent_path().string());
  ASSERT_TRUE(tokenizer.ok());
  const std::string prompt = "Once upon a time, a cat";
  HttpReply r = Post(0, "/tokenize", {{"prompt", prompt}, {"return_token_strs", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json body = Body(r);
  auto want = (*tokenizer)->Encode(prompt, /*add_bos=*/true);
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(body["tokens"].get<std::vector<int32_t>>(), *want);
  EXPECT_EQ(body["count"], want->size());
  EXPECT_EQ(body["max_model_len"], 65536);  // the replica's --max-prompt-tokens
  ASSERT_EQ(body["token_strs"].size(), want->size());
  EXPECT_EQ(body["token_strs"][2], std::string((*tokenizer)->TokenBytes((*want)[2])));
  HttpReply completion =
      Post(1, "/v1/completions", {{"prompt", prompt}, {"max_tokens", 2}, {"temperature", 0}});
  ASSERT_EQ(completion.status, 200) << completion.body;
  EXPECT_EQ(Body(completion)["usage"]["prompt_tokens"], body["count"]);
  HttpReply bare = Post(0, "/tokenize", {{"prompt", prompt}, {"add_special_tokens", false}});
  ASSERT_EQ(bare.status, 200) << bare.body;
  EXPECT_EQ(Body(bare)["tokens"].get<std::vector<int32_t>>(),
            std::vector<int32_t>(want->begin() + 1, want->end()));
  EXPECT_FALSE(Body(bare).contains("token_strs"));

  // Detokenize inverts it (BOS is not text).
  HttpReply text = Post(1, "/detokenize", {{"tokens", body["tokens"]}});
  ASSERT_EQ(text.status, 200) << text.body;
  EXPECT_EQ(Body(text)["prompt"], prompt);

  // Messages: the chat template's rendering, as the chat completion counts it.
  auto chat = ChatTemplate::Create(ChatFormat::kPlain, tokenizer->get());
  ASSERT_TRUE(chat.ok());
  const std::vector<ChatMessage> messages = {{"system", "A story."}, {"user", "A dog"}};
  json wire = json::array();
  for (const ChatMessage& m : messages) wire.push_back({{"role", m.role}, {"content", m.content}});
  HttpReply rendered = Post(0, "/tokenize", {{"messages", wire}});
  ASSERT_EQ(rendered.status, 200) << rendered.body;
  auto ids = chat->RenderIds(messages, {});
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(Body(rendered)["tokens"].get<std::vector<int32_t>>(), *ids);
  HttpReply answered =
      Post(1, "/v1/chat/completions", {{"messages", wire}, {"max_tokens", 2}, {"temperature", 0}});
  ASSERT_EQ(answered.status, 200) << answered.body;
  EXPECT_EQ(Body(answered)["usage"]["prompt_tokens"], Body(rendered)["count"]);
  // Without the generation prompt, and continuing a final assistant message.
  ChatRenderOptions open;
  open.add_generation_prompt = false;
  HttpReply no_header =
      Post(0, "/tokenize", {{"messages", wire}, {"add_generation_prompt", false}});
  ASSERT_EQ(no_header.status, 200) << no_header.body;
  EXPECT_EQ(Body(no_header)["tokens"].get<std::vector<int32_t>>(),
            *chat->RenderIds(messages, open));
  std::vector<ChatMessage> continued = messages;
  continued.push_back({"assistant", "Once"});
  wire.push_back({{"role", "assistant"}, {"content", "Once"}});
  open.continue_final_message = true;
  HttpReply cont = Post(0, "/tokenize", {{"messages", wire}, {"continue_final_message", true}});
  ASSERT_EQ(cont.status, 200) << cont.body;
  EXPECT_EQ(Body(cont)["tokens"].get<std::vector<int32_t>>(), *chat->RenderIds(continued, open));
}

TEST_F(HttpApiTest, TokenizeErrors) {
  const struct {
    std::string path;
    json body;
    int status;
    const char* param;
    const char* message;
  } cases[] = {
      {"/tokenize", json::object(), 400, "prompt", "either 'prompt'"},
      {"/tokenize",
       {{"prompt", "a"}, {"messages", {{{"role", "user"}, {"content", "b"}}}}},
       400,
       "messages",
       "not both"},
      {"/tokenize", {{"prompt", 5}}, 400, "prompt", "'prompt' must be a string"},
      {"/tokenize",
       {{"messages", {{{"role", "assistant"}, {"content", "b"}}}},
        {"continue_final_message", true},
        {"add_generation_prompt", true}},
       400,
       "add_generation_prompt",
       "exclude each other"},
      {"/tokenize", {{"messages", {{{"role", "robot"}, {"content", "b"}}}}}, 400, nullptr, "robot"},
      {"/tokenize", {{"prompt", "a"}, {"model", "gpt-9"}}, 404, nullptr, "gpt-9"},
      {"/detokenize", {{"tokens", {1, 600}}}, 400, "tokens", "token id 600 outside [0, 512)"},
      {"/detokenize", {{"tokens", {1, -1}}}, 400, "tokens", "integers >= 0"},
      {"/detokenize", {{"tokens", "abc"}}, 400, "tokens", "array of token ids"},
  };
  for (const auto& c : cases) {
    HttpReply r = Post(0, c.path, c.body);
    EXPECT_EQ(r.status, c.status) << c.path << " " << c.body.dump() << ": " << r.body;
    EXPECT_THAT(Body(r)["error"]["message"].get<std::string>(), HasSubstr(c.message))
        << c.body.dump();
    if (c.param != nullptr) {
      EXPECT_EQ(Body(r)["error"]["param"], c.param) << c.body.dump();
    }
  }
  EXPECT_EQ(Post(0, "/tokenize", {{"prompt", "a"}}, {}).status, 401);
  EXPECT_EQ(HttpCall(port_[0], "GET", "/detokenize", "", kAuth).status, 405);
}

}  // namespace
}  // namespace kvfold::testing
