// `kvfold generate`: local generation with the engine, streaming text to stdout.
#include <chrono>
#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/command_line.h"
#include "inference_svc/engine/sampler.h"
#include "inference_svc/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tools/kvfold/cli_engine.h"
#include "tools/kvfold/cli_sampling.h"
#include "tools/kvfold/cli_token_ids.h"
#include "tools/kvfold/command.h"

namespace kvfold::cli {
namespace {

struct GenerateFlags {
  EngineFlags engine;
  std::string prompt;
  std::string prompt_ids;
  std::string mode = "full";
  int window = 1024;
  int sink = 4;
  double temperature = 0.0;
  int top_k = 0;
  double top_p = 1.0;
  uint64_t seed = 0;
  LogitAdjustFlags adjust;
  int max_new_tokens = 256;
  bool ignore_eos = false;
  bool no_bos = false;
  bool json = false;
  std::string tokenizer;
};

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

int RunGenerate(const GenerateFlags& flags, const CLI::App& app) {
  const bool has_prompt = app.count("--prompt") > 0;
  engine::SamplingParams params;
  params.temperature = static_cast<float>(flags.temperature);
  params.top_k = flags.top_k;
  params.top_p = static_cast<float>(flags.top_p);
  params.seed = flags.seed;
  params.presence_penalty = static_cast<float>(flags.adjust.presence_penalty);
  params.frequency_penalty = static_cast<float>(flags.adjust.frequency_penalty);
  if (flags.adjust.repetition_penalty != 0) {
    params.repetition_penalty = static_cast<float>(flags.adjust.repetition_penalty);
  }
  params.min_p = static_cast<float>(flags.adjust.min_p);
  auto bias = ParseLogitBias(flags.adjust.logit_bias);
  if (!bias.ok()) return FailWith("generate", bias.status());
  params.logit_bias = std::move(*bias);
  params.max_new_tokens = flags.max_new_tokens;
  params.ignore_eos = flags.ignore_eos;
  if (absl::Status s = params.Validate(); !s.ok()) return FailWith("generate", s);

  const std::string& model_path = flags.engine.model;
  auto engine_options = EngineOptionsFromFlags(flags.engine);
  if (!engine_options.ok()) return FailWith("generate", engine_options.status());
  auto loaded = LoadEngine(model_path, flags.engine.backend, flags.engine.threads,
                           flags.engine.projector, *engine_options);
  if (!loaded.ok()) return FailWith("generate", loaded.status());
  const model::ModelConfig& config = loaded->engine->config();
  for (const auto& [id, bias] : params.logit_bias) {
    if (id < 0 || id >= config.vocab_size) {
      return FailWith("generate",
                      absl::InvalidArgumentError(absl::StrCat(
                          "--logit-bias: token id ", id, " outside [0, ", config.vocab_size, ")")));
    }
  }

  // Tokenizer: required for --prompt and for text output.
  std::unique_ptr<Tokenizer> tokenizer;
  {
    absl::StatusOr<std::string> path = !flags.tokenizer.empty()
                                           ? absl::StatusOr<std::string>(flags.tokenizer)
                                           : Tokenizer::FindNextToModel(model_path);
    if (path.ok()) {
      auto tok = Tokenizer::Load(*path);
      if (!tok.ok()) return FailWith("generate", tok.status());
      tokenizer = std::move(*tok);
    } else if (has_prompt || !flags.tokenizer.empty()) {
      return FailWith("generate", path.status());
    }
  }
  std::vector<int32_t> prompt;
  const bool add_bos = !flags.no_bos;
  if (app.count("--prompt-ids")) {
    auto ids = ParseTokenIds(flags.prompt_ids, "--prompt-ids");
    if (!ids.ok()) return FailWith("generate", ids.status());
    prompt = std::move(*ids);
  } else {
    auto ids = tokenizer->Encode(flags.prompt, add_bos);
    if (!ids.ok()) return FailWith("generate", ids.status());
    prompt = std::move(*ids);
  }
  if (prompt.empty()) prompt.push_back(config.bos_token_id);

  const std::string& mode = flags.mode;
  auto session = MakeSession(*loaded, mode, flags.window, flags.sink);
  if (!session.ok()) return FailWith("generate", session.status());
  const bool json = flags.json;

  const auto t0 = Clock::now();
  if (absl::Status s = (*session)->Prefill(prompt); !s.ok()) return FailWith("generate", s);
  const auto t1 = Clock::now();
  engine::Sampler sampler(config.vocab_size, params);
  sampler.AddContext(prompt);
  std::unique_ptr<IncrementalDecoder> decoder;
  if (tokenizer) decoder = std::make_unique<IncrementalDecoder>(tokenizer.get(), prompt.size() <= 1);
  std::vector<int32_t> generated;
  std::string text;
  bool stopped = false;
  for (int i = 0; i < params.max_new_tokens; ++i) {
    const int32_t id = sampler.Sample((*session)->Logits());
    generated.push_back(id);
    const std::string piece = decoder ? decoder->Push(id) : std::to_string(id) + " ";
    text += piece;
    if (!json) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    if (sampler.IsStop(id, config.eos_token_ids)) {
      stopped = true;
      break;
    }
    if (i + 1 < params.max_new_tokens) {
      if (absl::Status s = (*session)->Append(id); !s.ok()) return FailWith("generate", s);
    }
  }
  const auto t2 = Clock::now();
  if (decoder) {
    const std::string rest = decoder->Flush();
    text += rest;
    if (!json) std::fwrite(rest.data(), 1, rest.size(), stdout);
  }
  const double prefill_s = Seconds(t0, t1), decode_s = Seconds(t1, t2);
  if (json) {
    nlohmann::json j;
    j["text"] = text;
    j["mode"] = mode;
    j["prompt_tokens"] = prompt.size();
    j["generated_tokens"] = generated.size();
    j["token_ids"] = generated;
    j["stopped"] = stopped ? "stop_token" : "max_new_tokens";
    j["prefill_seconds"] = prefill_s;
    j["decode_seconds"] = decode_s;
    j["decode_tokens_per_second"] = decode_s > 0 ? generated.size() / decode_s : 0.0;
    j["total_tokens"] = (*session)->TotalTokens();
    j["resident_tokens"] = (*session)->ResidentTokens();
    j["kv_bytes_resident"] = (*session)->KvBytesResident();
    j["model_fingerprint"] = loaded->engine->fingerprint();
    j["backend"] = loaded->backend->Name();
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("\n");
    std::fprintf(stderr, "[%zu prompt tokens in %.3f s, %zu new tokens at %.1f tok/s, mode %s]\n",
                 prompt.size(), prefill_s, generated.size(),
                 decode_s > 0 ? generated.size() / decode_s : 0.0, mode.c_str());
  }
  return 0;
}

RunFn SetupGenerate(CLI::App& app) {
  auto flags = std::make_shared<GenerateFlags>();
  GenerateFlags& f = *flags;
  app.footer(
      "Streams the generated text to stdout (--json: one JSON object at the end). The "
      "tokenizer is found next to the model unless --tokenizer is given.");
  AddEngineFlags(app, f.engine);
  CLI::Option* prompt = app.add_option("--prompt", f.prompt, "prompt text");
  app.add_option("--prompt-ids", f.prompt_ids, "prompt token ids, e.g. 1,2,3")->excludes(prompt);
  app.add_option("--mode", f.mode, "full|sliding|sink|memory|memory_only");
  app.add_option("--window", f.window, "window of sliding/sink/memory modes");
  app.add_option("--sink", f.sink, "sink tokens (sink mode)");
  app.add_option("--temperature", f.temperature, "sampling temperature (0 = greedy)");
  app.add_option("--top-k", f.top_k, "top-k sampling (0 = off)");
  app.add_option("--top-p", f.top_p, "nucleus sampling");
  app.add_option("--seed", f.seed, "sampling seed");
  AddLogitAdjustFlags(app, f.adjust);
  app.add_option("--max-new-tokens", f.max_new_tokens, "tokens to generate at most");
  AddSwitch(app, "--ignore-eos", f.ignore_eos, "do not stop at an end-of-sequence token");
  AddSwitch(app, "--no-bos", f.no_bos, "encode the prompt without the BOS token");
  AddSwitch(app, "--json", f.json, "one JSON object at the end instead of streamed text");
  app.add_option("--tokenizer", f.tokenizer, "tokenizer file (default: found next to the model)");
  return [flags, &app] { return RunGenerate(*flags, app); };
}

}  // namespace
}  // namespace kvfold::cli

KVFOLD_REGISTER_COMMAND(generate, "generate text locally with the engine",
                        kvfold::cli::SetupGenerate);
