// ChatTemplate: the native renderers of the chat-template families (chat_template.h).
// Each Render* mirrors its family's Jinja template line by line; `| trim` and `.strip()`
// are Python's str.strip().
#include "inference_svc/tokenizer/chat_template.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/json_depth.h"
#include "inference_svc/tokenizer/python_json.h"

namespace kvfold {
namespace {

constexpr std::string_view kNames[] = {"llama3", "chatml", "llama2",  "mistral",
                                       "gemma",  "plain",  "llama31", "mistral_v3"};

// Python's str.strip() / rstrip() for the ASCII whitespace that occurs in chat text.
// (std::string results: Debian's Abseil has its own string_view type.)
std::string RStrip(std::string_view s) {
  while (!s.empty() && absl::ascii_isspace(static_cast<unsigned char>(s.back()))) {
    s.remove_suffix(1);
  }
  return std::string(s);
}
std::string Strip(std::string_view s) {
  while (!s.empty() && absl::ascii_isspace(static_cast<unsigned char>(s.front()))) {
    s.remove_prefix(1);
  }
  return RStrip(s);
}

absl::Status Invalid(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("chat messages: ", what));
}

// Roles known, system only first, and (when `alternate`) user/assistant alternating from a
// user message on (after an optional leading system message).
absl::Status CheckRoles(std::span<const ChatMessage> messages, bool alternate, bool continuation) {
  if (messages.empty()) return Invalid("no messages");
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      return Invalid(absl::StrCat("message ", i, " has role \"", role,
                                  "\"; expected system, user, assistant or tool"));
    }
    if (!messages[i].tool_calls.empty() && role != "assistant") {
      return Invalid(absl::StrCat("message ", i, " (", role,
                                  ") has tool calls; only assistant messages make them"));
    }
    if (role == "system" && (i != 0 || continuation)) {
      return Invalid(absl::StrCat("message ", i,
                                  " is a system message; only the first message of a new "
                                  "conversation may be one"));
    }
  }
  if (!alternate) return absl::OkStatus();
  const size_t first = messages[0].role == "system" ? 1 : 0;
  for (size_t i = first; i < messages.size(); ++i) {
    const bool want_user = (i - first) % 2 == 0;
    if ((messages[i].role == "user") != want_user) {
      return Invalid(
          absl::StrCat("this model's template needs user and assistant messages "
                       "to alternate, starting with user; message ",
                       i, " is ", messages[i].role));
    }
  }
  return absl::OkStatus();
}

// Whether the conversation uses tools: a tool list, a tool message or a tool call.
bool UsesTools(std::span<const ChatMessage> messages, const ChatRenderOptions& options) {
  if (!options.tools.empty()) return true;
  return std::any_of(messages.begin(), messages.end(), [](const ChatMessage& m) {
    return m.role == "tool" || !m.tool_calls.empty();
  });
}

// Qwen2.5's tool block, around one line per tool.
constexpr char kChatMlToolsHead[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
constexpr char kChatMlToolsTail[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
    "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";

// The plain family's tool block (kvfold's own form, docs/tokenizers.md).
std::string PlainTools(std::span<const std::string> tools) {
  std::string out = "Tools:\n";
  for (const std::string& tool : tools) absl::StrAppend(&out, tool, "\n");
  out +=
      "Call a tool with <tool_call>{\"name\": NAME, \"arguments\": ARGUMENTS}</tool_call>."
      "\n\n";
  return out;
}

// `call` as the tool families write it: {"name": "f", "<key>": arguments}, the arguments
// as Python's json.dumps writes them.
absl::StatusOr<std::string> CallJson(const ChatToolCall& call, std::string_view key = "arguments") {
  auto arguments = PythonJsonOf(call.arguments, -1, "a tool call's arguments");
  if (!arguments.ok()) return Invalid(std::string(arguments.status().message()));
  return absl::StrCat("{\"name\": \"", call.name, "\", \"", std::string(key), "\": ", *arguments,
                      "}");
}

// Llama 3.1's system turn: always the knowledge cut-off and the template's default date
// (Hugging Face passes no date_string), "Environment: ipython" first when tools are shown.
constexpr char kLlama31Dates[] =
    "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n";
// Llama 3.1's tool block, at the start of the first user message.
constexpr char kLlama31ToolsHead[] =
    "Given the following functions, please respond with a JSON for a function call with its "
    "proper arguments that best answers the given prompt.\n\nRespond in the format "
    "{\"name\": function name, \"parameters\": dictionary of argument name and its value}."
    "Do not use variables.\n\n";

}  // namespace

std::string_view ChatFormatName(ChatFormat format) { return kNames[static_cast<int>(format)]; }

absl::StatusOr<ChatFormat> ParseChatFormat(std::string_view name) {
  std::vector<std::string> names;
  for (size_t i = 0; i < std::size(kNames); ++i) {
    if (name == kNames[i]) return static_cast<ChatFormat>(i);
    names.emplace_back(kNames[i]);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown chat template \"", std::string(name),
                                                 "\"; expected one of ",
                                                 absl::StrJoin(names, ", ")));
}

