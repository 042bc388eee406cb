// The OpenAI wire format kvfold's HTTP front speaks: request bodies parsed into plain
// structs (every value checked; InvalidArgument names the field), response bodies and
// server-sent-event chunks built from plain structs, errors in OpenAI's error JSON, and
// the response-id <-> (session, version) mapping. No I/O. Fields: docs/http-api.md.
#ifndef KVFOLD_INFERENCE_SVC_HTTP_OPENAI_PROTOCOL_H_
#define KVFOLD_INFERENCE_SVC_HTTP_OPENAI_PROTOCOL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "inference_svc/http/tool_calls.h"
#include "inference_svc/http/turn_port.h"
#include "inference_svc/tokenizer/chat_template.h"
#include "nlohmann/json_fwd.hpp"

namespace kvfold::http {

// Most alternatives per token a request may ask for (OpenAI's top_logprobs limit).
inline constexpr int kMaxTopLogprobs = 20;
// Most choices one request may ask for: its prompts times `n`.
inline constexpr int kMaxChoices = 128;

// Sampling and output controls shared by every generating endpoint.
struct GenerationParams {
  std::optional<int> max_tokens;     // max_tokens / max_completion_tokens / max_output_tokens
  std::optional<float> temperature;  // [0, 2]; absent = 1 (OpenAI's default)
  std::optional<float> top_p;        // (0, 1]
  std::optional<uint64_t> seed;
  // OpenAI's penalties, [-2, 2]; and vLLM's extensions repetition_penalty (> 0) and top_k
  // (0 or -1 = off).
  std::optional<float> presence_penalty;
  std::optional<float> frequency_penalty;
  std::optional<float> repetition_penalty;
  std::optional<int> top_k;
  std::optional<float> min_p;  // vLLM's, [0, 1]
  // OpenAI's logit_bias: (token id, bias in [-100, 100]), sorted by id; the replica checks
  // the ids against its vocabulary.
  std::vector<std::pair<int32_t, float>> logit_bias;
  std::vector<std::string> stop;  // at most 4 non-empty strings
  // vLLM's: end the turn on one of these ids (its text not shown), the model's EOS ids
  // not ending it, and no stop or EOS id among the first min_tokens tokens.
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  int min_tokens = 0;
  // Log-probabilities of the generated tokens and top_logprobs alternatives each: chat's
  // logprobs/top_logprobs, completions' logprobs count, responses' top_logprobs/include.
  bool logprobs = false;
  int top_logprobs = 0;  // [0, kMaxTopLogprobs]
  // Choices per prompt, each an independent sample (OpenAI's `n`), [1, kMaxChoices].
  int n = 1;
  // OpenAI's response_format (chat, completions) or text.format (responses), or vLLM's
  // guided_json / guided_choice / structured_outputs: free text, a JSON object, a
  // document of json_schema (the schema, as JSON text; the replica refuses a schema it
  // cannot hold), or exactly one of `choices`.
  OutputFormat format = OutputFormat::kText;
  std::string json_schema;
  // `strict: false` given with the json_schema: what the subset cannot hold is read past
  // and named in the X-Kvfold-Schema-Skipped header (docs/structured-output.md).
  bool lenient_schema = false;
  // kJsonSchema: json_schema already compiled (tools' answers, HeldAnswerSchema, with
  // each lenient tool read leniently); null: compiled from json_schema.
  std::shared_ptr<const structured::Grammar> grammar;
  std::vector<std::string> choices;
};

struct ChatCompletionRequest {
  std::string model;
  std::vector<ChatMessage> messages;
  GenerationParams params;
  bool stream = false;
  bool include_usage = false;           // stream_options.include_usage
  bool continue_final_message = false;  // the last (assistant) message is continued
  std::string session;                  // kvfold_session (or the X-Kvfold-Session header)
  // tools / tool_choice / parallel_tool_calls. With tool_choice required or a named
  // function, params.format is kJsonSchema with ToolAnswerSchema's schema.
  ToolSet tools;
};

// One prompt of a completions request.
struct CompletionPrompt {
  std::string text;  // a text prompt (BOS added when tokenized)
  // A prompt of token ids (OpenAI's `prompt: [1, 2, 3]`), fed as given: no BOS. Non-empty
  // when the request gave ids; `text` is then empty.
  std::vector<int32_t> ids;
};

struct CompletionRequest {
  std::string model;
  // At least one: `prompt` as a string, token ids, or an array of either (a batch). The
  // answer has params.n choices per prompt, prompt i's at indices i * n .. i * n + n - 1.
  std::vector<CompletionPrompt> prompts;
  GenerationParams params;
  bool stream = false;
  bool include_usage = false;
  bool echo = false;
  // `max_tokens: 0` with echo: the prompt alone is fed (and scored with logprobs).
  bool prompt_only = false;
};

struct ResponsesRequest {
  std::string model;
  std::vector<ChatMessage> input;  // a string input is one user message
  std::string instructions;        // a system message for a new chain
  std::string previous_response_id;
  GenerationParams params;
  bool stream = false;  // OpenAI's typed events (ResponseStream*)
  // Function tools ({"type": "function", "name", "parameters"}) and tool_choice in the
  // Responses form, held as chat's; input items function_call / function_call_output
  // become an assistant's tool calls / tool messages.
  ToolSet tools;
  // `store` (default true): false keeps no record of the response with its version (GET
  // /v1/responses/{id} then answers 404), though previous_response_id still continues it.
  bool store = true;
  // The input as OpenAI lists a response's input items (GET .../input_items), a JSON
  // array's text: a string input is one user message; messages get their content as parts
  // (`input_text`, an assistant's `output_text`); function_call / function_call_output
  // items stay as given; each item without a string `id` gets "item_<index>".
  std::string input_items;
  // The request's fields a response object repeats, a JSON object's text:
  // previous_response_id, instructions, metadata (checked: at most 16 strings, keys of at
  // most 64 characters, values of at most 512), max_output_tokens, temperature, top_p,
  // tools, tool_choice, parallel_tool_calls, text and store, as given, else OpenAI's
  // defaults (null, {}, 1, [], "auto", true, {"format": {"type": "text"}}).
  std::string echo;
};

// vLLM's POST /tokenize: a text prompt or chat messages, as a turn would feed them.
struct TokenizeRequest {
  std::string model;
  // Exactly one of the two.
  std::optional<std::string> prompt;
  std::vector<ChatMessage> messages;
  std::vector<std::string> tools;       // messages: as a chat turn shows them (vLLM's `tools`)
  bool add_special_tokens = true;       // a prompt starts with BOS (messages: the template's)
  bool add_generation_prompt = true;    // messages: the assistant's header at the end
  bool continue_final_message = false;  // messages: the last (assistant) one left open
  bool return_token_strs = false;       // also each token's text
};

// vLLM's POST /detokenize.
struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;  // ids >= 0 (the front checks them against the vocabulary)
};

