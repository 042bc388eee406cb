// `kvfold logits`: raw logits for a token sequence, for parity tests against PyTorch.
// Writes little-endian float32 [num_tokens, vocab_size]; row i = logits after feeding
// tokens[0..i]. Default: one token at a time through a Session (the decode path, folds
// included in memory modes). --prefill: all tokens in one Engine::Forward (plain modes).
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/command_line.h"
#include "tools/kvfold/cli_engine.h"
#include "tools/kvfold/cli_token_ids.h"
#include "tools/kvfold/command.h"

namespace kvfold::cli {
namespace {

struct LogitsFlags {
  EngineFlags engine;
  std::string mode = "full";
  int window = 1024;
  int sink = 4;
  std::string tokens;
  std::string tokens_file;
  bool prefill = false;
  std::string out;
  bool fp32_memory = false;
};

int RunLogits(const LogitsFlags& flags) {
  std::string token_text;
  if (flags.tokens_file.empty()) {
    token_text = flags.tokens;
  } else {
    std::ifstream in(flags.tokens_file);
    if (!in) {
      return FailWith("logits",
                      absl::ErrnoToStatus(
                          errno, absl::StrCat("cannot open --tokens-file ", flags.tokens_file)));
    }
    std::stringstream ss;
    ss << in.rdbuf();
    token_text = ss.str();
  }
  auto ids = ParseTokenIds(token_text, flags.tokens_file.empty() ? "--tokens" : "--tokens-file");
  if (!ids.ok()) return FailWith("logits", ids.status());
  const std::string& mode = flags.mode;
  auto engine_options = EngineOptionsFromFlags(flags.engine);
  if (!engine_options.ok()) return FailWith("logits", engine_options.status());
  auto loaded = LoadEngine(flags.engine.model, flags.engine.backend, flags.engine.threads,
                           flags.engine.projector, *engine_options);
  if (!loaded.ok()) return FailWith("logits", loaded.status());
  const int vocab = loaded->engine->config().vocab_size;
  std::vector<float> out;
  out.reserve(ids->size() * static_cast<size_t>(vocab));
  if (flags.prefill) {
    engine::KvPolicy policy;
    if (mode == "full") {
      policy = engine::KvPolicy::Full();
    } else if (mode == "sliding") {
      policy = engine::KvPolicy::Sliding(flags.window);
    } else if (mode == "sink") {
      policy = engine::KvPolicy::Sink(flags.sink, flags.window);
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
    auto session = MakeSession(*loaded, mode, flags.window, flags.sink,
                               /*fp16_memory=*/!flags.fp32_memory);
    if (!session.ok()) return FailWith("logits", session.status());
    for (int32_t id : *ids) {
      if (absl::Status s = (*session)->Append(id); !s.ok()) return FailWith("logits", s);
      std::span<const float> l = (*session)->Logits();
      out.insert(out.end(), l.begin(), l.end());
    }
  }
  errno = 0;
  std::ofstream f(flags.out, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size() * sizeof(float)));
  f.close();
  if (!f) {
    return FailWith("logits", absl::ErrnoToStatus(errno != 0 ? errno : EIO,
                                                  absl::StrCat("cannot write --out ", flags.out)));
  }
  return 0;
}

RunFn SetupLogits(CLI::App& app) {
  auto flags = std::make_shared<LogitsFlags>();
  LogitsFlags& f = *flags;
  app.footer(
      "--fp32-memory: memory modes keep the projector's fp32 output instead of rounding it to "
      "fp16 after each fold (for fp32 parity tests; blocks then need fp32 payloads). "
      "--tokens-file: ids separated by commas or whitespace. Output: float32 LE [num_tokens, "
      "vocab_size].");
  AddEngineFlags(app, f.engine);
  app.add_option("--mode", f.mode, "full|sliding|sink|memory|memory_only");
  app.add_option("--window", f.window, "window of sliding/sink/memory modes");
  app.add_option("--sink", f.sink, "sink tokens (sink mode)");
  CLI::Option* tokens = app.add_option("--tokens", f.tokens, "token ids, e.g. 1,2,3");
  CLI::Option* tokens_file =
      app.add_option("--tokens-file", f.tokens_file, "file with the token ids")->excludes(tokens);
  CLI::Option_group* input_group = app.add_option_group("input");
  input_group->add_options(tokens, tokens_file);
  input_group->require_option(1);
  AddSwitch(app, "--prefill", f.prefill,
            "all tokens in one forward (full, sliding, sink) instead of one at a time");
  app.add_option("--out", f.out, "output file (float32 LE)")->required();
  AddSwitch(app, "--fp32-memory", f.fp32_memory, "keep the projector's fp32 output");
  return [flags] { return RunLogits(*flags); };
}

}  // namespace
}  // namespace kvfold::cli

KVFOLD_REGISTER_COMMAND(logits, "raw logits of a token sequence (parity tests)",
                        kvfold::cli::SetupLogits);