absl::StatusOr<ChatFormat> DetectChatFormat(std::string_view jinja) {
  auto has = [&](std::string_view marker) { return jinja.find(marker) != std::string::npos; };
  if (has("<|start_header_id|>") && has("<|eot_id|>")) {
    return has("Cutting Knowledge Date") ? ChatFormat::kLlama31 : ChatFormat::kLlama3;
  }
  if (has("<|im_start|>") && has("<|im_end|>")) return ChatFormat::kChatMl;
  if (has("<start_of_turn>") && has("<end_of_turn>")) return ChatFormat::kGemma;
  if (has("[SYSTEM_PROMPT]")) {
    // Mistral Small 3 and later (tokenizer v7+): a system turn of its own, not mistral_v3's
    // system message on the last user message; rendering it as either Mistral family
    // would feed the model a prompt it was not trained on.
    return absl::NotFoundError(
        "the chat template has [SYSTEM_PROMPT] turns (Mistral Small 3 and later), which "
        "none of kvfold's families renders");
  }
  if (has("[INST]") && has("[AVAILABLE_TOOLS]")) return ChatFormat::kMistralV3;
  if (has("[INST]") && has("<<SYS>>")) return ChatFormat::kLlama2;
  if (has("[INST]")) return ChatFormat::kMistral;
  return absl::NotFoundError(
      "the chat template matches none of the families kvfold renders (llama3: "
      "<|start_header_id|>, chatml: <|im_start|>, gemma: <start_of_turn>, llama2/mistral: "
      "[INST])");
}

ChatRenderOptions ChatTemplate::OptionsAfter(bool session_empty, int32_t last_token) const {
  ChatRenderOptions render;
  render.continuation = !session_empty;
  render.previous_turn_closed = std::find(end_of_turn_ids_.begin(), end_of_turn_ids_.end(),
                                          last_token) != end_of_turn_ids_.end();
  return render;
}