// InvalidArgument for malformed JSON, wrong types, values out of range (n: [1, 128]; a
// completions batch's prompts x n at most kMaxChoices; responses: n = 1), and unsupported
// features that would change the answer (tools outside chat, best_of, non-text content
// parts, chat's audio / prediction / web search / non-text modalities, the Responses API's
// conversation, background, prompt templates). Unknown fields are ignored
// (docs/http-api.md lists the refused and the ignored ones).
absl::StatusOr<ChatCompletionRequest> ParseChatCompletionRequest(std::string_view body);
absl::StatusOr<CompletionRequest> ParseCompletionRequest(std::string_view body);
absl::StatusOr<ResponsesRequest> ParseResponsesRequest(std::string_view body);
// OpenAI's POST /v1/responses/input_tokens: the fields of a create that decide its input
// (model, input, instructions, previous_response_id, tools, tool_choice,
// parallel_tool_calls, text, reasoning, truncation), checked as a create checks them; any
// other field is a 400 naming it.
absl::StatusOr<ResponsesRequest> ParseInputTokensRequest(std::string_view body);
// {"object": "response.input_tokens", "input_tokens": count}.
std::string InputTokensJson(size_t count);
// Neither or both of prompt and messages, add_generation_prompt with
// continue_final_message, ids that are not integers >= 0: InvalidArgument.
absl::StatusOr<TokenizeRequest> ParseTokenizeRequest(std::string_view body);
absl::StatusOr<DetokenizeRequest> ParseDetokenizeRequest(std::string_view body);
// {"count", "max_model_len" (the replica's prompt limit), "tokens"[, "token_strs"]}.
std::string TokenizeJson(const std::vector<int32_t>& tokens, uint32_t max_prompt_tokens,
                         const std::vector<std::string>* token_strs);

