// bench_service's HTTP rows, measured in the same run as the gRPC rows.
//
// BenchHttpVsGrpc: aggregate tok/s of `streams` concurrent chat turns over HTTP (streamed
// /v1/chat/completions, one connection per stream) against the same turns over gRPC
// (Generate with the messages form) on the same replica, interleaved for `rounds` rounds;
// the median of each; and in the same rounds one ephemeral chat completion with n =
// `streams` choices (not streamed), whose choices decode as one batch. BenchIdleStreams: `streams`
// streamed chat completions held open at once (ephemeral 512-token chats, most waiting for the
// scheduler; clients never read), the process's thread count and RSS before and while they are
// open. BenchSharedPrompt and BenchPrefixCache: below.
#ifndef KVFOLD_TOOLS_BENCH_SERVICE_BENCH_HTTP_H_
#define KVFOLD_TOOLS_BENCH_SERVICE_BENCH_HTTP_H_

#include <nlohmann/json.hpp>

#include "inference_svc/service/server.h"

namespace kvfold::bench {

// `server` must serve HTTP (ServiceConfig::http_port >= 0) without auth.
nlohmann::json BenchHttpVsGrpc(service::InferenceServer& server, int streams, int new_tokens,
                               int rounds);
nlohmann::json BenchIdleStreams(service::InferenceServer& server, int streams);
// One completion of a `prompt_tokens`-token prompt with `choices` choices (sampled, a seed
// each), whose prompt is fed once and copied to the other choices, against the same choices
// as `choices` concurrent requests of one choice each (each feeding the prompt), interleaved
// for `rounds` rounds: the median seconds of each and the prompt copies a request made.
nlohmann::json BenchSharedPrompt(service::InferenceServer& server, int choices, int prompt_tokens,
                                 int new_tokens, int rounds);
// A one-token completion of a `prompt_tokens`-token prompt (token ids) plus 8 more tokens,
// right after a request fed that prompt (the prefix cache holds it), against the same
// request on a prompt no request fed, interleaved for `rounds` rounds: median seconds of
// each and the prompt tokens a warm request took from the cache.
nlohmann::json BenchPrefixCache(service::InferenceServer& server, int prompt_tokens, int rounds);
// `streams` concurrent completions of up to `new_tokens` tokens each, free against held to
// a JSON Schema (an object of two free strings), interleaved for `rounds` rounds: median
// tokens per second of each, and the mask's microseconds per structured token.
nlohmann::json BenchStructured(service::InferenceServer& server, int streams, int new_tokens,
                               int rounds);

}  // namespace kvfold::bench

#endif  // KVFOLD_TOOLS_BENCH_SERVICE_BENCH_HTTP_H_
