// OpenAiFront's generating endpoints: chat completions (with kvfold sessions),
// completions and responses (previous_response_id chains and forks). Each request is
// parsed on the I/O thread; a worker does the store round trips (heads, creation, forks)
// and starts the turn; a ChatTurn answers from the port's events. Chat messages go to the
// replica as messages: it renders them with its chat template, as a continuation when the
// session already holds a conversation.
#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/rng.h"
#include "inference_svc/http/chat_turn.h"
#include "inference_svc/http/openai_front.h"
#include "inference_svc/structured/json_grammar.h"
#include "nlohmann/json.hpp"

namespace kvfold::http {
namespace {

// The random part of the ids this front makes.
std::string RandomHex() { return kvfold::RandomHex(32); }

int64_t NowSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

ChatAnswer NewHead(std::string id, std::string model) {
  ChatAnswer head;
  head.id = std::move(id);
  head.model = std::move(model);
  head.created = NowSeconds();
  return head;
}

// The answer's shape: which API, streamed or not, and its id (`id_prefix` + random); the
// keywords the turns' schema reads past (`spec`, SpecFor's) in a header.
ChatTurnOptions AnswerOptions(ChatTurnOptions::Api api, bool stream, bool include_usage,
                              const GenerationParams& params, const TurnSpec& spec,
                              const std::string& id_prefix, const std::string& model) {
  ChatTurnOptions options;
  options.api = api;
  options.stream = stream;
  options.include_usage = include_usage;
  options.logprobs = params.logprobs;
  options.stop_token_ids = params.stop_token_ids;
  options.head = NewHead(id_prefix.empty() ? "" : absl::StrCat(id_prefix, RandomHex()), model);
  if (spec.grammar != nullptr && !spec.grammar->skipped().empty()) {
    options.headers.emplace_back(
        "X-Kvfold-Schema-Skipped",
        nlohmann::json(spec.grammar->skipped()).dump(-1, ' ', /*ensure_ascii=*/true));
  }
  return options;
}

TurnSpec SpecFor(const std::string& session_id, const GenerationParams& p) {
  TurnSpec spec;
  spec.session_id = session_id;
  spec.temperature = p.temperature.value_or(1.0f);
  spec.top_p = p.top_p.value_or(0.0f);
  spec.top_k = std::max(0, p.top_k.value_or(0));
  spec.seed = p.seed.value_or(0);
  spec.presence_penalty = p.presence_penalty.value_or(0.0f);
  spec.frequency_penalty = p.frequency_penalty.value_or(0.0f);
  spec.repetition_penalty = p.repetition_penalty.value_or(0.0f);
  spec.min_p = p.min_p.value_or(0.0f);
  spec.logit_bias = p.logit_bias;
  spec.stop_token_ids = p.stop_token_ids;
  spec.ignore_eos = p.ignore_eos;
  spec.min_tokens = p.min_tokens;
  spec.max_new_tokens = p.max_tokens.value_or(0);
  spec.top_logprobs = p.logprobs ? p.top_logprobs : -1;
  spec.format = p.format;
  spec.json_schema = p.json_schema;
  spec.lenient_schema = p.lenient_schema;
  spec.grammar = p.grammar;
  if (p.format == OutputFormat::kJsonSchema && p.lenient_schema && spec.grammar == nullptr) {
    // Compiled here once, for the header (what it reads past is known before the turns
    // start and a stream's first event goes out) and for every choice's turn. A schema
    // that is not one is left to the replica, which refuses it.
    auto grammar = structured::Grammar::FromSchema(p.json_schema, true, /*lenient=*/true);
    if (grammar.ok()) spec.grammar = std::move(*grammar);
  }
  spec.choices = p.choices;
  return spec;
}

// The request record's session, and its prompt: the messages as "role: content" lines, or
// `prompt_text` (only when the front records prompts).
void AnnotateTurn(ObservedExchange& exchange, const TurnSpec& spec, bool record_prompts,
                  const std::string& prompt_text = "") {
  exchange.Annotate([&](logging::RequestRecord* r) {
    r->session = spec.session_id;
    if (!record_prompts) return;
    r->prompt = prompt_text;
    for (const ChatMessage& m : spec.messages) {
      absl::StrAppend(&r->prompt, m.role, ": ", m.content, "\n");
    }
  });
}

// The seed of choice `index` of an ephemeral conversation: the request's seed + index, so
// that a seeded request is reproducible and its choices differ (choice 0 is what n = 1
// gives); unseeded, a random one per choice (0 would mean the RNG's fixed default).
uint64_t ChoiceSeed(const GenerationParams& p, int index) {
  if (p.seed.has_value()) return *p.seed + static_cast<uint64_t>(index);
  uint64_t seed = 0;
  while (seed == 0) seed = RandomWord();
  return seed;
}

// One choice of a request: its turn and (completions) the echoed prompt text.
struct Choice {
  TurnSpec spec;
  std::string echo;
};

// Starts one turn per choice (choice i is index i of the answer), answering on `exchange`
// through one ChoiceSet: the first failure answers the error, and choices after it are not
// started. `create_missing`: a named session that does not exist yet is created first.
void StartChoices(TurnPort* port, const Tokenizer* tokenizer, const Caller& caller,
                  std::vector<Choice> choices, ChatTurnOptions options,
                  std::shared_ptr<ObservedExchange> exchange, bool create_missing = false) {
  auto set = std::make_shared<ChoiceSet>(std::move(options), static_cast<int>(choices.size()),
                                         std::move(exchange), tokenizer);
  set->Watch();
  for (size_t i = 0; i < choices.size() && !set->closed(); ++i) {
    const TurnSpec& spec = choices[i].spec;
    auto turn = set->Choice(static_cast<int>(i), std::move(choices[i].echo));
    auto running = port->StartTurn(caller, spec, turn);
    if (!running.ok() && create_missing && running.status().code() == absl::StatusCode::kNotFound) {
      absl::Status created = port->CreateSession(caller, spec.session_id);
      if (!created.ok() && created.code() != absl::StatusCode::kAlreadyExists) {
        return turn->Fail(created);
      }
      running = port->StartTurn(caller, spec, turn);
    }
    if (!running.ok()) return turn->Fail(running.status());
    turn->Attach(std::move(*running));
  }
}

// The tools an answer is read for (null: none), in the way the model's family writes calls.
std::shared_ptr<const ToolSet> ToolsOfAnswer(ToolSet tools, const ChatTemplate& chat) {
  if (!tools.active()) return nullptr;
  tools.style = ToolCallStyleOf(chat.format());
  return std::make_shared<const ToolSet>(std::move(tools));
}

void AddStops(const GenerationParams& params, const ChatTemplate& chat, ChatTurnOptions* options) {
  options->stop = params.stop;
  for (const std::string& s : chat.stop_strings()) options->stop.push_back(s);
}

}  // namespace

void OpenAiFront::ChatCompletions(const Caller& caller, const HttpRequest& request,
                                  std::shared_ptr<ObservedExchange> exchange) {
  auto parsed = ParseChatCompletionRequest(request.body);
  if (!parsed.ok()) return exchange->RespondError(parsed.status());
  if (absl::Status s = CheckModel(parsed->model); !s.ok()) return exchange->RespondError(s);
  if (parsed->session.empty()) parsed->session = std::string(request.Header("X-Kvfold-Session"));
  if (!parsed->session.empty() && parsed->params.n != 1) {
    return exchange->RespondError(WithParam(
        absl::InvalidArgumentError(absl::StrCat(
            "'n' is ", parsed->params.n,
            ": a kvfold session keeps one answer (n = 1); several choices need an ephemeral "
            "conversation")),
        "n"));
  }
  Post([this, caller, req = std::move(*parsed), exchange]() mutable {
    // Without a session the conversation is ephemeral: nothing is read or stored.
    const bool ephemeral = req.session.empty();
    TurnSpec spec = SpecFor(req.session, req.params);
    spec.messages = std::move(req.messages);
    spec.continue_final_message = req.continue_final_message;
    spec.tools = req.tools.Shown();
    ChatTurnOptions options =
        AnswerOptions(ChatTurnOptions::Api::kChat, req.stream, req.include_usage, req.params, spec,
                      "chatcmpl-", port_->Model().id);
    if (!ephemeral) options.head.usage.session_id = req.session;
    AddStops(req.params, *chat_, &options);
    options.cancel_on_stop = ephemeral;
    options.choices_per_prompt = req.params.n;
    options.tools = ToolsOfAnswer(std::move(req.tools), *chat_);
    AnnotateTurn(*exchange, spec, options_.record_prompts);
    if (ephemeral && req.params.n > 1) spec.prompt_group = port_->GroupPrompt(req.params.n);
    std::vector<Choice> choices(req.params.n, Choice{spec, ""});
    if (ephemeral) {
      for (int i = 0; i < req.params.n; ++i) choices[i].spec.seed = ChoiceSeed(req.params, i);
    }
    StartChoices(port_, tokenizer_, caller, std::move(choices), std::move(options), exchange,
                 /*create_missing=*/!ephemeral);
  });
}

void OpenAiFront::Completions(const Caller& caller, const HttpRequest& request,
                              std::shared_ptr<ObservedExchange> exchange) {
  auto parsed = ParseCompletionRequest(request.body);
  if (!parsed.ok()) return exchange->RespondError(parsed.status());
  if (absl::Status s = CheckModel(parsed->model); !s.ok()) return exchange->RespondError(s);
  Post([this, caller, req = std::move(*parsed), exchange]() mutable {
    TurnSpec spec = SpecFor("", req.params);
    spec.prompt_only = req.prompt_only;
    // With logprobs, an echoed prompt is scored too (OpenAI's legacy layout).
    if (req.echo && req.params.logprobs) spec.prompt_logprobs = req.params.top_logprobs;
    const int n = req.params.n;
    std::vector<Choice> choices;
    std::string prompts_text;
    for (size_t p = 0; p < req.prompts.size(); ++p) {
      CompletionPrompt& prompt = req.prompts[p];
      if (!prompt.ids.empty()) {
        // Token ids are fed as given; their text serves echo and the request log.
        const std::string what =
            absl::StrCat(req.prompts.size() > 1 ? absl::StrCat("prompt ", p, ": ") : "", "prompt ");
        if (absl::Status s = CheckVocabulary(prompt.ids, what, "prompt"); !s.ok()) {
          return exchange->RespondError(s);
        }
        prompt.text = tokenizer_->Decode(prompt.ids);
        spec.prompt_ids = std::move(prompt.ids);
      } else {
        auto ids = tokenizer_->Encode(prompt.text, /*add_bos=*/true);
        if (!ids.ok()) return exchange->RespondError(ids.status());
        spec.prompt_ids = std::move(*ids);
      }
      absl::StrAppend(&prompts_text, p == 0 ? "" : "\n", prompt.text);
      // The prompt's choices feed it once (the port copies the fed session to the others).
      spec.prompt_group = n > 1 ? port_->GroupPrompt(n) : nullptr;
      for (int i = 0; i < n; ++i) {
        Choice& c = choices.emplace_back(Choice{spec, req.echo ? prompt.text : ""});
        c.spec.seed = ChoiceSeed(req.params, static_cast<int>(choices.size()) - 1);
      }
    }
    ChatTurnOptions options =
        AnswerOptions(ChatTurnOptions::Api::kCompletion, req.stream, req.include_usage, req.params,
                      spec, "cmpl-", port_->Model().id);
    options.stop = req.params.stop;
    options.cancel_on_stop = true;
    options.choices_per_prompt = n;
    AnnotateTurn(*exchange, spec, options_.record_prompts, prompts_text);
    StartChoices(port_, tokenizer_, caller, std::move(choices), std::move(options), exchange);
  });
}

namespace {

// `s` as the answer about previous_response_id `id`: a session or version the store does
// not have (NotFound) is that response not found; other errors stay as they are.
absl::Status AsPreviousResponse(absl::Status s, const std::string& id) {
  if (s.code() != absl::StatusCode::kNotFound) return s;
  return WithParam(absl::NotFoundError(absl::StrCat("response '", id, "' not found")),
                   "previous_response_id");
}

}  // namespace

// A response continues the session version its previous_response_id names: at the head
// the session itself advances; from an older version a fork of that version does, so
// every response id stays valid and continuing from one never rewrites history.
absl::StatusOr<OpenAiFront::ChainPoint> OpenAiFront::FindChainPoint(
    const Caller& caller, const std::string& previous_response_id) {
  auto id = ParseResponseId(previous_response_id);
  if (!id.ok()) return WithParam(id.status(), "previous_response_id");
  ChainPoint point{.session = id->first, .version = id->second, .head = 0};
  auto head = port_->HeadVersion(caller, point.session);
  if (!head.ok()) return AsPreviousResponse(head.status(), previous_response_id);
  if (point.version > *head) {
    return AsPreviousResponse(absl::NotFoundError("past the head"), previous_response_id);
  }
  point.head = *head;
  return point;
}

namespace {

// What a response's turn is given: a new chain starts with its instructions as the system
// message; a continuation gets the new input alone.
std::vector<ChatMessage> ResponseMessages(ResponsesRequest& req, bool new_chain) {
  std::vector<ChatMessage> messages;
  if (new_chain && !req.instructions.empty()) messages.push_back({"system", req.instructions});
  for (ChatMessage& m : req.input) messages.push_back(std::move(m));
  return messages;
}

}  // namespace

void OpenAiFront::Responses(const Caller& caller, const HttpRequest& request,
                            std::shared_ptr<ObservedExchange> exchange) {
  auto parsed = ParseResponsesRequest(request.body);
  if (!parsed.ok()) return exchange->RespondError(parsed.status());
  if (absl::Status s = CheckModel(parsed->model); !s.ok()) return exchange->RespondError(s);
  if (!parsed->previous_response_id.empty()) {
    if (auto id = ParseResponseId(parsed->previous_response_id); !id.ok()) {
      return exchange->RespondError(WithParam(id.status(), "previous_response_id"));
    }
  }
  Post([this, caller, req = std::move(*parsed), exchange]() mutable {
    std::string session;
    const bool new_chain = req.previous_response_id.empty();
    if (new_chain) {
      session = absl::StrCat("resp-", RandomHex());
      if (absl::Status s = port_->CreateSession(caller, session); !s.ok()) {
        return exchange->RespondError(s);
      }
    } else {
      auto point = FindChainPoint(caller, req.previous_response_id);
      if (!point.ok()) return exchange->RespondError(point.status());
      session = point->session;
      if (point->version < point->head) {
        session = absl::StrCat("resp-", RandomHex());
        absl::Status s = port_->ForkSession(caller, point->session, point->version, session);
        if (!s.ok()) return exchange->RespondError(AsPreviousResponse(s, req.previous_response_id));
      }
    }
    TurnSpec spec = SpecFor(session, req.params);
    spec.messages = ResponseMessages(req, new_chain);
    spec.tools = req.tools.Shown();
    // The id is the session version the turn writes, known for sure at the end. A stream
    // names it in its first event: the version after the session's head, which the turn's
    // commit writes (it commits only on that head; if another turn moved it first, this
    // one fails and its stream ends in response.failed).
    ChatTurnOptions options = AnswerOptions(ChatTurnOptions::Api::kResponse, req.stream, false,
                                            req.params, spec, "", port_->Model().id);
    if (req.stream) {
      auto head = port_->HeadVersion(caller, session);
      if (!head.ok()) return exchange->RespondError(head.status());
      options.head.id = ResponseId(session, *head + 1);
    }
    options.head.usage.session_id = session;
    options.response_echo = req.echo;
    options.keep_record = req.store;
    options.input_items = std::move(req.input_items);  // StoredResponseJson drops it if too large
    options.tools = ToolsOfAnswer(std::move(req.tools), *chat_);
    AddStops(req.params, *chat_, &options);
    AnnotateTurn(*exchange, spec, options_.record_prompts);
    StartChoices(port_, tokenizer_, caller, {Choice{std::move(spec), ""}}, std::move(options),
                 exchange);
  });
}

void OpenAiFront::InputTokens(const Caller& caller, const HttpRequest& request,
                              std::shared_ptr<ObservedExchange> exchange) {
  auto parsed = ParseInputTokensRequest(request.body);
  if (!parsed.ok()) return exchange->RespondError(parsed.status());
  if (absl::Status s = CheckModel(parsed->model); !s.ok()) return exchange->RespondError(s);
  // Rendered as the replica renders the create's turn (Runtime::PromptIds): a new chain
  // as a whole conversation, a continuation against where the version it continues ends
  // (a fork of an older version continues that version).
  Post([this, caller, req = std::move(*parsed), exchange]() mutable {
    const bool new_chain = req.previous_response_id.empty();
    SessionTail tail;
    if (!new_chain) {
      auto point = FindChainPoint(caller, req.previous_response_id);
      if (!point.ok()) return exchange->RespondError(point.status());
      auto found = port_->TailOf(caller, point->session, point->version);
      if (!found.ok()) return exchange->RespondError(found.status());
      tail = *found;
    }
    const std::vector<std::string> tools = req.tools.Shown();
    ChatRenderOptions render = chat_->OptionsAfter(tail.total_tokens == 0, tail.last_token);
    render.tools = tools;
    auto ids = chat_->RenderIds(ResponseMessages(req, new_chain), render);
    if (!ids.ok()) return exchange->RespondError(ids.status());
    exchange->Respond(200, "application/json", InputTokensJson(ids->size()));
  });
}

}  // namespace kvfold::http