absl::StatusOr<ChatTemplate> ChatTemplate::Create(ChatFormat format, const Tokenizer* tokenizer,
                                                  ChatSpecialTokens special) {
  if (tokenizer == nullptr) return absl::InvalidArgumentError("chat template needs a tokenizer");
  ChatTemplate t;
  t.format_ = format;
  t.tokenizer_ = tokenizer;
  std::vector<std::string> markers;
  switch (format) {
    case ChatFormat::kLlama3:
    case ChatFormat::kLlama31:
      if (special.bos.empty()) special.bos = "<|begin_of_text|>";
      markers = {special.bos, "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
      break;
    case ChatFormat::kChatMl:
      markers = {"<|im_start|>", "<|im_end|>"};
      break;
    case ChatFormat::kLlama2:
    case ChatFormat::kMistral:
      if (special.bos.empty()) special.bos = "<s>";
      if (special.eos.empty()) special.eos = "</s>";
      markers = {special.bos, special.eos};
      break;
    case ChatFormat::kGemma:
      if (special.bos.empty()) special.bos = "<bos>";
      markers = {special.bos, "<start_of_turn>", "<end_of_turn>"};
      break;
    case ChatFormat::kMistralV3:
      // Control tokens of Mistral's v3 tokenizer.
      if (special.bos.empty()) special.bos = "<s>";
      if (special.eos.empty()) special.eos = "</s>";
      markers = {special.bos,    special.eos,         "[INST]",
                 "[/INST]",      "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                 "[TOOL_CALLS]", "[TOOL_RESULTS]",    "[/TOOL_RESULTS]"};
      break;
    case ChatFormat::kPlain:
      break;
  }
  t.special_ = std::move(special);
  for (const std::string& text : markers) {
    int32_t id = -1;
    for (int32_t i = 0; i < tokenizer->vocab_size() && id < 0; ++i) {
      if (tokenizer->IsSpecial(i) && tokenizer->TokenBytes(i) == text) id = i;
    }
    // SentencePiece control pieces <s> / </s> carry no text: the tokenizer's own ids.
    if (id < 0 && text == t.special_.bos) id = tokenizer->bos_id();
    if (id < 0 && text == t.special_.eos) id = tokenizer->eos_id();
    if (id < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("chat template ", std::string(ChatFormatName(format)), " writes ", text,
                       ", which is not a special token of this model's tokenizer"));
    }
    t.markers_.emplace_back(text, id);
    const bool ends_turn = text == "<|eot_id|>" || text == "<|im_end|>" ||
                           text == "<end_of_turn>" || text == t.special_.eos;
    if (ends_turn) t.end_of_turn_ids_.push_back(id);
  }
  std::sort(t.markers_.begin(), t.markers_.end(),
            [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  if (tokenizer->eos_id() >= 0 && std::find(t.end_of_turn_ids_.begin(), t.end_of_turn_ids_.end(),
                                            tokenizer->eos_id()) == t.end_of_turn_ids_.end()) {
    t.end_of_turn_ids_.push_back(tokenizer->eos_id());
  }
  if (format == ChatFormat::kPlain) t.stop_strings_ = {"\nUser:"};
  return t;
}

std::string ChatTemplate::AssistantClose() const {
  switch (format_) {
    case ChatFormat::kLlama3:
    case ChatFormat::kLlama31:
      return "<|eot_id|>";
    case ChatFormat::kChatMl:
      return "<|im_end|>\n";
    case ChatFormat::kLlama2:
      return absl::StrCat(" ", special_.eos);
    case ChatFormat::kMistral:
      return absl::StrCat(special_.eos, special_.space_after_eos ? " " : "");
    case ChatFormat::kMistralV3:
      return special_.eos;
    case ChatFormat::kGemma:
      return "<end_of_turn>\n";
    case ChatFormat::kPlain:
      return "\n";
  }
  return "";
}

absl::StatusOr<std::string> ChatTemplate::Render(std::span<const ChatMessage> messages,
                                                 const ChatRenderOptions& options) const {
  const bool alternate = format_ == ChatFormat::kLlama2 || format_ == ChatFormat::kMistral ||
                         format_ == ChatFormat::kGemma;
  if (absl::Status s =
          CheckRoles(messages, alternate && !options.continuation, options.continuation);
      !s.ok()) {
    return s;
  }
  if (UsesTools(messages, options) && !renders_tools()) {
    return Invalid(absl::StrCat("this model's chat template (", std::string(name()),
                                ") has no tool format; tools, tool messages and tool calls "
                                "need the chatml or plain family"));
  }
  if (options.continue_final_message) {
    if (messages.back().role != "assistant" || !messages.back().tool_calls.empty()) {
      return Invalid(
          "continue_final_message needs the last message to be the assistant's, without tool "
          "calls");
    }
    if (options.add_generation_prompt) {
      return Invalid("continue_final_message and add_generation_prompt exclude each other");
    }
  }
  if (options.continuation && alternate) {
    // The session ends after an assistant turn: the new messages start with a user one.
    if (absl::Status s = CheckRoles(messages, true, true); !s.ok()) return s;
  }
  if (format_ == ChatFormat::kMistralV3) {
    std::string out;
    if (options.continuation && !options.previous_turn_closed) out = AssistantClose();
    if (!options.continuation) out = special_.bos;
    return RenderMistralV3(messages, options, std::move(out));
  }

  // The tools as this family shows them.
  std::vector<std::string> tool_texts;
  if (!options.continuation) {
    for (const std::string& tool : options.tools) {
      auto text = PythonJsonOf(tool, format_ == ChatFormat::kLlama31 ? 4 : -1, "a tool");
      if (!text.ok()) return Invalid(std::string(text.status().message()));
      tool_texts.push_back(std::move(*text));
    }
  }
  std::string out;
  if (options.continuation) {
    // Close the assistant turn the session ends with: the model produced its end-of-turn
    // token (only the text after it is missing) or stopped before it.
    const std::string close = AssistantClose();
    if (!options.previous_turn_closed) {
      out += close;
    } else if (format_ == ChatFormat::kChatMl || format_ == ChatFormat::kGemma) {
      out += "\n";
    } else if (format_ == ChatFormat::kMistral && special_.space_after_eos) {
      out += " ";
    }
  }
  // A system message rides on the first user message in the families without a system
  // turn; `system_prefix` holds it until then.
  std::string system_prefix;
  size_t begin = 0;
  if (messages[0].role == "system") {
    switch (format_) {
      case ChatFormat::kLlama2:
        system_prefix = absl::StrCat("<<SYS>>\n", messages[0].content, "\n<</SYS>>\n\n");
        begin = 1;
        break;
      case ChatFormat::kMistral:
        system_prefix = absl::StrCat(messages[0].content, "\n\n");
        begin = 1;
        break;
      case ChatFormat::kGemma:
        system_prefix = absl::StrCat(messages[0].content, "\n\n");
        begin = 1;
        break;
      default:
        break;
    }
  }
  const bool first_is_system = messages[0].role == "system";
  const bool tools = !options.tools.empty() && !options.continuation;
  if (!options.continuation) {
    if (format_ == ChatFormat::kMistral || format_ == ChatFormat::kGemma) out += special_.bos;
    if (format_ == ChatFormat::kChatMl && tools) {
      // The system turn carries the tools (after the system text or the default one).
      const std::string& system = first_is_system ? messages[0].content : special_.default_system;
      absl::StrAppend(&out, "<|im_start|>system\n", system,
                      first_is_system || !system.empty() ? "\n\n" : "", kChatMlToolsHead);
      for (const std::string& tool : tool_texts) absl::StrAppend(&out, "\n", tool);
      out += kChatMlToolsTail;
      if (first_is_system) begin = 1;
    } else if (format_ == ChatFormat::kChatMl && !first_is_system &&
               !special_.default_system.empty()) {
      absl::StrAppend(&out, "<|im_start|>system\n", special_.default_system, "<|im_end|>\n");
    }
    if (format_ == ChatFormat::kPlain && tools && !first_is_system) out += PlainTools(tool_texts);
    if (format_ == ChatFormat::kLlama31) {
      absl::StrAppend(&out, special_.bos, "<|start_header_id|>system<|end_header_id|>\n\n",
                      tools ? "Environment: ipython\n" : "", kLlama31Dates,
                      first_is_system ? Strip(messages[0].content) : "", "<|eot_id|>");
      if (first_is_system) begin = 1;
      if (tools) {
        // The first message after the system one carries the tools, as a user message.
        if (begin == messages.size()) {
          return Invalid(
              "Llama 3.1's template shows tools in the first user message; there is none");
        }
        absl::StrAppend(&out, "<|start_header_id|>user<|end_header_id|>\n\n", kLlama31ToolsHead);
        for (const std::string& tool : tool_texts) absl::StrAppend(&out, tool, "\n\n");
        absl::StrAppend(&out, Strip(messages[begin].content), "<|eot_id|>");
        ++begin;
      }
    }
  }
  for (size_t i = begin; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const bool is_last = i + 1 == messages.size();
    const bool open = is_last && options.continue_final_message;  // assistant prefix
    std::string content = m.content;
    // Gemma writes the system text untrimmed before the trimmed first user message.
    if (i == begin && format_ != ChatFormat::kGemma) content = system_prefix + content;
    switch (format_) {
      case ChatFormat::kLlama31:
        if (m.role == "tool") {
          // The result as its `tojson` writes a string: quoted.
          absl::StrAppend(&out, "<|start_header_id|>ipython<|end_header_id|>\n\n",
                          PythonJsonText(nlohmann::ordered_json(m.content)), "<|eot_id|>");
        } else if (!m.tool_calls.empty()) {
          if (m.tool_calls.size() != 1) {
            return Invalid(absl::StrCat("message ", i, " has ", m.tool_calls.size(),
                                        " tool calls; Llama 3.1's template takes one per "
                                        "assistant message"));
          }
          auto call = CallJson(m.tool_calls[0], "parameters");
          if (!call.ok()) return call.status();
          absl::StrAppend(&out, "<|start_header_id|>assistant<|end_header_id|>\n\n", *call,
                          "<|eot_id|>");
        } else {
          absl::StrAppend(&out, "<|start_header_id|>", m.role, "<|end_header_id|>\n\n",
                          Strip(content));
          if (!open) out += "<|eot_id|>";
        }
        break;
      case ChatFormat::kLlama3: {
        if (i == 0 && !options.continuation) out += special_.bos;
        absl::StrAppend(&out, "<|start_header_id|>", m.role, "<|end_header_id|>\n\n",
                        Strip(content));
        if (!open) out += "<|eot_id|>";
        break;
      }
      case ChatFormat::kChatMl:
        if (m.role == "tool") {
          // A run of tool results is one user turn.
          if (i == 0 || messages[i - 1].role != "tool") out += "<|im_start|>user";
          absl::StrAppend(&out, "\n<tool_response>\n", content, "\n</tool_response>");
          if (is_last || messages[i + 1].role != "tool") out += "<|im_end|>\n";
        } else if (!m.tool_calls.empty()) {
          out += "<|im_start|>assistant";
          if (!content.empty()) absl::StrAppend(&out, "\n", content);
          for (const ChatToolCall& call : m.tool_calls) {
            auto text = CallJson(call);
            if (!text.ok()) return text.status();
            absl::StrAppend(&out, "\n<tool_call>\n", *text, "\n</tool_call>");
          }
          out += "<|im_end|>\n";
        } else {
          absl::StrAppend(&out, "<|im_start|>", m.role, "\n", open ? RStrip(content) : content);
          if (!open) out += "<|im_end|>\n";
        }
        break;
      case ChatFormat::kLlama2:
        if (m.role == "user") {
          absl::StrAppend(&out, special_.bos, "[INST] ", Strip(content), " [/INST]");
        } else {
          absl::StrAppend(&out, " ", Strip(content));
          if (!open) absl::StrAppend(&out, " ", special_.eos);
        }
        break;
      case ChatFormat::kMistral:
        if (m.role == "user") {
          absl::StrAppend(&out, "[INST] ", content, " [/INST]");
        } else if (open) {
          out += RStrip(content);
        } else {
          absl::StrAppend(&out, content, AssistantClose());
        }
        break;
      case ChatFormat::kGemma:
        absl::StrAppend(&out, "<start_of_turn>", m.role == "assistant" ? "model" : m.role, "\n",
                        i == begin ? system_prefix : "", Strip(content));
        if (!open) out += "<end_of_turn>\n";
        break;
      case ChatFormat::kMistralV3:  // RenderMistralV3
        break;
      case ChatFormat::kPlain:
        if (m.role == "system") {
          absl::StrAppend(&out, content, "\n\n");
          if (tools) out += PlainTools(tool_texts);
        } else if (m.role == "tool") {
          absl::StrAppend(&out, "Tool: ", content, "\n");
        } else if (!m.tool_calls.empty()) {
          absl::StrAppend(&out, "Assistant: ", content);
          for (const ChatToolCall& call : m.tool_calls) {
            auto text = CallJson(call);
            if (!text.ok()) return text.status();
            absl::StrAppend(&out, "<tool_call>", *text, "</tool_call>");
          }
          out += "\n";
        } else {
          absl::StrAppend(
              &out, m.role == "user" ? "User: " : "Assistant: ", open ? RStrip(content) : content);
          if (!open) out += "\n";
        }
        break;
    }
  }
  if (options.add_generation_prompt) {
    switch (format_) {
      case ChatFormat::kLlama3:
      case ChatFormat::kLlama31:
        out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
        break;
      case ChatFormat::kChatMl:
        out += "<|im_start|>assistant\n";
        break;
      case ChatFormat::kGemma:
        out += "<start_of_turn>model\n";
        break;
      case ChatFormat::kPlain:
        out += "Assistant:";
        break;
      case ChatFormat::kLlama2:
      case ChatFormat::kMistral:
      case ChatFormat::kMistralV3:
        break;  // "[/INST]" already asks for the answer
    }
  }
  return out;
}

namespace {

// A call's or a result's id as Mistral v0.3's template takes it: 9 characters. A longer id
// (another server's "call_...") gives its last 9, as vLLM passes them to Mistral models.
absl::StatusOr<std::string> MistralId(const std::string& id, size_t message) {
  if (id.size() > 9) return id.substr(id.size() - 9);
  if (id.size() < 9) {
    return Invalid(absl::StrCat("message ", message,
                                ": Mistral v0.3's template needs tool call ids of 9 "
                                "characters; got \"",
                                id, "\""));
  }
  return id;
}

// Mistral v0.3's [AVAILABLE_TOOLS] block: each tool's function fields but "return",
// strings written raw between quotes (the template does not escape them), other values
// as its `tojson` writes them.
absl::StatusOr<std::string> MistralTools(std::span<const std::string> tools) {
  std::string out = "[AVAILABLE_TOOLS] [";
  for (size_t t = 0; t < tools.size(); ++t) {
    if (absl::Status s = CheckJsonDepth(tools[t], "a tool"); !s.ok())
      return Invalid(std::string(s.message()));
    const nlohmann::ordered_json tool =
        nlohmann::ordered_json::parse(tools[t], nullptr, /*allow_exceptions=*/false);
    if (!tool.is_object() || !tool.contains("function") || !tool["function"].is_object()) {
      return Invalid("a tool must be {\"type\": \"function\", \"function\": {...}}");
    }
    out += "{\"type\": \"function\", \"function\": {";
    bool first = true;
    for (const auto& [key, value] : tool["function"].items()) {
      if (key == "return") continue;
      if (!first) out += ", ";
      first = false;
      if (value.is_string()) {
        absl::StrAppend(&out, "\"", key, "\": \"", value.get<std::string>(), "\"");
      } else {
        absl::StrAppend(&out, "\"", key, "\": ", PythonJsonText(value));
      }
    }
    out += t + 1 < tools.size() ? "}}, " : "}}]";
  }
  out += "[/AVAILABLE_TOOLS]";
  return out;
}

}  // namespace

// Mistral v0.3's template, line by line: an optional system message rides on the last
// user message when that is the conversation's last message (otherwise it is not shown);
// the tools come before the last user message (each user message equal to it, as the
// template compares them); an assistant message with calls is the calls alone.
absl::StatusOr<std::string> ChatTemplate::RenderMistralV3(std::span<const ChatMessage> messages,
                                                          const ChatRenderOptions& options,
                                                          std::string out) const {
  const size_t begin = messages[0].role == "system" ? 1 : 0;
  // User and assistant messages alternate from a user one, tool results and calls aside.
  size_t plain = 0;
  for (size_t i = begin; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "tool" || !m.tool_calls.empty()) continue;
    if ((m.role == "user") != (plain % 2 == 0)) {
      return Invalid(
          absl::StrCat("this model's template needs user and assistant messages to "
                       "alternate (tool calls and results aside), starting with "
                       "user; message ",
                       i, " is ", m.role));
    }
    ++plain;
  }
  const ChatMessage* last_user = nullptr;
  for (size_t i = begin; i < messages.size(); ++i) {
    if (messages[i].role == "user") last_user = &messages[i];
  }
  std::string tools;
  if (!options.tools.empty() && !options.continuation) {
    auto block = MistralTools(options.tools);
    if (!block.ok()) return block.status();
    tools = std::move(*block);
  }
  for (size_t i = begin; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const bool is_last = i + 1 == messages.size();
    if (m.role == "user") {
      if (!tools.empty() && m.content == last_user->content) out += tools;
      out += "[INST] ";
      if (is_last && begin == 1) absl::StrAppend(&out, messages[0].content, "\n\n");
      absl::StrAppend(&out, m.content, "[/INST]");
    } else if (!m.tool_calls.empty()) {
      out += "[TOOL_CALLS] [";
      for (size_t c = 0; c < m.tool_calls.size(); ++c) {
        auto call = CallJson(m.tool_calls[c]);
        if (!call.ok()) return call.status();
        auto id = MistralId(m.tool_calls[c].id, i);
        if (!id.ok()) return id.status();
        call->pop_back();  // the template's out[:-1]
        absl::StrAppend(&out, *call, ", \"id\": \"", *id, "\"}",
                        c + 1 < m.tool_calls.size() ? ", " : "]");
      }
      out += special_.eos;
    } else if (m.role == "assistant") {
      absl::StrAppend(&out, " ", Strip(m.content));
      if (!(is_last && options.continue_final_message)) out += special_.eos;
    } else {  // tool
      auto id = MistralId(m.tool_call_id, i);
      if (!id.ok()) return id.status();
      absl::StrAppend(&out, "[TOOL_RESULTS] {\"content\": ", m.content, ", \"call_id\": \"", *id,
                      "\"}[/TOOL_RESULTS]");
    }
  }
  return out;
}

absl::StatusOr<std::vector<int32_t>> ChatTemplate::Encode(std::string_view rendered,
                                                          bool continuation) const {
  std::vector<int32_t> ids;
  if (format_ == ChatFormat::kPlain && !continuation && tokenizer_->bos_id() >= 0) {
    ids.push_back(tokenizer_->bos_id());
  }
  auto encode_text = [&](std::string_view text) -> absl::Status {
    if (text.empty()) return absl::OkStatus();
    auto piece = tokenizer_->Encode(text, /*add_bos=*/false);
    if (!piece.ok()) return piece.status();
    ids.insert(ids.end(), piece->begin(), piece->end());
    return absl::OkStatus();
  };
  size_t text_start = 0;
  size_t pos = 0;
  while (pos < rendered.size()) {
    const std::pair<std::string, int32_t>* hit = nullptr;
    if (rendered[pos] == '<') {  // every marker starts with '<'
      for (const auto& marker : markers_) {
        if (rendered.substr(pos).starts_with(marker.first)) {
          hit = &marker;
          break;
        }
      }
    }
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    if (absl::Status s = encode_text(rendered.substr(text_start, pos - text_start)); !s.ok()) {
      return s;
    }
    ids.push_back(hit->second);
    pos += hit->first.size();
    text_start = pos;
  }
  if (absl::Status s = encode_text(rendered.substr(text_start)); !s.ok()) return s;
  return ids;
}

absl::StatusOr<std::vector<int32_t>> ChatTemplate::RenderIds(
    std::span<const ChatMessage> messages, const ChatRenderOptions& options) const {
  auto text = Render(messages, options);
  if (!text.ok()) return text.status();
  return Encode(*text, options.continuation);
}

}  // namespace kvfold
