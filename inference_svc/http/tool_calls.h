// Function calling over the chat API: a request's `tools` and `tool_choice` checked and
// turned into what the chat template shows and what the answer must be, and the model's
// text read back as OpenAI's `tool_calls`. No I/O. docs/tools.md has the rules.
#ifndef KVFOLD_INFERENCE_SVC_HTTP_TOOL_CALLS_H_
#define KVFOLD_INFERENCE_SVC_HTTP_TOOL_CALLS_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "inference_svc/structured/json_grammar.h"
#include "inference_svc/tokenizer/chat_template.h"
#include "inference_svc/tokenizer/python_json.h"
#include "nlohmann/json.hpp"

namespace kvfold::http {

// Most tools one request may offer (OpenAI's limit).
inline constexpr size_t kMaxTools = 128;

// One function the model may call.
struct ToolFunction {
  std::string name;  // [A-Za-z0-9_-]{1,64}, unique in the request
  // The tool object as the chat template shows it: Python's json.dumps of the request's
  // {"type": "function", "function": {...}}, keys in the body's order.
  std::string rendered;
  // Its `parameters` JSON Schema as compact JSON (keys in the body's order);
  // {"type": "object"} when the tool gives none.
  std::string parameters;
  // `strict: false` given: where the answer is held to the parameters, what the
  // structured-output subset cannot hold is read past and named (a lenient schema).
  bool lenient = false;
};

// OpenAI's tool_choice: none (no call), auto (the model decides), required (at least one
// call), or one named function.
enum class ToolChoice { kNone, kAuto, kRequired, kFunction };

// How the model writes calls in auto mode: <tool_call> blocks (chatml, plain), JSON
// objects {"name", "parameters"} as the whole answer (llama31; ";" between several, an
// optional <|python_tag|> first), or a JSON array of {"name", "arguments"} as the whole
// answer after the [TOOL_CALLS] control token, which decoding drops (mistral_v3; its
// call ids have 9 characters).
enum class ToolCallStyle { kTagged, kJson, kMistral };

struct ToolSet {
  std::vector<ToolFunction> functions;
  ToolCallStyle style = ToolCallStyle::kTagged;
  ToolChoice choice = ToolChoice::kNone;
  std::string forced;    // kFunction: the function's name
  bool parallel = true;  // parallel_tool_calls: more than one call per answer
  // The request used OpenAI's deprecated `functions` / `function_call`: one call at most,
  // answered as `function_call` (finish_reason "function_call").
  bool legacy = false;
  bool active() const { return choice != ToolChoice::kNone; }
  // The tool texts a chat turn shows (ChatRenderOptions::tools): none with tool_choice none.
  std::vector<std::string> Shown() const {
    std::vector<std::string> texts;
    if (active()) {
      for (const ToolFunction& f : functions) texts.push_back(f.rendered);
    }
    return texts;
  }
};

// A call as the answer reports it.
struct ToolCallOut {
  std::string id;  // NewToolCallId
  std::string name;
  std::string arguments;  // compact JSON text of the arguments
};

// `tools`, `tool_choice` and `parallel_tool_calls` of a chat request (`body`, keys in
// order). No tools: choice kNone. InvalidArgument naming the field for a tool that is not
// {"type": "function", "function": {"name", "description"?, "parameters"?}}, a bad or
// repeated name, more than kMaxTools, a tool_choice that is not "none", "auto",
// "required" or {"type": "function", "function": {"name": one of the tools}}, or a
// tool_choice without tools. The deprecated `functions` (function objects) and
// `function_call` ("none", "auto", {"name"}) are read the same way into a `legacy` set
// (errors name `functions` / `function_call`); beside `tools`, `tool_choice` or
// `parallel_tool_calls` they are refused.
absl::StatusOr<ToolSet> ParseTools(const nlohmann::ordered_json& body);

// The JSON Schema the answer is held to for tool_choice required or a named function
// (empty for none and auto): an array of at least one {"name", "arguments"} object whose
// arguments match the named tool's parameters (one item without parallel_tool_calls), or
// the named function's arguments object itself. A tool's references into its own
// parameters ("#/$defs/...", "#") are rewritten to where the parameters sit in it.
std::string ToolAnswerSchema(const ToolSet& tools);

// The answer's schema (ToolAnswerSchema) and its grammar, compiled with each lenient
// tool's parameters read leniently (what is read past is named "... in
// tools[i].function.parameters").
struct HeldAnswer {
  std::string schema;
  std::shared_ptr<const structured::Grammar> grammar;
};

// The answer held for tool_choice required or a named function; an empty schema and no
// grammar otherwise. Each tool it names must have parameters of the structured-output
// subset (docs/structured-output.md; a lenient tool's only need to be a schema), and so
// must the answer's schema; InvalidArgument with param "tools" or "tool_choice" otherwise.
absl::StatusOr<HeldAnswer> HeldAnswerSchema(const ToolSet& tools);

// The model's text read as an answer of `tools`: the content before the first call and
// the calls. auto: <tool_call>{"name": ..., "arguments": {...}}</tool_call> blocks (the
// JSON may be surrounded by whitespace), or in the JSON style the whole text as calls
// ("parameters" or "arguments"); required: the schema's array; a named function: its
// arguments object. A text that does not read as calls of known tools whole (a
// truncated answer, a name not offered, malformed JSON) has no calls: all of it is
// content, as the model wrote it.
struct ToolAnswer {
  std::string content;
  std::vector<ToolCallOut> calls;  // each with a new id (NewToolCallId of tools.style)
};
ToolAnswer ReadToolAnswer(std::string_view text, const ToolSet& tools);

// How a model of this chat family writes calls in auto mode: Llama 3.1's and Mistral
// v0.3's as the whole answer (kJson, kMistral), the others in <tool_call> tags.
ToolCallStyle ToolCallStyleOf(ChatFormat format);

// A new call id: "call_" and 24 random hex digits; for kMistral 9 random hex digits (the
// length Mistral's template requires).
std::string NewToolCallId(ToolCallStyle style);

// Where a call may begin in auto mode's text: the opening tag.
inline constexpr std::string_view kToolCallOpen = "<tool_call>";

}  // namespace kvfold::http

#endif  // KVFOLD_INFERENCE_SVC_HTTP_TOOL_CALLS_H_
