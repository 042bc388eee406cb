// bench_memory_mode: decode tok/s and resident KV bytes at histories of 1k, 10k and 100k
// tokens for full, sliding, sink, memory and memory_only on one model, in one run, as JSON.
//
//   bench_memory_mode [--model PATH] [--projector DIR] [--histories 1000,10000,100000]
//                     [--modes full,sliding,sink,memory,memory_only] [--decode-tokens 256] [--repeats 3] [--window 112] [--sink 4]
//                     [--threads 0] [--full-real-max 2048] [--seed 1]
//
// Model: default $KVFOLD_SHARED_DIR/models/stories260K/stories260K.bin (KVFOLD_SHARED_DIR
// defaults to ../shared). Projector: --projector DIR, else a random one (M 16, W 64, C 32).
// The history is fed for real (random token ids, prompt path: memory modes fold exactly as
// in decode), then `--repeats` x `--decode-tokens` greedy tokens are timed and the best
// repeat counts (the machine is shared; decode_tokens is a multiple of C, so memory modes
// include whole fold cycles in every repeat). Full mode beyond --full-real-max would need an
// O(n^2) prefill, so its K/V are synthesised (entries appended without compute; attention
// cost is the same) and the row says "kv_synthetic": true. Sliding and sink use --window
// (default 112 = M + W + C, the memory mode's largest resident size: equal KV budgets).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "inference_svc/engine/engine.h"
#include "inference_svc/engine/sampler.h"
#include "inference_svc/memory/memory_session.h"
#include "inference_svc/memory/random_projector.h"
#include "inference_svc/model/model_file.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, model, "", "model path (default: stories260K from the shared dir)");
ABSL_FLAG(std::string, projector, "", "projector dir (default: a random projector)");
ABSL_FLAG(std::string, histories, "1000,10000,100000", "history lengths in tokens");
ABSL_FLAG(std::string, modes, "full,sliding,sink,memory,memory_only", "modes to run");
ABSL_FLAG(int, decode_tokens, 256, "timed decode steps per (mode, history)");
ABSL_FLAG(int, window, 112, "sliding/sink window (default M + W + C: equal KV budget)");
ABSL_FLAG(int, sink, 4, "sink tokens");
ABSL_FLAG(int, threads, 0, "CPU threads (0 = all cores)");
ABSL_FLAG(int, repeats, 3, "timed decode repeats per (mode, history); the best counts");
ABSL_FLAG(int, full_real_max, 2048, "full mode: longest history prefilled for real");
ABSL_FLAG(uint64_t, seed, 1, "token RNG seed");

