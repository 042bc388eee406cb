// `kvfold eval`: the Markdown and JSON reports (cli_eval.h).
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/kvfold/cli_eval.h"

namespace kvfold::cli::eval {
namespace {

std::string Cell(const NllSum& s) {
  return s.tokens > 0 ? absl::StrFormat("%.4f", s.Mean()) : std::string("-");
}

// Relative difference to full's value, in percent.
std::string VsFull(const NllSum& s, const NllSum& full) {
  if (s.tokens == 0 || full.tokens == 0) return "-";
  return absl::StrFormat("%+.2f%%", 100.0 * (s.Mean() / full.Mean() - 1.0));
}

std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string JsonNumber(double v) {
  return std::isfinite(v) ? absl::StrFormat("%.6f", v) : std::string("null");
}

std::string JsonSum(const NllSum& s) {
  return absl::StrCat("{\"nll\": ", JsonNumber(s.Mean()), ", \"tokens\": ", s.tokens, "}");
}

// One table of mode rows over `sums_of(totals)`: NLL all, beyond W + C, beyond the budget,
// the recall probe, each with its change relative to full mode.
std::string ModeTable(const Report& r, const PositionSums& (*sums_of)(const ModeTotals&)) {
  const PositionSums* full = nullptr;
  for (size_t i = 0; i < r.modes.size(); ++i) {
    if (r.modes[i].mode == core::KvMode::kFull) full = &sums_of(r.totals[i]);
  }
  static const PositionSums kNone;
  const PositionSums& f = full ? *full : kNone;
  // The beyond-window column only with a projector (W + C differs from the budget), the
  // beyond-budget one whenever there is a budget.
  const bool show_window = r.beyond_window_from > 0 && r.beyond_window_from != r.beyond_budget_from;
  const bool show_budget = r.beyond_budget_from > 0;
  std::string head = "| mode | KV budget (entries) | max resident | NLL all |";
  if (show_window) absl::StrAppend(&head, " NLL ctx > ", r.beyond_window_from, " | vs full |");
  if (show_budget) absl::StrAppend(&head, " NLL ctx > ", r.beyond_budget_from, " | vs full |");
  if (r.recall) head += " recall probe | vs full | recall: names |";
  std::string out = head + "\n|";
  for (size_t k = 1; k < head.size(); ++k) {
    if (head[k] == '|') out += " --- |";
  }
  out += "\n";
  for (size_t i = 0; i < r.modes.size(); ++i) {
    const PositionSums& t = sums_of(r.totals[i]);
    absl::StrAppend(&out, "| ", r.modes[i].name, " | ", r.modes[i].budget_text, " | ",
                    r.totals[i].max_resident, " | ", Cell(t.all), " |");
    if (show_window) {
      absl::StrAppend(&out, " ", Cell(t.beyond_window), " | ", VsFull(t.beyond_window, f.beyond_window), " |");
    }
    if (show_budget) {
      absl::StrAppend(&out, " ", Cell(t.beyond_budget), " | ", VsFull(t.beyond_budget, f.beyond_budget), " |");
    }
    if (r.recall) {
      absl::StrAppend(&out, " ", Cell(t.recall), " | ", VsFull(t.recall, f.recall), " | ",
                      Cell(t.recall_names), " |");
    }
    out += "\n";
  }
  out += "\nscored tokens: ";
  for (size_t i = 0; i < r.modes.size(); ++i) {
    const PositionSums& t = sums_of(r.totals[i]);
    absl::StrAppend(&out, i ? "; " : "", r.modes[i].name, " all ", t.all.tokens);
    if (show_window) absl::StrAppend(&out, ", ctx > ", r.beyond_window_from, " ", t.beyond_window.tokens);
    if (show_budget) absl::StrAppend(&out, ", ctx > ", r.beyond_budget_from, " ", t.beyond_budget.tokens);
    if (r.recall) absl::StrAppend(&out, ", recall ", t.recall.tokens, " (names ", t.recall_names.tokens, ")");
  }
  return out + "\n";
}

const PositionSums& AllSums(const ModeTotals& t) { return t.sums; }
const PositionSums& HeadSums(const ModeTotals& t) { return t.head; }

}  // namespace

std::string MarkdownReport(const Report& r) {
  std::string out;
  absl::StrAppend(&out, "model: ", r.model, "\n");
  if (r.kv_dtype != "f32") absl::StrAppend(&out, "kv cache: ", r.kv_dtype, "\n");
  if (!r.projector.empty()) {
    absl::StrAppend(&out, "projector: ", r.projector_label, " (", r.projector, "; M = ",
                    r.mem_slots, ", W = ", r.window_size, ", C = ", r.chunk_size,
                    r.sink_tokens > 0 ? absl::StrCat(", S = ", r.sink_tokens) : "", ")\n");
  }
  absl::StrAppend(&out, "text: ", r.text, ": ", r.num_docs, " document(s), ", r.num_tokens,
                  " tokens; ", absl::StrFormat("%.1f", r.seconds), " s\n\n");
  bool full_truncated = false;
  for (size_t i = 0; i < r.modes.size(); ++i) {
    full_truncated |= r.modes[i].mode == core::KvMode::kFull && r.totals[i].truncated;
  }
  if (full_truncated) {
    absl::StrAppend(&out, "Full mode is scored only on the first ", r.head_limit,
                    " tokens of each document (--full-max-tokens); every mode on those same "
                    "positions:\n\n", ModeTable(r, &HeadSums),
                    "\nEvery mode on all its positions (\"vs full\" compares with full's "
                    "shorter range):\n\n");
  }
  out += ModeTable(r, &AllSums);
  if (r.bucket_size > 0) {
    size_t num_buckets = 0;
    for (const ModeTotals& t : r.totals) num_buckets = std::max(num_buckets, t.buckets.size());
    absl::StrAppend(&out, "\nNLL per ", r.bucket_size, "-token bucket of target positions:\n\n| bucket |");
    for (const ModeSpec& m : r.modes) absl::StrAppend(&out, " ", m.name, " |");
    out += "\n| --- |";
    for (size_t i = 0; i < r.modes.size(); ++i) out += " --- |";
    out += "\n";
    const size_t stride = static_cast<size_t>(std::max<int64_t>(1, r.bucket_stride));
    for (size_t b = 0; b < num_buckets; ++b) {
      if (b % stride != 0 && b + 1 != num_buckets) continue;
      absl::StrAppend(&out, "| ", b * static_cast<size_t>(r.bucket_size), " |");
      for (const ModeTotals& t : r.totals) {
        absl::StrAppend(&out, " ", b < t.buckets.size() ? Cell(t.buckets[b]) : "-", " |");
      }
      out += "\n";
    }
    // Summary rows: the mean of the per-bucket means over all buckets and over each half of
    // the buckets a mode scored (a drift between the halves shows instability).
    auto mean_of = [](const std::vector<NllSum>& buckets, size_t begin, size_t end) {
      double sum = 0.0;
      int count = 0;
      for (size_t b = begin; b < end && b < buckets.size(); ++b) {
        if (buckets[b].tokens > 0) {
          sum += buckets[b].Mean();
          ++count;
        }
      }
      return count ? absl::StrFormat("%.4f", sum / count) : std::string("-");
    };
    out += "| mean of buckets |";
    for (const ModeTotals& t : r.totals) absl::StrAppend(&out, " ", mean_of(t.buckets, 0, t.buckets.size()), " |");
    out += "\n| mean, first half |";
    for (const ModeTotals& t : r.totals) absl::StrAppend(&out, " ", mean_of(t.buckets, 0, t.buckets.size() / 2), " |");
    out += "\n| mean, second half |";
    for (const ModeTotals& t : r.totals) {
      absl::StrAppend(&out, " ", mean_of(t.buckets, t.buckets.size() / 2, t.buckets.size()), " |");
    }
    out += "\n";
  }
  return out;
}

namespace {

// "all": {...}, "beyond_window": {...}, ... (without braces around).
std::string JsonSums(const PositionSums& s, bool recall) {
  std::string out = absl::StrCat("\"all\": ", JsonSum(s.all), ", \"beyond_window\": ",
                                 JsonSum(s.beyond_window), ", \"beyond_budget\": ",
                                 JsonSum(s.beyond_budget));
  if (recall) {
    absl::StrAppend(&out, ", \"recall\": ", JsonSum(s.recall), ", \"recall_names\": ",
                    JsonSum(s.recall_names));
  }
  return out;
}

}  // namespace

std::string JsonReport(const Report& r) {
  std::string out = "{\n";
  absl::StrAppend(&out, " \"model\": ", JsonString(r.model), ",\n \"kv_dtype\": ",
                  JsonString(r.kv_dtype), ",\n \"projector\": ",
                  JsonString(r.projector), ",\n \"projector_label\": ",
                  JsonString(r.projector_label), ",\n \"mem_slots\": ", r.mem_slots,
                  ", \"window_size\": ", r.window_size, ", \"chunk_size\": ", r.chunk_size,
                  ", \"sink_tokens\": ", r.sink_tokens, ",\n \"text\": ", JsonString(r.text), ",\n \"documents\": ", r.num_docs,
                  ", \"tokens\": ", r.num_tokens, ",\n \"beyond_window_from\": ",
                  r.beyond_window_from, ", \"beyond_budget_from\": ", r.beyond_budget_from,
                  ", \"head_limit\": ", r.head_limit,
                  ", \"bucket_size\": ", r.bucket_size, ",\n \"seconds\": ",
                  JsonNumber(r.seconds), ",\n \"modes\": {");
  for (size_t i = 0; i < r.modes.size(); ++i) {
    const ModeSpec& m = r.modes[i];
    const ModeTotals& t = r.totals[i];
    absl::StrAppend(&out, i ? "," : "", "\n  ", JsonString(m.name), ": {\"budget\": ", m.budget,
                    ", \"budget_text\": ", JsonString(m.budget_text), ", \"window_size\": ",
                    m.window_size, ", \"sink_tokens\": ", m.sink_tokens, ", \"max_tokens\": ",
                    m.max_tokens, ", \"truncated\": ", t.truncated ? "true" : "false",
                    ", \"max_resident\": ", t.max_resident, ",\n   ", JsonSums(t.sums, r.recall));
    if (r.head_limit > 0) {
      absl::StrAppend(&out, ",\n   \"head\": {\"limit\": ", r.head_limit, ", ",
                      JsonSums(t.head, r.recall), "}");
    }
    if (r.bucket_size > 0) {
      out += ",\n   \"buckets\": [";
      for (size_t b = 0; b < t.buckets.size(); ++b) {
        absl::StrAppend(&out, b ? ", " : "", JsonSum(t.buckets[b]));
      }
      out += "]";
    }
    out += "}";
  }
  out += "\n }\n}\n";
  return out;
}

}  // namespace kvfold::cli::eval
