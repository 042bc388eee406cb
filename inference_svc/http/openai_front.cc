// OpenAiFront: routing, authentication, the simple endpoints and the worker pool
// (openai_front.h). The generating endpoints are in openai_generate.cc.
#include "inference_svc/http/openai_front.h"

#include <algorithm>
#include <charconv>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

namespace kvfold::http {
namespace {

constexpr std::string_view kSessionsPath = "/v1/kvfold/sessions";

}  // namespace

std::optional<OpenAiFront::SessionRoute> OpenAiFront::RouteSession(std::string_view method,
                                                                   std::string_view path) {
  if (path == kSessionsPath) {
    return SessionRoute{method == "POST" ? SessionOp::kCreate : SessionOp::kList, "",
                        method == "GET" || method == "POST"};
  }
  if (!path.starts_with(kSessionsPath) || path.size() <= kSessionsPath.size() + 1 ||
      path[kSessionsPath.size()] != '/') {
    return std::nullopt;
  }
  std::string_view rest = path.substr(kSessionsPath.size() + 1);
  for (auto [action, op] : {std::pair{std::string_view("/fork"), SessionOp::kFork},
                            std::pair{std::string_view("/rollback"), SessionOp::kRollback}}) {
    if (rest.size() > action.size() && rest.ends_with(action)) {
      return SessionRoute{op, std::string(rest.substr(0, rest.size() - action.size())),
                          method == "POST"};
    }
  }
  return SessionRoute{method == "DELETE" ? SessionOp::kDelete : SessionOp::kGet, std::string(rest),
                      method == "GET" || method == "DELETE"};
}

absl::StatusOr<std::unique_ptr<OpenAiFront>> OpenAiFront::Start(const OpenAiFrontOptions& options,
                                                                TurnPort* port,
                                                                const Tokenizer* tokenizer,
                                                                const ChatTemplate* chat) {
  if (port == nullptr || tokenizer == nullptr || chat == nullptr) {
    return absl::FailedPreconditionError(
        "the HTTP API needs the replica's tokenizer and chat template");
  }
  if (options.workers < 1 || options.workers > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("http workers ", options.workers, " outside [1, 256]"));
  }
  std::unique_ptr<OpenAiFront> front(new OpenAiFront());
  front->options_ = options;
  front->port_ = port;
  front->tokenizer_ = tokenizer;
  front->chat_ = chat;
  for (int i = 0; i < options.workers; ++i) {
    front->workers_.emplace_back([f = front.get()] { f->WorkerLoop(); });
  }
  auto server = HttpServer::Start(
      options.http, [f = front.get()](HttpRequest r, std::shared_ptr<HttpExchange> e) {
        f->Handle(std::move(r), std::move(e));
      });
  if (!server.ok()) {
    front->Stop();
    return server.status();
  }
  front->server_ = std::move(*server);
  return front;
}

OpenAiFront::~OpenAiFront() { Stop(); }

void OpenAiFront::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && workers_.empty()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  if (server_ != nullptr) server_->Stop();
}

void OpenAiFront::Post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void OpenAiFront::WorkerLoop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping and drained
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

absl::Status OpenAiFront::CheckModel(const std::string& model) {
  const std::string served = port_->Model().id;
  if (model.empty() || model == served) return absl::OkStatus();
  return absl::NotFoundError(
      absl::StrCat("the model '", model, "' does not exist; this server serves '", served, "'"));
}

absl::Status OpenAiFront::CheckVocabulary(const std::vector<int32_t>& ids, const std::string& what,
                                          std::string_view param) const {
  for (int32_t id : ids) {
    if (id >= tokenizer_->vocab_size()) {
      return WithParam(absl::InvalidArgumentError(absl::StrCat(
                           what, "token id ", id, " outside [0, ", tokenizer_->vocab_size(), ")")),
                       param);
    }
  }
  return absl::OkStatus();
}

