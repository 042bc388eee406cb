// bench_service: end-to-end numbers of kvfold-inference, one JSON document, one run.
//
//   bench_service --model PATH [--projector DIR] [--sessions 1,4,16] [--new-tokens 128]
//                 [--histories 1000,10000,50000] [--threads 0] [--kv-pool-bytes N]
//
// In process, over real gRPC on 127.0.0.1: a MemoryServer and kvfold-inference servers,
// each measured once it reports ready (its KV pool populated, ServiceConfig::kv_populate).
// 1. decode: aggregate tok/s of N concurrent sessions, scheduler batching on vs off (the
//    ratio is the gain of continuous batching's shared matmuls): whole turns, and the
//    decode phase alone (all sessions decoding; prompts excluded, their time reported),
//    with decode_over_one_session = N sessions' decode phase / one session's, per wall
//    second and (_cpu) per CPU second of the process. --decode-rounds R repeats the whole
//    --sessions list R times (1, 16, 1, 16, ...): each ratio is taken within its round,
//    every number of a row is the median over the rounds, decode_rounds has them all.
// 2. resume: time to first token of a turn on a replica that never saw the session (it
//    streams the block from the store and rebuilds: memory mode with --projector, else
//    full) against re-prefilling the whole history in full mode, as an engine without
//    persistence must, for each history length.
// 3. fairness: latency of short turns (8-token prompt, 8 new tokens, --fairness-sessions
//    sessions in a loop) alone, and while one full-mode session prefills a
//    --fairness-long-prompt-token prompt, alternating for several rounds; with the
//    scheduler's fair prefill (on) and with fixed chunks (off). p99 ratio with / without
//    the long prompt (bench_fairness.h).
// 4. http: --http-streams concurrent chat turns over the OpenAI HTTP API vs gRPC on one
//    replica, and --idle-streams event streams held open (threads, RSS); bench_http.h.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/create_channel.h>
#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/command_line.h"
#include "common/proto_enums.h"
#include "inference_svc/engine/kv_cache.h"
#include "inference_svc/service/server.h"
#include "memory_svc/service/server.h"
#include "tools/bench_cpu.h"
#include "tools/bench_service/bench_fairness.h"
#include "tools/bench_service/bench_grpc.h"
#include "tools/bench_service/bench_http.h"

