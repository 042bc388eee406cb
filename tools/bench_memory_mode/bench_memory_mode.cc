// bench_memory_mode: decode tok/s and resident KV bytes at histories of 1k, 10k and 100k
// tokens for full, sliding, sink, memory and memory_only on one model, in one run, as JSON.
//
//   bench_memory_mode [--model PATH] [--projector DIR] [--histories 1000,10000,100000]
//                     [--modes full,sliding,sink,memory,memory_only] [--rounds 8]
//                     [--round-tokens 64] [--window N] [--sink 4] [--threads 1]
//                     [--full-real-max 2048] [--seed 1]
//
// Model: default $KVFOLD_SHARED_DIR/models/stories260K/stories260K.bin (KVFOLD_SHARED_DIR
// defaults to ../shared). Projector: --projector DIR, else a random one (M 16, W 64, C 32).
//
// Method. For each mode, one session per history is built by feeding random token ids
// through the prompt path (memory modes fold exactly as in decode). Then `--rounds` rounds
// each decode `--round-tokens` greedy tokens on every session of the mode in turn
// (interleaved, so load from other processes hits every history alike); a session's
// figure is its best round. round-tokens is a multiple of C, so every memory-mode round
// holds whole fold cycles. Two clocks: wall time and process CPU time (CPU tok/s measures
// the work per token even on a busy machine). Full mode beyond --full-real-max would need
// an O(n^2) prefill, so its K/V are synthesised (entries appended without compute; the
// attention work per token is the same) and the row says "kv_synthetic": true. Sliding and
// sink use --window (default: the projector's KV budget, memory mode's largest resident
// size: M + W + C, or M + W under the sliding window policy). "memory_over_sliding" is
// memory mode's decode tok/s divided by sliding's at each history (CPU and wall).
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/command_line.h"
#include "inference_svc/engine/engine.h"
#include "inference_svc/engine/sampler.h"
#include "inference_svc/memory/memory_session.h"
#include "inference_svc/memory/random_projector.h"
#include "inference_svc/model/model_file.h"
#include "nlohmann/json.hpp"