void OpenAiFront::Handle(HttpRequest request, std::shared_ptr<HttpExchange> inner) {
  const std::string& path = request.path;
  const bool get = request.method == "GET";
  const bool post = request.method == "POST";
  const bool probe =
      get && (path == "/health" || path.starts_with("/health/") || path == "/metrics");
  auto exchange =
      std::make_shared<ObservedExchange>(std::move(inner), request, probe, options_.on_request);
  exchange->Start();
  if (get && (path == "/health" || path == "/health/ready")) {
    const absl::Status ready = port_->Ready();
    exchange->Respond(ready.ok() ? 200 : 503, "application/json",
                      JsonText(nlohmann::json{{"status", ready.ok() ? "ok" : ready.message()}}));
    return;
  }
  if (get && path == "/health/live") {
    exchange->Respond(200, "application/json", R"({"status":"ok"})");
    return;
  }
  if (get && path == "/metrics") {
    if (!options_.metrics_text) return exchange->RespondError(absl::NotFoundError("no metrics"));
    exchange->Respond(200, "text/plain; version=0.0.4", options_.metrics_text());
    return;
  }
  constexpr std::string_view kModelPrefix = "/v1/models/";
  constexpr std::string_view kInputTokensPath = "/v1/responses/input_tokens";
  const bool model_path = path.starts_with(kModelPrefix) && path.size() > kModelPrefix.size();
  const bool post_path = path == "/v1/chat/completions" || path == "/v1/completions" ||
                         path == "/v1/responses" || path == kInputTokensPath ||
                         path == "/tokenize" || path == "/detokenize";
  const std::optional<SessionRoute> session_route = RouteSession(request.method, path);
  const bool sessions_path = session_route.has_value();
  constexpr std::string_view kResponsePrefix = "/v1/responses/";
  constexpr std::string_view kInputItems = "/input_items";
  std::string_view response_id;
  bool input_items = false;
  if (path.starts_with(kResponsePrefix)) {
    response_id = std::string_view(path).substr(kResponsePrefix.size());
    input_items = response_id.ends_with(kInputItems);
    if (input_items) response_id.remove_suffix(kInputItems.size());
  }
  const bool response_path = !response_id.empty() && response_id.find('/') == std::string::npos &&
                             path != kInputTokensPath;
  const bool known = (get && (path == "/v1/models" || model_path || response_path)) ||
                     (post && post_path) || (sessions_path && session_route->allowed);
  if (!known) {
    const bool other_method =
        path == "/v1/models" || model_path || post_path || sessions_path || response_path;
    exchange->Respond(
        other_method ? 405 : 404, "application/json",
        ErrorJson(absl::NotFoundError(absl::StrCat("no route ", request.method, " ", path))));
    return;
  }
  auto caller = port_->Authenticate(request.Header("Authorization"));
  if (!caller.ok()) return exchange->RespondError(caller.status());
  exchange->Annotate([&](logging::RequestRecord* r) { r->tenant = caller->tenant; });
  if (path == "/v1/models") return Models(*caller, "", *exchange);
  if (model_path) {
    return Models(*caller, std::string_view(path).substr(kModelPrefix.size()), *exchange);
  }
  if (path == "/v1/chat/completions") return ChatCompletions(*caller, request, exchange);
  if (path == "/v1/completions") return Completions(*caller, request, exchange);
  if (sessions_path) return Sessions(*caller, *session_route, request, exchange);
  if (path == kInputTokensPath) return InputTokens(*caller, request, exchange);
  if (path == "/tokenize") return Tokenize(request, exchange);
  if (path == "/detokenize") return Detokenize(request, *exchange);
  if (response_path) {
    return ReadBackResponse(*caller, std::string(response_id), input_items, request, exchange);
  }
  return Responses(*caller, request, exchange);
}

void OpenAiFront::ReadBackResponse(const Caller& caller, const std::string& raw_id, bool items,
                                   const HttpRequest& request,
                                   std::shared_ptr<ObservedExchange> exchange) {
  const std::optional<std::string> id = PercentDecoded(raw_id);
  if (!id.has_value()) {
    return exchange->RespondError(
        absl::InvalidArgumentError("malformed escape in the response id"));
  }
  auto version = ParseResponseId(*id);
  if (!version.ok()) return exchange->RespondError(version.status());
  exchange->Annotate([&](logging::RequestRecord* r) { r->session = version->first; });
  Post([this, caller, id = *id, at = *version, items, query = request.query, exchange] {
    const auto& [session, version] = at;
    auto turn = port_->StoredTurnOf(caller, session, version);
    if (!turn.ok()) {
      // Another tenant's, removed, or written without a record (not by this API, or with
      // store: false): OpenAI's 404 for each.
      return exchange->RespondError(
          turn.status().code() == absl::StatusCode::kNotFound
              ? absl::NotFoundError(absl::StrCat("response '", id, "' not found"))
              : turn.status());
    }
    auto stored = ParseStoredResponse(turn->front_record);
    if (!stored.ok()) return exchange->RespondError(stored.status());
    if (items) {
      if (stored->input_items.empty()) {
        return exchange->RespondError(absl::NotFoundError(
            absl::StrCat("the input items of response '", id, "' were not kept (over ",
                         kMaxKeptInputBytes, " bytes)")));
      }
      auto page = InputItemsPage(stored->input_items, query);
      if (!page.ok()) return exchange->RespondError(page.status());
      return exchange->Respond(200, "application/json", std::move(*page));
    }
    ChatAnswer& answer = stored->answer;
    answer.id = id;
    if (answer.finish_reason.empty()) answer.finish_reason = turn->finish_reason;
    answer.usage = {.prompt_tokens = turn->prompt_tokens,
                    .cached_tokens = turn->cached_prompt_tokens,
                    .completion_tokens = turn->generated_tokens,
                    .tokens_folded = turn->tokens_folded,
                    .version = version,
                    .session_id = session,
                    .replica = turn->replica};
    exchange->Respond(200, "application/json", ResponseJson(answer, stored->echo));
  });
}