namespace {

// The command line (docs/cli.md).
struct Flags {
  std::string model;
  std::string projector;
  std::string sessions = "1,4,16";
  int new_tokens = 128;
  int decode_rounds = 1;
  std::string histories = "1000,10000,50000";
  int threads = 0;
  kvfold::core::DType kv_dtype = kvfold::core::DType::kF32;
  int reprefill_max_tokens = 20000;
  int fairness_long_prompt = 8000;
  int fairness_sessions = 4;
  int fairness_turns = 40;
  int fairness_rounds = 3;
  double fairness_alone_seconds = 0;
  bool skip_decode_resume = false;
  bool batching_off = true;
  bool fairness_baseline = true;
  double prefill_stall = 1.0;
  int http_streams = 16;
  int http_new_tokens = 128;
  int http_rounds = 3;
  int shared_prompt_tokens = 512;
  int prefix_cache_prompt_tokens = 1000;
  bool structured = true;
  int idle_streams = 1000;
  std::string db_dir = "/tmp/kvfold-bench-service-db";
  uint64_t kv_pool_bytes = 4ull << 30;
  double temperature = 0;  // decode table: 0 = greedy
  double top_p = 0;        // decode table: 0 = off
  std::string log_level = "warn";
};

void AddFlags(CLI::App& app, Flags& f) {
  app.add_option("--model", f.model,
                 "model path (HF directory, GGUF file or llama2.c .bin); required")
      ->required();
  app.add_option("--projector", f.projector, "projector directory (memory mode); empty = full mode");
  app.add_option("--sessions", f.sessions, "concurrent sessions for the decode table");
  app.add_option("--new-tokens", f.new_tokens, "tokens generated per session in the decode table");
  app.add_option("--decode-rounds", f.decode_rounds,
                 "interleaved rounds of the decode table (every --sessions entry per round); "
                 "rows are medians, ratios paired within a round")
      ->check(CLI::Range(1, 100));
  app.add_option("--histories", f.histories, "history lengths for the resume table");
  app.add_option("--threads", f.threads, "engine threads (0 = all cores)")
      ->check(kvfold::NonNegative());
  app.add_option_function<std::string>(
         "--kv-dtype",
         [&f](const std::string& name) {
           absl::StatusOr<kvfold::core::DType> dtype = kvfold::engine::ParseKvDType(name);
           if (!dtype.ok()) {
             throw CLI::ValidationError("--kv-dtype", std::string(dtype.status().message()));
           }
           f.kv_dtype = *dtype;
         },
         "KV cache element type of every replica: f32|int8 (KIVI int8 codes)")
      ->default_str("f32");
  app.add_option("--reprefill-max-tokens", f.reprefill_max_tokens, "skip the full-mode re-prefill baseline above this history (it is quadratic)");
  app.add_option("--fairness-long-prompt", f.fairness_long_prompt, "tokens of the long full-mode prompt in the fairness table (0 = skip the table)");
  app.add_option("--fairness-sessions", f.fairness_sessions, "sessions running short turns in the fairness table");
  app.add_option("--fairness-turns", f.fairness_turns, "short turns per session measured without the long prompt");
  app.add_option("--fairness-alone-seconds", f.fairness_alone_seconds, "each window without the long prompt lasts at least this long (and --fairness-turns turns)");
  app.add_option("--fairness-rounds", f.fairness_rounds, "alternating rounds (without / with the long prompt) of the fairness table")
      ->check(CLI::Range(1, 100));
  kvfold::AddSwitch(app, "--skip-decode-resume", f.skip_decode_resume, "run only the fairness table");
  kvfold::AddSwitch(
      app, "--batching-off", f.batching_off,
      "decode table: also run every row with batching off (=false: batching on only)");
  kvfold::AddSwitch(app, "--structured", f.structured,
                    "HTTP: the structured-output row, free completions against ones held to a "
                    "JSON Schema (=false: skip)");
  kvfold::AddSwitch(app, "--fairness-baseline", f.fairness_baseline, "also run the fairness table with fixed chunks");
  app.add_option("--prefill-stall", f.prefill_stall, "the replica's prefill_stall in the fair fairness row");
  app.add_option("--http-streams", f.http_streams, "concurrent streams, HTTP vs gRPC (0 = skip)");
  app.add_option("--http-new-tokens", f.http_new_tokens, "tokens per stream in the HTTP vs gRPC rows");
  app.add_option("--http-rounds", f.http_rounds, "interleaved rounds of the HTTP vs gRPC rows (median)");
  app.add_option("--shared-prompt-tokens", f.shared_prompt_tokens,
                 "prompt of the shared-prompt row: one request of --http-streams choices against "
                 "as many requests (0 = skip)")
      ->check(CLI::Range(0, 60000));
  app.add_option("--prefix-cache-prompt-tokens", f.prefix_cache_prompt_tokens,
                 "prompt of the prefix-cache row: a request after one that fed its prompt, "
                 "against one on an unseen prompt (0 = skip)")
      ->check(CLI::Range(0, 60000));
  app.add_option("--idle-streams", f.idle_streams, "event streams held open at once (0 = skip)");
  app.add_option("--db-dir", f.db_dir, "scratch RocksDB directory");
  app.add_option("--temperature", f.temperature,
                 "the decode table's sampling temperature (0 = greedy)");
  app.add_option("--top-p", f.top_p, "the decode table's nucleus sampling (0 = off)");
  app.add_option("--kv-pool-bytes", f.kv_pool_bytes,
                 "KV pool of every replica (as the server's flag)")
      ->check(CLI::Range(uint64_t{1} << 24, uint64_t{1} << 50));
  app.add_option("--log-level", f.log_level, "request log of the in-process servers (debug|info|warn|error|off)")
      ->check(CLI::IsMember({"debug", "info", "warn", "error", "off"}));
}

using Clock = std::chrono::steady_clock;
using kvfold::bench::Create;
using kvfold::bench::Generate;
using kvfold::bench::RandomIds;
using kvfold::bench::Turn;
using kvfold::v1::InferenceService;

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

std::vector<int> ParseList(const std::string& text) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int v = 0;
    if (absl::SimpleAtoi(part, &v) && v > 0) out.push_back(v);
  }
  return out;
}

