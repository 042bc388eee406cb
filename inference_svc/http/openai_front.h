// OpenAiFront: kvfold-inference's OpenAI-compatible HTTP API (docs/http-api.md) on an
// HttpServer, speaking to the replica through a TurnPort.
//
//   GET  /v1/models               the served model
//   POST /v1/chat/completions     chat (JSON or SSE); kvfold_session / X-Kvfold-Session
//                                 continues a named session with only the new messages
//   POST /v1/completions          raw text prompt
//   POST /v1/responses            previous_response_id continues (or forks) a stored
//                                 session version on any replica
//   GET  /v1/responses/{id}[/input_items]
//                                 a stored response, as created, and its input items
//   POST /tokenize, /detokenize   vLLM's: token ids of a prompt or messages, and back
//   /v1/kvfold/sessions           the caller's stored sessions, the gRPC API's messages:
//                                 GET lists, POST creates; GET and DELETE .../{id};
//                                 POST .../{id}/fork and .../{id}/rollback
//   GET  /health, /health/live, /health/ready, /metrics
//
// Requests are parsed on the I/O threads; store round trips run on a small worker pool;
// tokens flow from the port to the connection without a thread per stream.
#ifndef KVFOLD_INFERENCE_SVC_HTTP_OPENAI_FRONT_H_
#define KVFOLD_INFERENCE_SVC_HTTP_OPENAI_FRONT_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/request_log.h"
#include "inference_svc/http/http_server.h"
#include "inference_svc/http/observed_exchange.h"
#include "inference_svc/http/openai_protocol.h"
#include "inference_svc/http/turn_port.h"
#include "inference_svc/tokenizer/chat_template.h"
#include "inference_svc/tokenizer/tokenizer.h"

namespace kvfold::http {

struct OpenAiFrontOptions {
  HttpServerOptions http;
  // Threads for store round trips (session lookups, creation, forks). Default 4.
  int workers = 4;
  // Prometheus text for GET /metrics; null = 404.
  std::function<std::string()> metrics_text;
  // Receives one record per finished request (the request log line and request metrics);
  // called on a front or port thread, must not block. Null = none.
  ObservedExchange::Observer on_request;
  // Put the prompt (messages or completion prompt) into the records. Default: false.
  bool record_prompts = false;
};

class OpenAiFront {
 public:
  // `port`, `tokenizer` and `chat` must outlive the front. Unavailable when the HTTP
  // address cannot be bound.
  static absl::StatusOr<std::unique_ptr<OpenAiFront>> Start(const OpenAiFrontOptions& options,
                                                            TurnPort* port,
                                                            const Tokenizer* tokenizer,
                                                            const ChatTemplate* chat);
  // Stop(): no new requests; turns in flight are cancelled; joins the workers.
  ~OpenAiFront();
  void Stop();

  int port() const { return server_->port(); }
  const HttpServer& server() const { return *server_; }

 private:
  OpenAiFront() = default;
  void Handle(HttpRequest request, std::shared_ptr<HttpExchange> inner);
  void Post(std::function<void()> task);
  void WorkerLoop();

  // GET /v1/models (`id` empty: the list) or /v1/models/{id} (the served model, else 404).
  void Models(const Caller& caller, std::string_view id, ObservedExchange& exchange);
  void ChatCompletions(const Caller& caller, const HttpRequest& request,
                       std::shared_ptr<ObservedExchange> exchange);
  void Completions(const Caller& caller, const HttpRequest& request,
                   std::shared_ptr<ObservedExchange> exchange);
  void Responses(const Caller& caller, const HttpRequest& request,
                 std::shared_ptr<ObservedExchange> exchange);
  // POST /v1/responses/input_tokens: the tokens a create of the same fields would feed.
  void InputTokens(const Caller& caller, const HttpRequest& request,
                   std::shared_ptr<ObservedExchange> exchange);
  // The version a previous_response_id names and its session's head: InvalidArgument for
  // an id that is not a response id, NotFound (on previous_response_id) when the session or
  // version is not the caller's or is ahead of the head.
  struct ChainPoint {
    std::string session;
    uint64_t version = 0;
    uint64_t head = 0;
  };
  absl::StatusOr<ChainPoint> FindChainPoint(const Caller& caller,
                                            const std::string& previous_response_id);
  // GET /v1/responses/{id} (`raw_id` as in the path) and, with `items`, .../input_items:
  // the record kept with the response's version.
  void ReadBackResponse(const Caller& caller, const std::string& raw_id, bool items,
                        const HttpRequest& request, std::shared_ptr<ObservedExchange> exchange);
  // kvfold's stored sessions (docs/http-api.md, "Stored sessions"): which operation a
  // request under /v1/kvfold/sessions is, the session id as in the path (escapes not
  // decoded), and whether its method fits; nullopt outside that path.
  struct SessionRoute {
    SessionOp op;
    std::string raw_id;
    bool allowed = false;
  };
  static std::optional<SessionRoute> RouteSession(std::string_view method, std::string_view path);
  void Sessions(const Caller& caller, const SessionRoute& route, const HttpRequest& request,
                std::shared_ptr<ObservedExchange> exchange);
  // vLLM's POST /tokenize (a prompt or messages as a turn would feed them) and
  // /detokenize.
  void Tokenize(const HttpRequest& request, std::shared_ptr<ObservedExchange> exchange);
  void Detokenize(const HttpRequest& request, ObservedExchange& exchange);
  // NotFound unless `model` is empty or the served model.
  absl::Status CheckModel(const std::string& model);
  // InvalidArgument on `param` for the first id outside the tokenizer's vocabulary:
  // "<what>token id X outside [0, V)".
  absl::Status CheckVocabulary(const std::vector<int32_t>& ids, const std::string& what,
                               std::string_view param) const;

  OpenAiFrontOptions options_;
  TurnPort* port_ = nullptr;
  const Tokenizer* tokenizer_ = nullptr;
  const ChatTemplate* chat_ = nullptr;
  std::unique_ptr<HttpServer> server_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace kvfold::http

#endif  // KVFOLD_INFERENCE_SVC_HTTP_OPENAI_FRONT_H_
