// `kvfold eval`: mean NLL per KV mode on the same documents, at the same positions, at
// stated equal KV budgets (teacher forcing through each mode's Session, one token at a
// time: exactly the decode path, folds included). Recall probe and per-bucket NLL for
// long documents. Protocol and measured tables: docs/eval.md.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "tools/kvfold/cli_engine.h"
#include "tools/kvfold/cli_eval.h"
#include "tools/kvfold/command.h"

namespace kvfold::cli {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kUsage[] =
    "usage: kvfold eval --model PATH [--tokenizer FILE] [--projector DIR]\n"
    "         --text FILE [--split-endoftext] [--docs first:N|last:N|range:A:B|all]\n"
    "         [--modes full,sliding,sink,memory,memory_only] [--budget N] [--sink N]\n"
    "         [--max-tokens N] [--full-max-tokens N] [--buckets N [--bucket-stride K]]\n"
    "         [--recall]\n"
    "         [--json OUT] [--per-token OUT] [--projector-label TEXT]\n"
    "         [--backend cpu|cpu-ref] [--threads N] [--kv-dtype f32|int8]\n"
    "Feeds every document token by token through each mode's session and scores the\n"
    "next token (mean NLL, nats/token). Budgets: memory M + W + C entries (M + W under\n"
    "the projector's sliding window policy), sliding --budget (default: memory's),\n"
    "sink S + (budget - S),\n"
    "memory_only M + C. --max-tokens: truncate each document (default with\n"
    "--split-endoftext: the model's trained context; otherwise no limit).\n"
    "--full-max-tokens: full mode only on each document's first N tokens (default 4096).\n"
    "--buckets N: NLL per N target positions (Markdown: every K-th bucket; JSON: all).\n"
    "--recall: recall probe (docs/eval.md).\n"
    "--per-token OUT: TSV doc, pos, token, NLL per mode. Markdown to stdout, progress to\n"
    "stderr.\n";

// "S sinks + " when the projector keeps sink tokens, else empty.
std::string SinkTerm(const eval::Report& r) {
  return r.sink_tokens > 0 ? absl::StrCat(r.sink_tokens, " sinks + ") : std::string();
}

absl::StatusOr<std::string> ReadFile(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", flag, " ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::Status WriteFile(const std::string& path, const std::string& text, const char* flag) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", flag, " ", path));
  return absl::OkStatus();
}

// Prints "[eval] ..." progress lines to stderr every few seconds.
class Progress {
 public:
  explicit Progress(int64_t total) : total_(total), start_(Clock::now()), last_(start_) {}
  void Update(int64_t done, const std::string& what) {
    const auto now = Clock::now();
    if (std::chrono::duration<double>(now - last_).count() < 5.0) return;
    last_ = now;
    const double s = std::chrono::duration<double>(now - start_).count();
    const double rate = done / std::max(s, 1e-9);
    std::fprintf(stderr, "[eval] %5.1f%% %s: %lld/%lld tokens, %.0f tok/s, ETA %.0f s\n",
                 100.0 * done / std::max<int64_t>(total_, 1), what.c_str(),
                 static_cast<long long>(done), static_cast<long long>(total_), rate,
                 (total_ - done) / std::max(rate, 1e-9));
  }
  double Seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  int64_t total_;
  Clock::time_point start_, last_;
};

int RunEval(int argc, char** argv) {
  auto flags =
      ParseEngineFlags(argc, argv,
                       {"model", "tokenizer", "projector", "projector-label", "text", "docs",
                        "modes", "budget", "sink", "max-tokens", "full-max-tokens", "buckets",
                        "bucket-stride", "json", "per-token", "backend", "threads", "kv-dtype"},
                       {"split-endoftext", "recall", "help"});
  if (!flags.ok()) {
    std::fprintf(stderr, "%s", kUsage);
    return FailWith("eval", flags.status());
  }
  if (flags->count("help")) {
    std::printf("%s", kUsage);
    return 0;
  }
  auto has = [&](const char* name) { return flags->count(name) > 0; };
  auto get = [&](const char* name, const std::string& def) {
    return has(name) ? flags->at(name) : def;
  };
  if (!has("model") || !has("text")) {
    std::fprintf(stderr, "%s", kUsage);
    return FailWith("eval", absl::InvalidArgumentError("--model and --text are required"));
  }
  auto budget_flag = IntFlag(*flags, "budget", 0);
  auto sink = IntFlag(*flags, "sink", 4);
  auto max_tokens_flag = IntFlag(*flags, "max-tokens", -1);
  auto full_max = IntFlag(*flags, "full-max-tokens", 4096);
  auto buckets = IntFlag(*flags, "buckets", 0);
  auto bucket_stride = IntFlag(*flags, "bucket-stride", 1);
  auto threads = IntFlag(*flags, "threads", 1);
  for (const auto* v : {&budget_flag, &sink, &max_tokens_flag, &full_max, &buckets, &bucket_stride, &threads}) {
    if (!v->ok()) return FailWith("eval", v->status());
  }
  if (has("budget") && *budget_flag < 2) {
    return FailWith("eval", absl::InvalidArgumentError("--budget must be >= 2"));
  }
  if (*sink < 1 || (has("max-tokens") && *max_tokens_flag < 2) || *full_max < 2 ||
      *buckets < 0 || *bucket_stride < 1 || *threads < 0) {
    return FailWith("eval", absl::InvalidArgumentError(
                                "--sink >= 1, --max-tokens >= 2, --full-max-tokens >= 2, "
                                "--buckets >= 0, --bucket-stride >= 1 and --threads >= 0 are required"));
  }
  const std::string default_modes =
      has("projector") ? "full,sliding,sink,memory,memory_only" : "full,sliding,sink";
  std::vector<eval::ModeSpec> modes;
  const std::vector<std::string> mode_names =
      absl::StrSplit(get("modes", default_modes), ',', absl::SkipEmpty());
  for (const std::string& name : mode_names) {
    auto kv = engine::ParseKvMode(name);
    if (!kv.ok()) {
      return FailWith("eval", absl::InvalidArgumentError(absl::StrCat(
                                  "unknown mode '", name,
                                  "' in --modes (full, sliding, sink, memory, memory_only)")));
    }
    for (const auto& m : modes) {
      if (m.mode == *kv) return FailWith("eval", absl::InvalidArgumentError("--modes repeats a mode"));
    }
    eval::ModeSpec spec;
    spec.name = name;
    spec.mode = *kv;
    modes.push_back(spec);
  }
  if (modes.empty()) return FailWith("eval", absl::InvalidArgumentError("--modes is empty"));
  bool wants_memory = false, wants_window = false;
  for (const auto& m : modes) {
    wants_memory |= m.mode == engine::KvMode::kMemory || m.mode == engine::KvMode::kMemoryOnly;
    wants_window |= m.mode == engine::KvMode::kSliding || m.mode == engine::KvMode::kSink;
  }
  if (wants_memory && !has("projector")) {
    return FailWith("eval", absl::InvalidArgumentError("memory modes need --projector DIR"));
  }
  if (wants_window && !has("budget") && !has("projector")) {
    return FailWith("eval", absl::InvalidArgumentError(
                                "sliding/sink need --budget N (or --projector to derive it)"));
  }

  auto text = ReadFile(flags->at("text"), "--text");
  if (!text.ok()) return FailWith("eval", text.status());
  const bool split = has("split-endoftext");
  std::vector<std::string> docs = eval::SplitDocuments(*text, split);
  if (docs.empty()) return FailWith("eval", absl::InvalidArgumentError("--text has no documents"));
  auto range = eval::ParseDocRange(get("docs", "all"), static_cast<int>(docs.size()));
  if (!range.ok()) return FailWith("eval", range.status());

  const std::string model_path = flags->at("model");
  auto tok_path = has("tokenizer") ? absl::StatusOr<std::string>(flags->at("tokenizer"))
                                   : Tokenizer::FindNextToModel(model_path);
  if (!tok_path.ok()) return FailWith("eval", tok_path.status());
  auto tokenizer = Tokenizer::Load(*tok_path);
  if (!tokenizer.ok()) return FailWith("eval", tokenizer.status());

  auto engine_options = EngineOptionsFromFlags(*flags);
  if (!engine_options.ok()) return FailWith("eval", engine_options.status());
  auto loaded = LoadEngine(model_path, get("backend", "cpu"), static_cast<int>(*threads),
                           get("projector", ""), *engine_options);
  if (!loaded.ok()) return FailWith("eval", loaded.status());
  const model::ModelConfig& config = loaded->engine->config();
  if ((*tokenizer)->vocab_size() > config.vocab_size) {
    return FailWith("eval", absl::InvalidArgumentError(absl::StrCat(
                                "the tokenizer has ", (*tokenizer)->vocab_size(),
                                " tokens, the model ", config.vocab_size)));
  }

  // Budgets (docs/eval.md): every bounded mode at its largest resident size.
  eval::Report report;
  report.model = model_path;
  report.kv_dtype = engine::KvDTypeName(engine_options->kv_dtype);
  report.text = flags->at("text");
  if (loaded->projector) {
    const memory::ProjectorConfig& pc = loaded->projector->config();
    report.projector = flags->at("projector");
    report.projector_label = get("projector-label", "projector");
    report.mem_slots = pc.mem_slots;
    report.window_size = pc.window_size;
    report.chunk_size = pc.chunk_size;
    report.sink_tokens = pc.sink_tokens;
  }
  const int64_t mem_budget =
      loaded->projector ? loaded->projector->config().kv_budget() : int64_t{0};
  const int64_t budget = has("budget") ? *budget_flag : mem_budget;
  if (wants_window && budget <= *sink) {
    return FailWith("eval", absl::InvalidArgumentError("the budget must exceed --sink"));
  }
  if (has("budget") && wants_memory && wants_window && budget != mem_budget) {
    std::fprintf(stderr,
                 "[eval] note: --budget %lld differs from the memory mode's budget %lld; "
                 "the budgets are not equal\n",
                 static_cast<long long>(budget), static_cast<long long>(mem_budget));
  }
  report.beyond_budget_from = budget;
  report.beyond_window_from = loaded->projector ? report.window_size + report.chunk_size : budget;
  for (auto& m : modes) {
    switch (m.mode) {
      case engine::KvMode::kFull:
        m.budget_text = "all";
        m.max_tokens = *full_max;
        report.head_limit = *full_max;
        break;
      case engine::KvMode::kSliding:
        m.window_size = static_cast<int>(budget);
        m.budget = budget;
        m.budget_text = absl::StrCat(budget);
        break;
      case engine::KvMode::kSink:
        m.sink_tokens = static_cast<int>(*sink);
        m.window_size = static_cast<int>(budget - *sink);
        m.budget = budget;
        m.budget_text = absl::StrCat(*sink, " + ", budget - *sink, " = ", budget);
        break;
      case engine::KvMode::kMemory:
        m.budget = mem_budget;
        m.budget_text =
            mem_budget == report.sink_tokens + report.mem_slots + report.window_size
                ? absl::StrCat(SinkTerm(report), report.mem_slots, " + ", report.window_size,
                               " (sliding) = ", mem_budget)
                : absl::StrCat(SinkTerm(report), report.mem_slots, " + ", report.window_size,
                               " + ", report.chunk_size, " = ", mem_budget);
        break;
      case engine::KvMode::kMemoryOnly: {
        const memory::ProjectorConfig& pc = loaded->projector->config();
        m.budget = pc.memory_only_budget();
        m.budget_text = absl::StrCat(
            SinkTerm(report), report.mem_slots, " + ",
            pc.memory_only_window > 0 ? absl::StrCat(pc.memory_only_window, " (sliding)")
                                      : absl::StrCat(report.chunk_size),
            " = ", m.budget);
        break;
      }
    }
  }

  // Encode: BOS + llama2.c encode; truncated to --max-tokens.
  const int64_t max_tokens =
      has("max-tokens") ? *max_tokens_flag : (split ? config.max_position_embeddings : 0);
  std::vector<std::vector<int32_t>> ids;
  int64_t total_work = 0;
  for (int d = range->first; d < range->second; ++d) {
    auto enc = (*tokenizer)->Encode(docs[static_cast<size_t>(d)], /*add_bos=*/true);
    if (!enc.ok()) return FailWith("eval", enc.status());
    if (enc->empty() || enc->front() != config.bos_token_id) {
      enc->insert(enc->begin(), config.bos_token_id);
    }
    if (max_tokens > 0 && static_cast<int64_t>(enc->size()) > max_tokens) {
      enc->resize(static_cast<size_t>(max_tokens));
    }
    if (enc->size() < 2) continue;
    report.num_tokens += static_cast<int64_t>(enc->size());
    for (const auto& m : modes) {
      const int64_t n = m.max_tokens > 0 ? std::min<int64_t>(m.max_tokens, enc->size())
                                         : static_cast<int64_t>(enc->size());
      total_work += n - 1;
    }
    ids.push_back(std::move(*enc));
  }
  if (ids.empty()) return FailWith("eval", absl::InvalidArgumentError("no document has 2 tokens"));
  report.num_docs = static_cast<int>(ids.size());
  report.bucket_size = *buckets;
  report.bucket_stride = *bucket_stride;
  report.recall = has("recall");
  report.modes = modes;
  report.totals.resize(modes.size());
  std::fprintf(stderr, "[eval] %d documents, %lld tokens, modes:", report.num_docs,
               static_cast<long long>(report.num_tokens));
  for (const auto& m : modes) std::fprintf(stderr, " %s (budget %s)", m.name.c_str(), m.budget_text.c_str());
  std::fprintf(stderr, "\n");

  std::string per_token;
  if (has("per-token")) {
    per_token = "doc\tpos\ttoken";
    for (const auto& m : modes) absl::StrAppend(&per_token, "\t", m.name);
    per_token += "\n";
  }
  Progress progress(total_work);
  int64_t done = 0;
  std::vector<std::vector<double>> doc_nll(modes.size());
  std::vector<engine::Session*> active;
  std::vector<int32_t> active_ids;
  std::vector<size_t> active_modes;
  engine::ForwardResult scratch;
  for (size_t d = 0; d < ids.size(); ++d) {
    const std::vector<int32_t>& doc = ids[d];
    const int64_t n = static_cast<int64_t>(doc.size());
    eval::RecallMarks marks;
    if (report.recall) marks = eval::RecallProbe(**tokenizer, doc, budget);
    // All modes in lockstep: one ragged Forward per position for every session still
    // scoring (engine::AppendBatch; results are batch-invariant, so each mode's logits are
    // exactly those of its own Append loop).
    std::vector<std::unique_ptr<engine::Session>> sessions;
    std::vector<int64_t> ends;
    for (size_t i = 0; i < modes.size(); ++i) {
      auto session = MakeSession(*loaded, modes[i].name, std::max(modes[i].window_size, 1),
                                 modes[i].sink_tokens);
      if (!session.ok()) return FailWith("eval", session.status());
      sessions.push_back(std::move(*session));
      ends.push_back(modes[i].max_tokens > 0 ? std::min(modes[i].max_tokens, n) : n);
      doc_nll[i].assign(static_cast<size_t>(n), std::numeric_limits<double>::quiet_NaN());
    }
    for (int64_t j = 1; j < n; ++j) {
      active.clear();
      active_ids.clear();
      active_modes.clear();
      for (size_t i = 0; i < modes.size(); ++i) {
        if (j >= ends[i]) continue;
        active.push_back(sessions[i].get());
        active_ids.push_back(doc[static_cast<size_t>(j - 1)]);
        active_modes.push_back(i);
      }
      if (active.empty()) break;
      if (absl::Status s = engine::AppendBatch(*loaded->engine, active, active_ids, &scratch);
          !s.ok()) {
        return FailWith("eval", s);
      }
      for (size_t i : active_modes) {
        eval::ModeTotals& t = report.totals[i];
        t.max_resident = std::max(t.max_resident, sessions[i]->ResidentTokens());
        const double nll = eval::TokenNll(sessions[i]->Logits(), doc[static_cast<size_t>(j)]);
        doc_nll[i][static_cast<size_t>(j)] = nll;
        for (eval::PositionSums* p : {&t.sums, &t.head}) {
          if (p == &t.head && j >= report.head_limit) break;
          p->all.Add(nll);
          if (j > report.beyond_window_from) p->beyond_window.Add(nll);
          if (j > report.beyond_budget_from) p->beyond_budget.Add(nll);
          if (report.recall && marks.any[static_cast<size_t>(j)]) p->recall.Add(nll);
          if (report.recall && marks.names[static_cast<size_t>(j)]) p->recall_names.Add(nll);
        }
        if (report.bucket_size > 0) {
          const size_t b = static_cast<size_t>(j / report.bucket_size);
          if (t.buckets.size() <= b) t.buckets.resize(b + 1);
          t.buckets[b].Add(nll);
        }
        if (j + 1 == ends[i] && modes[i].max_tokens > 0 && ends[i] < n) t.truncated = true;
      }
      done += static_cast<int64_t>(active.size());
      if ((j & 63) == 0) {
        progress.Update(done, absl::StrFormat("doc %d/%d", d + 1, ids.size()));
      }
    }
    if (has("per-token")) {
      for (int64_t j = 1; j < n; ++j) {
        absl::StrAppend(&per_token, d, "\t", j, "\t", doc[static_cast<size_t>(j)]);
        for (size_t i = 0; i < modes.size(); ++i) {
          const double v = doc_nll[i][static_cast<size_t>(j)];
          absl::StrAppend(&per_token, "\t", std::isnan(v) ? std::string("-") : absl::StrFormat("%.17g", v));
        }
        per_token += "\n";
      }
    }
  }
  report.seconds = progress.Seconds();
  std::fprintf(stderr, "[eval] done: %lld tokens in %.1f s\n", static_cast<long long>(done),
               report.seconds);
  const std::string md = eval::MarkdownReport(report);
  std::fwrite(md.data(), 1, md.size(), stdout);
  if (has("json")) {
    if (absl::Status s = WriteFile(flags->at("json"), eval::JsonReport(report), "--json"); !s.ok()) {
      return FailWith("eval", s);
    }
  }
  if (has("per-token")) {
    if (absl::Status s = WriteFile(flags->at("per-token"), per_token, "--per-token"); !s.ok()) {
      return FailWith("eval", s);
    }
  }
  return 0;
}

}  // namespace
}  // namespace kvfold::cli

KVFOLD_REGISTER_COMMAND(eval, "mean NLL per KV mode at equal KV budgets (docs/eval.md)",
                        kvfold::cli::RunEval);