void OpenAiFront::Sessions(const Caller& caller, const SessionRoute& route,
                           const HttpRequest& request, std::shared_ptr<ObservedExchange> exchange) {
  std::string body = request.body;
  if (route.op == SessionOp::kList) {
    // The page's fields come as query parameters.
    auto page_size = QueryParam(request.query, "page_size");
    auto page_token = QueryParam(request.query, "page_token");
    for (const auto* p : {&page_size, &page_token}) {
      if (!p->ok()) return exchange->RespondError(p->status());
    }
    uint32_t size = 0;
    if (page_size->has_value() && (!absl::SimpleAtoi(**page_size, &size) || size > 1000)) {
      return exchange->RespondError(
          WithParam(absl::InvalidArgumentError(absl::StrCat(
                        "'page_size' is '", **page_size, "'; it must be an integer in [0, 1000]")),
                    "page_size"));
    }
    body = JsonText(nlohmann::json{{"page_size", size}, {"page_token", page_token->value_or("")}});
  }
  std::string id;
  if (!route.raw_id.empty()) {
    const std::optional<std::string> decoded = PercentDecoded(route.raw_id);
    if (!decoded.has_value()) {
      return exchange->RespondError(WithParam(
          absl::InvalidArgumentError("malformed escape in the session id"), "session_id"));
    }
    id = *decoded;
    exchange->Annotate([&](logging::RequestRecord* r) { r->session = id; });
  }
  Post([this, caller, op = route.op, id, body = std::move(body), exchange] {
    auto json = port_->SessionCall(caller, op, id, body);
    if (!json.ok()) return exchange->RespondError(json.status());
    exchange->Respond(200, "application/json", std::move(*json));
  });
}

void OpenAiFront::Tokenize(const HttpRequest& request, std::shared_ptr<ObservedExchange> exchange) {
  auto parsed = ParseTokenizeRequest(request.body);
  if (!parsed.ok()) return exchange->RespondError(parsed.status());
  if (absl::Status s = CheckModel(parsed->model); !s.ok()) return exchange->RespondError(s);
  // Tokenizing a large body takes a while: off the I/O thread.
  Post([this, req = std::move(*parsed), exchange] {
    absl::StatusOr<std::vector<int32_t>> ids;
    if (req.prompt.has_value()) {
      ids = tokenizer_->Encode(*req.prompt, req.add_special_tokens);
    } else {
      ChatRenderOptions render;
      render.add_generation_prompt = req.add_generation_prompt;
      render.continue_final_message = req.continue_final_message;
      render.tools = req.tools;
      ids = chat_->RenderIds(req.messages, render);
    }
    if (!ids.ok()) return exchange->RespondError(ids.status());
    std::vector<std::string> strs;
    if (req.return_token_strs) {
      for (int32_t id : *ids) strs.emplace_back(tokenizer_->TokenBytes(id));
    }
    exchange->Respond(200, "application/json",
                      TokenizeJson(*ids, port_->Model().max_prompt_tokens,
                                   req.return_token_strs ? &strs : nullptr));
  });
}

void OpenAiFront::Detokenize(const HttpRequest& request, ObservedExchange& exchange) {
  auto parsed = ParseDetokenizeRequest(request.body);
  if (!parsed.ok()) return exchange.RespondError(parsed.status());
  if (absl::Status s = CheckModel(parsed->model); !s.ok()) return exchange.RespondError(s);
  if (absl::Status s = CheckVocabulary(parsed->tokens, "", "tokens"); !s.ok()) {
    return exchange.RespondError(s);
  }
  exchange.Respond(200, "application/json",
                   JsonText(nlohmann::json{{"prompt", tokenizer_->Decode(parsed->tokens)}}));
}

void OpenAiFront::Models(const Caller& caller, std::string_view id, ObservedExchange& exchange) {
  const ModelCard card = port_->Model();
  nlohmann::json model = {
      {"id", card.id}, {"object", "model"}, {"created", card.created}, {"owned_by", "kvfold"}};
  if (id.empty()) {
    exchange.Respond(200, "application/json",
                     JsonText(nlohmann::json{{"object", "list"}, {"data", {model}}}));
    return;
  }
  const std::optional<std::string> name = PercentDecoded(id);
  if (name != card.id) {
    return exchange.RespondError(WithParam(
        absl::NotFoundError(absl::StrCat("the model '", name.value_or(std::string(id)),
                                         "' does not exist; this server serves '", card.id, "'")),
        "model"));
  }
  exchange.Respond(200, "application/json", JsonText(model));
}

}  // namespace kvfold::http
