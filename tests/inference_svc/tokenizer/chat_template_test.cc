// Chat templates: kvfold's native renderers against strings Jinja2 rendered from the real
// templates (testdata/chat_template_expected.json, made by chat_template_expected.py),
// token ids against an independent split (byte-level vocabulary) and against
// libsentencepiece on Llama 2's real tokenizer, continuation, detection and errors.
#include "inference_svc/tokenizer/chat_template.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inference_svc/tokenizer/hf_tokenizer.h"
#include "tests/inference_svc/tokenizer/sentencepiece_reference.h"
#include "tests/inference_svc/tokenizer/test_util.h"

namespace kvfold {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ::kvfold::testing::ByteLevelTokenizerJson;
using ::kvfold::testing::ChatSpecialId;
using ::kvfold::testing::kChatSpecials;
using ::kvfold::testing::ReadAll;
using ::kvfold::testing::SharedFile;
using ::testing::HasSubstr;

// A model directory with tokenizer.json and the given tokenizer_config.json (and
// generation_config.json when non-null). Removed with the fixture.
class ModelDir {
 public:
  explicit ModelDir(const json& tokenizer_config, const json& generation_config = nullptr) {
    path_ = fs::temp_directory_path() /
            ("kvfold_chat_" + std::to_string(getpid()) + "_" + std::to_string(counter_++));
    fs::create_directories(path_);
    std::ofstream(path_ / "tokenizer.json") << ByteLevelTokenizerJson();
    std::ofstream(path_ / "tokenizer_config.json") << tokenizer_config.dump();
    if (!generation_config.is_null()) {
      std::ofstream(path_ / "generation_config.json") << generation_config.dump();
    }
  }
  ~ModelDir() { fs::remove_all(path_); }
  std::string path() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

std::unique_ptr<Tokenizer> LoadTokenizer(const std::string& dir) {
  auto t = Tokenizer::Load(dir + "/tokenizer.json");
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

json TestData(const std::string& name) {
  const char* src = std::getenv("KVFOLD_SOURCE_DIR");
  const std::string path =
      std::string(src != nullptr ? src : ".") + "/tests/inference_svc/tokenizer/testdata/" + name;
  json j = json::parse(ReadAll(path), nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << "cannot read " << path;
  return j;
}

std::vector<ChatMessage> Messages(const json& list) {
  std::vector<ChatMessage> out;
  for (const json& m : list) {
    ChatMessage& message = out.emplace_back(ChatMessage{m["role"], m["content"]});
    for (const json& call : m.value("tool_calls", json::array())) {
      message.tool_calls.push_back({call["name"], call["arguments"], call.value("id", "")});
    }
    message.tool_call_id = m.value("tool_call_id", "");
  }
  return out;
}

// The ids of `text` split independently of ChatTemplate::Encode: each special string one
// id, every other byte its own id.
std::vector<int32_t> ExpectedByteLevelIds(const std::string& text) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < text.size();) {
    bool matched = false;
    for (const std::string& s : kChatSpecials) {
      if (text.compare(i, s.size(), s) == 0) {
        ids.push_back(ChatSpecialId(s));
        i += s.size();
        matched = true;
        break;
      }
    }
    if (!matched) ids.push_back(static_cast<unsigned char>(text[i++]));
  }
  return ids;
}

ChatFormat FamilyOf(const std::string& fixture) {
  if (fixture == "llama3") return ChatFormat::kLlama3;
  if (fixture == "llama3_1") return ChatFormat::kLlama31;
  if (fixture == "qwen2" || fixture == "qwen2_5" || fixture == "chatml") return ChatFormat::kChatMl;
  if (fixture == "llama2") return ChatFormat::kLlama2;
  if (fixture == "gemma" || fixture == "gemma3") return ChatFormat::kGemma;
  if (fixture == "mistral_v3") return ChatFormat::kMistralV3;
  return ChatFormat::kMistral;
}

// `chat` renders `messages` as `expected` (Jinja's text), and its ids split as
// ExpectedByteLevelIds splits that text.
void ExpectRendering(const ChatTemplate& chat, const std::vector<ChatMessage>& messages,
                     const ChatRenderOptions& options, const json& expected,
                     const std::string& label) {
  auto text = chat.Render(messages, options);
  ASSERT_TRUE(text.ok()) << label << ": " << text.status();
  EXPECT_EQ(*text, expected.get<std::string>()) << label;
  auto ids = chat.RenderIds(messages, options);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, ExpectedByteLevelIds(expected)) << label;
}

TEST(ChatTemplateTest, RendersTheRealTemplatesLikeJinja) {
  const json templates = TestData("chat_templates.json");
  const json data = TestData("chat_template_expected.json");
  ASSERT_TRUE(templates.is_object() && data.is_object());
  int checked = 0;
  for (const auto& [name, t] : templates.items()) {
    json config = {{"chat_template", t["template"]},
                   {"bos_token", t["bos_token"]},
                   {"eos_token", t["eos_token"]}};
    ModelDir dir(config);
    auto tokenizer = LoadTokenizer(dir.path());
    ASSERT_NE(tokenizer, nullptr);
    auto chat = ChatTemplate::ForModel(dir.path(), "", tokenizer.get());
    ASSERT_TRUE(chat.ok()) << name << ": " << chat.status();
    EXPECT_EQ(chat->format(), FamilyOf(name)) << name;
    for (const auto& [conversation, expected] : data["expected"][name].items()) {
      const json& c = data["conversations"][conversation];
      ChatRenderOptions options;
      options.add_generation_prompt = c["add_generation_prompt"];
      options.continue_final_message = c["continue_final_message"];
      ExpectRendering(*chat, Messages(c["messages"]), options, expected, name + "/" + conversation);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 60);
}

// The tool texts of the fixture (Python's json.dumps of each tool).
std::vector<std::string> FixtureTools(const json& data) {
  std::vector<std::string> tools;
  for (const json& t : data["tools"]) tools.push_back(t["text"]);
  return tools;
}

// The chat template of fixture `name` (chat_templates.json), through ForModel.
struct FixtureTemplate {
  explicit FixtureTemplate(const json& t)
      : dir(json{{"chat_template", t["template"]},
                 {"bos_token", t["bos_token"]},
                 {"eos_token", t["eos_token"]}}),
        tokenizer(LoadTokenizer(dir.path())),
        chat(ChatTemplate::ForModel(dir.path(), "", tokenizer.get())) {}
  ModelDir dir;
  std::unique_ptr<Tokenizer> tokenizer;
  absl::StatusOr<ChatTemplate> chat;
};

TEST(ChatTemplateTest, RendersToolsLikeQwen25AndLlama31) {
  const json templates = TestData("chat_templates.json");
  const json data = TestData("chat_template_expected.json");
  const std::vector<std::string> tools = FixtureTools(data);
  int checked = 0, refused = 0;
  for (const auto& [name, cases] : data["tool_expected"].items()) {
    FixtureTemplate fixture(templates[name]);
    ASSERT_NE(fixture.tokenizer, nullptr);
    const auto& chat = fixture.chat;
    ASSERT_TRUE(chat.ok()) << chat.status();
    ASSERT_TRUE(chat->renders_tools()) << name;
    for (const auto& [conversation, expected] : cases.items()) {
      const json& c = data["tool_conversations"][conversation];
      const std::vector<ChatMessage> messages = Messages(c["messages"]);
      ChatRenderOptions options;
      if (c["with_tools"].get<bool>()) options.tools = tools;
      auto text = chat->Render(messages, options);
      if (expected.is_null()) {  // the template raises
        EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument)
            << name << "/" << conversation;
        ++refused;
        continue;
      }
      ExpectRendering(*chat, messages, options, expected, name + "/" + conversation);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 20);
  EXPECT_EQ(refused, 1);  // Llama 3.1: two calls in one assistant message
}

TEST(ChatTemplateTest, AToolSessionContinuesAsTheWholeConversation) {
  const json templates = TestData("chat_templates.json");
  const json data = TestData("chat_template_expected.json");
  const std::vector<std::string> tools = FixtureTools(data);
  FixtureTemplate fixture(templates["qwen2_5"]);
  const auto& chat = fixture.chat;
  ASSERT_TRUE(chat.ok()) << chat.status();
  // A session that ends with the assistant's calls (closed by <|im_end|>) continues with
  // the results alone: the same text as the whole conversation.
  const std::vector<ChatMessage> all =
      Messages(data["tool_conversations"]["tool_round_trip"]["messages"]);
  const std::span<const ChatMessage> head(all.data(), 2), rest(all.data() + 2, 2);
  auto whole = chat->Render(all, {.tools = tools});
  auto first = chat->Render(head, {.add_generation_prompt = false, .tools = tools});
  // Tools given to a continuation are not shown again.
  auto after = chat->Render(rest, {.continuation = true, .tools = tools});
  ASSERT_TRUE(whole.ok() && first.ok() && after.ok());
  ASSERT_TRUE(first->ends_with("<|im_end|>\n"));
  EXPECT_EQ(first->substr(0, first->size() - 1) + *after, *whole);

  // Llama 3.1: the call ends with <|eot_id|>, the result and the next turns follow.
  FixtureTemplate llama(templates["llama3_1"]);
  const auto& llama_chat = llama.chat;
  ASSERT_TRUE(llama_chat.ok()) << llama_chat.status();
  const std::vector<ChatMessage> one =
      Messages(data["tool_conversations"]["one_call_round_trip"]["messages"]);
  const std::span<const ChatMessage> call(one.data(), 2), results(one.data() + 2, 3);
  whole = llama_chat->Render(one, {.tools = tools});
  first = llama_chat->Render(call, {.add_generation_prompt = false, .tools = tools});
  after = llama_chat->Render(results, {.continuation = true, .tools = tools});
  ASSERT_TRUE(whole.ok() && first.ok() && after.ok());
  EXPECT_EQ(*first + *after, *whole);
}

// Mistral v0.3: a session that ends with the calls (closed by </s>) continues with the
// results as the whole conversation renders them when the tools sit before the only user
// message; ids longer than 9 characters give their last 9, shorter ones are refused.
TEST(ChatTemplateTest, MistralV3SessionsAndCallIds) {
  const json templates = TestData("chat_templates.json");
  const json data = TestData("chat_template_expected.json");
  const std::vector<std::string> tools = FixtureTools(data);
  FixtureTemplate fixture(templates["mistral_v3"]);
  const auto& chat = fixture.chat;
  ASSERT_TRUE(chat.ok()) << chat.status();
  ASSERT_EQ(chat->format(), ChatFormat::kMistralV3);
  ASSERT_EQ(chat->name(), "mistral_v3");
  const std::vector<ChatMessage> all =
      Messages(data["tool_conversations"]["tool_round_trip"]["messages"]);
  const std::span<const ChatMessage> head(all.data(), 2), rest(all.data() + 2, 2);
  auto whole = chat->Render(all, {.tools = tools});
  auto first = chat->Render(head, {.add_generation_prompt = false, .tools = tools});
  auto after = chat->Render(rest, {.continuation = true, .tools = tools});
  ASSERT_TRUE(whole.ok() && first.ok() && after.ok());
  ASSERT_TRUE(first->ends_with("]</s>")) << *first;
  EXPECT_EQ(*first + *after, *whole);
  EXPECT_TRUE(after->starts_with("[TOOL_RESULTS] {\"content\": 18 C, \"call_id\": \"a1b2c3d4e\"}"));
  // A turn the model left open (no </s> produced) is closed first.
  auto open = chat->Render(rest, {.continuation = true, .previous_turn_closed = false});
  ASSERT_TRUE(open.ok());
  EXPECT_EQ(*open, "</s>" + *after);

  std::vector<ChatMessage> long_ids = all;
  long_ids[1].tool_calls[0].id = "call_0123456789abca1b2c3d4e";
  long_ids[2].tool_call_id = "call_0123456789abca1b2c3d4e";
  auto truncated = chat->Render(long_ids, {.tools = tools});
  ASSERT_TRUE(truncated.ok()) << truncated.status();
  EXPECT_EQ(*truncated, *whole);
  std::vector<ChatMessage> short_id = all;
  short_id[3].tool_call_id = "f5g6";
  auto refused = chat->Render(short_id, {.tools = tools});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("ids of 9 characters"));
  // Plain user and assistant messages still alternate, calls and results aside.
  std::vector<ChatMessage> twice = all;
  twice.push_back({"tool", "x"});
  twice.push_back({"assistant", "Done."});
  twice.push_back({"assistant", "Again."});
  twice[4].tool_call_id = "a1b2c3d4e";
  refused = chat->Render(twice, {});
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("alternate"));
  // A tool that is not a function object is refused, not rendered half.
  const std::vector<std::string> bad_tool = {R"({"type": "function"})"};
  refused = chat->Render(head, {.tools = bad_tool});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChatTemplateTest, PlainToolsAndFamiliesWithoutAToolFormat) {
  ModelDir dir(json::object());
  auto tokenizer = LoadTokenizer(dir.path());
  ASSERT_NE(tokenizer, nullptr);
  const std::vector<std::string> tools = {R"({"type": "function", "function": {"name": "f"}})"};
  const std::string block =
      "Tools:\n{\"type\": \"function\", \"function\": {\"name\": \"f\"}}\nCall a tool with "
      "<tool_call>{\"name\": NAME, \"arguments\": ARGUMENTS}</tool_call>.\n\n";
  auto plain = ChatTemplate::Create(ChatFormat::kPlain, tokenizer.get());
  ASSERT_TRUE(plain.ok());
  std::vector<ChatMessage> messages = {{"system", "Be brief."}, {"user", "Time?"}};
  messages.push_back({"assistant", "", {{"f", R"({"zone": "CET"})"}}});
  messages.push_back({"tool", "12:00"});
  auto text = plain->Render(messages, {.tools = tools});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "Be brief.\n\n" + block +
                       "User: Time?\nAssistant: <tool_call>{\"name\": \"f\", \"arguments\": "
                       "{\"zone\": \"CET\"}}</tool_call>\nTool: 12:00\nAssistant:");
  auto no_system = plain->Render(std::span(messages).subspan(1, 1), {.tools = tools});
  ASSERT_TRUE(no_system.ok());
  EXPECT_EQ(*no_system, block + "User: Time?\nAssistant:");

  // The other families have no tool format: tools, tool results and calls are refused.
  for (ChatFormat format :
       {ChatFormat::kLlama3, ChatFormat::kLlama2, ChatFormat::kMistral, ChatFormat::kGemma}) {
    auto chat = ChatTemplate::Create(format, tokenizer.get());
    ASSERT_TRUE(chat.ok());
    EXPECT_FALSE(chat->renders_tools());
    const std::vector<ChatMessage> user = {{"user", "Time?"}};
    auto with_tools = chat->Render(user, {.tools = tools});
    EXPECT_EQ(with_tools.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(with_tools.status().message(), HasSubstr("no tool format"));
    EXPECT_EQ(chat->Render(std::span(messages).subspan(1), {}).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  // Calls only on assistant messages; an assistant message with calls is not continued.
  auto chatml = ChatTemplate::Create(ChatFormat::kChatMl, tokenizer.get());
  ASSERT_TRUE(chatml.ok());
  std::vector<ChatMessage> user_call = {{"user", "x", {{"f", "{}"}}}};
  EXPECT_EQ(chatml->Render(user_call, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(chatml
                ->Render(std::span(messages).subspan(1, 2),
                         {.add_generation_prompt = false, .continue_final_message = true})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ChatTemplateTest, ContinuationEqualsTheWholeConversation) {
  const json data = TestData("chat_template_expected.json");
  const std::vector<ChatMessage> all =
      Messages(data["conversations"]["multi_turn_no_system"]["messages"]);
  ModelDir dir(json::object());
  auto tokenizer = LoadTokenizer(dir.path());
  ASSERT_NE(tokenizer, nullptr);
  const std::span<const ChatMessage> head(all.data(), 2), rest(all.data() + 2, all.size() - 2);
  for (ChatFormat format :
       {ChatFormat::kLlama3, ChatFormat::kChatMl, ChatFormat::kLlama2, ChatFormat::kMistral,
        ChatFormat::kGemma, ChatFormat::kPlain, ChatFormat::kLlama31}) {
    SCOPED_TRACE(std::string(ChatFormatName(format)));
    auto chat = ChatTemplate::Create(format, tokenizer.get());
    ASSERT_TRUE(chat.ok()) << chat.status();
    auto whole = chat->Render(all, {});
    ASSERT_TRUE(whole.ok()) << whole.status();
    // The session ends with the assistant's answer and no end-of-turn (stopped by length).
    auto open_head =
        chat->Render(head, {.add_generation_prompt = false, .continue_final_message = true});
    ASSERT_TRUE(open_head.ok()) << open_head.status();
    auto after_open = chat->Render(rest, {.continuation = true, .previous_turn_closed = false});
    ASSERT_TRUE(after_open.ok()) << after_open.status();
    EXPECT_EQ(*open_head + *after_open, *whole);
    // The model produced its end-of-turn token itself.
    if (format == ChatFormat::kLlama2 || format == ChatFormat::kPlain) continue;
    const int32_t eot = chat->end_of_turn_ids().front();
    auto after_closed = chat->Render(rest, {.continuation = true, .previous_turn_closed = true});
    ASSERT_TRUE(after_closed.ok()) << after_closed.status();
    EXPECT_EQ(*open_head + std::string(tokenizer->TokenBytes(eot)) + *after_closed, *whole);
  }
}

TEST(ChatTemplateTest, Llama2IdsMatchSentencePieceOnTheRealTokenizer) {
  const std::string model = SharedFile("models/tokenizers/llama2_32000.model");
  if (model.empty()) GTEST_SKIP() << "../shared/models/tokenizers/llama2_32000.model absent";
  auto reference = kvfold::testing::SentencePieceReference::LoadFile(model);
  ASSERT_NE(reference, nullptr);
  auto tokenizer = Tokenizer::Load(model);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto chat = ChatTemplate::Create(ChatFormat::kLlama2, tokenizer->get());
  ASSERT_TRUE(chat.ok()) << chat.status();
  const json data = TestData("chat_template_expected.json");
  for (const char* conversation : {"system", "multi_turn", "assistant_prefix"}) {
    const json& c = data["conversations"][conversation];
    const std::string expected = data["expected"]["llama2"][conversation];
    ChatRenderOptions options;
    options.add_generation_prompt = c["add_generation_prompt"];
    options.continue_final_message = c["continue_final_message"];
    auto ids = chat->RenderIds(Messages(c["messages"]), options);
    ASSERT_TRUE(ids.ok()) << ids.status();
    // HF's rule, with libsentencepiece encoding the text between <s> and </s>.
    std::vector<int32_t> want;
    size_t pos = 0;
    while (pos < expected.size()) {
      const size_t bos = expected.find("<s>", pos), eos = expected.find("</s>", pos);
      const size_t next = std::min(bos, eos);
      const std::string text = expected.substr(pos, next - pos);
      if (!text.empty()) {
        for (int32_t id : reference->EncodeIds(text, false)) want.push_back(id);
      }
      if (next == std::string::npos) break;
      want.push_back(next == bos ? 1 : 2);
      pos = next + (next == bos ? 3 : 4);
    }
    EXPECT_EQ(*ids, want) << conversation;
  }
  // The well-known opening of a Llama 2 chat prompt: <s> ▁[ INST ].
  auto ids = chat->RenderIds(std::vector<ChatMessage>{{"user", "Hi"}}, {});
  ASSERT_TRUE(ids.ok());
  ASSERT_GE(ids->size(), 4u);
  EXPECT_EQ(std::vector<int32_t>(ids->begin(), ids->begin() + 4),
            (std::vector<int32_t>{1, 518, 25580, 29962}));
}

TEST(ChatTemplateTest, PlainFallbackForModelsWithoutTemplate) {
  const std::string tok = SharedFile("models/stories260K/tok512.bin");
  if (tok.empty()) GTEST_SKIP() << "../shared/models/stories260K absent";
  auto tokenizer = Tokenizer::Load(tok);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto chat = ChatTemplate::ForModel(fs::path(tok).parent_path().string(), "", tokenizer->get());
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->format(), ChatFormat::kPlain);
  const std::vector<ChatMessage> messages = {
      {"system", "Tell a story."}, {"user", "A cat"}, {"assistant", "Once"}, {"user", "More"}};
  auto text = chat->Render(messages, {});
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "Tell a story.\n\nUser: A cat\nAssistant: Once\nUser: More\nAssistant:");
  auto ids = chat->RenderIds(messages, {});
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->front(), (*tokenizer)->bos_id());
  EXPECT_EQ((*tokenizer)->Decode(*ids), *text);
  EXPECT_EQ(chat->stop_strings(), std::vector<std::string>{"\nUser:"});
  // A family whose markers the tokenizer lacks is refused at start-up.
  auto chatml = ChatTemplate::ForModel(tok, "chatml", tokenizer->get());
  EXPECT_EQ(chatml.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(chatml.status().message(), HasSubstr("<|im_start|>"));
}

TEST(ChatTemplateTest, DetectionOverrideAndStopIds) {
  ModelDir unknown(
      json{{"chat_template", "{% for m in messages %}### {{ m.content }}{% endfor %}"}});
  auto tokenizer = LoadTokenizer(unknown.path());
  ASSERT_NE(tokenizer, nullptr);
  auto refused = ChatTemplate::ForModel(unknown.path(), "", tokenizer.get());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("--chat-template"));
  auto forced = ChatTemplate::ForModel(unknown.path(), "gemma", tokenizer.get());
  ASSERT_TRUE(forced.ok()) << forced.status();
  EXPECT_EQ(forced->format(), ChatFormat::kGemma);
  EXPECT_EQ(ChatTemplate::ForModel(unknown.path(), "jinja", tokenizer.get()).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Mistral's later templates have [INST] and [AVAILABLE_TOOLS] too, and a system turn of
  // their own: refused, not rendered as mistral_v3 or mistral.
  ModelDir small3(json{
      {"chat_template", "[SYSTEM_PROMPT]{{ system }}[/SYSTEM_PROMPT][AVAILABLE_TOOLS] [INST]"}});
  refused = ChatTemplate::ForModel(small3.path(), "", tokenizer.get());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("[SYSTEM_PROMPT]"));
  EXPECT_THAT(refused.status().message(), HasSubstr("--chat-template"));

  // A list-form chat_template ("default" entry) and generation_config's eos ids.
  ModelDir llama3(json{{"chat_template",
                        {{{"name", "tool_use"}, {"template", "<|im_start|><|im_end|>"}},
                         {{"name", "default"}, {"template", "<|start_header_id|> <|eot_id|>"}}}},
                       {"bos_token", "<|begin_of_text|>"},
                       {"eos_token", {{"content", "<|eot_id|>"}}}},
                  json{{"eos_token_id", {ChatSpecialId("<|eot_id|>"), 42}}});
  auto chat = ChatTemplate::ForModel(llama3.path(), "", tokenizer.get());
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->format(), ChatFormat::kLlama3);
  EXPECT_THAT(chat->end_of_turn_ids(), ::testing::Contains(ChatSpecialId("<|eot_id|>")));
  EXPECT_THAT(chat->end_of_turn_ids(), ::testing::Contains(42));

  ModelDir broken(json::object());
  std::ofstream(broken.path() + "/tokenizer_config.json") << "{ not json";
  EXPECT_EQ(ChatTemplate::ForModel(broken.path(), "", tokenizer.get()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ChatTemplateTest, RejectsMalformedConversations) {
  ModelDir dir(json::object());
  auto tokenizer = LoadTokenizer(dir.path());
  ASSERT_NE(tokenizer, nullptr);
  auto gemma = ChatTemplate::Create(ChatFormat::kGemma, tokenizer.get());
  auto chatml = ChatTemplate::Create(ChatFormat::kChatMl, tokenizer.get());
  ASSERT_TRUE(gemma.ok() && chatml.ok());
  auto code = [](const absl::StatusOr<std::string>& s) { return s.status().code(); };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(code(chatml->Render(std::vector<ChatMessage>{}, {})), kInvalid);
  EXPECT_EQ(code(chatml->Render(std::vector<ChatMessage>{{"robot", "x"}}, {})), kInvalid);
  EXPECT_EQ(code(chatml->Render(std::vector<ChatMessage>{{"user", "a"}, {"system", "b"}}, {})),
            kInvalid);
  EXPECT_EQ(code(gemma->Render(std::vector<ChatMessage>{{"user", "a"}, {"user", "b"}}, {})),
            kInvalid);
  EXPECT_EQ(code(gemma->Render(std::vector<ChatMessage>{{"assistant", "a"}}, {})), kInvalid);
  EXPECT_EQ(code(chatml->Render(std::vector<ChatMessage>{{"user", "a"}},
                                {.add_generation_prompt = false, .continue_final_message = true})),
            kInvalid);
  EXPECT_EQ(code(chatml->Render(std::vector<ChatMessage>{{"system", "a"}, {"user", "b"}},
                                {.continuation = true})),
            kInvalid);
  // ChatML allows any order of user and assistant messages.
  EXPECT_TRUE(chatml->Render(std::vector<ChatMessage>{{"user", "a"}, {"user", "b"}}, {}).ok());
}

}  // namespace
}  // namespace kvfold
