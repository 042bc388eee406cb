// Chat templates: a conversation (system / user / assistant messages) as the token ids an
// instruct model was trained on.
//
// kvfold has no Jinja engine. It recognises the template families in use from the text of
// a model's `chat_template` (tokenizer_config.json) and renders them natively, byte for
// byte what the Jinja template renders (tests hold them to strings rendered by Jinja from
// the real templates):
//
//   llama3    <|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>
//   llama31   llama3 after a system turn that always opens with the knowledge cut-off
//             and date lines (Llama 3.1 / 3.2 / 3.3 instruct)
//   chatml    <|im_start|>user\nHi<|im_end|>\n            (Qwen2, Hermes, Yi, ...)
//   llama2    <s>[INST] <<SYS>>\nS\n<</SYS>>\n\nHi [/INST] Hello </s>
//   mistral   <s>[INST] Hi [/INST]Hello</s>               (Mistral/Mixtral instruct)
//   mistral_v3 <s>[INST] Hi[/INST] Hello</s>              (Mistral 7B v0.3, Nemo: the
//             system message on the last user message, tools before it)
//   gemma     <bos><start_of_turn>user\nHi<end_of_turn>\n
//   plain     BOS "System\n\nUser: Hi\nAssistant: Hello\n"  (models without a template)
//
// Tools (function calling) render in the chatml family as Qwen2.5's template renders them,
// in llama31 as Llama 3.1's does (in the first user message), in mistral_v3 as Mistral 7B
// v0.3's does ([AVAILABLE_TOOLS] before the last user message, calls and results with
// their 9-character ids) and in the plain family in kvfold's own form; the other families
// refuse them.
//
// docs/tokenizers.md ("Chat templates") gives each family's rules (system messages, roles,
// continuation).
#ifndef KVFOLD_INFERENCE_SVC_TOKENIZER_CHAT_TEMPLATE_H_
#define KVFOLD_INFERENCE_SVC_TOKENIZER_CHAT_TEMPLATE_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "inference_svc/tokenizer/tokenizer.h"

namespace kvfold {

enum class ChatFormat { kLlama3, kChatMl, kLlama2, kMistral, kGemma, kPlain, kLlama31, kMistralV3 };

// "llama3", "chatml", "llama2", "mistral", "gemma", "plain", "llama31", "mistral_v3".
std::string_view ChatFormatName(ChatFormat format);
// InvalidArgument naming the accepted names.
absl::StatusOr<ChatFormat> ParseChatFormat(std::string_view name);
// The family of a Jinja chat template, from the markers in its text. NotFound when the
// text matches no family kvfold renders (the caller turns that into a start-up error
// that suggests --chat-template).
absl::StatusOr<ChatFormat> DetectChatFormat(std::string_view jinja);

// A function call an assistant message made (OpenAI's `tool_calls`).
struct ChatToolCall {
  std::string name;
  std::string arguments;  // JSON text (the template writes it as its `tojson` does)
  std::string id = "";    // the call's id; mistral_v3 writes it (its last 9 characters)
};

struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string role, std::string content, std::vector<ChatToolCall> tool_calls = {})
      : role(std::move(role)), content(std::move(content)), tool_calls(std::move(tool_calls)) {}

  std::string role;  // "system", "user", "assistant" or "tool" (a function's result)
  std::string content;
  std::vector<ChatToolCall> tool_calls;  // assistant messages only
  std::string tool_call_id = "";         // tool messages: the call answered (mistral_v3)
};

// How a conversation ends.
struct ChatRenderOptions {
  // Append the header of a new assistant turn (the model answers next).
  bool add_generation_prompt = true;
  // The last message is an assistant message the model continues: it is rendered without
  // its end-of-turn (as HF's continue_final_message: trailing whitespace is dropped).
  // Requires the last message to be from the assistant; excludes add_generation_prompt.
  bool continue_final_message = false;
  // The messages continue a conversation already in the session (kvfold sessions): no
  // BOS and no default system message. `previous_turn_closed` says whether the session
  // ends with the assistant's end-of-turn token (the model produced it); when false the
  // rest of the assistant's end-of-turn text is rendered first.
  bool continuation = false;
  bool previous_turn_closed = true;
  // Functions the model may call, each the tool object (OpenAI's {"type": "function",
  // "function": {...}}) as JSON text, shown as Python's json.dumps writes it (the `tojson`
  // of Hugging Face templates; keys in order). Rendered where the conversation starts
  // (not in a continuation: the session already shows the tools it began with).
  std::span<const std::string> tools = {};
};

