// OpenAI request parsing and response building (openai_protocol.h).
#include "inference_svc/http/openai_protocol.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/json_depth.h"
#include "core/status_macros.h"
#include "inference_svc/structured/json_grammar.h"
#include "inference_svc/tokenizer/python_json.h"
#include "nlohmann/json.hpp"

namespace kvfold::http {
namespace {

using json = nlohmann::json;

// The request field an error is about, carried as a payload of the status so that
// ErrorJson can name it in OpenAI's "param" (the official clients expose it as
// error.param); empty for errors about the body as a whole.
constexpr char kParamPayload[] = "kvfold/openai-error-param";

// A string, or null when empty.
json Nullable(std::string_view s) { return s.empty() ? json(nullptr) : json(std::string(s)); }

absl::Status Bad(std::string_view param, const std::string& message) {
  return WithParam(absl::InvalidArgumentError(message), param);
}

absl::StatusOr<json> ParseObject(std::string_view body) {
  // What reads a body walks its JSON recursively (copies, dumps, the renderers): nesting
  // beyond any request's need is refused before it is parsed (common/json_depth.h).
  if (absl::Status s = CheckJsonDepth(body, "the request body"); !s.ok()) {
    return Bad("", std::string(s.message()));
  }
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad("", "the request body is not valid JSON");
  if (!j.is_object()) return Bad("", "the request body must be a JSON object");
  return j;
}

// `j[key]` when `j` is an object whose `key` is a string; "" otherwise (json::value would
// throw on a value of another type).
template <typename Json>
std::string StringField(const Json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) return "";
  return j[key].template get<std::string>();
}

// Optional typed fields: absent or null leaves *out alone.
absl::Status GetString(const json& j, const char* key, std::string* out) {
  if (!j.contains(key) || j[key].is_null()) return absl::OkStatus();
  if (!j[key].is_string()) return Bad(key, absl::StrCat("'", key, "' must be a string"));
  *out = j[key].get<std::string>();
  return absl::OkStatus();
}

// `name`: how errors spell the field (its path from the body's top, for a nested key);
// null = key.
absl::Status GetBool(const json& j, const char* key, bool* out, const char* name = nullptr) {
  if (!j.contains(key) || j[key].is_null()) return absl::OkStatus();
  if (name == nullptr) name = key;
  if (!j[key].is_boolean()) return Bad(name, absl::StrCat("'", name, "' must be a boolean"));
  *out = j[key].get<bool>();
  return absl::OkStatus();
}

absl::Status GetNumber(const json& j, const char* key, double lo, double hi,
                       std::optional<double>* out) {
  if (!j.contains(key) || j[key].is_null()) return absl::OkStatus();
  if (!j[key].is_number()) return Bad(key, absl::StrCat("'", key, "' must be a number"));
  const double v = j[key].get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) {
    return Bad(key, absl::StrCat("'", key, "' is ", v, "; it must be in [", lo, ", ", hi, "]"));
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status GetInt(const json& j, const char* key, int64_t lo, int64_t hi,
                    std::optional<int64_t>* out) {
  if (!j.contains(key) || j[key].is_null()) return absl::OkStatus();
  if (!j[key].is_number_integer()) return Bad(key, absl::StrCat("'", key, "' must be an integer"));
  const int64_t v = j[key].get<int64_t>();
  if (v < lo || v > hi) {
    return Bad(key, absl::StrCat("'", key, "' is ", v, "; it must be in [", lo, ", ", hi, "]"));
  }
  *out = v;
  return absl::OkStatus();
}

// The token ids of JSON array `list` (request field `param`) appended to *out: integers
// in [0, 2^31).
absl::Status AppendTokenIds(const json& list, const char* param, std::vector<int32_t>* out) {
  for (const json& id : list) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      return Bad(param, absl::StrCat("'", param, "' token ids must be integers >= 0"));
    }
    out->push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return absl::OkStatus();
}

// Fields that change the answer and that kvfold does not implement: refused, never ignored.
absl::Status RefuseUnsupported(const json& j) {
  for (const char* key :
       {"tools", "functions", "tool_choice", "function_call", "suffix", "best_of"}) {
    if (j.contains(key) && !j[key].is_null() && !(j[key].is_array() && j[key].empty()) &&
        !(j[key].is_object() && j[key].empty())) {
      return Bad(key, absl::StrCat("'", key, "' is not supported by kvfold"));
    }
  }
  return absl::OkStatus();
}

bool Given(const json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

// Chat completions' fields for what kvfold does not produce (audio, predicted outputs, web
// search): refused, never ignored. `modalities` may only ask for text.
absl::Status RefuseUnsupportedChat(const json& j) {
  for (const char* key : {"audio", "prediction", "web_search_options"}) {
    if (Given(j, key)) return Bad(key, absl::StrCat("'", key, "' is not supported by kvfold"));
  }
  if (Given(j, "modalities")) {
    const json& m = j["modalities"];
    if (!m.is_array()) return Bad("modalities", "'modalities' must be an array of strings");
    for (const json& e : m) {
      if (!e.is_string()) return Bad("modalities", "'modalities' must be an array of strings");
      if (e.get<std::string>() != "text") {
        return Bad("modalities", absl::StrCat("modality '", e.get<std::string>(),
                                              "' is not supported by kvfold (only \"text\")"));
      }
    }
  }
  return absl::OkStatus();
}

// The Responses API's fields that would change what a response is and that kvfold does not
// implement: refused, never ignored. `truncation` may be either of its values: a kvfold
// session never drops input items (a turn's new input over the replica's prompt limit is a
// 400 either way; the session's history is folded or slid, by its mode, not truncated).
absl::Status RefuseUnsupportedResponse(const json& j) {
  if (Given(j, "conversation")) {
    return Bad("conversation",
               "'conversation' is not supported by kvfold: continue a response with "
               "'previous_response_id' (every response is a stored session version)");
  }
  if (Given(j, "background") && !(j["background"].is_boolean() && !j["background"].get<bool>())) {
    return Bad("background", "'background' responses are not supported by kvfold");
  }
  if (Given(j, "prompt")) {
    return Bad("prompt", "'prompt' (a stored prompt template) is not supported by kvfold");
  }
  if (Given(j, "truncation")) {
    const json& t = j["truncation"];
    if (!t.is_string() || (t.get<std::string>() != "auto" && t.get<std::string>() != "disabled")) {
      return Bad("truncation", "'truncation' must be \"auto\" or \"disabled\"");
    }
  }
  return absl::OkStatus();
}

// `logit_bias`: an object from token ids (decimal strings, as OpenAI's clients send them)
// to biases in [-100, 100].
absl::Status ParseLogitBias(const json& j, GenerationParams* p) {
  if (!j.contains("logit_bias") || j["logit_bias"].is_null()) return absl::OkStatus();
  const json& bias = j["logit_bias"];
  if (!bias.is_object()) {
    return Bad("logit_bias", "'logit_bias' must be an object from token ids to numbers");
  }
  if (bias.size() > 1024) {
    return Bad("logit_bias",
               absl::StrCat("'logit_bias' has ", bias.size(), " entries; at most 1024"));
  }
  for (const auto& [key, value] : bias.items()) {
    int32_t id = 0;
    const bool digits =
        !key.empty() && key.size() <= 9 &&
        std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits || !absl::SimpleAtoi(key, &id)) {
      return Bad("logit_bias", absl::StrCat("'logit_bias' key \"", absl::CHexEscape(key),
                                            "\" is not a token id"));
    }
    if (!value.is_number() || !std::isfinite(value.get<double>()) ||
        std::abs(value.get<double>()) > 100) {
      return Bad("logit_bias",
                 absl::StrCat("'logit_bias' of token ", id, " must be a number in [-100, 100]"));
    }
    p->logit_bias.emplace_back(id, static_cast<float>(value.get<double>()));
  }
  std::sort(p->logit_bias.begin(), p->logit_bias.end());
  return absl::OkStatus();
}

absl::Status ParseSampling(const json& j, const char* max_key, GenerationParams* p) {
  std::optional<int64_t> i;
  for (const char* key : {max_key, "max_completion_tokens"}) {
    KVFOLD_RETURN_IF_ERROR(GetInt(j, key, 1, 1 << 30, &i));
  }
  if (i.has_value()) p->max_tokens = static_cast<int>(*i);
  std::optional<double> d;
  KVFOLD_RETURN_IF_ERROR(GetNumber(j, "temperature", 0, 2, &d));
  if (d.has_value()) p->temperature = static_cast<float>(*d);
  d.reset();
  KVFOLD_RETURN_IF_ERROR(GetNumber(j, "top_p", 0, 1, &d));
  if (d.has_value()) {
    if (*d <= 0) return Bad("top_p", "'top_p' must be greater than 0");
    p->top_p = static_cast<float>(*d);
  }
  for (auto [key, field] : {std::pair{"presence_penalty", &p->presence_penalty},
                            std::pair{"frequency_penalty", &p->frequency_penalty}}) {
    d.reset();
    KVFOLD_RETURN_IF_ERROR(GetNumber(j, key, -2, 2, &d));
    if (d.has_value()) *field = static_cast<float>(*d);
  }
  d.reset();
  KVFOLD_RETURN_IF_ERROR(GetNumber(j, "repetition_penalty", 0, 100, &d));
  if (d.has_value()) {
    if (*d <= 0) return Bad("repetition_penalty", "'repetition_penalty' must be greater than 0");
    p->repetition_penalty = static_cast<float>(*d);
  }
  d.reset();
  KVFOLD_RETURN_IF_ERROR(GetNumber(j, "min_p", 0, 1, &d));
  if (d.has_value()) p->min_p = static_cast<float>(*d);
  KVFOLD_RETURN_IF_ERROR(ParseLogitBias(j, p));
  i.reset();
  KVFOLD_RETURN_IF_ERROR(GetInt(j, "top_k", -1, 1 << 30, &i));
  if (i.has_value()) p->top_k = static_cast<int>(*i);
  i.reset();
  KVFOLD_RETURN_IF_ERROR(GetInt(j, "seed", INT64_MIN, INT64_MAX, &i));
  if (i.has_value()) p->seed = static_cast<uint64_t>(*i);
  i.reset();
  KVFOLD_RETURN_IF_ERROR(GetInt(j, "n", 1, kMaxChoices, &i));
  if (i.has_value()) p->n = static_cast<int>(*i);
  KVFOLD_RETURN_IF_ERROR(GetBool(j, "ignore_eos", &p->ignore_eos));
  i.reset();
  KVFOLD_RETURN_IF_ERROR(GetInt(j, "min_tokens", 0, INT32_MAX, &i));
  if (i.has_value()) p->min_tokens = static_cast<int>(*i);
  if (p->max_tokens.has_value() && p->min_tokens > *p->max_tokens) {
    return Bad("min_tokens",
               absl::StrCat("'min_tokens' is ", p->min_tokens, "; it must be at most max_tokens (",
                            *p->max_tokens, ")"));
  }
  if (j.contains("stop_token_ids") && !j["stop_token_ids"].is_null()) {
    const json& ids = j["stop_token_ids"];
    if (!ids.is_array())
      return Bad("stop_token_ids", "'stop_token_ids' must be an array of token ids");
    KVFOLD_RETURN_IF_ERROR(AppendTokenIds(ids, "stop_token_ids", &p->stop_token_ids));
  }
  if (j.contains("stop") && !j["stop"].is_null()) {
    const json& s = j["stop"];
    if (s.is_string()) {
      p->stop.push_back(s.get<std::string>());
    } else if (s.is_array()) {
      for (const json& e : s) {
        if (!e.is_string()) return Bad("stop", "'stop' must be a string or an array of strings");
        p->stop.push_back(e.get<std::string>());
      }
    } else {
      return Bad("stop", "'stop' must be a string or an array of strings");
    }
    if (p->stop.size() > 4) return Bad("stop", "'stop' takes at most 4 strings");
    for (const std::string& e : p->stop) {
      if (e.empty()) return Bad("stop", "'stop' strings must not be empty");
    }
  }
  return RefuseUnsupported(j);
}

// Which endpoint's spelling of log-probabilities a body uses.
enum class LogprobsForm { kChat, kCompletion, kResponse };

// Chat: `logprobs` a boolean, `top_logprobs` 0..20 and only with logprobs. Completions:
// `logprobs` a count 0..5 of alternatives. Responses: `top_logprobs` 0..20 or `include`
// naming "message.output_text.logprobs".
absl::Status ParseLogprobs(const json& j, LogprobsForm form, GenerationParams* p) {
  const bool has_logprobs = j.contains("logprobs") && !j["logprobs"].is_null();
  std::optional<int64_t> top;
  switch (form) {
    case LogprobsForm::kChat:
      KVFOLD_RETURN_IF_ERROR(GetBool(j, "logprobs", &p->logprobs));
      KVFOLD_RETURN_IF_ERROR(GetInt(j, "top_logprobs", 0, kMaxTopLogprobs, &top));
      if (top.has_value() && !p->logprobs) {
        return Bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
      }
      break;
    case LogprobsForm::kCompletion:
      if (has_logprobs) {
        if (!j["logprobs"].is_number_integer()) {
          return Bad("logprobs",
                     "'logprobs' must be an integer in [0, 5] (the number of alternatives)");
        }
        KVFOLD_RETURN_IF_ERROR(GetInt(j, "logprobs", 0, 5, &top));
        p->logprobs = true;
      }
      break;
    case LogprobsForm::kResponse:
      KVFOLD_RETURN_IF_ERROR(GetInt(j, "top_logprobs", 0, kMaxTopLogprobs, &top));
      if (j.contains("include") && !j["include"].is_null()) {
        if (!j["include"].is_array()) {
          return Bad("include", "'include' must be an array of strings");
        }
        for (const json& e : j["include"]) {
          if (!e.is_string()) return Bad("include", "'include' must be an array of strings");
          if (e.get<std::string>() == "message.output_text.logprobs") p->logprobs = true;
        }
      }
      if (top.has_value()) p->logprobs = true;
      break;
  }
  if (top.has_value()) p->top_logprobs = static_cast<int>(*top);
  return absl::OkStatus();
}

// `schema`'s text, keys in the body's order (properties are written in the schema's
// order, which `schema` lost: nlohmann::json sorts object keys): the body read again in
// order, at `path`. A body holding a key twice may hold another value there: then
// `schema`'s own text.
std::string SchemaText(std::string_view body, std::initializer_list<const char*> path,
                       const json& schema) {
  const auto ordered = nlohmann::ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
  const nlohmann::ordered_json* at = &ordered;
  for (const char* key : path) {
    if (!at->is_object() || !at->contains(key)) return schema.dump();
    at = &at->at(key);
  }
  std::string text = at->dump();
  return json::parse(text) == schema ? text : schema.dump();
}

// The answer's format: chat's and completions' `response_format` ({"type": "text"},
// {"type": "json_object"}, {"type": "json_schema", "json_schema": {"name", "schema",
// "strict"}}), or responses' `text.format` (the same, with "name" and "schema" beside
// "type").
absl::Status ParseResponseFormat(const json& j, std::string_view body, LogprobsForm form,
                                 GenerationParams* p) {
  const bool responses = form == LogprobsForm::kResponse;
  const char* param = responses ? "text.format" : "response_format";
  const json* f = nullptr;
  if (responses) {
    if (!j.contains("text") || j["text"].is_null()) return absl::OkStatus();
    if (!j["text"].is_object()) return Bad("text", "'text' must be an object");
    if (j["text"].contains("format") && !j["text"]["format"].is_null()) f = &j["text"]["format"];
  } else if (j.contains("response_format") && !j["response_format"].is_null()) {
    f = &j["response_format"];
  }
  if (f == nullptr) return absl::OkStatus();
  if (!f->is_object() || !f->contains("type") || !(*f)["type"].is_string()) {
    return Bad(param, absl::StrCat("'", param, "' must be an object with a 'type'"));
  }
  const std::string type = (*f)["type"].get<std::string>();
  if (type == "text") return absl::OkStatus();
  if (type == "json_object") {
    p->format = OutputFormat::kJsonObject;
    return absl::OkStatus();
  }
  if (type != "json_schema") {
    return Bad(param, absl::StrCat("'", param, ".type' is \"", absl::CHexEscape(type),
                                   "\"; it must be text, json_object or json_schema"));
  }
  const json* holder = f;
  std::string at = param;
  if (!responses) {
    if (!f->contains("json_schema") || !(*f)["json_schema"].is_object()) {
      return Bad(param, "'response_format.json_schema' must be an object with a 'schema'");
    }
    holder = &(*f)["json_schema"];
    at += ".json_schema";
  }
  if (holder->contains("name") && !(*holder)["name"].is_string()) {
    return Bad(param, absl::StrCat("'", at, ".name' must be a string"));
  }
  if (holder->contains("strict") && !(*holder)["strict"].is_boolean() &&
      !(*holder)["strict"].is_null()) {
    return Bad(param, absl::StrCat("'", at, ".strict' must be a boolean"));
  }
  // Only an explicit false: without `strict` a schema is held whole or refused.
  p->lenient_schema = holder->contains("strict") && (*holder)["strict"].is_boolean() &&
                      !(*holder)["strict"].get<bool>();
  if (!holder->contains("schema") ||
      !((*holder)["schema"].is_object() || (*holder)["schema"].is_boolean())) {
    return Bad(param, absl::StrCat("'", at, ".schema' must be a JSON Schema (an object)"));
  }
  p->format = OutputFormat::kJsonSchema;
  p->json_schema = responses ? SchemaText(body, {"text", "format", "schema"}, (*holder)["schema"])
                             : SchemaText(body, {"response_format", "json_schema", "schema"},
                                          (*holder)["schema"]);
  return absl::OkStatus();
}

// vLLM's spellings of a format: `guided_json` (a schema, or its JSON text),
// `guided_choice` (texts), `structured_outputs` ({"json": ...} or {"choice": [...]}). One
// way of giving a format per request.
absl::Status ParseGuided(const json& j, std::string_view body, GenerationParams* p) {
  const char* given = p->format != OutputFormat::kText ? "response_format" : nullptr;
  auto one = [&given](const char* param) -> absl::Status {
    if (given != nullptr) {
      return Bad(param,
                 absl::StrCat("'", param, "' and '", given, "' both give a format; give one"));
    }
    given = param;
    return absl::OkStatus();
  };
  auto schema = [&](const json& s, const char* param,
                    std::initializer_list<const char*> path) -> absl::Status {
    KVFOLD_RETURN_IF_ERROR(one(param));
    p->format = OutputFormat::kJsonSchema;
    if (s.is_string()) {  // the schema's JSON text, as vLLM also takes it
      if (absl::Status deep =
              CheckJsonDepth(s.get_ref<const std::string&>(), absl::StrCat("'", param, "'"));
          !deep.ok()) {
        return Bad(param, std::string(deep.message()));
      }
      if (json::parse(s.get<std::string>(), nullptr, false).is_discarded()) {
        return Bad(param, absl::StrCat("'", param, "' is a string but not JSON"));
      }
      p->json_schema = s.get<std::string>();
    } else if (s.is_object() || s.is_boolean()) {
      p->json_schema = SchemaText(body, path, s);
    } else {
      return Bad(param, absl::StrCat("'", param, "' must be a JSON Schema"));
    }
    return absl::OkStatus();
  };
  auto choice = [&](const json& c, const char* param) -> absl::Status {
    KVFOLD_RETURN_IF_ERROR(one(param));
    if (!c.is_array() || c.empty()) {
      return Bad(param, absl::StrCat("'", param, "' must be a non-empty array of strings"));
    }
    for (const json& e : c) {
      if (!e.is_string()) {
        return Bad(param, absl::StrCat("'", param, "' must be a non-empty array of strings"));
      }
      p->choices.push_back(e.get<std::string>());
    }
    p->format = OutputFormat::kChoice;
    return absl::OkStatus();
  };
  if (Given(j, "guided_json")) {
    KVFOLD_RETURN_IF_ERROR(schema(j["guided_json"], "guided_json", {"guided_json"}));
  }
  if (Given(j, "guided_choice"))
    KVFOLD_RETURN_IF_ERROR(choice(j["guided_choice"], "guided_choice"));
  for (const char* key : {"guided_regex", "guided_grammar"}) {
    if (Given(j, key)) return Bad(key, absl::StrCat("'", key, "' is not supported by kvfold"));
  }
  if (Given(j, "structured_outputs")) {
    const json& so = j["structured_outputs"];
    if (!so.is_object()) {
      return Bad("structured_outputs", "'structured_outputs' must be an object");
    }
    for (const auto& [key, value] : so.items()) {
      if (value.is_null()) continue;
      if (key == "json") {
        KVFOLD_RETURN_IF_ERROR(schema(value, "structured_outputs", {"structured_outputs", "json"}));
      } else if (key == "choice") {
        KVFOLD_RETURN_IF_ERROR(choice(value, "structured_outputs"));
      } else {
        return Bad("structured_outputs",
                   absl::StrCat("'structured_outputs.", key, "' is not supported by kvfold"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ParseFormat(const json& j, std::string_view body, LogprobsForm form,
                         GenerationParams* p) {
  KVFOLD_RETURN_IF_ERROR(ParseResponseFormat(j, body, form, p));
  return ParseGuided(j, body, p);
}

absl::Status ParseParams(const json& j, std::string_view body, LogprobsForm form,
                         GenerationParams* p) {
  KVFOLD_RETURN_IF_ERROR(
      ParseSampling(j, form == LogprobsForm::kResponse ? "max_output_tokens" : "max_tokens", p));
  KVFOLD_RETURN_IF_ERROR(ParseFormat(j, body, form, p));
  return ParseLogprobs(j, form, p);
}

absl::Status ParseStreamOptions(const json& j, bool stream, bool* include_usage) {
  if (!j.contains("stream_options") || j["stream_options"].is_null()) return absl::OkStatus();
  if (!j["stream_options"].is_object()) {
    return Bad("stream_options", "'stream_options' must be an object");
  }
  if (!stream) return Bad("stream_options", "'stream_options' is only allowed with 'stream': true");
  return GetBool(j["stream_options"], "include_usage", include_usage,
                 "stream_options.include_usage");
}

// Message content: a string, or an array of text parts ({"type": "text"|"input_text"|
// "output_text", "text": ...}) concatenated.
absl::StatusOr<std::string> ContentText(const json& content, const std::string& where) {
  if (content.is_null()) return std::string();
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    return Bad(absl::StrCat(where, ".content"),
               absl::StrCat(where, ".content must be a string or an array"));
  }
  std::string text;
  for (const json& part : content) {
    const std::string type = StringField(part, "type");
    if ((type != "text" && type != "input_text" && type != "output_text") ||
        !part.contains("text") || !part["text"].is_string()) {
      return Bad(absl::StrCat(where, ".content"),
                 absl::StrCat(where, ": only text content parts are supported (got '", type, "')"));
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

// A call's function `f` ({"name": string, "arguments": JSON text}, checked by the caller;
// `at` names it), its arguments as the chat template writes them (Python's json.dumps,
// order kept).
absl::StatusOr<ChatToolCall> CallOf(const json& f, const std::string& at, std::string id) {
  const std::string param = absl::StrCat(at, ".arguments");
  auto arguments = PythonJsonOf(f["arguments"].get_ref<const std::string&>(), -1, param);
  if (!arguments.ok()) return Bad(param, std::string(arguments.status().message()));
  return ChatToolCall{f["name"].get<std::string>(), std::move(*arguments), std::move(id)};
}

// An assistant message's `tool_calls`: [{"id", "type": "function", "function": {"name",
// "arguments": JSON text}}], the arguments as the chat template writes them.
absl::StatusOr<std::vector<ChatToolCall>> ParseMessageToolCalls(const json& list,
                                                                const std::string& where) {
  if (!list.is_array()) return Bad(where, absl::StrCat(where, ".tool_calls must be an array"));
  std::vector<ChatToolCall> calls;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = absl::StrCat(where, ".tool_calls[", i, "]");
    const json& c = list[i];
    const json* f = c.is_object() && c.contains("function") ? &c["function"] : nullptr;
    if (f == nullptr || !f->is_object() || !f->contains("name") || !(*f)["name"].is_string() ||
        !f->contains("arguments") || !(*f)["arguments"].is_string()) {
      return Bad(at, absl::StrCat(at,
                                  " must be {\"type\": \"function\", \"function\": "
                                  "{\"name\": string, \"arguments\": JSON text}}"));
    }
    if (c.contains("id") && !c["id"].is_null() && !c["id"].is_string()) {
      return Bad(at, absl::StrCat(at, ".id must be a string"));
    }
    auto call = CallOf(*f, absl::StrCat(at, ".function"), StringField(c, "id"));
    if (!call.ok()) return call.status();
    calls.push_back(std::move(*call));
  }
  return calls;
}

// The deprecated form of an assistant's call, `function_call`: {"name": string,
// "arguments": JSON text}.
absl::StatusOr<ChatToolCall> ParseMessageFunctionCall(const json& f, const std::string& where) {
  const std::string at = absl::StrCat(where, ".function_call");
  if (!f.is_object() || !f.contains("name") || !f["name"].is_string() || !f.contains("arguments") ||
      !f["arguments"].is_string()) {
    return Bad(at, absl::StrCat(at, " must be {\"name\": string, \"arguments\": JSON text}"));
  }
  return CallOf(f, at, "");
}

// tool_choice required or a named function: the answer held to ToolAnswerSchema (not
// beside another format).
absl::Status HoldToTools(const ToolSet& tools, GenerationParams* p) {
  if (tools.choice != ToolChoice::kRequired && tools.choice != ToolChoice::kFunction) {
    return absl::OkStatus();
  }
  if (p->format != OutputFormat::kText && tools.legacy) {
    return Bad("function_call",
               "'function_call' naming a function sets the answer's format; it cannot be "
               "combined with 'response_format' or guided decoding");
  }
  if (p->format != OutputFormat::kText) {
    return Bad("tool_choice",
               "'tool_choice' \"required\" or a named function sets the answer's format; it "
               "cannot be combined with 'response_format', 'text.format' or guided decoding");
  }
  KVFOLD_ASSIGN_OR_RETURN(HeldAnswer held, HeldAnswerSchema(tools));
  p->json_schema = std::move(held.schema);
  p->grammar = std::move(held.grammar);
  p->format = OutputFormat::kJsonSchema;
  return absl::OkStatus();
}

// Message `m` of a request (`where` names it in errors: "messages[2]").
absl::StatusOr<ChatMessage> ParseMessage(const json& m, const std::string& where) {
  if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
    return Bad(where, absl::StrCat(where, " must be an object with a string 'role'"));
  }
  ChatMessage message;
  message.role = m["role"].get<std::string>();
  if (message.role == "developer") message.role = "system";  // OpenAI's newer name
  auto text = ContentText(m.contains("content") ? m["content"] : json(), where);
  if (!text.ok()) return text.status();
  message.content = std::move(*text);
  if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
    auto calls = ParseMessageToolCalls(m["tool_calls"], where);
    if (!calls.ok()) return calls.status();
    message.tool_calls = std::move(*calls);
  }
  if (m.contains("tool_call_id") && !m["tool_call_id"].is_null() &&
      !m["tool_call_id"].is_string()) {
    return Bad(where, absl::StrCat(where, ".tool_call_id must be a string"));
  }
  message.tool_call_id = StringField(m, "tool_call_id");
  return message;
}

// Chat's deprecated function calling in message `m` (parsed into *message): an
// assistant's `function_call` becomes its one call, with a made-up id ("call_0001", ...:
// the form names none), and a `function` message a tool message answering the latest call
// of its `name` in the request; *latest_call maps names to those ids.
absl::Status ReadLegacyFunctionCalling(const json& m, const std::string& where, int* calls_made,
                                       std::map<std::string, std::string>* latest_call,
                                       ChatMessage* message) {
  if (m.contains("function_call") && !m["function_call"].is_null()) {
    if (message->role != "assistant" || !message->tool_calls.empty()) {
      const std::string at = absl::StrCat(where, ".function_call");
      return Bad(at, absl::StrCat(at, " goes in an assistant message without tool_calls"));
    }
    auto call = ParseMessageFunctionCall(m["function_call"], where);
    if (!call.ok()) return call.status();
    call->id = absl::StrCat("call_", absl::Dec(++*calls_made, absl::kZeroPad4));
    (*latest_call)[call->name] = call->id;
    message->tool_calls.push_back(std::move(*call));
  }
  if (message->role != "function") return absl::OkStatus();
  if (!m.contains("name") || !m["name"].is_string()) {
    return Bad(where, absl::StrCat(where, " (role function) needs the function's 'name'"));
  }
  // None in the request (a stored session's later turn answers a call of an earlier one):
  // no id, which a template that shows ids refuses.
  const auto call = latest_call->find(m["name"].get_ref<const std::string&>());
  message->role = "tool";
  message->tool_call_id = call == latest_call->end() ? "" : call->second;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ChatMessage>> ParseMessages(const json& list, const char* key) {
  if (!list.is_array() || list.empty()) {
    return Bad(key, absl::StrCat("'", key, "' must be a non-empty array of messages"));
  }
  std::vector<ChatMessage> out;
  int calls_made = 0;
  std::map<std::string, std::string> latest_call;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = absl::StrCat(key, "[", i, "]");
    auto message = ParseMessage(list[i], where);
    if (!message.ok()) return message.status();
    KVFOLD_RETURN_IF_ERROR(
        ReadLegacyFunctionCalling(list[i], where, &calls_made, &latest_call, &*message));
    out.push_back(std::move(*message));
  }
  return out;
}

}  // namespace

absl::StatusOr<ChatCompletionRequest> ParseChatCompletionRequest(std::string_view body) {
  auto j = ParseObject(body);
  if (!j.ok()) return j.status();
  ChatCompletionRequest r;
  KVFOLD_RETURN_IF_ERROR(GetString(*j, "model", &r.model));
  KVFOLD_RETURN_IF_ERROR(RefuseUnsupportedChat(*j));
  if (!j->contains("messages")) return Bad("messages", "'messages' is required");
  auto messages = ParseMessages((*j)["messages"], "messages");
  if (!messages.ok()) return messages.status();
  r.messages = std::move(*messages);
  if (j->contains("tools") || j->contains("tool_choice") || j->contains("parallel_tool_calls") ||
      j->contains("functions") || j->contains("function_call")) {
    // Read in the body's order: the template shows each tool as the client wrote it.
    auto tools = ParseTools(nlohmann::ordered_json::parse(body));
    if (!tools.ok()) return tools.status();
    r.tools = std::move(*tools);
    for (const char* key : {"tools", "tool_choice", "functions", "function_call"}) j->erase(key);
  }
  KVFOLD_RETURN_IF_ERROR(ParseParams(*j, body, LogprobsForm::kChat, &r.params));
  KVFOLD_RETURN_IF_ERROR(HoldToTools(r.tools, &r.params));
  KVFOLD_RETURN_IF_ERROR(GetBool(*j, "stream", &r.stream));
  KVFOLD_RETURN_IF_ERROR(ParseStreamOptions(*j, r.stream, &r.include_usage));
  KVFOLD_RETURN_IF_ERROR(GetBool(*j, "continue_final_message", &r.continue_final_message));
  KVFOLD_RETURN_IF_ERROR(GetString(*j, "kvfold_session", &r.session));
  return r;
}

absl::StatusOr<CompletionRequest> ParseCompletionRequest(std::string_view body) {
  auto j = ParseObject(body);
  if (!j.ok()) return j.status();
  CompletionRequest r;
  KVFOLD_RETURN_IF_ERROR(GetString(*j, "model", &r.model));
  const json& prompt = j->contains("prompt") ? (*j)["prompt"] : json();
  // A prompt is a string or token ids; `prompt` is one, or an array of them (a batch).
  auto one = [&](const json& p, CompletionPrompt* out) -> absl::Status {
    if (p.is_string()) {
      out->text = p.get<std::string>();
      return absl::OkStatus();
    }
    if (!p.is_array() || p.empty()) {
      return Bad("prompt",
                 "'prompt' must be a string, an array of token ids, or an array of either");
    }
    return AppendTokenIds(p, "prompt", &out->ids);
  };
  if (prompt.is_array() && !prompt.empty() && !prompt[0].is_number()) {
    for (const json& p : prompt) {
      KVFOLD_RETURN_IF_ERROR(one(p, &r.prompts.emplace_back()));
    }
  } else {
    KVFOLD_RETURN_IF_ERROR(one(prompt, &r.prompts.emplace_back()));
  }
  KVFOLD_RETURN_IF_ERROR(GetBool(*j, "echo", &r.echo));
  // `max_tokens: 0` scores an echoed prompt without generating (OpenAI's legacy scoring
  // request); without echo it stays out of range.
  if (r.echo && j->contains("max_tokens") && (*j)["max_tokens"].is_number_integer() &&
      (*j)["max_tokens"].get<int64_t>() == 0) {
    r.prompt_only = true;
    j->erase("max_tokens");
  }
  KVFOLD_RETURN_IF_ERROR(ParseParams(*j, body, LogprobsForm::kCompletion, &r.params));
  if (r.prompts.size() * r.params.n > kMaxChoices) {
    return Bad(r.params.n > 1 ? "n" : "prompt",
               absl::StrCat(r.prompts.size(), " prompts x n = ", r.params.n, " is ",
                            r.prompts.size() * r.params.n, " choices (at most ", kMaxChoices,
                            " per request)"));
  }
  KVFOLD_RETURN_IF_ERROR(GetBool(*j, "stream", &r.stream));
  KVFOLD_RETURN_IF_ERROR(ParseStreamOptions(*j, r.stream, &r.include_usage));
  return r;
}

// The Responses API's tools and tool_choice in chat's form ({"type": "function",
// "function": {...}}, {"type": "function", "function": {"name"}}), keys in the body's
// order, for ParseTools.
absl::StatusOr<nlohmann::ordered_json> ChatFormTools(std::string_view body) {
  using ojson = nlohmann::ordered_json;
  const ojson j = ojson::parse(body);
  ojson out = ojson::object();
  if (j.contains("tools") && j["tools"].is_array()) {
    ojson tools = ojson::array();
    for (size_t i = 0; i < j["tools"].size(); ++i) {
      const ojson& t = j["tools"][i];
      if (StringField(t, "type") != "function") {
        return Bad("tools", absl::StrCat("tools[", i,
                                         "]: only {\"type\": \"function\", \"name\", "
                                         "\"parameters\"} tools are supported"));
      }
      ojson function = ojson::object();
      for (const auto& [key, value] : t.items()) {
        if (key != "type") function[key] = value;
      }
      tools.push_back({{"type", "function"}, {"function", std::move(function)}});
    }
    out["tools"] = std::move(tools);
  } else if (j.contains("tools")) {
    out["tools"] = j["tools"];
  }
  if (j.contains("tool_choice")) {
    const ojson& choice = j["tool_choice"];
    out["tool_choice"] =
        choice.is_object() && choice.contains("name")
            ? ojson{{"type", StringField(choice, "type")}, {"function", {{"name", choice["name"]}}}}
            : choice;
  }
  if (j.contains("parallel_tool_calls")) out["parallel_tool_calls"] = j["parallel_tool_calls"];
  return out;
}

// A Responses input: a string (one user message) or items: messages, function_call
// (the assistant's call; consecutive calls are one assistant message) and
// function_call_output (a tool message).
absl::StatusOr<std::vector<ChatMessage>> ParseResponseInput(const json& input) {
  if (input.is_string()) return std::vector<ChatMessage>{{"user", input.get<std::string>()}};
  if (!input.is_array()) return Bad("input", "'input' must be a string or an array of items");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < input.size(); ++i) {
    const json& item = input[i];
    const std::string where = absl::StrCat("input[", i, "]");
    const std::string type = StringField(item, "type");
    if (type == "function_call") {
      if (!item.contains("name") || !item["name"].is_string() || !item.contains("arguments") ||
          !item["arguments"].is_string()) {
        return Bad(where, absl::StrCat(where,
                                       ": a function_call needs string 'name' and "
                                       "'arguments' (JSON text)"));
      }
      auto arguments =
          PythonJsonOf(item["arguments"].get<std::string>(), -1, absl::StrCat(where, ".arguments"));
      if (!arguments.ok())
        return Bad(absl::StrCat(where, ".arguments"), std::string(arguments.status().message()));
      if (out.empty() || out.back().role != "assistant" || out.back().tool_calls.empty()) {
        out.push_back({"assistant", ""});
      }
      out.back().tool_calls.push_back(
          {item["name"].get<std::string>(), *arguments, StringField(item, "call_id")});
    } else if (type == "function_call_output") {
      if (!item.contains("output") || !item["output"].is_string()) {
        return Bad(where, absl::StrCat(where, ": a function_call_output needs a string 'output'"));
      }
      out.push_back({"tool", item["output"].get<std::string>()});
      out.back().tool_call_id = StringField(item, "call_id");
    } else {
      auto message = ParseMessage(item, where);
      if (!message.ok()) return message.status();
      out.push_back(std::move(*message));
    }
  }
  if (out.empty()) return Bad("input", "'input' must not be empty");
  return out;
}

// Code points of UTF-8 text (its bytes that do not continue a character).
size_t CodePoints(std::string_view s) {
  return static_cast<size_t>(
      std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

// OpenAI's `metadata`: at most 16 string values, keys of at most 64 characters and values
// of at most 512.
absl::Status CheckMetadata(const json& metadata) {
  if (!metadata.is_object()) return Bad("metadata", "'metadata' must be an object of strings");
  if (metadata.size() > 16) {
    return Bad("metadata",
               absl::StrCat("'metadata' has ", metadata.size(), " keys; at most 16 are allowed"));
  }
  for (const auto& [key, value] : metadata.items()) {
    if (CodePoints(key) > 64) {
      return Bad("metadata", absl::StrCat("a 'metadata' key is over 64 characters: '", key, "'"));
    }
    if (!value.is_string() || CodePoints(value.get<std::string>()) > 512) {
      return Bad("metadata",
                 absl::StrCat("'metadata.", key, "' must be a string of at most 512 characters"));
    }
  }
  return absl::OkStatus();
}

// The request's fields a response object repeats (ResponsesRequest::echo), as given where
// given, else OpenAI's defaults. Call after the fields it reads were checked, but for
// metadata, checked here.
absl::StatusOr<json> ResponseEchoOf(const json& j, const ResponsesRequest& r) {
  auto given = [&](const char* key, json otherwise) {
    return j.contains(key) && !j[key].is_null() ? j[key] : otherwise;
  };
  json metadata = given("metadata", json::object());
  KVFOLD_RETURN_IF_ERROR(CheckMetadata(metadata));
  json text = given("text", json::object());
  if (!text.is_object()) text = json::object();
  if (!text.contains("format") || text["format"].is_null()) text["format"] = {{"type", "text"}};
  return json{{"previous_response_id", Nullable(r.previous_response_id)},
              {"instructions", Nullable(r.instructions)},
              {"metadata", std::move(metadata)},
              {"max_output_tokens", given("max_output_tokens", nullptr)},
              {"temperature", given("temperature", 1)},
              {"top_p", given("top_p", 1)},
              {"tools", given("tools", json::array())},
              {"tool_choice", given("tool_choice", "auto")},
              {"parallel_tool_calls", given("parallel_tool_calls", true)},
              {"text", std::move(text)},
              {"store", r.store}};
}

// A valid `input` as OpenAI lists it (ResponsesRequest::input_items).
json InputItemsOf(const json& input) {
  auto text_part = [](const std::string& role, const json& text) {
    return json::array(
        {{{"type", role == "assistant" ? "output_text" : "input_text"}, {"text", text}}});
  };
  json items = json::array();
  if (input.is_string()) {
    items.push_back({{"type", "message"}, {"role", "user"}, {"content", text_part("user", input)}});
  } else {
    for (const json& item : input) {
      json out = item;
      const std::string type = StringField(item, "type");
      if (type.empty() || type == "message") {
        out["type"] = "message";
        if (out.contains("content") && out["content"].is_string()) {
          out["content"] = text_part(StringField(item, "role"), out["content"]);
        }
      }
      items.push_back(std::move(out));
    }
  }
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].contains("id") || !items[i]["id"].is_string()) {
      items[i]["id"] = absl::StrCat("item_", i);
    }
  }
  return items;
}

absl::StatusOr<ResponsesRequest> ParseResponsesRequest(std::string_view body) {
  auto j = ParseObject(body);
  if (!j.ok()) return j.status();
  ResponsesRequest r;
  KVFOLD_RETURN_IF_ERROR(GetString(*j, "model", &r.model));
  KVFOLD_RETURN_IF_ERROR(RefuseUnsupportedResponse(*j));
  KVFOLD_RETURN_IF_ERROR(GetString(*j, "instructions", &r.instructions));
  KVFOLD_RETURN_IF_ERROR(GetString(*j, "previous_response_id", &r.previous_response_id));
  KVFOLD_RETURN_IF_ERROR(GetBool(*j, "stream", &r.stream));
  KVFOLD_RETURN_IF_ERROR(GetBool(*j, "store", &r.store));
  auto echo = ResponseEchoOf(*j, r);
  if (!echo.ok()) return echo.status();
  auto input = ParseResponseInput(j->contains("input") ? (*j)["input"] : json());
  if (!input.ok()) return input.status();
  r.input = std::move(*input);
  r.input_items = JsonText(InputItemsOf((*j)["input"]));
  if (j->contains("tools") || j->contains("tool_choice") || j->contains("parallel_tool_calls")) {
    auto chat_form = ChatFormTools(body);
    if (!chat_form.ok()) return chat_form.status();
    auto tools = ParseTools(*chat_form);
    if (!tools.ok()) return tools.status();
    r.tools = std::move(*tools);
    j->erase("tools");
    j->erase("tool_choice");
  }
  KVFOLD_RETURN_IF_ERROR(ParseParams(*j, body, LogprobsForm::kResponse, &r.params));
  if (r.params.n != 1) {
    return Bad("n", absl::StrCat("'n' is ", r.params.n, ": a response has one output (n = 1)"));
  }
  KVFOLD_RETURN_IF_ERROR(HoldToTools(r.tools, &r.params));
  r.echo = JsonText(*echo);
  return r;
}

absl::StatusOr<ResponsesRequest> ParseInputTokensRequest(std::string_view body) {
  auto j = ParseObject(body);
  if (!j.ok()) return j.status();
  static constexpr std::array<std::string_view, 11> kFields = {
      "model",        "input",     "instructions", "previous_response_id",
      "conversation", "tools",     "tool_choice",  "parallel_tool_calls",
      "text",         "reasoning", "truncation"};
  for (const auto& [key, value] : j->items()) {
    if (std::find(kFields.begin(), kFields.end(), key) == kFields.end()) {
      return Bad(key, absl::StrCat("'", key, "' is not a field of an input token count"));
    }
  }
  return ParseResponsesRequest(body);
}

std::string InputTokensJson(size_t count) {
  return JsonText(json{{"object", "response.input_tokens"}, {"input_tokens", count}});
}

absl::StatusOr<TokenizeRequest> ParseTokenizeRequest(std::string_view body) {
  auto j = ParseObject(body);
  if (!j.ok()) return j.status();
  TokenizeRequest r;
  KVFOLD_RETURN_IF_ERROR(GetString(*j, "model", &r.model));
  const bool has_prompt = j->contains("prompt") && !(*j)["prompt"].is_null();
  const bool has_messages = j->contains("messages") && !(*j)["messages"].is_null();
  if (has_prompt == has_messages) {
    return Bad(has_prompt ? "messages" : "prompt",
               "give either 'prompt' (a string) or 'messages', not both or neither");
  }
  if (has_prompt) {
    if (!(*j)["prompt"].is_string()) return Bad("prompt", "'prompt' must be a string");
    r.prompt = (*j)["prompt"].get<std::string>();
    if (j->contains("tools") && !(*j)["tools"].is_null()) {
      return Bad("tools", "'tools' goes with 'messages'");
    }
  } else {
    auto messages = ParseMessages((*j)["messages"], "messages");
    if (!messages.ok()) return messages.status();
    r.messages = std::move(*messages);
    if ((j->contains("tools") && !(*j)["tools"].is_null()) ||
        (j->contains("functions") && !(*j)["functions"].is_null())) {
      // Shown as a chat turn with these tools shows them (tool_choice "none" shows none).
      auto tools = ParseTools(nlohmann::ordered_json::parse(body));
      if (!tools.ok()) return tools.status();
      r.tools = tools->Shown();
    }
  }
  KVFOLD_RETURN_IF_ERROR(GetBool(*j, "add_special_tokens", &r.add_special_tokens));
  KVFOLD_RETURN_IF_ERROR(GetBool(*j, "continue_final_message", &r.continue_final_message));
  const bool generation_prompt_given =
      j->contains("add_generation_prompt") && !(*j)["add_generation_prompt"].is_null();
  KVFOLD_RETURN_IF_ERROR(GetBool(*j, "add_generation_prompt", &r.add_generation_prompt));
  if (r.continue_final_message) {
    if (generation_prompt_given && r.add_generation_prompt) {
      return Bad("add_generation_prompt",
                 "'add_generation_prompt' and 'continue_final_message' exclude each other");
    }
    r.add_generation_prompt = false;
  }
  KVFOLD_RETURN_IF_ERROR(GetBool(*j, "return_token_strs", &r.return_token_strs));
  return r;
}

absl::StatusOr<DetokenizeRequest> ParseDetokenizeRequest(std::string_view body) {
  auto j = ParseObject(body);
  if (!j.ok()) return j.status();
  DetokenizeRequest r;
  KVFOLD_RETURN_IF_ERROR(GetString(*j, "model", &r.model));
  const json& tokens = j->contains("tokens") ? (*j)["tokens"] : json();
  if (!tokens.is_array()) return Bad("tokens", "'tokens' must be an array of token ids");
  KVFOLD_RETURN_IF_ERROR(AppendTokenIds(tokens, "tokens", &r.tokens));
  return r;
}

std::string TokenizeJson(const std::vector<int32_t>& tokens, uint32_t max_prompt_tokens,
                         const std::vector<std::string>* token_strs) {
  json out = {{"count", tokens.size()}, {"max_model_len", max_prompt_tokens}, {"tokens", tokens}};
  if (token_strs != nullptr) out["token_strs"] = *token_strs;
  return JsonText(out);
}

namespace {

json LogprobsJson(const std::vector<TokenLogprob>& logprobs) {
  json content = json::array();
  for (const TokenLogprob& t : logprobs) {
    json top = json::array();
    for (const auto& [token, lp] : t.top) {
      top.push_back({{"token", token},
                     {"logprob", lp},
                     {"bytes", std::vector<int>(token.begin(), token.end())}});
    }
    content.push_back({{"token", t.token},
                       {"logprob", t.logprob},
                       {"bytes", std::vector<int>(t.token.begin(), t.token.end())},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

// Completions' legacy logprobs layout.
json LegacyLogprobsJson(const std::vector<TokenLogprob>& logprobs) {
  json tokens = json::array(), values = json::array(), top = json::array();
  for (const TokenLogprob& t : logprobs) {
    tokens.push_back(t.token);
    if (!t.scored) {
      values.push_back(nullptr);
      top.push_back(nullptr);
      continue;
    }
    values.push_back(t.logprob);
    json alternatives = json::object();
    for (const auto& [token, lp] : t.top) alternatives[token] = lp;
    top.push_back(alternatives);
  }
  return {{"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", top}};
}

json UsageJson(const TurnUsage& u) {
  json kvfold = {
      {"tokens_folded", u.tokens_folded}, {"version", u.version}, {"replica", u.replica}};
  if (!u.session_id.empty()) kvfold["session_id"] = u.session_id;
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}},
          {"kvfold", kvfold}};
}

std::string Event(const json& j) { return absl::StrCat("data: ", JsonText(j), "\n\n"); }

// One chat.completion.chunk event of choice head.index.
std::string ChatChunk(const ChatAnswer& head, json delta, std::string_view finish_reason,
                      const std::vector<TokenLogprob>& logprobs) {
  json choice = {{"index", head.index},
                 {"delta", std::move(delta)},
                 {"finish_reason", Nullable(finish_reason)},
                 {"logprobs", logprobs.empty() ? json(nullptr) : LogprobsJson(logprobs)}};
  return Event({{"id", head.id},
                {"object", "chat.completion.chunk"},
                {"created", head.created},
                {"model", head.model},
                {"choices", {choice}}});
}

// The deprecated form's one call: {"name", "arguments"}.
json FunctionCallJson(const ToolCallOut& call) {
  return {{"name", call.name}, {"arguments", call.arguments}};
}

// OpenAI's tool_calls list; `indexed` (a stream's delta) gives each call its index.
json ToolCallsJson(const std::vector<ToolCallOut>& calls, bool indexed) {
  json list = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json call = {{"id", calls[i].id},
                 {"type", "function"},
                 {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (indexed) call["index"] = i;
    list.push_back(std::move(call));
  }
  return list;
}

// A whole (not streamed) chat or text completion: its choices in the envelope both share.
std::string AnswerJson(const std::vector<ChatAnswer>& choices, const TurnUsage& usage,
                       const char* object, json (*choice)(const ChatAnswer&)) {
  json list = json::array();
  for (const ChatAnswer& c : choices) list.push_back(choice(c));
  const ChatAnswer& a = choices.front();
  return JsonText({{"id", a.id},
                   {"object", object},
                   {"created", a.created},
                   {"model", a.model},
                   {"choices", std::move(list)},
                   {"usage", UsageJson(usage)}});
}

}  // namespace

std::string JsonText(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ChatCompletionJson(const std::vector<ChatAnswer>& choices, const TurnUsage& usage) {
  return AnswerJson(choices, usage, "chat.completion", [](const ChatAnswer& a) -> json {
    json message = {{"role", "assistant"}, {"content", a.text}};
    if (!a.tool_calls.empty()) {
      if (a.text.empty()) message["content"] = nullptr;
      if (a.finish_reason == kFunctionCallFinish) {
        message["function_call"] = FunctionCallJson(a.tool_calls.front());
      } else {
        message["tool_calls"] = ToolCallsJson(a.tool_calls, /*indexed=*/false);
      }
    }
    return {{"index", a.index},
            {"message", std::move(message)},
            {"finish_reason", a.finish_reason},
            {"logprobs", a.logprobs.empty() ? json(nullptr) : LogprobsJson(a.logprobs)}};
  });
}

std::string CompletionJson(const std::vector<ChatAnswer>& choices, const TurnUsage& usage) {
  return AnswerJson(choices, usage, "text_completion", [](const ChatAnswer& a) -> json {
    return {{"index", a.index},
            {"text", a.text},
            {"finish_reason", a.finish_reason},
            {"logprobs", a.logprobs.empty() ? json(nullptr) : LegacyLogprobsJson(a.logprobs)}};
  });
}

namespace {

// The message item of a response: its one output_text part, `status` in_progress while
// streaming.
json ResponseMessage(const ChatAnswer& a, const json& content, std::string_view status) {
  return {{"type", "message"},
          {"id", absl::StrCat("msg_", a.id.size() > 5 ? a.id.substr(5) : a.id)},
          {"status", std::string(status)},
          {"role", "assistant"},
          {"content", content}};
}

json OutputTextPart(const ChatAnswer& a) {
  json part = {{"type", "output_text"}, {"text", a.text}, {"annotations", json::array()}};
  if (!a.logprobs.empty()) part["logprobs"] = LogprobsJson(a.logprobs)["content"];
  return part;
}

// The response object; `status` empty: completed or incomplete by the finish reason.
// `echo`: ResponsesRequest::echo (empty: none), its fields set on the object.
json ResponseObject(const ChatAnswer& a, std::string_view echo, const json& output,
                    std::string_view status = "") {
  json usage = {{"input_tokens", a.usage.prompt_tokens},
                {"output_tokens", a.usage.completion_tokens},
                {"total_tokens", a.usage.prompt_tokens + a.usage.completion_tokens},
                {"input_tokens_details", {{"cached_tokens", a.usage.cached_tokens}}},
                {"output_tokens_details", {{"reasoning_tokens", 0}}},
                {"kvfold", UsageJson(a.usage)["kvfold"]}};
  json incomplete = nullptr;
  if (status.empty() && a.finish_reason == "length") incomplete = {{"reason", "max_output_tokens"}};
  if (status.empty()) status = a.finish_reason == "length" ? "incomplete" : "completed";
  json object = {{"id", a.id},
                 {"object", "response"},
                 {"created_at", a.created},
                 {"status", std::string(status)},
                 {"incomplete_details", incomplete},
                 {"model", a.model},
                 {"previous_response_id", nullptr},
                 {"output", output},
                 {"usage", status == "completed" || status == "incomplete" ? usage : json(nullptr)},
                 {"error", nullptr}};
  if (!echo.empty()) {
    const json fields = json::parse(echo, nullptr, false);
    if (fields.is_object()) {
      for (const auto& [key, value] : fields.items()) object[key] = value;
    }
  }
  return object;
}

// A call of a response as its function_call output item; `done` false: in progress, no
// arguments yet (a stream's item announcement).
json FunctionCallItem(const ToolCallOut& call, bool done) {
  return {{"type", "function_call"},
          {"id", absl::StrCat("fc_", call.id.substr(std::min<size_t>(5, call.id.size())))},
          {"call_id", call.id},
          {"name", call.name},
          {"arguments", done ? call.arguments : ""},
          {"status", done ? "completed" : "in_progress"}};
}

// One typed event of a streamed response.
std::string TypedEvent(std::string_view type, json body, int* sequence) {
  body["type"] = std::string(type);
  body["sequence_number"] = (*sequence)++;
  return absl::StrCat("event: ", std::string(type), "\ndata: ", JsonText(body), "\n\n");
}

}  // namespace

std::string ResponseJson(const ChatAnswer& a, std::string_view echo) {
  json output = json::array();
  // An answer of calls alone has no message item.
  if (a.tool_calls.empty() || !a.text.empty()) {
    output.push_back(ResponseMessage(a, json::array({OutputTextPart(a)}), "completed"));
  }
  for (const ToolCallOut& call : a.tool_calls) output.push_back(FunctionCallItem(call, true));
  return JsonText(ResponseObject(a, echo, output));
}

std::string ResponseStreamStart(const ChatAnswer& head, std::string_view echo, int* sequence) {
  const json item = ResponseMessage(head, json::array(), "in_progress");
  // One statement per event: their sequence numbers follow the order written.
  std::string out = TypedEvent(
      "response.created", {{"response", ResponseObject(head, echo, json::array(), "in_progress")}},
      sequence);
  out += TypedEvent("response.output_item.added", {{"output_index", 0}, {"item", item}}, sequence);
  out += TypedEvent(
      "response.content_part.added",
      {{"item_id", item["id"]},
       {"output_index", 0},
       {"content_index", 0},
       {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}}},
      sequence);
  return out;
}

std::string ResponseTextDeltaEvent(const ChatAnswer& head, std::string_view delta,
                                   const std::vector<TokenLogprob>& logprobs, int* sequence) {
  return TypedEvent(
      "response.output_text.delta",
      {{"item_id", ResponseMessage(head, json::array(), "")["id"]},
       {"output_index", 0},
       {"content_index", 0},
       {"delta", std::string(delta)},
       {"logprobs", logprobs.empty() ? json::array() : LogprobsJson(logprobs)["content"]}},
      sequence);
}

std::string ResponseStreamEnd(const ChatAnswer& a, std::string_view echo, int* sequence) {
  const json part = OutputTextPart(a);
  const json item = ResponseMessage(a, json::array({part}), "completed");
  const json where = {{"item_id", item["id"]}, {"output_index", 0}, {"content_index", 0}};
  json text_done = where;
  text_done["text"] = a.text;
  json part_done = where;
  part_done["part"] = part;
  json output = json::array({item});
  std::string out = TypedEvent("response.output_text.done", text_done, sequence);
  out += TypedEvent("response.content_part.done", part_done, sequence);
  out += TypedEvent("response.output_item.done", {{"output_index", 0}, {"item", item}}, sequence);
  // The calls after the message, each announced, its arguments whole, and done.
  for (const ToolCallOut& call : a.tool_calls) {
    const int index = static_cast<int>(output.size());
    const json done = FunctionCallItem(call, true);
    const json at = {{"item_id", done["id"]}, {"output_index", index}};
    out += TypedEvent("response.output_item.added",
                      {{"output_index", index}, {"item", FunctionCallItem(call, false)}}, sequence);
    json delta = at;
    delta["delta"] = call.arguments;
    out += TypedEvent("response.function_call_arguments.delta", delta, sequence);
    json arguments_done = at;
    arguments_done["arguments"] = call.arguments;
    out += TypedEvent("response.function_call_arguments.done", arguments_done, sequence);
    out += TypedEvent("response.output_item.done", {{"output_index", index}, {"item", done}},
                      sequence);
    output.push_back(done);
  }
  const json response = ResponseObject(a, echo, output);
  out +=
      TypedEvent(response["status"] == "incomplete" ? "response.incomplete" : "response.completed",
                 {{"response", response}}, sequence);
  return out;
}

std::string ResponseFailedEvent(const ChatAnswer& head, std::string_view echo,
                                const absl::Status& status, int* sequence) {
  json response = ResponseObject(head, echo, json::array(), "failed");
  response["error"] = {{"code", std::string(absl::StatusCodeToString(status.code()))},
                       {"message", std::string(status.message())}};
  return TypedEvent("response.failed", {{"response", response}}, sequence);
}

std::string ChatChunkEvent(const ChatAnswer& head, std::string_view delta, bool first,
                           std::string_view finish_reason,
                           const std::vector<TokenLogprob>& logprobs) {
  json d = json::object();
  if (first) d["role"] = "assistant";
  if (!delta.empty() || first) d["content"] = std::string(delta);
  return ChatChunk(head, std::move(d), finish_reason, logprobs);
}

std::string ChatToolCallsChunkEvent(const ChatAnswer& head, const std::vector<ToolCallOut>& calls,
                                    bool first, const std::vector<TokenLogprob>& logprobs,
                                    bool function_call) {
  json d = function_call ? json{{"function_call", FunctionCallJson(calls.front())}}
                         : json{{"tool_calls", ToolCallsJson(calls, /*indexed=*/true)}};
  if (first) {
    d["role"] = "assistant";
    d["content"] = nullptr;
  }
  return ChatChunk(head, std::move(d), "", logprobs);
}

std::string CompletionChunkEvent(const ChatAnswer& head, std::string_view delta,
                                 std::string_view finish_reason,
                                 const std::vector<TokenLogprob>& logprobs) {
  json choice = {{"index", head.index},
                 {"text", std::string(delta)},
                 {"finish_reason", Nullable(finish_reason)},
                 {"logprobs", logprobs.empty() ? json(nullptr) : LegacyLogprobsJson(logprobs)}};
  return Event({{"id", head.id},
                {"object", "text_completion"},
                {"created", head.created},
                {"model", head.model},
                {"choices", {choice}}});
}

std::string UsageChunkEvent(const ChatAnswer& a, bool chat) {
  return Event({{"id", a.id},
                {"object", chat ? "chat.completion.chunk" : "text_completion"},
                {"created", a.created},
                {"model", a.model},
                {"choices", json::array()},
                {"usage", UsageJson(a.usage)}});
}

int HttpStatusOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kAlreadyExists:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kCancelled:
      return 499;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

absl::Status WithParam(absl::Status status, std::string_view param) {
  if (!status.ok() && !param.empty()) {
    status.SetPayload(kParamPayload, absl::Cord(std::string(param)));
  }
  return status;
}

std::string ErrorJson(const absl::Status& status) {
  const char* type = "server_error";
  const char* code = nullptr;
  switch (HttpStatusOf(status.code())) {
    case 400:
      type = "invalid_request_error";
      break;
    case 401:
      type = "authentication_error";
      code = "invalid_api_key";
      break;
    case 403:
      type = "permission_error";
      break;
    case 404:
      type = "invalid_request_error";
      code = "not_found";
      break;
    case 409:
      type = "conflict_error";
      code = "conflict";
      break;
    case 429:
      type = "rate_limit_error";
      code = "rate_limit_exceeded";
      break;
    case 503:
      type = "service_unavailable";
      code = "service_unavailable";
      break;
    default:
      break;
  }
  const auto param = status.GetPayload(kParamPayload);
  return JsonText({{"error",
                    {{"message", std::string(status.message())},
                     {"type", type},
                     {"param", param ? json(std::string(*param)) : json(nullptr)},
                     {"code", code ? json(code) : json(nullptr)}}}});
}

std::string StoredResponseJson(const StoredResponse& response) {
  const ChatAnswer& a = response.answer;
  json calls = json::array();
  for (const ToolCallOut& call : a.tool_calls) {
    calls.push_back({{"id", call.id}, {"name", call.name}, {"arguments", call.arguments}});
  }
  json echo = response.echo.empty() ? json::object() : json::parse(response.echo, nullptr, false);
  if (!echo.is_object()) echo = json::object();
  json items = nullptr;
  if (!response.input_items.empty() && response.input_items.size() <= kMaxKeptInputBytes) {
    items = json::parse(response.input_items, nullptr, false);
    if (!items.is_array()) items = nullptr;
  }
  return JsonText({{"model", a.model},
                   {"created", a.created},
                   {"echo", echo},
                   {"text", a.text},
                   {"tool_calls", std::move(calls)},
                   {"finish_reason", a.finish_reason},
                   {"input_items", std::move(items)}});
}

absl::StatusOr<StoredResponse> ParseStoredResponse(std::string_view text) {
  const json j = json::parse(text, nullptr, false);
  const auto bad = absl::DataLossError("the stored response is not a response record");
  if (!j.is_object()) return bad;
  for (const char* key : {"model", "text", "finish_reason"}) {
    if (!j.contains(key) || !j[key].is_string()) return bad;
  }
  if (!j.contains("echo") || !j["echo"].is_object()) return bad;
  if (!j.contains("created") || !j["created"].is_number_integer() || !j.contains("tool_calls") ||
      !j["tool_calls"].is_array() || !j.contains("input_items") ||
      !(j["input_items"].is_array() || j["input_items"].is_null())) {
    return bad;
  }
  StoredResponse out;
  ChatAnswer& a = out.answer;
  a.model = j["model"].get<std::string>();
  a.created = j["created"].get<int64_t>();
  a.text = j["text"].get<std::string>();
  a.finish_reason = j["finish_reason"].get<std::string>();
  for (const json& call : j["tool_calls"]) {
    if (!call.is_object()) return bad;
    for (const char* key : {"id", "name", "arguments"}) {
      if (!call.contains(key) || !call[key].is_string()) return bad;
    }
    a.tool_calls.push_back({call["id"].get<std::string>(), call["name"].get<std::string>(),
                            call["arguments"].get<std::string>()});
  }
  out.echo = JsonText(j["echo"]);
  if (j["input_items"].is_array()) out.input_items = JsonText(j["input_items"]);
  return out;
}

absl::StatusOr<std::string> InputItemsPage(std::string_view items_text, const std::string& query) {
  std::optional<std::string> params[4];
  const char* names[4] = {"limit", "order", "after", "before"};
  for (int i = 0; i < 4; ++i) {
    auto value = QueryParam(query, names[i]);
    if (!value.ok()) return value.status();
    params[i] = std::move(*value);
  }
  const auto& [limit_text, order, after, before] = params;
  int limit = 20;
  if (limit_text.has_value() &&
      (!absl::SimpleAtoi(*limit_text, &limit) || limit < 1 || limit > 100)) {
    return Bad("limit",
               absl::StrCat("'limit' is '", *limit_text, "'; it must be an integer in [1, 100]"));
  }
  if (order.has_value() && *order != "asc" && *order != "desc") {
    return Bad("order", absl::StrCat("'order' is '", *order, "'; it must be 'asc' or 'desc'"));
  }
  json items = json::parse(items_text, nullptr, false);
  if (!items.is_array()) return absl::DataLossError("the stored input items are not a list");
  if (order.value_or("desc") == "desc") std::reverse(items.begin(), items.end());
  // The items between the cursors, in the page's order.
  size_t begin = 0, end = items.size();
  auto find = [&](const std::string& id, const char* name) -> absl::StatusOr<size_t> {
    for (size_t i = 0; i < items.size(); ++i) {
      if (items[i]["id"] == id) return i;
    }
    return Bad(name, absl::StrCat("'", name, "' is '", id, "', which is no item of this response"));
  };
  if (after.has_value()) {
    auto at = find(*after, "after");
    if (!at.ok()) return at.status();
    begin = *at + 1;
  }
  if (before.has_value()) {
    auto at = find(*before, "before");
    if (!at.ok()) return at.status();
    end = *at;
  }
  json data = json::array();
  for (size_t i = begin; i < end && data.size() < static_cast<size_t>(limit); ++i) {
    data.push_back(items[i]);
  }
  const bool more = begin < end && end - begin > data.size();
  return JsonText({{"object", "list"},
                   {"data", data},
                   {"first_id", data.empty() ? json(nullptr) : data.front()["id"]},
                   {"last_id", data.empty() ? json(nullptr) : data.back()["id"]},
                   {"has_more", more}});
}

std::optional<std::string> PercentDecoded(std::string_view in) {
  std::string out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out.push_back(in[i]);
      continue;
    }
    int value = 0;
    if (i + 2 >= in.size() || !absl::ascii_isxdigit(in[i + 1]) ||
        !absl::ascii_isxdigit(in[i + 2])) {
      return std::nullopt;
    }
    std::from_chars(in.data() + i + 1, in.data() + i + 3, value, 16);
    out.push_back(static_cast<char>(value));
    i += 2;
  }
  return out;
}

absl::StatusOr<std::optional<std::string>> QueryParam(const std::string& query,
                                                      const std::string& name) {
  const std::vector<std::string> pairs = absl::StrSplit(query, '&', absl::SkipEmpty());
  for (const std::string& pair : pairs) {
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) != name) continue;
    std::string raw = eq == std::string::npos ? "" : pair.substr(eq + 1);
    std::replace(raw.begin(), raw.end(), '+', ' ');
    std::optional<std::string> value = PercentDecoded(raw);
    if (!value.has_value()) {
      return WithParam(absl::InvalidArgumentError(absl::StrCat("malformed escape in '", name, "'")),
                       name);
    }
    return value;
  }
  return std::optional<std::string>();
}

std::string ResponseId(std::string_view session_id, uint64_t version) {
  return absl::StrCat("resp_", version, "_", std::string(session_id));
}

absl::StatusOr<std::pair<std::string, uint64_t>> ParseResponseId(std::string_view id) {
  const auto not_found =
      absl::NotFoundError(absl::StrCat("response '", std::string(id),
                                       "' not found: kvfold response ids look like "
                                       "resp_<version>_<session>"));
  if (!id.starts_with("resp_")) return not_found;
  id.remove_prefix(5);
  const size_t sep = id.find('_');
  if (sep == 0 || sep == std::string_view::npos || sep > 19 || sep + 1 == id.size()) {
    return not_found;
  }
  uint64_t version = 0;
  for (char c : id.substr(0, sep)) {
    if (c < '0' || c > '9') return not_found;
    version = version * 10 + static_cast<uint64_t>(c - '0');
  }
  if (version == 0) return not_found;
  return std::make_pair(std::string(id.substr(sep + 1)), version);
}

}  // namespace kvfold::http