namespace kvfold {
namespace {

using Clock = std::chrono::steady_clock;
using engine::KvMode;

struct Run {
  std::string mode;
  int64_t history = 0;
  double decode_tok_s = 0;
  size_t kv_bytes_resident = 0;      // max over the timed decode steps
  int64_t resident_tokens = 0;       // at the end
  double history_seconds = 0;        // building the history
  bool kv_synthetic = false;
  int64_t folds_during_decode = 0;
  double fold_seconds_during_decode = 0;
  double projector_seconds_during_decode = 0;
  double expand_seconds_during_decode = 0;
};

std::string DefaultModel() {
  const char* shared = std::getenv("KVFOLD_SHARED_DIR");
  return std::string(shared ? shared : "../shared") + "/models/stories260K/stories260K.bin";
}

// Full mode with a synthesised history: `history` main entries appended without compute,
// then decode through Engine::Forward exactly as a full-mode session does.
absl::StatusOr<Run> RunSyntheticFull(engine::Engine& engine, int64_t history, int decode_tokens) {
  Run run{"full", history};
  run.kv_synthetic = true;
  auto cache = engine.NewCache(engine::KvPolicy::Full());
  std::vector<int32_t> slots(4096);
  for (int64_t done = 0; done < history;) {
    const int n = static_cast<int>(std::min<int64_t>(4096, history - done));
    if (auto s = cache->AppendMain(n, slots.data()); !s.ok()) return s;
    done += n;
  }
  engine::ForwardResult result;
  int32_t token = 1;
  engine::SequenceInput input;
  input.cache = cache.get();
  input.token_ids = {&token, 1};
  for (int rep = 0; rep < absl::GetFlag(FLAGS_repeats); ++rep) {
    const auto start = Clock::now();
    for (int i = 0; i < decode_tokens; ++i) {
      if (auto s = engine.Forward({&input, 1}, &result); !s.ok()) return s;
      token = engine::Argmax(result.outputs[0].logits);
      run.kv_bytes_resident = std::max(run.kv_bytes_resident, cache->ResidentBytes());
    }
    run.decode_tok_s = std::max(
        run.decode_tok_s, decode_tokens / std::chrono::duration<double>(Clock::now() - start).count());
  }
  run.resident_tokens = cache->resident_tokens();
  return run;
}

absl::StatusOr<Run> RunSession(engine::Engine& engine, const memory::Projector* projector,
                               KvMode mode, int64_t history, int decode_tokens, int window,
                               int sink, uint64_t seed) {
  engine::SessionOptions options;
  options.mode = mode;
  options.window_size = window;
  options.sink_tokens = sink;
  auto session = memory::CreateSession(&engine, options, projector);
  if (!session.ok()) return session.status();
  engine::Session& s = **session;
  Run run{engine::KvModeName(mode), history};
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_int_distribution<int32_t> dist(0, engine.config().vocab_size - 1);
  std::vector<int32_t> piece(4096);
  auto start = Clock::now();
  for (int64_t done = 0; done < history;) {
    const int n = static_cast<int>(std::min<int64_t>(piece.size(), history - done));
    for (int i = 0; i < n; ++i) piece[i] = dist(rng);
    if (auto st = s.Prefill({piece.data(), static_cast<size_t>(n)}); !st.ok()) return st;
    done += n;
  }
  run.history_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  auto* mem = dynamic_cast<memory::MemorySession*>(&s);
  const memory::MemorySessionStats before = mem ? mem->stats() : memory::MemorySessionStats{};
  for (int rep = 0; rep < absl::GetFlag(FLAGS_repeats); ++rep) {
    start = Clock::now();
    for (int i = 0; i < decode_tokens; ++i) {
      if (auto st = s.Append(engine::Argmax(s.Logits())); !st.ok()) return st;
      run.kv_bytes_resident = std::max(run.kv_bytes_resident, s.KvBytesResident());
    }
    run.decode_tok_s = std::max(
        run.decode_tok_s, decode_tokens / std::chrono::duration<double>(Clock::now() - start).count());
  }
  run.resident_tokens = s.ResidentTokens();
  if (mem) {
    run.folds_during_decode = mem->stats().num_folds - before.num_folds;
    run.fold_seconds_during_decode = mem->stats().fold_seconds - before.fold_seconds;
    run.projector_seconds_during_decode = mem->stats().projector_seconds - before.projector_seconds;
    run.expand_seconds_during_decode = mem->stats().expand_seconds - before.expand_seconds;
  }
  return run;
}

int Main() {
  const std::string model_path =
      absl::GetFlag(FLAGS_model).empty() ? DefaultModel() : absl::GetFlag(FLAGS_model);
  auto model = model::LoadModel(model_path);
  if (!model.ok()) {
    std::fprintf(stderr, "bench_memory_mode: %s\n", std::string(model.status().message()).c_str());
    return 2;
  }
  auto backend = kernels::CreateCpuBackend({.num_threads = absl::GetFlag(FLAGS_threads)});
  engine::EngineOptions engine_options;
  engine_options.kv_pool_bytes = size_t{2} << 30;
  auto engine = engine::Engine::Create(*model, backend.get(), engine_options);
  if (!engine.ok()) {
    std::fprintf(stderr, "bench_memory_mode: %s\n", std::string(engine.status().message()).c_str());
    return 1;
  }
  std::unique_ptr<memory::Projector> projector;
  std::string projector_source = absl::GetFlag(FLAGS_projector);
  if (!projector_source.empty()) {
    auto p = memory::Projector::LoadForModel(projector_source, (*engine)->fingerprint(),
                                             model->config.hidden_size);
    if (!p.ok()) {
      std::fprintf(stderr, "bench_memory_mode: %s\n", std::string(p.status().message()).c_str());
      return 2;
    }
    projector = *std::move(p);
  } else {
    memory::ProjectorConfig c;
    c.hidden_size = model->config.hidden_size;
    c.num_heads = c.hidden_size % 8 == 0 ? 8 : 1;
    c.model_fingerprint = (*engine)->fingerprint();
    projector = *memory::Projector::FromTensors(c, memory::RandomProjectorTensors(c, 1.0f, 1), "random");
    projector_source = "random (seed 1)";
  }
  std::vector<int64_t> histories;
  for (absl::string_view h : absl::StrSplit(absl::GetFlag(FLAGS_histories), ',')) {
    int64_t v;
    if (!absl::SimpleAtoi(h, &v) || v < 1) {
      std::fprintf(stderr, "bench_memory_mode: bad --histories\n");
      return 2;
    }
    histories.push_back(v);
  }
  const int decode_tokens = absl::GetFlag(FLAGS_decode_tokens);
  const memory::ProjectorConfig& pc = projector->config();

  std::vector<KvMode> modes;
  for (absl::string_view name : absl::StrSplit(absl::GetFlag(FLAGS_modes), ',')) {
    auto mode = engine::ParseKvMode(std::string(name));
    if (!mode.ok()) {
      std::fprintf(stderr, "bench_memory_mode: %s\n", std::string(mode.status().message()).c_str());
      return 2;
    }
    modes.push_back(*mode);
  }
  std::vector<Run> runs;
  for (KvMode mode : modes) {
    for (int64_t history : histories) {
      absl::StatusOr<Run> run =
          mode == KvMode::kFull && history > absl::GetFlag(FLAGS_full_real_max)
              ? RunSyntheticFull(**engine, history, decode_tokens)
              : RunSession(**engine, projector.get(), mode, history, decode_tokens,
                           absl::GetFlag(FLAGS_window), absl::GetFlag(FLAGS_sink),
                           absl::GetFlag(FLAGS_seed));
      if (!run.ok()) {
        std::fprintf(stderr, "bench_memory_mode: %s at %lld: %s\n", engine::KvModeName(mode),
                     static_cast<long long>(history), std::string(run.status().message()).c_str());
        return 1;
      }
      std::fprintf(stderr, "%-12s history %7lld: %9.1f tok/s, %10zu KV bytes\n", run->mode.c_str(),
                   static_cast<long long>(history), run->decode_tok_s, run->kv_bytes_resident);
      runs.push_back(*run);
    }
  }

  nlohmann::ordered_json out;
  out["model"] = model_path;
  out["backend"] = backend->Name();
  out["threads"] = absl::GetFlag(FLAGS_threads);
  out["projector"] = {{"source", projector_source}, {"mem_slots", pc.mem_slots},
                      {"window_size", pc.window_size}, {"chunk_size", pc.chunk_size}};
  out["sliding_sink_window"] = absl::GetFlag(FLAGS_window);
  out["sink_tokens"] = absl::GetFlag(FLAGS_sink);
  out["decode_tokens"] = decode_tokens;
  out["repeats"] = absl::GetFlag(FLAGS_repeats);
  std::map<std::string, std::map<int64_t, double>> tok_s;
  for (const Run& r : runs) {
    out["runs"].push_back({{"mode", r.mode},
                           {"history", r.history},
                           {"decode_tok_s", r.decode_tok_s},
                           {"kv_bytes_resident", r.kv_bytes_resident},
                           {"resident_tokens", r.resident_tokens},
                           {"history_build_s", r.history_seconds},
                           {"kv_synthetic", r.kv_synthetic}});
    tok_s[r.mode][r.history] = r.decode_tok_s;
  }
  const int64_t lo = histories.front(), hi = histories.back();
  for (const auto& [mode, by_history] : tok_s) {
    out["tok_s_ratio_longest_over_shortest"][mode] = by_history.at(hi) / by_history.at(lo);
  }
  out["ratio_histories"] = {lo, hi};
  // Fold cost, from the memory-mode runs at the longest history.
  for (const Run& r : runs) {
    if (r.mode != "memory" && r.mode != "memory_only") continue;
    if (r.history != hi || r.folds_during_decode == 0) continue;
    // Fold time over all repeats against the decode time of the same steps.
    const double decode_s = absl::GetFlag(FLAGS_repeats) * decode_tokens / r.decode_tok_s;
    out["fold"][r.mode] = {
        {"folds", r.folds_during_decode},
        {"ms_per_fold", 1e3 * r.fold_seconds_during_decode / r.folds_during_decode},
        {"projector_ms_per_fold", 1e3 * r.projector_seconds_during_decode / r.folds_during_decode},
        {"expand_ms_per_fold", 1e3 * r.expand_seconds_during_decode / r.folds_during_decode},
        {"refill_tokens_per_token",
         r.mode == "memory" ? static_cast<double>(pc.window_size) / pc.chunk_size : 0.0},
        {"share_of_decode_time", r.fold_seconds_during_decode / decode_s}};
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

// Accepts --flag-name as well as absl's --flag_name (CONTRACTS.md spells flags with dashes).
void DashesToUnderscores(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--", 2) != 0) continue;
    for (char* p = argv[i] + 2; *p != '\0' && *p != '='; ++p) {
      if (*p == '-') *p = '_';
    }
  }
}

}  // namespace
}  // namespace kvfold

int main(int argc, char** argv) {
  kvfold::DashesToUnderscores(argc, argv);
  absl::ParseCommandLine(argc, argv);
  return kvfold::Main();
}
