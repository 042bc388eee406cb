// `kvfold logits`: raw logits for a token sequence, for parity tests against PyTorch.
// Writes little-endian float32 [num_tokens, vocab_size]; row i = logits after feeding
// tokens[0..i]. Default: one token at a time through a Session (the decode path, folds
// included in memory modes). --prefill: all tokens in one Engine::Forward (plain modes).
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "tools/kvfold/cli_engine.h"
#include "tools/kvfold/command.h"

namespace kvfold::cli {
namespace {

constexpr char kUsage[] =
    "usage: kvfold logits --model PATH [--projector DIR]\n"
    "         [--mode full|sliding|sink|memory|memory_only] [--window N] [--sink N]\n"
    "         (--tokens 1,2,3 | --tokens-file F) [--prefill] --out FILE\n"
    "         [--backend cpu|cpu-ref] [--threads N] [--kv-dtype f32|int8] [--fp32-memory]\n"
    "--fp32-memory: memory modes keep the projector's fp32 output instead of rounding it\n"
    "to fp16 after each fold (for fp32 parity tests; blocks then need fp32 payloads).\n"
    "--tokens-file: ids separated by commas or whitespace. Output: float32 LE\n"
    "[num_tokens, vocab_size].\n";

absl::StatusOr<std::vector<int32_t>> ParseIds(const std::string& text) {
  std::vector<int32_t> ids;
  for (absl::string_view piece : absl::StrSplit(text, absl::ByAnyChar(", \n\t\r"), absl::SkipEmpty())) {
    int32_t id;
    if (!absl::SimpleAtoi(piece, &id)) {
      return absl::InvalidArgumentError("token ids must be integers");
    }
    ids.push_back(id);
  }
  if (ids.empty()) return absl::InvalidArgumentError("no token ids");
  return ids;
}

int RunLogits(int argc, char** argv) {
  auto flags = ParseEngineFlags(argc, argv,
                                {"model", "projector", "mode", "window", "sink", "tokens",
                                 "tokens-file", "out", "backend", "threads", "kv-dtype"},
                                {"prefill", "fp32-memory", "help"});
  if (!flags.ok()) return FailWith("logits", flags.status());
  if (flags->count("help")) {
    std::printf("%s", kUsage);
    return 0;
  }
  if (!flags->count("model") || !flags->count("out") ||
      flags->count("tokens") == flags->count("tokens-file")) {
    std::fprintf(stderr, "%s", kUsage);
    return 2;
  }
  std::string token_text;
  if (flags->count("tokens")) {
    token_text = flags->at("tokens");
  } else {
    std::ifstream in(flags->at("tokens-file"));
    if (!in) return FailWith("logits", absl::NotFoundError("cannot open --tokens-file"));
    std::stringstream ss;
    ss << in.rdbuf();
    token_text = ss.str();
  }
  auto ids = ParseIds(token_text);
  if (!ids.ok()) return FailWith("logits", ids.status());
  auto window = IntFlag(*flags, "window", 1024);
  auto sink = IntFlag(*flags, "sink", 4);
  auto threads = IntFlag(*flags, "threads", 0);
  if (!window.ok() || !sink.ok() || !threads.ok()) {
    return FailWith("logits", absl::InvalidArgumentError("--window/--sink/--threads must be integers"));
  }
  const std::string mode = flags->count("mode") ? flags->at("mode") : "full";
  auto engine_options = EngineOptionsFromFlags(*flags);
  if (!engine_options.ok()) return FailWith("logits", engine_options.status());
  auto loaded =
      LoadEngine(flags->at("model"), flags->count("backend") ? flags->at("backend") : "cpu",
                 static_cast<int>(*threads),
                 flags->count("projector") ? flags->at("projector") : "", *engine_options);
  if (!loaded.ok()) return FailWith("logits", loaded.status());
  const int vocab = loaded->engine->config().vocab_size;
  std::vector<float> out;
  out.reserve(ids->size() * static_cast<size_t>(vocab));
  if (flags->count("prefill")) {
    engine::KvPolicy policy;
    if (mode == "full") {
      policy = engine::KvPolicy::Full();
    } else if (mode == "sliding") {
      policy = engine::KvPolicy::Sliding(static_cast<int>(*window));
    } else if (mode == "sink") {
      policy = engine::KvPolicy::Sink(static_cast<int>(*sink), static_cast<int>(*window));
    } else {
      return FailWith("logits", absl::InvalidArgumentError(
                                    "--prefill supports full, sliding and sink (memory modes "
                                    "fold while feeding; use the default decode path)"));
    }
    auto cache = loaded->engine->NewCache(policy);
    engine::SequenceInput in;
    in.cache = cache.get();
    in.token_ids = *ids;
    in.logits = engine::RowSelect::kAll;
    engine::ForwardResult result;
    if (absl::Status s = loaded->engine->Forward(std::span<const engine::SequenceInput>(&in, 1), &result);
        !s.ok()) {
      return FailWith("logits", s);
    }
    out.assign(result.outputs[0].logits.begin(), result.outputs[0].logits.end());
  } else {
    auto session = MakeSession(*loaded, mode, static_cast<int>(*window), static_cast<int>(*sink),
                               /*fp16_memory=*/!flags->count("fp32-memory"));
    if (!session.ok()) return FailWith("logits", session.status());
    for (int32_t id : *ids) {
      if (absl::Status s = (*session)->Append(id); !s.ok()) return FailWith("logits", s);
      std::span<const float> l = (*session)->Logits();
      out.insert(out.end(), l.begin(), l.end());
    }
  }
  std::ofstream f(flags->at("out"), std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size() * sizeof(float)));
  if (!f) return FailWith("logits", absl::InternalError("cannot write --out"));
  return 0;
}

}  // namespace
}  // namespace kvfold::cli

KVFOLD_REGISTER_COMMAND(logits, "raw logits of a token sequence (parity tests)",
                        kvfold::cli::RunLogits);
