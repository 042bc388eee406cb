// InferenceServiceImpl's observability hooks: what a handler adds to its call's
// request-log line and to the replica's kvfold_inference_* metrics (docs/observability.md).
#include "inference_svc/service/inference_service.h"

namespace kvfold::service {

void InferenceServiceImpl::Annotate(const grpc::ServerContext* context,
                                    const std::function<void(logging::RequestRecord*)>& fill) const {
  if (deps_.request_log != nullptr) deps_.request_log->Annotate(context, fill);
}

void InferenceServiceImpl::AnnotateSession(const grpc::ServerContext* context,
                                           const std::string& session_id,
                                           uint64_t version) const {
  Annotate(context, [&](logging::RequestRecord* r) {
    r->session = session_id;
    r->version = version;
  });
}

void InferenceServiceImpl::ReportTurn(const grpc::ServerContext* context,
                                      const absl::StatusOr<runtime::TurnUsage>& outcome) const {
  if (deps_.metrics != nullptr) deps_.metrics->TurnFinished(outcome);
  if (!outcome.ok()) return;
  const runtime::TurnUsage& u = *outcome;
  Annotate(context, [&u](logging::RequestRecord* r) {
    r->version = u.version;
    r->timings_ms = TurnTimingsMs(u);
    r->counts = {{"prompt_tokens", u.prompt_tokens},
                 {"generated_tokens", u.generated_tokens},
                 {"folded_tokens", u.tokens_folded},
                 {"restored_from_store", u.restored_from_store ? 1 : 0}};
  });
}

}  // namespace kvfold::service
