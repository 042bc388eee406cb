// `kvfold eval`: mean NLL per KV mode on the same documents, at the same positions, at
// stated equal KV budgets (teacher forcing through each mode's Session, one token at a
// time: exactly the decode path, folds included). Recall probe and per-bucket NLL for
// long documents. Protocol and measured tables: docs/eval.md.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/command_line.h"
#include "tools/kvfold/cli_engine.h"
#include "tools/kvfold/cli_eval.h"
#include "tools/kvfold/command.h"

namespace kvfold::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct EvalFlags {
  EngineFlags engine;
  std::string tokenizer;
  std::string projector_label = "projector";
  std::string text;
  bool split_endoftext = false;
  std::string docs = "all";
  std::string modes;  // empty: every mode the flags allow
  int64_t budget = 0;
  int64_t sink = 4;
  int64_t max_tokens = -1;
  int64_t full_max_tokens = 4096;
  int64_t buckets = 0;
  int64_t bucket_stride = 1;
  bool recall = false;
  std::string json;
  std::string per_token;
};

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

int RunEval(const EvalFlags& f, const CLI::App& app) {
  auto has = [&](const char* name) { return app.count(std::string("--") + name) > 0; };
  if (has("budget") && f.budget < 2) {
    return FailWith("eval", absl::InvalidArgumentError("--budget must be >= 2"));
  }
  if (f.sink < 1 || (has("max-tokens") && f.max_tokens < 2) || f.full_max_tokens < 2 ||
      f.buckets < 0 || f.bucket_stride < 1 || f.engine.threads < 0) {
    return FailWith("eval", absl::InvalidArgumentError(
                                "--sink >= 1, --max-tokens >= 2, --full-max-tokens >= 2, "
                                "--buckets >= 0, --bucket-stride >= 1 and --threads >= 0 are required"));
  }
  const std::string default_modes =
      !f.engine.projector.empty() ? "full,sliding,sink,memory,memory_only" : "full,sliding,sink";
  std::vector<eval::ModeSpec> modes;
  const std::vector<std::string> mode_names =
      absl::StrSplit((f.modes.empty() ? default_modes : f.modes), ',', absl::SkipEmpty());
  for (const std::string& name : mode_names) {
    auto kv = core::ParseKvMode(name);
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
    wants_memory |= m.mode == core::KvMode::kMemory || m.mode == core::KvMode::kMemoryOnly;
    wants_window |= m.mode == core::KvMode::kSliding || m.mode == core::KvMode::kSink;
  }
  if (wants_memory && !!f.engine.projector.empty()) {
    return FailWith("eval", absl::InvalidArgumentError("memory modes need --projector DIR"));
  }
  if (wants_window && !has("budget") && !!f.engine.projector.empty()) {
    return FailWith("eval", absl::InvalidArgumentError(
                                "sliding/sink need --budget N (or --projector to derive it)"));
  }

  auto text = ReadFile(f.text, "--text");
  if (!text.ok()) return FailWith("eval", text.status());
  const bool split = f.split_endoftext;
  std::vector<std::string> docs = eval::SplitDocuments(*text, split);
  if (docs.empty()) return FailWith("eval", absl::InvalidArgumentError("--text has no documents"));
  auto range = eval::ParseDocRange(f.docs, static_cast<int>(docs.size()));
  if (!range.ok()) return FailWith("eval", range.status());

  const std::string model_path = f.engine.model;
  auto tok_path = !f.tokenizer.empty() ? absl::StatusOr<std::string>(f.tokenizer)
                                       : Tokenizer::FindNextToModel(model_path);
  if (!tok_path.ok()) return FailWith("eval", tok_path.status());
  auto tokenizer = Tokenizer::Load(*tok_path);
  if (!tokenizer.ok()) return FailWith("eval", tokenizer.status());

  auto engine_options = EngineOptionsFromFlags(f.engine);
  if (!engine_options.ok()) return FailWith("eval", engine_options.status());
  auto loaded = LoadEngine(model_path, f.engine.backend, f.engine.threads, f.engine.projector,
                           *engine_options);
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
  report.kv_dtype = core::DTypeName(engine_options->kv_dtype);
  report.text = f.text;
  if (loaded->projector) {
    const memory::ProjectorConfig& pc = loaded->projector->config();
    report.projector = f.engine.projector;
    report.projector_label = f.projector_label;
    report.mem_slots = pc.mem_slots;
    report.window_size = pc.window_size;
    report.chunk_size = pc.chunk_size;
    report.sink_tokens = pc.sink_tokens;
  }
  const int64_t mem_budget =
      loaded->projector ? loaded->projector->config().kv_budget() : int64_t{0};
  const int64_t budget = has("budget") ? f.budget : mem_budget;
  if (wants_window && budget <= f.sink) {
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
      case core::KvMode::kFull:
        m.budget_text = "all";
        m.max_tokens = f.full_max_tokens;
        report.head_limit = f.full_max_tokens;
        break;
      case core::KvMode::kSliding:
        m.window_size = static_cast<int>(budget);
        m.budget = budget;
        m.budget_text = absl::StrCat(budget);
        break;
      case core::KvMode::kSink:
        m.sink_tokens = static_cast<int>(f.sink);
        m.window_size = static_cast<int>(budget - f.sink);
        m.budget = budget;
        m.budget_text = absl::StrCat(f.sink, " + ", budget - f.sink, " = ", budget);
        break;
      case core::KvMode::kMemory:
        m.budget = mem_budget;
        m.budget_text =
            mem_budget == report.sink_tokens + report.mem_slots + report.window_size
                ? absl::StrCat(SinkTerm(report), report.mem_slots, " + ", report.window_size,
                               " (sliding) = ", mem_budget)
                : absl::StrCat(SinkTerm(report), report.mem_slots, " + ", report.window_size,
                               " + ", report.chunk_size, " = ", mem_budget);
        break;
      case core::KvMode::kMemoryOnly: {
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
      has("max-tokens") ? f.max_tokens : (split ? config.max_position_embeddings : 0);
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
  report.bucket_size = f.buckets;
  report.bucket_stride = f.bucket_stride;
  report.recall = f.recall;
  report.modes = modes;
  report.totals.resize(modes.size());
  std::fprintf(stderr, "[eval] %d documents, %lld tokens, modes:", report.num_docs,
               static_cast<long long>(report.num_tokens));
  for (const auto& m : modes) std::fprintf(stderr, " %s (budget %s)", m.name.c_str(), m.budget_text.c_str());
  std::fprintf(stderr, "\n");

  std::string per_token;
  if (!f.per_token.empty()) {
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
    if (!f.per_token.empty()) {
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
  if (!f.json.empty()) {
    if (absl::Status s = WriteFile(f.json, eval::JsonReport(report), "--json"); !s.ok()) {
      return FailWith("eval", s);
    }
  }
  if (!f.per_token.empty()) {
    if (absl::Status s = WriteFile(f.per_token, per_token, "--per-token"); !s.ok()) {
      return FailWith("eval", s);
    }
  }
  return 0;
}

RunFn SetupEval(CLI::App& app) {
  auto flags = std::make_shared<EvalFlags>();
  EvalFlags& f = *flags;
  app.footer(
      "Feeds every document token by token through each mode's session and scores the next "
      "token (mean NLL, nats/token). Budgets: memory M + W + C entries (M + W under the "
      "projector's sliding window policy), sliding --budget (default: memory's), sink S + "
      "(budget - S), memory_only M + C. Markdown to stdout, progress to stderr. Protocol: "
      "docs/eval.md.");
  f.engine.threads = 1;
  AddEngineFlags(app, f.engine);
  app.add_option("--tokenizer", f.tokenizer, "tokenizer file (default: found next to the model)");
  app.add_option("--projector-label", f.projector_label, "the projector's name in the report");
  app.add_option("--text", f.text, "text file with the documents")->required();
  AddSwitch(app, "--split-endoftext", f.split_endoftext,
            "split the text into documents at <|endoftext|>");
  app.add_option("--docs", f.docs, "first:N|last:N|range:A:B|all");
  app.add_option("--modes", f.modes,
                 "comma-separated modes (default: full,sliding,sink, plus memory,memory_only "
                 "with --projector)");
  app.add_option("--budget", f.budget, "KV budget of sliding/sink (default: memory's)");
  app.add_option("--sink", f.sink, "sink tokens (sink mode)");
  app.add_option("--max-tokens", f.max_tokens,
                 "truncate each document (default with --split-endoftext: the model's trained "
                 "context; otherwise no limit)");
  app.add_option("--full-max-tokens", f.full_max_tokens,
                 "full mode only on each document's first N tokens");
  app.add_option("--buckets", f.buckets,
                 "NLL per N target positions (Markdown: every K-th bucket; JSON: all)");
  app.add_option("--bucket-stride", f.bucket_stride, "K: Markdown shows every K-th bucket");
  AddSwitch(app, "--recall", f.recall, "recall probe (docs/eval.md)");
  app.add_option("--json", f.json, "also write the JSON report to this file");
  app.add_option("--per-token", f.per_token, "TSV doc, pos, token, NLL per mode to this file");
  return [flags, &app] { return RunEval(*flags, app); };
}

}  // namespace
}  // namespace kvfold::cli

KVFOLD_REGISTER_COMMAND(eval, "mean NLL per KV mode at equal KV budgets (docs/eval.md)",
                        kvfold::cli::SetupEval);
