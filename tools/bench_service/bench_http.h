// bench_service's HTTP rows, measured in the same run as the gRPC rows.
//
// BenchHttpVsGrpc: aggregate tok/s of `streams` concurrent chat turns over HTTP (streamed
// /v1/chat/completions, one connection per stream) against the same turns over gRPC
// (Generate with the messages form) on the same replica, interleaved for `rounds` rounds;
// the median of each; and in the same rounds one ephemeral chat completion with n =
// `streams` choices (not streamed), whose choices decode as one batch. BenchIdleStreams: `streams`
// streamed chat completions held open at once (ephemeral 512-token chats, most waiting for the
// scheduler; clients never read), the process's thread count and RSS before and while they are
// open.
#ifndef KVFOLD_TOOLS_BENCH_SERVICE_BENCH_HTTP_H_
#define KVFOLD_TOOLS_BENCH_SERVICE_BENCH_HTTP_H_

#include <nlohmann/json.hpp>

#include "inference_svc/service/server.h"

namespace kvfold::bench {

// `server` must serve HTTP (ServiceConfig::http_port >= 0) without auth.
nlohmann::json BenchHttpVsGrpc(service::InferenceServer& server, int streams, int new_tokens,
                               int rounds);
nlohmann::json BenchIdleStreams(service::InferenceServer& server, int streams);

}  // namespace kvfold::bench

#endif  // KVFOLD_TOOLS_BENCH_SERVICE_BENCH_HTTP_H_