struct Replica {
  std::unique_ptr<kvfold::service::InferenceServer> server;
  std::unique_ptr<InferenceService::Stub> stub;
  double ready_ms = 0;  // from Start's return to ready
};

Replica StartReplica(const Flags& flags, const std::string& store, bool batching, kvfold::v1::KvMode mode,
                     double prefill_stall = 1.0, bool http = false) {
  kvfold::service::ServiceConfig c;
  c.model_path = flags.model;
  c.projector_path = flags.projector;
  c.memory_store = store;
  c.listen = "127.0.0.1:0";
  c.insecure_no_auth = true;  // a local benchmark: no tokens
  c.threads = flags.threads;
  c.kv_pool_bytes = flags.kv_pool_bytes;
  c.kv_dtype = flags.kv_dtype;
  c.default_mode = kvfold::KvModeFromProto(mode).value();
  c.batching = batching;
  c.max_prompt_tokens = 1 << 20;
  c.max_new_tokens_cap = 1 << 16;
  c.max_active_sessions = 256;
  c.prefill_stall = prefill_stall;
  c.log_level = flags.log_level;
  c.http_port = http ? 0 : -1;
  auto server = kvfold::service::InferenceServer::Start(c);
  if (!server.ok()) {
    std::fprintf(stderr, "bench_service: %s\n", server.status().ToString().c_str());
    std::exit(1);
  }
  Replica r;
  r.server = std::move(*server);
  // Measured only once the replica reports ready (as a load balancer routes), i.e. its
  // KV pool is populated (ServiceConfig::kv_populate).
  const auto start = Clock::now();
  while (!r.server->Readiness().ok()) {
    if (Clock::now() - start > std::chrono::minutes(5)) {
      std::fprintf(stderr, "bench_service: replica not ready after 5 min: %s\n",
                   r.server->Readiness().ToString().c_str());
      std::exit(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  r.ready_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  r.stub = InferenceService::NewStub(
      grpc::CreateChannel(r.server->address(), grpc::InsecureChannelCredentials()));
  return r;
}

// The decode phase of N concurrent turns: from the moment every session has its first
// token (all prompts prefilled) until the first session finishes, tokens that arrived in
// that window per second. Prompts are excluded; prompts_ms (the last first token) is
// reported beside it.
// tok_per_cpu_s: the same tokens per CPU second of the whole process (engine, gRPC and
// client threads), the figure that depends least on what else runs on a shared machine.
struct DecodePhase {
  double tok_s = 0, tok_per_cpu_s = 0, window_ms = 0, prompts_ms = 0;
};
DecodePhase SteadyDecode(const std::vector<Turn>& turns) {
  DecodePhase p;
  double begin = 0, end = 1e300, cpu_begin = 0, cpu_end = 0;
  for (const Turn& t : turns) {
    if (t.arrivals_ms.size() < 2) return p;
    if (t.arrivals_ms.front() > begin) {
      begin = t.arrivals_ms.front();
      cpu_begin = t.arrivals_cpu_s.front();
    }
    if (t.arrivals_ms.back() < end) {
      end = t.arrivals_ms.back();
      cpu_end = t.arrivals_cpu_s.back();
    }
  }
  p.prompts_ms = begin;
  if (end <= begin) return p;
  int tokens = 0;
  for (const Turn& t : turns) {
    for (double a : t.arrivals_ms) tokens += a > begin && a <= end;
  }
  p.window_ms = end - begin;
  p.tok_s = tokens / (p.window_ms / 1000.0);
  if (cpu_end > cpu_begin) p.tok_per_cpu_s = tokens / (cpu_end - cpu_begin);
  return p;
}

}  // namespace

// One row of the decode table: n concurrent sessions, batching on and then off, each on a
// fresh replica; whole-turn and decode-phase tok/s.
nlohmann::json DecodeRow(const Flags& flags, const std::string& store_address, int n, int round,
                         int* vocab) {
  nlohmann::json row;
  row["sessions"] = n;
  row["new_tokens_per_session"] = flags.new_tokens;
  for (bool batching : {true, false}) {
    if (!batching && !flags.batching_off) break;
    Replica r = StartReplica(flags, store_address, batching, kvfold::v1::KV_MODE_FULL);
    *vocab = static_cast<int>(r.server->engine().config().vocab_size);
    const std::string tag = std::string(batching ? "on" : "off") + "-" + std::to_string(round) +
                            "-" + std::to_string(n) + "-";
    for (int i = 0; i < n; ++i) Create(*r.stub, tag + std::to_string(i), kvfold::v1::KV_MODE_FULL);
    Create(*r.stub, tag + "warmup", kvfold::v1::KV_MODE_FULL);
    Generate(*r.stub, tag + "warmup", RandomIds(8, *vocab, 99), 16);
    std::vector<Turn> turns(n);
    std::vector<std::thread> threads;
    const auto start = Clock::now();
    for (int i = 0; i < n; ++i) {
      threads.emplace_back([&, i] {
        kvfold::v1::SamplingParams sampling;
        sampling.set_temperature(static_cast<float>(flags.temperature));
        sampling.set_top_p(static_cast<float>(flags.top_p));
        sampling.set_seed(1 + i);
        turns[i] = Generate(*r.stub, tag + std::to_string(i), RandomIds(8, *vocab, i),
                            flags.new_tokens, &start, sampling);
      });
    }
    for (auto& t : threads) t.join();
    const double wall_ms = Ms(start, Clock::now());
    int total = 0;
    for (const Turn& t : turns) total += t.tokens;
    row[batching ? "batching_on_tok_s" : "batching_off_tok_s"] = total / (wall_ms / 1000.0);
    const DecodePhase phase = SteadyDecode(turns);
    const std::string on = batching ? "batching_on" : "batching_off";
    row[on + "_decode_tok_s"] = phase.tok_s;
    row[on + "_decode_tok_per_cpu_s"] = phase.tok_per_cpu_s;
    row[on + "_decode_window_ms"] = phase.window_ms;
    row[on + "_first_token_ms_max"] = phase.prompts_ms;
    row[on + "_replica_ready_ms"] = r.ready_ms;
  }
  std::string off, off_decode;  // the unbatched figures, when measured
  if (flags.batching_off) {
    row["speedup"] =
        row["batching_on_tok_s"].get<double>() / row["batching_off_tok_s"].get<double>();
    off = absl::StrFormat(", %.0f unbatched", row["batching_off_tok_s"].get<double>());
    off_decode =
        absl::StrFormat(", %.1f unbatched", row["batching_off_decode_tok_s"].get<double>());
  }
  std::fprintf(stderr,
               "decode %d sessions (round %d): %.0f tok/s batched%s (whole turns); "
               "decode phase only: %.1f tok/s batched%s\n",
               n, round + 1, row["batching_on_tok_s"].get<double>(), off.c_str(),
               row["batching_on_decode_tok_s"].get<double>(), off_decode.c_str());
  return row;
}

// Field by field median of the same row over rounds (numbers only; others from the first).
nlohmann::json MedianRow(const std::vector<nlohmann::json>& rows) {
  nlohmann::json out = rows.front();
  for (auto& [key, value] : out.items()) {
    if (!value.is_number_float()) continue;
    std::vector<double> v;
    for (const auto& r : rows) v.push_back(r.value(key, 0.0));
    std::sort(v.begin(), v.end());
    const size_t h = v.size() / 2;
    value = v.size() % 2 == 1 ? v[h] : 0.5 * (v[h - 1] + v[h]);
  }
  out["rounds"] = rows.size();
  return out;
}

int main(int argc, char** argv) {
  CLI::App app{"End-to-end numbers of kvfold-inference: decode, resume, fairness, HTTP (JSON).",
               "bench_service"};
  kvfold::ApplyConvention(app);
  Flags flags;
  AddFlags(app, flags);
  if (std::optional<int> rc = kvfold::ParseCommandLine(app, argc, argv)) return *rc;
  if (flags.model.empty()) {
    std::fprintf(stderr, "usage: bench_service --model PATH [--projector DIR] [flags]\n");
    return 2;
  }
  std::filesystem::remove_all(flags.db_dir);
  kvfold::memory_svc::ServerConfig store_config;
  store_config.listen = "127.0.0.1:0";
  store_config.store.db_dir = flags.db_dir;
  store_config.store.sync_writes = false;
  store_config.insecure_no_auth = true;
  store_config.log_level = flags.log_level;
  auto store = kvfold::memory_svc::MemoryServer::Start(store_config);
  if (!store.ok()) {
    std::fprintf(stderr, "bench_service: %s\n", store.status().ToString().c_str());
    return 1;
  }
  const std::string store_address = (*store)->address();
  const bool memory = !flags.projector.empty();
  const kvfold::v1::KvMode resume_mode = memory ? kvfold::v1::KV_MODE_MEMORY : kvfold::v1::KV_MODE_FULL;
  nlohmann::json out;
  out["model"] = flags.model;
  out["projector"] = flags.projector;
  out["threads"] = flags.threads;
  out["kv_dtype"] = kvfold::core::DTypeName(flags.kv_dtype);
  out["temperature"] = flags.temperature;
  out["top_p"] = flags.top_p;
  kvfold::bench::AddCpu(out);

  const bool skip = flags.skip_decode_resume;
  // 1. Decode throughput, batching on vs off; --decode-rounds interleaved rounds.
  int vocab = 0;
  std::vector<std::vector<nlohmann::json>> rounds;  // [round][entry of --sessions]
  for (int round = 0; round < (skip ? 0 : flags.decode_rounds); ++round) {
    rounds.emplace_back();
    for (int n : ParseList(flags.sessions)) {
      nlohmann::json row = DecodeRow(flags, store_address, n, round, &vocab);
      const nlohmann::json& first = rounds.back().empty() ? row : rounds.back().front();
      if (n != 1 && first["sessions"] == 1) {
        // Paired with this round's one-session row: load drifts between rounds.
        row["decode_over_one_session"] = row["batching_on_decode_tok_s"].get<double>() /
                                         first["batching_on_decode_tok_s"].get<double>();
        const double one_cpu = first["batching_on_decode_tok_per_cpu_s"].get<double>();
        row["decode_over_one_session_cpu"] =
            one_cpu > 0 ? row["batching_on_decode_tok_per_cpu_s"].get<double>() / one_cpu : 0.0;
      }
      rounds.back().push_back(std::move(row));
    }
  }
  nlohmann::json decode = nlohmann::json::array();
  for (size_t i = 0; !rounds.empty() && i < rounds.front().size(); ++i) {
    std::vector<nlohmann::json> of_entry;
    for (const auto& r : rounds) of_entry.push_back(r[i]);
    decode.push_back(MedianRow(of_entry));
  }
  // The medians' ratio: N sessions' median decode tok/s over one session's median. One
  // session's decode window is short, so single rounds swing; this pools every round.
  if (!decode.empty() && decode.front()["sessions"] == 1) {
    const double one = decode.front()["batching_on_decode_tok_s"].get<double>();
    for (size_t i = 1; i < decode.size(); ++i) {
      decode[i]["decode_over_one_session_pooled"] =
          decode[i]["batching_on_decode_tok_s"].get<double>() / one;
    }
  }
  out["decode"] = decode;
  out["decode_rounds"] = rounds;

  // 2. Resume on another replica vs re-prefilling the history.
  nlohmann::json resume = nlohmann::json::array();
  Replica a = StartReplica(flags, store_address, true, resume_mode);
  vocab = static_cast<int>(a.server->engine().config().vocab_size);
  for (int history : skip ? std::vector<int>() : ParseList(flags.histories)) {
    Replica b = StartReplica(flags, store_address, true, resume_mode);  // a fresh, cold replica
    const std::string id = "resume-" + std::to_string(history);
    const std::vector<int32_t> ids = RandomIds(history, vocab, 1000 + history);
    const std::vector<int32_t> next = RandomIds(8, vocab, 7);
    Create(*a.stub, id, resume_mode);
    const Turn fed = Generate(*a.stub, id, ids, 1);  // the history, on replica A
    const Turn switched = Generate(*b.stub, id, next, 1);  // replica B: restore from the store
    // An engine without persistence: the whole history (+ the new prompt) as a prefill.
    const std::string full_id = "reprefill-" + std::to_string(history);
    Create(*b.stub, full_id, kvfold::v1::KV_MODE_FULL);
    std::vector<int32_t> all = ids;
    all.insert(all.end(), next.begin(), next.end());
    const bool run_reprefill = history <= flags.reprefill_max_tokens;
    const Turn reprefill = run_reprefill ? Generate(*b.stub, full_id, all, 1) : Turn{};
    nlohmann::json row;
    row["history_tokens"] = history;
    row["resume_mode"] = memory ? "memory" : "full";
    row["feed_history_ms"] = fed.total_ms;
    row["switch_replica_ttft_ms"] = switched.ttft_ms;
    row["switch_replica_restore_ms"] = switched.usage.timings().restore_ms();
    row["switch_replica_restored"] = switched.usage.restored_from_store();
    if (run_reprefill) {
      row["reprefill_ttft_ms"] = reprefill.ttft_ms;
      row["speedup"] = switched.ttft_ms > 0 ? reprefill.ttft_ms / switched.ttft_ms : 0.0;
    } else {
      row["reprefill_ttft_ms"] = nullptr;  // skipped: --reprefill-max-tokens
    }
    row["ok"] = fed.ok && switched.ok && (!run_reprefill || reprefill.ok);
    resume.push_back(row);
    std::fprintf(stderr, "resume %d tokens: switch %.1f ms vs re-prefill %.1f ms\n", history,
                 switched.ttft_ms, reprefill.ttft_ms);
  }
  out["resume"] = resume;
  a.server.reset();

  // 3. Fairness: short turns with and without one long prompt.
  nlohmann::json fairness = nlohmann::json::array();
  if (flags.fairness_long_prompt > 0) {
    kvfold::bench::FairnessOptions options;
    options.long_prompt_tokens = flags.fairness_long_prompt;
    options.sessions = flags.fairness_sessions;
    options.turns = flags.fairness_turns;
    options.rounds = flags.fairness_rounds;
    options.alone_seconds = flags.fairness_alone_seconds;
    for (bool fair : {true, false}) {
      if (!fair && !flags.fairness_baseline) continue;
      const double stall = fair ? flags.prefill_stall : 0.0;
      Replica r = StartReplica(flags, store_address, true, kvfold::v1::KV_MODE_FULL, stall);
      nlohmann::json row =
          kvfold::bench::BenchFairness(*r.server, options, fair ? "fair" : "fixed");
      row["prefill_stall"] = stall;
      fairness.push_back(row);
    }
  }
  out["fairness"] = fairness;

  // 4. The HTTP path on one replica (full mode).
  if (flags.http_streams > 0 || flags.idle_streams > 0) {
    Replica h = StartReplica(flags, store_address, true, kvfold::v1::KV_MODE_FULL, 2.0, /*http=*/true);
    if (flags.http_streams > 0) {
      out["http_vs_grpc"] = kvfold::bench::BenchHttpVsGrpc(
          *h.server, flags.http_streams, flags.http_new_tokens,
          flags.http_rounds);
      std::fprintf(stderr, "http vs grpc: %s\n", out["http_vs_grpc"].dump().c_str());
      if (flags.shared_prompt_tokens > 0) {
        out["shared_prompt"] = kvfold::bench::BenchSharedPrompt(
            *h.server, flags.http_streams, flags.shared_prompt_tokens, flags.http_new_tokens,
            flags.http_rounds);
        std::fprintf(stderr, "shared prompt: %s\n", out["shared_prompt"].dump().c_str());
      }
      if (flags.prefix_cache_prompt_tokens > 0) {
        out["prefix_cache"] = kvfold::bench::BenchPrefixCache(
            *h.server, flags.prefix_cache_prompt_tokens, flags.http_rounds);
        std::fprintf(stderr, "prefix cache: %s\n", out["prefix_cache"].dump().c_str());
      }
      if (flags.structured) {
        out["structured"] = kvfold::bench::BenchStructured(
            *h.server, flags.http_streams, flags.http_new_tokens, flags.http_rounds);
        std::fprintf(stderr, "structured: %s\n", out["structured"].dump().c_str());
      }
    }
    if (flags.idle_streams > 0) {
      out["idle_streams"] =
          kvfold::bench::BenchIdleStreams(*h.server, flags.idle_streams);
      std::fprintf(stderr, "idle streams: %s\n", out["idle_streams"].dump().c_str());
    }
  }
  (void)(*store)->Shutdown(absl::ZeroDuration());
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
