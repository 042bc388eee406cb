// Tools of a chat request and calls read from the model's text (tool_calls.h).
#include "inference_svc/http/tool_calls.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/json_depth.h"
#include "common/rng.h"
#include "core/status_macros.h"
#include "inference_svc/http/openai_protocol.h"
#include "inference_svc/structured/json_grammar.h"

namespace kvfold::http {
namespace {

using ojson = nlohmann::ordered_json;

absl::Status Bad(std::string_view param, std::string message) {
  return WithParam(absl::InvalidArgumentError(std::move(message)), param);
}

bool ValidName(const std::string& name) {
  return !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

const ToolFunction* Find(const ToolSet& tools, std::string_view name) {
  for (const ToolFunction& f : tools.functions) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

// Function object `f` of a tool (`where` names it: "tools[0].function", or "functions[0]"
// in the deprecated form, whose errors go to `param`); `tool` is what the template shows.
absl::StatusOr<ToolFunction> ParseFunction(const ojson& f, const ojson& tool,
                                           const std::string& where, std::string_view param) {
  if (!f.contains("name") || !f["name"].is_string() || !ValidName(f["name"].get<std::string>())) {
    return Bad(param, absl::StrCat(where, ".name must be 1 to 64 letters, digits, '_' or '-'"));
  }
  if (f.contains("description") && !f["description"].is_string() && !f["description"].is_null()) {
    return Bad(param, absl::StrCat(where, ".description must be a string"));
  }
  if (f.contains("parameters") && !f["parameters"].is_object() && !f["parameters"].is_null()) {
    return Bad(param, absl::StrCat(where, ".parameters must be a JSON Schema object"));
  }
  if (f.contains("strict") && !f["strict"].is_boolean() && !f["strict"].is_null()) {
    return Bad(param, absl::StrCat(where, ".strict must be a boolean"));
  }
  ToolFunction out;
  out.name = f["name"].get<std::string>();
  out.rendered = PythonJsonText(tool);
  out.parameters = f.contains("parameters") && f["parameters"].is_object()
                       ? f["parameters"].dump()
                       : std::string(R"({"type":"object"})");
  out.lenient = f.contains("strict") && f["strict"].is_boolean() && !f["strict"].get<bool>();
  return out;
}

absl::StatusOr<ToolFunction> ParseTool(const ojson& tool, size_t index) {
  const std::string where = absl::StrCat("tools[", index, "]");
  if (!tool.is_object() || !tool.contains("type") || tool["type"] != "function" ||
      !tool.contains("function") || !tool["function"].is_object()) {
    return Bad("tools", absl::StrCat(where,
                                     " must be {\"type\": \"function\", \"function\": "
                                     "{\"name\", \"description\", \"parameters\"}}"));
  }
  return ParseFunction(tool["function"], tool, absl::StrCat(where, ".function"), "tools");
}

// An item of the deprecated `functions`: a function object, shown as the tool it stands
// for.
absl::StatusOr<ToolFunction> ParseLegacyFunction(const ojson& function, size_t index) {
  const std::string where = absl::StrCat("functions[", index, "]");
  if (!function.is_object()) {
    return Bad("functions",
               absl::StrCat(where, " must be {\"name\", \"description\", \"parameters\"}"));
  }
  const ojson tool = {{"type", "function"}, {"function", function}};
  return ParseFunction(function, tool, where, "functions");
}

bool Given(const ojson& body, const char* key) {
  return body.contains(key) && !body[key].is_null();
}

// The list `key` of body ("tools", or the deprecated "functions"), at most kMaxTools, each
// item read by `parse` and its name unique, into set->functions.
absl::Status ParseFunctionList(const ojson& body, const char* key,
                               absl::StatusOr<ToolFunction> (*parse)(const ojson&, size_t),
                               ToolSet* set) {
  if (!Given(body, key)) return absl::OkStatus();
  const ojson& list = body[key];
  if (!list.is_array()) return Bad(key, absl::StrCat("'", key, "' must be an array of ", key));
  if (list.size() > kMaxTools) {
    return Bad(key,
               absl::StrCat("'", key, "' has ", list.size(), " ", key, "; at most ", kMaxTools));
  }
  for (size_t i = 0; i < list.size(); ++i) {
    auto f = parse(list[i], i);
    if (!f.ok()) return f.status();
    if (Find(*set, f->name) != nullptr) {
      return Bad(key, absl::StrCat(key, "[", i, "]: function '", f->name, "' is offered twice"));
    }
    set->functions.push_back(std::move(*f));
  }
  return absl::OkStatus();
}

// A choice (`choice_key`) other than none needs functions (`tools_key`), and a named one
// one of them.
absl::Status CheckChoice(const ToolSet& set, const char* choice_key, const char* tools_key) {
  if (set.functions.empty()) {
    return Bad(choice_key,
               absl::StrCat("'", choice_key, "' other than \"none\" needs '", tools_key, "'"));
  }
  if (set.choice == ToolChoice::kFunction && Find(set, set.forced) == nullptr) {
    return Bad(choice_key, absl::StrCat("'", choice_key, "' names function '", set.forced,
                                        "', which is not among '", tools_key, "'"));
  }
  return absl::OkStatus();
}

// OpenAI's deprecated form of tools: `functions` (the function objects) and
// `function_call` ("none", "auto" or {"name"}); one call at most.
absl::StatusOr<ToolSet> ParseLegacyFunctions(const ojson& body) {
  for (const char* key : {"tools", "tool_choice", "parallel_tool_calls"}) {
    if (Given(body, key)) {
      return Bad("functions", absl::StrCat("'functions' / 'function_call' (the deprecated form of "
                                           "tools) cannot be combined with '",
                                           key, "'"));
    }
  }
  ToolSet set;
  set.legacy = true;
  set.parallel = false;
  KVFOLD_RETURN_IF_ERROR(ParseFunctionList(body, "functions", ParseLegacyFunction, &set));
  if (!set.functions.empty()) set.choice = ToolChoice::kAuto;
  if (!Given(body, "function_call")) return set;
  const ojson& choice = body["function_call"];
  if (choice == "none") {
    set.choice = ToolChoice::kNone;
    return set;
  }
  if (choice == "auto") {
    set.choice = ToolChoice::kAuto;
  } else if (choice.is_object() && choice.contains("name") && choice["name"].is_string()) {
    set.choice = ToolChoice::kFunction;
    set.forced = choice["name"].get<std::string>();
  } else {
    return Bad("function_call", "'function_call' must be \"none\", \"auto\" or {\"name\": ...}");
  }
  KVFOLD_RETURN_IF_ERROR(CheckChoice(set, "function_call", "functions"));
  return set;
}

// What errors call tool i's parameters.
std::string ParametersName(const ToolSet& tools, size_t i) {
  return tools.legacy ? absl::StrCat("functions[", i, "].parameters")
                      : absl::StrCat("tools[", i, "].function.parameters");
}

// `j` (a parsed call) as a call of `tools`: {"name": a tool's name, "arguments": an
// object}; false otherwise.
bool ReadCall(const ojson& j, const ToolSet& tools, ToolCallOut* out) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  const std::string name = j["name"].get<std::string>();
  if (Find(tools, name) == nullptr) return false;
  const char* key = j.contains("arguments") ? "arguments" : "parameters";
  const ojson arguments = j.contains(key) ? j[key] : ojson::object();
  if (!arguments.is_object()) return false;
  out->name = name;
  out->arguments = arguments.dump();
  return true;
}

// The model's text parsed; too deep to walk (a call's arguments are dumped) reads as no
// JSON at all.
ojson ParseOrdered(std::string_view text) {
  if (!JsonDepthWithin(text)) return ojson(ojson::value_t::discarded);
  return ojson::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

std::string_view StripWhitespace(std::string_view s) {
  while (!s.empty() && absl::ascii_isspace(static_cast<unsigned char>(s.front()))) {
    s.remove_prefix(1);
  }
  while (!s.empty() && absl::ascii_isspace(static_cast<unsigned char>(s.back()))) {
    s.remove_suffix(1);
  }
  return s;
}

// auto: the <tool_call> blocks after the content; false unless all of the rest reads.
bool ReadTaggedCalls(std::string_view rest, const ToolSet& tools, std::vector<ToolCallOut>* calls) {
  constexpr std::string_view kClose = "</tool_call>";
  while (true) {
    rest = StripWhitespace(rest);
    if (rest.empty()) return !calls->empty();
    if (!rest.starts_with(kToolCallOpen)) return false;
    rest.remove_prefix(kToolCallOpen.size());
    const size_t close = rest.find(kClose);
    // The last block may end at the end of the text (models stop at the closing tag).
    const std::string_view body = rest.substr(0, close);
    ToolCallOut call;
    if (!ReadCall(ParseOrdered(StripWhitespace(body)), tools, &call)) return false;
    calls->push_back(std::move(call));
    if (close == std::string_view::npos) return true;
    rest.remove_prefix(close + kClose.size());
  }
}

// The whole text as a non-empty JSON array of calls (required's answer; Mistral's after
// the [TOOL_CALLS] text, should the tokenizer have shown it).
bool ReadCallList(std::string_view text, const ToolSet& tools, std::vector<ToolCallOut>* calls) {
  constexpr std::string_view kMistralCalls = "[TOOL_CALLS]";
  text = StripWhitespace(text);
  if (text.starts_with(kMistralCalls)) text.remove_prefix(kMistralCalls.size());
  const ojson list = ParseOrdered(text);
  if (!list.is_array() || list.empty()) return false;
  for (const ojson& call : list) {
    if (!ReadCall(call, tools, &calls->emplace_back())) return false;
  }
  return true;
}

// auto, JSON style: the whole text is one call, or several separated by ";".
bool ReadJsonCalls(std::string_view text, const ToolSet& tools, std::vector<ToolCallOut>* calls) {
  constexpr std::string_view kPythonTag = "<|python_tag|>";
  text = StripWhitespace(text);
  if (text.starts_with(kPythonTag)) text.remove_prefix(kPythonTag.size());
  ToolCallOut call;
  if (ReadCall(ParseOrdered(text), tools, &call)) {
    calls->push_back(std::move(call));
    return true;
  }
  while (!text.empty()) {
    const size_t end = text.find(';');
    if (!ReadCall(ParseOrdered(StripWhitespace(text.substr(0, end))), tools,
                  &calls->emplace_back())) {
      return false;
    }
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return !calls->empty();
}

// Where tool i's arguments schema sits in ToolAnswerSchema's document (a JSON pointer).
std::string ArgumentsPointer(const ToolSet& tools, size_t i) {
  if (tools.choice == ToolChoice::kFunction) return "";
  return tools.functions.size() == 1 ? "/items/properties/arguments"
                                     : absl::StrCat("/items/anyOf/", i, "/properties/arguments");
}

// Rewrites the references into its own document ("#", "#/...") of schema *s, which is
// placed at JSON pointer `base` of another document, to point where their targets now
// are. Only keywords that hold schemas are walked (an `enum` or `default` value with a
// "$ref" member is data). Other references are left for the compiler to refuse.
void RebaseReferences(const std::string& base, ojson* s) {
  if (!s->is_object()) return;
  for (auto& [key, value] : s->items()) {
    if (key == "$ref") {
      if (value.is_string() && value.get_ref<const std::string&>().starts_with('#')) {
        value = absl::StrCat("#", base, value.get_ref<const std::string&>().substr(1));
      }
    } else if (key == "properties" || key == "patternProperties" || key == "$defs" ||
               key == "definitions" || key == "dependentSchemas") {
      if (!value.is_object()) continue;
      for (auto& [name, schema] : value.items()) RebaseReferences(base, &schema);
    } else if (key == "items" || key == "prefixItems" || key == "anyOf" || key == "oneOf" ||
               key == "allOf") {
      if (value.is_array()) {
        for (ojson& schema : value) RebaseReferences(base, &schema);
      } else {
        RebaseReferences(base, &value);
      }
    } else if (key == "additionalProperties" || key == "additionalItems" || key == "not" ||
               key == "if" || key == "then" || key == "else" || key == "contains" ||
               key == "propertyNames" || key == "unevaluatedProperties" ||
               key == "unevaluatedItems") {
      RebaseReferences(base, &value);
    }
  }
}

}  // namespace

absl::StatusOr<HeldAnswer> HeldAnswerSchema(const ToolSet& tools) {
  if (tools.choice != ToolChoice::kRequired && tools.choice != ToolChoice::kFunction) {
    return HeldAnswer{};
  }
  std::vector<structured::LenientScope> lenient;
  for (size_t i = 0; i < tools.functions.size(); ++i) {
    const ToolFunction& f = tools.functions[i];
    if (tools.choice == ToolChoice::kFunction && f.name != tools.forced) continue;
    auto compiled = structured::Grammar::FromSchema(f.parameters, /*compact=*/true, f.lenient);
    if (!compiled.ok()) {
      return Bad(tools.legacy ? "functions" : "tools",
                 absl::StrCat(ParametersName(tools, i), ": ", compiled.status().message(),
                              "; with this tool_choice the arguments are held to it"));
    }
    if (f.lenient) {
      lenient.push_back({.pointer = ArgumentsPointer(tools, i), .label = ParametersName(tools, i)});
    }
  }
  HeldAnswer held;
  held.schema = ToolAnswerSchema(tools);
  auto compiled =
      structured::Grammar::FromSchema(held.schema, /*compact=*/true, std::move(lenient));
  if (!compiled.ok()) {
    return Bad(tools.legacy ? "function_call" : "tool_choice",
               absl::StrCat("the answer's schema of these tools: ", compiled.status().message()));
  }
  held.grammar = std::move(*compiled);
  return held;
}

ToolCallStyle ToolCallStyleOf(ChatFormat format) {
  switch (format) {
    case ChatFormat::kLlama31:
      return ToolCallStyle::kJson;
    case ChatFormat::kMistralV3:
      return ToolCallStyle::kMistral;
    default:
      return ToolCallStyle::kTagged;
  }
}

std::string NewToolCallId(ToolCallStyle style) {
  return style == ToolCallStyle::kMistral ? RandomHex(9) : "call_" + RandomHex(24);
}

absl::StatusOr<ToolSet> ParseTools(const ojson& body) {
  if (Given(body, "functions") || Given(body, "function_call")) return ParseLegacyFunctions(body);
  ToolSet set;
  KVFOLD_RETURN_IF_ERROR(ParseFunctionList(body, "tools", ParseTool, &set));
  if (!set.functions.empty()) set.choice = ToolChoice::kAuto;
  if (body.contains("parallel_tool_calls") && !body["parallel_tool_calls"].is_null()) {
    if (!body["parallel_tool_calls"].is_boolean()) {
      return Bad("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    }
    set.parallel = body["parallel_tool_calls"].get<bool>();
  }
  if (!body.contains("tool_choice") || body["tool_choice"].is_null()) return set;
  const ojson& choice = body["tool_choice"];
  if (choice == "none") {
    set.choice = ToolChoice::kNone;
    return set;
  }
  if (choice.is_string() && (choice == "auto" || choice == "required")) {
    set.choice = choice == "auto" ? ToolChoice::kAuto : ToolChoice::kRequired;
  } else if (choice.is_object() && choice.contains("type") && choice["type"] == "function" &&
             choice.contains("function") && choice["function"].is_object() &&
             choice["function"].contains("name") && choice["function"]["name"].is_string()) {
    set.choice = ToolChoice::kFunction;
    set.forced = choice["function"]["name"].get<std::string>();
  } else {
    return Bad("tool_choice",
               "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": "
               "\"function\", \"function\": {\"name\": ...}}");
  }
  KVFOLD_RETURN_IF_ERROR(CheckChoice(set, "tool_choice", "tools"));
  return set;
}

std::string ToolAnswerSchema(const ToolSet& tools) {
  if (tools.choice == ToolChoice::kFunction) return Find(tools, tools.forced)->parameters;
  if (tools.choice != ToolChoice::kRequired) return "";
  ojson alternatives = ojson::array();
  for (size_t i = 0; i < tools.functions.size(); ++i) {
    const ToolFunction& f = tools.functions[i];
    ojson arguments = ojson::parse(f.parameters);
    RebaseReferences(ArgumentsPointer(tools, i), &arguments);
    ojson call = {
        {"type", "object"},
        {"properties", {{"name", {{"const", f.name}}}, {"arguments", std::move(arguments)}}},
        {"required", {"name", "arguments"}},
        {"additionalProperties", false}};
    alternatives.push_back(std::move(call));
  }
  ojson schema = {{"type", "array"}, {"minItems", 1}};
  if (!tools.parallel) schema["maxItems"] = 1;
  schema["items"] =
      alternatives.size() == 1 ? alternatives[0] : ojson{{"anyOf", std::move(alternatives)}};
  return schema.dump();
}

namespace {

// The calls `text` makes whole (and in answer->content the text before them); false when
// it makes none.
bool ReadCalls(std::string_view text, const ToolSet& tools, ToolAnswer* answer) {
  switch (tools.choice) {
    case ToolChoice::kNone:
      return false;
    case ToolChoice::kAuto:
      switch (tools.style) {
        case ToolCallStyle::kJson:
          return ReadJsonCalls(text, tools, &answer->calls);
        case ToolCallStyle::kMistral:
          return ReadCallList(text, tools, &answer->calls);
        case ToolCallStyle::kTagged: {
          const size_t open = text.find(kToolCallOpen);
          if (open == std::string_view::npos ||
              !ReadTaggedCalls(text.substr(open), tools, &answer->calls)) {
            return false;
          }
          answer->content = std::string(text.substr(0, open));
          return true;
        }
      }
      return false;
    case ToolChoice::kRequired:
      return ReadCallList(text, tools, &answer->calls);
    case ToolChoice::kFunction: {
      const ojson arguments = ParseOrdered(text);
      if (!arguments.is_object()) return false;
      answer->calls.push_back({"", tools.forced, arguments.dump()});
      return true;
    }
  }
  return false;
}

}  // namespace

ToolAnswer ReadToolAnswer(std::string_view text, const ToolSet& tools) {
  ToolAnswer answer;
  // The deprecated form answers with one function_call.
  if (!ReadCalls(text, tools, &answer) || (tools.legacy && answer.calls.size() > 1)) {
    return ToolAnswer{std::string(text), {}};
  }
  for (ToolCallOut& call : answer.calls) call.id = NewToolCallId(tools.style);
  return answer;
}

}  // namespace kvfold::http
