// Helpers of `kvfold eval` (cmd_eval.cc): documents, per-token NLL accumulation, the
// recall probe and the reports. The protocol is documented in docs/eval.md.
//
// Position vocabulary: a document is ids[0..n) (ids[0] = BOS). Target j (1 <= j < n) is
// predicted from the logits after feeding ids[0..j) one token at a time through a mode's
// Session (teacher forcing on the decode path); its context holds j tokens.
#ifndef KVFOLD_TOOLS_KVFOLD_CLI_EVAL_H_
#define KVFOLD_TOOLS_KVFOLD_CLI_EVAL_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "inference_svc/engine/session.h"
#include "inference_svc/tokenizer/tokenizer.h"

namespace kvfold::cli::eval {

// Sum of NLLs and their count (nats/token).
struct NllSum {
  double nll = 0.0;
  int64_t tokens = 0;
  void Add(double v) {
    nll += v;
    ++tokens;
  }
  double Mean() const;  // NaN when empty
};

// One evaluated mode and the KV budget it runs at.
struct ModeSpec {
  std::string name;  // "full", "sliding", "sink", "memory", "memory_only"
  core::KvMode mode = core::KvMode::kFull;
  int window_size = 0;          // sliding/sink: main entries incl. the current token
  int sink_tokens = 0;          // sink
  int64_t budget = 0;           // largest resident KV entries; 0 = unbounded (full)
  std::string budget_text;      // e.g. "16 + 64 + 32 = 112"
  int64_t max_tokens = 0;       // evaluate only the first max_tokens of a document (0 = all)
};

// NLL sums over the position sets of the report.
struct PositionSums {
  NllSum all;            // every target
  NllSum beyond_window;  // targets whose context exceeds W + C (where memory mode folds)
  NllSum beyond_budget;  // targets whose context exceeds the budget (every bounded mode)
  NllSum recall;         // recall probe (see RecallProbe)
  NllSum recall_names;   // its subset of capitalised names
};

// Accumulated results of one mode.
struct ModeTotals {
  PositionSums sums;            // every scored target
  PositionSums head;            // targets j < Report::head_limit (where full is scored too)
  std::vector<NllSum> buckets;  // by target position / bucket_size
  int64_t max_resident = 0;     // largest Session::ResidentTokens() seen
  bool truncated = false;       // some document was cut at ModeSpec::max_tokens
};

// The file's documents: the whole text (stripped of surrounding whitespace) or, with
// split_endoftext, the pieces between `<|endoftext|>` markers, each stripped, empty ones
// dropped.
std::vector<std::string> SplitDocuments(std::string_view text, bool split_endoftext);

// "first:N", "last:N" or "all" -> [begin, end) of `num_docs`. InvalidArgument for a
// malformed spec, N < 1 or N > num_docs.
absl::StatusOr<std::pair<int, int>> ParseDocRange(std::string_view spec, int num_docs);

// -log softmax(logits)[target], computed in double.
double TokenNll(std::span<const float> logits, int32_t target);

// Recall probe marks for a document's targets (vectors of size ids.size(); index = target
// position j). Words are maximal runs of ASCII letters in the decoded text, compared
// case-insensitively. A word is a candidate when it is a name (starts with an upper-case
// letter, at least 2 letters, and one of its occurrences in the document is not at a
// sentence start) or a content word (at least 3 letters, not in a fixed stop-word list).
// Token j of a candidate word's occurrence is marked when the word occurred earlier in
// the document and every earlier occurrence ended before target j - window, i.e. lies
// outside the last `window` tokens of j's context. `names` marks the subset of names.
struct RecallMarks {
  std::vector<uint8_t> any;
  std::vector<uint8_t> names;
};
RecallMarks RecallProbe(const Tokenizer& tokenizer, std::span<const int32_t> ids,
                        int64_t window);

// Report inputs shared by the Markdown and JSON writers.
struct Report {
  std::string model, projector, projector_label, text;
  std::string kv_dtype = "f32";  // core::DTypeName of the engine's KV cache
  int num_docs = 0;
  int64_t num_tokens = 0;          // ids fed (incl. BOS) over all documents
  int64_t beyond_window_from = 0;  // W + C (or the budget without a projector)
  int64_t beyond_budget_from = 0;  // the budget
  int64_t head_limit = 0;          // full mode's max_tokens (0: full not evaluated)
  int mem_slots = 0, window_size = 0, chunk_size = 0;
  int sink_tokens = 0;  // the projector's sink tokens S (memory modes)
  int64_t bucket_size = 0;
  int64_t bucket_stride = 1;  // Markdown shows every bucket_stride-th bucket (and the last)
  bool recall = false;
  std::vector<ModeSpec> modes;
  std::vector<ModeTotals> totals;  // parallel to modes
  double seconds = 0.0;
};

std::string MarkdownReport(const Report& report);
std::string JsonReport(const Report& report);

}  // namespace kvfold::cli::eval

#endif  // KVFOLD_TOOLS_KVFOLD_CLI_EVAL_H_