// The special strings of a template and the token ids they stand for.
struct ChatSpecialTokens {
  std::string bos;  // "<s>", "<|begin_of_text|>", "<bos>"; empty = the tokenizer's BOS id
  std::string eos;  // "</s>", "<eos>", ...
  // Default system message of a ChatML template ("You are a helpful assistant."), empty
  // when the template has none.
  std::string default_system;
  // Mistral v0.1 writes a space after each assistant's eos.
  bool space_after_eos = false;
};

class ChatTemplate {
 public:
  // A template of `format` over `tokenizer` (must outlive the template). Every special
  // string the format writes must be one token of the tokenizer: FailedPrecondition names
  // the missing one (e.g. chatml over a tokenizer without <|im_start|>).
  static absl::StatusOr<ChatTemplate> Create(ChatFormat format, const Tokenizer* tokenizer,
                                             ChatSpecialTokens special = {});

  // The template of a model directory (or a model file: its directory is used). Reads
  // `chat_template`, `bos_token`, `eos_token` of tokenizer_config.json and
  // `eos_token_id` of generation_config.json; a GGUF model file gives the first three
  // itself (`tokenizer.chat_template`, the tokens of its BOS and EOS ids). `override_name`
  // non-empty selects that family whatever the files say. No chat_template at all gives `plain`. A
  // template of an unknown family is FailedPrecondition ("... pass --chat-template NAME").
  // InvalidArgument for malformed JSON.
  static absl::StatusOr<ChatTemplate> ForModel(const std::string& model_path,
                                               std::string_view override_name,
                                               const Tokenizer* tokenizer);

  // The text of `messages` (roles "system", "user", "assistant", "tool"; a system message
  // only first). InvalidArgument for an unknown role, a misplaced system message, roles
  // that do not alternate where the family requires it, an empty conversation, or tools,
  // tool messages or tool calls in a family without a tool format.
  absl::StatusOr<std::string> Render(std::span<const ChatMessage> messages,
                                     const ChatRenderOptions& options) const;

  // Token ids of rendered text: each special string is its one id, the text between is
  // encoded without BOS (HF's split-on-added-tokens rule). The plain family starts a
  // conversation (not a continuation) with the tokenizer's BOS id.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view rendered, bool continuation) const;

  // Render + Encode.
  absl::StatusOr<std::vector<int32_t>> RenderIds(std::span<const ChatMessage> messages,
                                                 const ChatRenderOptions& options) const;

  ChatFormat format() const { return format_; }
  // Whether the family renders tools, tool messages and tool calls (chatml, llama31,
  // mistral_v3, plain).
  bool renders_tools() const {
    return format_ == ChatFormat::kChatMl || format_ == ChatFormat::kLlama31 ||
           format_ == ChatFormat::kMistralV3 || format_ == ChatFormat::kPlain;
  }
  std::string_view name() const { return ChatFormatName(format_); }
  // Ids that end an assistant turn (EOS, <|eot_id|>, <|im_end|>, <end_of_turn>, plus the
  // model's generation_config eos ids when loaded with ForModel).
  const std::vector<int32_t>& end_of_turn_ids() const { return end_of_turn_ids_; }
  // How new messages are rendered onto a session that ends with token `last_token` (-1:
  // none) and holds tokens or not: a continuation of a non-empty one, closing the
  // assistant's turn first unless `last_token` is an end-of-turn id. The other options keep
  // their defaults (a generation prompt). Turns and their token counts render alike.
  ChatRenderOptions OptionsAfter(bool session_empty, int32_t last_token) const;
  // Strings that end an assistant turn in text (the plain family's "\nUser:"); callers
  // add them to the request's stop strings.
  const std::vector<std::string>& stop_strings() const { return stop_strings_; }

 private:
  ChatTemplate() = default;
  // The text after an assistant message's content that closes its turn.
  std::string AssistantClose() const;
  // Render for mistral_v3 (`out` holds what precedes the messages).
  absl::StatusOr<std::string> RenderMistralV3(std::span<const ChatMessage> messages,
                                              const ChatRenderOptions& options,
                                              std::string out) const;

  ChatFormat format_ = ChatFormat::kPlain;
  const Tokenizer* tokenizer_ = nullptr;
  ChatSpecialTokens special_;
  // (special string, id), longest first.
  std::vector<std::pair<std::string, int32_t>> markers_;
  std::vector<int32_t> end_of_turn_ids_;
  std::vector<std::string> stop_strings_;
};

}  // namespace kvfold

#endif  // KVFOLD_INFERENCE_SVC_TOKENIZER_CHAT_TEMPLATE_H_