namespace kvfold {
namespace {

// The command line (docs/cli.md).
struct Flags {
  std::string model;
  std::string projector;
  std::string histories = "1000,10000,100000";
  std::string modes = "full,sliding,sink,memory,memory_only";
  int rounds = 8;
  int round_tokens = 64;
  int window = 0;
  int sink = 4;
  int threads = 1;
  int full_real_max = 2048;
  uint64_t seed = 1;
};

void AddFlags(CLI::App& app, Flags& f) {
  app.add_option("--model", f.model, "model path (default: stories260K from the shared dir)");
  app.add_option("--projector", f.projector, "projector dir (default: a random projector)");
  app.add_option("--histories", f.histories, "history lengths in tokens");
  app.add_option("--modes", f.modes, "modes to run");
  app.add_option("--rounds", f.rounds, "interleaved timing rounds; a session's best round counts");
  app.add_option("--round-tokens", f.round_tokens, "decode steps per round (a multiple of C)");
  app.add_option("--window", f.window, "sliding/sink window (0 = the projector's KV budget)");
  app.add_option("--sink", f.sink, "sink tokens");
  app.add_option("--threads", f.threads, "CPU threads (0 = all cores)")
      ->check(kvfold::NonNegative());
  app.add_option("--full-real-max", f.full_real_max,
                 "full mode: longest history prefilled for real");
  app.add_option("--seed", f.seed, "token RNG seed");
}

using Clock = std::chrono::steady_clock;
using core::KvMode;

double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// One (mode, history) under test: a decode step and its resident KV.
struct Subject {
  std::string mode;
  int64_t history = 0;
  bool kv_synthetic = false;
  double history_build_s = 0;
  std::function<absl::Status()> step;
  std::function<size_t()> resident_bytes;
  std::function<int64_t()> resident_tokens;
  memory::MemorySession* memory = nullptr;  // memory modes: fold statistics
  // Owned state.
  std::unique_ptr<engine::Session> session;
  std::unique_ptr<engine::KvCache> cache;
  engine::ForwardResult result;
  int32_t token = 1;
  // Results.
  double best_wall_tok_s = 0, best_cpu_tok_s = 0;
  size_t max_resident_bytes = 0;
  memory::MemorySessionStats stats_before;
  memory::MemorySessionStats decode_stats;  // folds during the timed decode steps
  double decode_wall_s = 0;                 // all timed steps
};

std::string DefaultModel() {
  const char* shared = std::getenv("KVFOLD_SHARED_DIR");
  return std::string(shared ? shared : "../shared") + "/models/stories260K/stories260K.bin";
}

// Full mode with a synthesised history: entries appended without compute, then decode
// through Engine::Forward exactly as a full-mode session does.
absl::Status MakeSyntheticFull(engine::Engine& engine, Subject* s) {
  s->kv_synthetic = true;
  s->cache = engine.NewCache(engine::KvPolicy::Full());
  std::vector<int32_t> slots(4096);
  for (int64_t done = 0; done < s->history;) {
    const int n = static_cast<int>(std::min<int64_t>(4096, s->history - done));
    if (auto st = s->cache->AppendMain(n, slots.data()); !st.ok()) return st;
    done += n;
  }
  s->step = [&engine, s]() -> absl::Status {
    engine::SequenceInput input;
    input.cache = s->cache.get();
    input.token_ids = {&s->token, 1};
    if (auto st = engine.Forward({&input, 1}, &s->result); !st.ok()) return st;
    s->token = engine::Argmax(s->result.outputs[0].logits);
    return absl::OkStatus();
  };
  s->resident_bytes = [s] { return s->cache->ResidentBytes(); };
  s->resident_tokens = [s] { return static_cast<int64_t>(s->cache->resident_tokens()); };
  return absl::OkStatus();
}

// Sliding/sink window: --window, else the projector's KV budget (equal budgets).
int SlidingWindow(const memory::Projector& projector, int window) {
  const int w = window;
  return w > 0 ? w : projector.config().kv_budget();
}

absl::Status MakeSession(engine::Engine& engine, const memory::Projector* projector, KvMode mode,
                         const Flags& flags, Subject* s) {
  const uint64_t seed = flags.seed;
  engine::SessionOptions options;
  options.mode = mode;
  options.window_size = SlidingWindow(*projector, flags.window);
  options.sink_tokens = flags.sink;
  auto session = memory::CreateSession(&engine, options, projector);
  if (!session.ok()) return session.status();
  s->session = *std::move(session);
  engine::Session* sess = s->session.get();
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_int_distribution<int32_t> dist(0, engine.config().vocab_size - 1);
  std::vector<int32_t> piece(4096);
  const auto start = Clock::now();
  for (int64_t done = 0; done < s->history;) {
    const int n = static_cast<int>(std::min<int64_t>(piece.size(), s->history - done));
    for (int i = 0; i < n; ++i) piece[i] = dist(rng);
    if (auto st = sess->Prefill({piece.data(), static_cast<size_t>(n)}); !st.ok()) return st;
    done += n;
  }
  s->history_build_s = std::chrono::duration<double>(Clock::now() - start).count();
  s->memory = dynamic_cast<memory::MemorySession*>(sess);
  if (s->memory) s->stats_before = s->memory->stats();
  s->step = [sess] { return sess->Append(engine::Argmax(sess->Logits())); };
  s->resident_bytes = [sess] { return sess->KvBytesResident(); };
  s->resident_tokens = [sess] { return sess->ResidentTokens(); };
  return absl::OkStatus();
}

int Fail(const std::string& what, const absl::Status& status, int code) {
  std::fprintf(stderr, "bench_memory_mode: %s%s\n", what.c_str(), std::string(status.message()).c_str());
  return code;
}

int Main(const Flags& flags) {
  const std::string model_path = flags.model.empty() ? DefaultModel() : flags.model;
  auto model = model::LoadModel(model_path);
  if (!model.ok()) return Fail("", model.status(), 2);
  auto backend = kernels::CreateCpuBackend({.num_threads = flags.threads});
  engine::EngineOptions engine_options;
  engine_options.kv_pool_bytes = size_t{2} << 30;
  auto engine = engine::Engine::Create(*model, backend.get(), engine_options);
  if (!engine.ok()) return Fail("", engine.status(), 1);
  std::unique_ptr<memory::Projector> projector;
  std::string projector_source = flags.projector;
  if (!projector_source.empty()) {
    auto p = memory::Projector::LoadForModel(projector_source, (*engine)->fingerprint(),
                                             model->config.hidden_size);
    if (!p.ok()) return Fail("", p.status(), 2);
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
  for (absl::string_view h : absl::StrSplit(flags.histories, ',')) {
    int64_t v;
    if (!absl::SimpleAtoi(h, &v) || v < 1) return Fail("bad --histories", absl::OkStatus(), 2);
    histories.push_back(v);
  }
  std::vector<KvMode> modes;
  for (absl::string_view name : absl::StrSplit(flags.modes, ',')) {
    auto mode = core::ParseKvMode(std::string(name));
    if (!mode.ok()) return Fail("", mode.status(), 2);
    modes.push_back(*mode);
  }
  const int rounds = flags.rounds, round_tokens = flags.round_tokens;
  const memory::ProjectorConfig& pc = projector->config();

  std::vector<std::unique_ptr<Subject>> all;
  for (KvMode mode : modes) {
    // Build this mode's sessions, time them interleaved, then free them.
    std::vector<std::unique_ptr<Subject>> subjects;
    for (int64_t history : histories) {
      auto s = std::make_unique<Subject>();
      s->mode = core::KvModeName(mode);
      s->history = history;
      const absl::Status st = mode == KvMode::kFull && history > flags.full_real_max
                                  ? MakeSyntheticFull(**engine, s.get())
                                  : MakeSession(**engine, projector.get(), mode, flags, s.get());
      if (!st.ok()) return Fail(s->mode + " history " + std::to_string(history) + ": ", st, 1);
      subjects.push_back(std::move(s));
    }
    for (int round = 0; round < rounds; ++round) {
      for (auto& s : subjects) {
        const double cpu0 = CpuSeconds();
        const auto wall0 = Clock::now();
        for (int i = 0; i < round_tokens; ++i) {
          if (auto st = s->step(); !st.ok()) return Fail(s->mode + ": ", st, 1);
          s->max_resident_bytes = std::max(s->max_resident_bytes, s->resident_bytes());
        }
        const double wall = std::chrono::duration<double>(Clock::now() - wall0).count();
        const double cpu = CpuSeconds() - cpu0;
        s->decode_wall_s += wall;
        s->best_wall_tok_s = std::max(s->best_wall_tok_s, round_tokens / wall);
        s->best_cpu_tok_s = std::max(s->best_cpu_tok_s, round_tokens / cpu);
      }
    }
    for (auto& s : subjects) {
      std::fprintf(stderr, "%-12s history %7lld: %9.1f tok/s wall, %9.1f tok/s cpu, %10zu KV bytes\n",
                   s->mode.c_str(), static_cast<long long>(s->history), s->best_wall_tok_s,
                   s->best_cpu_tok_s, s->max_resident_bytes);
      if (s->memory) {
        const memory::MemorySessionStats& now = s->memory->stats();
        s->decode_stats.num_folds = now.num_folds - s->stats_before.num_folds;
        s->decode_stats.refill_tokens = now.refill_tokens - s->stats_before.refill_tokens;
        s->decode_stats.fold_seconds = now.fold_seconds - s->stats_before.fold_seconds;
        s->decode_stats.projector_seconds = now.projector_seconds - s->stats_before.projector_seconds;
        s->decode_stats.expand_seconds = now.expand_seconds - s->stats_before.expand_seconds;
      }
      s->session.reset();  // frees its KV blocks for the next mode
      s->cache.reset();
      all.push_back(std::move(s));
    }
  }

  nlohmann::ordered_json out;
  out["model"] = model_path;
  out["backend"] = backend->Name();
  out["threads"] = flags.threads;
  out["projector"] = {{"source", projector_source}, {"mem_slots", pc.mem_slots},
                      {"window_size", pc.window_size}, {"chunk_size", pc.chunk_size},
                      {"window_policy", memory::WindowPolicyName(pc.window_policy)},
                      {"sink_tokens", pc.sink_tokens},
                      {"kv_budget", pc.kv_budget()}};
  out["sliding_sink_window"] = SlidingWindow(*projector, flags.window);
  out["sink_tokens"] = flags.sink;
  out["rounds"] = rounds;
  out["round_tokens"] = round_tokens;
  std::map<std::string, std::map<int64_t, const Subject*>> by_mode;
  for (const auto& s : all) {
    out["runs"].push_back({{"mode", s->mode},
                           {"history", s->history},
                           {"decode_tok_s", s->best_wall_tok_s},
                           {"decode_tok_s_cpu", s->best_cpu_tok_s},
                           {"kv_bytes_resident", s->max_resident_bytes},
                           {"history_build_s", s->history_build_s},
                           {"kv_synthetic", s->kv_synthetic}});
    by_mode[s->mode][s->history] = s.get();
  }
  const int64_t lo = histories.front(), hi = histories.back();
  out["ratio_histories"] = {lo, hi};
  for (const auto& [mode, h] : by_mode) {
    out["tok_s_ratio"][mode] = {{"wall", h.at(hi)->best_wall_tok_s / h.at(lo)->best_wall_tok_s},
                                {"cpu", h.at(hi)->best_cpu_tok_s / h.at(lo)->best_cpu_tok_s}};
  }
  if (by_mode.count("memory") && by_mode.count("sliding")) {
    for (int64_t h : histories) {
      const Subject* m = by_mode["memory"].at(h);
      const Subject* sl = by_mode["sliding"].at(h);
      out["memory_over_sliding"][std::to_string(h)] = {
          {"cpu", m->best_cpu_tok_s / sl->best_cpu_tok_s},
          {"wall", m->best_wall_tok_s / sl->best_wall_tok_s}};
    }
  }
  // Fold cost over every timed decode step of the longest history's memory-mode sessions.
  for (const auto& s : all) {
    const memory::MemorySessionStats& f = s->decode_stats;
    if (s->memory == nullptr || s->history != hi || f.num_folds == 0) continue;
    const int64_t steps = static_cast<int64_t>(rounds) * round_tokens;
    out["fold"][s->mode] = {
        {"folds", f.num_folds},
        {"ms_per_fold", 1e3 * f.fold_seconds / f.num_folds},
        {"projector_ms_per_fold", 1e3 * f.projector_seconds / f.num_folds},
        {"expand_ms_per_fold", 1e3 * f.expand_seconds / f.num_folds},
        {"refill_ms_per_fold", 1e3 * (f.fold_seconds - f.projector_seconds - f.expand_seconds) / f.num_folds},
        {"refill_tokens_per_token", static_cast<double>(f.refill_tokens) / steps},
        {"share_of_decode_wall_time", f.fold_seconds / s->decode_wall_s}};
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace
}  // namespace kvfold

int main(int argc, char** argv) {
  CLI::App app{"Memory-mode decode cost against full/sliding/sink at long histories (JSON).",
               "bench_memory_mode"};
  kvfold::ApplyConvention(app);
  kvfold::Flags flags;
  kvfold::AddFlags(app, flags);
  if (std::optional<int> rc = kvfold::ParseCommandLine(app, argc, argv)) return *rc;
  return kvfold::Main(flags);
}