// One generated token with its log-probabilities (when requested).
struct TokenLogprob {
  std::string token;  // the token's text (bytes)
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;  // most likely first
  // False for an echoed prompt's first token on an empty session (nothing precedes it):
  // its logprob and alternatives are null.
  bool scored = true;
};

// kvfold's additions to usage.
struct TurnUsage {
  uint32_t prompt_tokens = 0;
  uint32_t cached_tokens = 0;  // of prompt_tokens, from the prefix cache
  uint32_t completion_tokens = 0;
  uint32_t tokens_folded = 0;
  uint64_t version = 0;    // the store version the turn wrote (0: nothing written)
  std::string session_id;  // empty for an ephemeral conversation
  std::string replica;
};

// The finish reason of an answer that calls a function of the deprecated `functions`.
inline constexpr std::string_view kFunctionCallFinish = "function_call";

struct ChatAnswer {
  std::string id;  // chatcmpl-..., cmpl-..., resp_...
  std::string model;
  int64_t created = 0;  // unix seconds
  int index = 0;        // the choice's index in the answer
  std::string text;
  // A chat answer read as tool calls: `text` is the content before them (null in the
  // JSON when empty) and finish_reason is "tool_calls", or kFunctionCallFinish for the
  // deprecated `functions` (its one call goes out as `message.function_call`).
  std::vector<ToolCallOut> tool_calls;
  std::string finish_reason;           // "stop", "length", "tool_calls" or "function_call"
  std::vector<TokenLogprob> logprobs;  // empty unless requested
  TurnUsage usage;
};

// A whole chat or text completion: `choices` (at least one, in index order; the envelope's
// id, model and created from the first) and the request's `usage`.
std::string ChatCompletionJson(const std::vector<ChatAnswer>& choices, const TurnUsage& usage);
std::string CompletionJson(const std::vector<ChatAnswer>& choices, const TurnUsage& usage);
// `echo` (ResponsesRequest::echo; empty: none) is set on each response object below.
std::string ResponseJson(const ChatAnswer& answer, std::string_view echo);
// A streamed response, as OpenAI's Responses API streams one: each function returns whole
// server-sent events ("event: <type>\ndata: {...}\n\n") and advances *sequence (each
// event's sequence_number). Start: response.created (status in_progress, no output),
// response.output_item.added and response.content_part.added; then one
// response.output_text.delta per piece of text; End: response.output_text.done,
// response.content_part.done, response.output_item.done, for each tool call
// response.output_item.added, response.function_call_arguments.delta (the arguments
// whole), response.function_call_arguments.done and response.output_item.done (items 1..,
// after the message item, which stays even when empty), and response.completed (or
// response.incomplete when max_output_tokens ended it), carrying ResponseJson's object.
// A failure after the start ends the stream with response.failed, whose response carries
// the error's code and message.
std::string ResponseStreamStart(const ChatAnswer& head, std::string_view echo, int* sequence);
std::string ResponseTextDeltaEvent(const ChatAnswer& head, std::string_view delta,
                                   const std::vector<TokenLogprob>& logprobs, int* sequence);
std::string ResponseStreamEnd(const ChatAnswer& answer, std::string_view echo, int* sequence);
std::string ResponseFailedEvent(const ChatAnswer& head, std::string_view echo,
                                const absl::Status& status, int* sequence);
// One SSE event "data: {...}\n\n" of a streamed chat completion / completion, for choice
// head.index. `first` adds the assistant role; a non-empty finish_reason closes the choice.
std::string ChatChunkEvent(const ChatAnswer& head, std::string_view delta, bool first,
                           std::string_view finish_reason,
                           const std::vector<TokenLogprob>& logprobs);
