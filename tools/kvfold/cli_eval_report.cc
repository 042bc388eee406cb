// `kvfold eval`: the Markdown and JSON reports (cli_eval.h).
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

}  // namespace

std::string MarkdownReport(const Report& r) {
  std::string out;
  absl::StrAppend(&out, "model: ", r.model, "\n");
  if (!r.projector.empty()) {
    absl::StrAppend(&out, "projector: ", r.projector_label, " (", r.projector, "; M = ",
                    r.mem_slots, ", W = ", r.window_size, ", C = ", r.chunk_size, ")\n");
  }
  absl::StrAppend(&out, "text: ", r.text, ": ", r.num_docs, " document(s), ", r.num_tokens,
                  " tokens; ", absl::StrFormat("%.1f", r.seconds), " s\n\n");
  const int full = [&r] {
    for (size_t i = 0; i < r.modes.size(); ++i) {
      if (r.modes[i].mode == engine::KvMode::kFull) return static_cast<int>(i);
    }
    return -1;
  }();
  static const NllSum kNone;
  absl::StrAppend(&out, "| mode | KV budget (entries) | max resident | NLL all | NLL ctx > ",
                  r.beyond_window_from, " | vs full | NLL ctx > ", r.beyond_budget_from,
                  " | vs full |");
  if (r.recall) absl::StrAppend(&out, " recall probe | vs full | recall names |");
  absl::StrAppend(&out, "\n| --- | --- | --- | --- | --- | --- | --- | --- |");
  if (r.recall) absl::StrAppend(&out, " --- | --- | --- |");
  out += "\n";
  for (size_t i = 0; i < r.modes.size(); ++i) {
    const ModeTotals& t = r.totals[i];
    const ModeTotals* f = full >= 0 ? &r.totals[static_cast<size_t>(full)] : nullptr;
    absl::StrAppend(&out, "| ", r.modes[i].name, " | ", r.modes[i].budget_text, " | ",
                    t.max_resident, " | ", Cell(t.all), " | ", Cell(t.beyond_window), " | ",
                    VsFull(t.beyond_window, f ? f->beyond_window : kNone), " | ",
                    Cell(t.beyond_budget), " | ",
                    VsFull(t.beyond_budget, f ? f->beyond_budget : kNone), " |");
    if (r.recall) {
      absl::StrAppend(&out, " ", Cell(t.recall), " | ", VsFull(t.recall, f ? f->recall : kNone),
                      " | ", Cell(t.recall_names), " |");
    }
    out += "\n";
  }
  out += "\nscored tokens per mode: ";
  for (size_t i = 0; i < r.modes.size(); ++i) {
    const ModeTotals& t = r.totals[i];
    absl::StrAppend(&out, i ? "; " : "", r.modes[i].name, " all ", t.all.tokens, ", ctx > ",
                    r.beyond_window_from, " ", t.beyond_window.tokens, ", ctx > ",
                    r.beyond_budget_from, " ", t.beyond_budget.tokens);
    if (r.recall) {
      absl::StrAppend(&out, ", recall ", t.recall.tokens, " (names ", t.recall_names.tokens, ")");
    }
    if (r.modes[i].max_tokens > 0) {
      absl::StrAppend(&out, " (first ", r.modes[i].max_tokens, " tokens of each document)");
    }
  }
  out += "\n";
  if (r.bucket_size > 0) {
    size_t num_buckets = 0;
    for (const ModeTotals& t : r.totals) num_buckets = std::max(num_buckets, t.buckets.size());
    absl::StrAppend(&out, "\nNLL per ", r.bucket_size, "-token bucket of target positions:\n\n| bucket |");
    for (const ModeSpec& m : r.modes) absl::StrAppend(&out, " ", m.name, " |");
    out += "\n| --- |";
    for (size_t i = 0; i < r.modes.size(); ++i) out += " --- |";
    out += "\n";
    for (size_t b = 0; b < num_buckets; ++b) {
      absl::StrAppend(&out, "| ", b * static_cast<size_t>(r.bucket_size), " |");
      for (const ModeTotals& t : r.totals) {
        absl::StrAppend(&out, " ", b < t.buckets.size() ? Cell(t.buckets[b]) : "-", " |");
      }
      out += "\n";
    }
    out += "| mean of buckets |";
    for (const ModeTotals& t : r.totals) {
      double sum = 0.0;
      int count = 0;
      for (const NllSum& s : t.buckets) {
        if (s.tokens > 0) {
          sum += s.Mean();
          ++count;
        }
      }
      absl::StrAppend(&out, " ", count ? absl::StrFormat("%.4f", sum / count) : "-", " |");
    }
    out += "\n";
  }
  return out;
}

std::string JsonReport(const Report& r) {
  std::string out = "{\n";
  absl::StrAppend(&out, " \"model\": ", JsonString(r.model), ",\n \"projector\": ",
                  JsonString(r.projector), ",\n \"projector_label\": ",
                  JsonString(r.projector_label), ",\n \"mem_slots\": ", r.mem_slots,
                  ", \"window_size\": ", r.window_size, ", \"chunk_size\": ", r.chunk_size,
                  ",\n \"text\": ", JsonString(r.text), ",\n \"documents\": ", r.num_docs,
                  ", \"tokens\": ", r.num_tokens, ",\n \"beyond_window_from\": ",
                  r.beyond_window_from, ", \"beyond_budget_from\": ", r.beyond_budget_from,
                  ", \"bucket_size\": ", r.bucket_size, ",\n \"seconds\": ",
                  JsonNumber(r.seconds), ",\n \"modes\": {");
  for (size_t i = 0; i < r.modes.size(); ++i) {
    const ModeSpec& m = r.modes[i];
    const ModeTotals& t = r.totals[i];
    absl::StrAppend(&out, i ? "," : "", "\n  ", JsonString(m.name), ": {\"budget\": ", m.budget,
                    ", \"budget_text\": ", JsonString(m.budget_text), ", \"window_size\": ",
                    m.window_size, ", \"sink_tokens\": ", m.sink_tokens, ", \"max_tokens\": ",
                    m.max_tokens, ", \"max_resident\": ", t.max_resident, ", \"seconds\": ",
                    JsonNumber(t.seconds), ",\n   \"all\": ", JsonSum(t.all),
                    ", \"beyond_window\": ", JsonSum(t.beyond_window), ", \"beyond_budget\": ",
                    JsonSum(t.beyond_budget));
    if (r.recall) {
      absl::StrAppend(&out, ",\n   \"recall\": ", JsonSum(t.recall), ", \"recall_names\": ",
                      JsonSum(t.recall_names));
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