// A streamed chat choice's tool calls, whole (id, name and arguments in one delta each,
// indices from 0); `function_call`: the deprecated form's one call, {"function_call":
// {"name", "arguments"}}.
std::string ChatToolCallsChunkEvent(const ChatAnswer& head, const std::vector<ToolCallOut>& calls,
                                    bool first, const std::vector<TokenLogprob>& logprobs,
                                    bool function_call = false);
std::string CompletionChunkEvent(const ChatAnswer& head, std::string_view delta,
                                 std::string_view finish_reason,
                                 const std::vector<TokenLogprob>& logprobs);
// The usage-only chunk of stream_options.include_usage (choices empty).
std::string UsageChunkEvent(const ChatAnswer& answer, bool chat);
inline constexpr std::string_view kDoneEvent = "data: [DONE]\n\n";

// `j` as compact JSON text; bytes that are not UTF-8 (a model file's name, a status
// message, generated text cut mid-character) become U+FFFD instead of making the
// serializer throw. Every JSON body the HTTP API writes goes through it.
std::string JsonText(const nlohmann::json& j);

// OpenAI's error JSON {"error": {"message", "type", "param", "code"}} and the HTTP status
// for a status code: InvalidArgument/FailedPrecondition/OutOfRange 400, Unauthenticated
// 401, PermissionDenied 403, NotFound 404, Aborted/AlreadyExists 409, ResourceExhausted
// 429, Unavailable 503, DeadlineExceeded 504, Cancelled 499, others 500.
int HttpStatusOf(absl::StatusCode code);
std::string ErrorJson(const absl::Status& status);
// `status` naming the request field it is about, for ErrorJson's "param" (the parsers
// below name theirs; callers name the fields they check themselves).
absl::Status WithParam(absl::Status status, std::string_view param);

// A response as its version keeps it (docs/http-api.md, "Stored responses"): `answer`'s
// model, created, text, tool_calls and finish_reason when the front set it ("stop" for a
// stop string, "tool_calls"; empty: the turn's own), the request's echo
// (ResponsesRequest::echo), and the input items (ResponsesRequest::input_items; empty: not
// kept). Input items whose text is over kMaxKeptInputBytes are not kept.
inline constexpr size_t kMaxKeptInputBytes = 4u << 20;
struct StoredResponse {
  ChatAnswer answer;
  std::string echo;
  std::string input_items;
};
std::string StoredResponseJson(const StoredResponse& response);
// DataLoss for text that StoredResponseJson did not write.
absl::StatusOr<StoredResponse> ParseStoredResponse(std::string_view text);
// One page of a response's input items (`items`, ResponsesRequest::input_items), as
// OpenAI's GET /v1/responses/{id}/input_items answers: {"object": "list", "data",
// "first_id", "last_id", "has_more"}. `query`: `limit` (1..100, default 20), `order`
// ("asc" or "desc", the default: the last item first), `after` / `before` (an item id:
// the page starts after it / ends before it, in that order). InvalidArgument naming the
// parameter for a bad value or an id that is not an item.
absl::StatusOr<std::string> InputItemsPage(std::string_view items, const std::string& query);

// %XX escapes of a path segment decoded; nullopt for a malformed escape.
std::optional<std::string> PercentDecoded(std::string_view in);
// The value of `name` in a query string ("a=1&b=x%20y"), percent-escapes and '+'
// decoded; nullopt when absent. InvalidArgument for a malformed escape.
absl::StatusOr<std::optional<std::string>> QueryParam(const std::string& query,
                                                      const std::string& name);

// Response ids name a stored session version: "resp_<version>_<session_id>".
std::string ResponseId(std::string_view session_id, uint64_t version);
// NotFound for an id that is not of that form.
absl::StatusOr<std::pair<std::string, uint64_t>> ParseResponseId(std::string_view id);

}  // namespace kvfold::http

#endif  // KVFOLD_INFERENCE_SVC_HTTP_OPENAI_PROTOCOL_H_
