// `kvfold generate`: local generation with the engine, streaming text to stdout.
#include <chrono>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "inference_svc/engine/sampler.h"
#include "inference_svc/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tools/kvfold/cli_engine.h"
#include "tools/kvfold/command.h"

namespace kvfold::cli {
namespace {

constexpr char kUsage[] =
    "usage: kvfold generate --model PATH (--prompt TEXT | --prompt-ids 1,2,3)\n"
    "         [--mode full|sliding|sink|memory|memory_only] [--window N] [--sink N]\n"
    "         [--projector DIR] [--temperature T] [--top-k K] [--top-p P] [--seed S]\n"
    "         [--max-new-tokens N] [--ignore-eos] [--no-bos] [--json]\n"
    "         [--backend cpu|cpu-ref] [--threads N] [--kv-dtype f32|int8] [--tokenizer FILE]\n"
    "Streams the generated text to stdout (--json: one JSON object at the end).\n"
    "The tokenizer is found next to the model unless --tokenizer is given.\n";

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

int RunGenerate(int argc, char** argv) {
  auto flags = ParseEngineFlags(
      argc, argv,
      {"model", "prompt", "prompt-ids", "mode", "window", "sink", "projector", "temperature",
       "top-k", "top-p", "seed", "max-new-tokens", "backend", "threads", "kv-dtype", "tokenizer"},
      {"json", "help", "ignore-eos", "no-bos"});
  if (!flags.ok()) return FailWith("generate", flags.status());
  if (flags->count("help")) {
    std::printf("%s", kUsage);
    return 0;
  }
  if (!flags->count("model") || (flags->count("prompt") && flags->count("prompt-ids"))) {
    std::fprintf(stderr, "%s", kUsage);
    return 2;
  }
  auto window = IntFlag(*flags, "window", 1024);
  auto sink = IntFlag(*flags, "sink", 4);
  auto threads = IntFlag(*flags, "threads", 0);
  auto top_k = IntFlag(*flags, "top-k", 0);
  auto seed = IntFlag(*flags, "seed", 0);
  auto max_new = IntFlag(*flags, "max-new-tokens", 256);
  auto temperature = FloatFlag(*flags, "temperature", 0.0);
  auto top_p = FloatFlag(*flags, "top-p", 1.0);
  for (const absl::Status& s : {window.status(), sink.status(), threads.status(), top_k.status(),
                                seed.status(), max_new.status(), temperature.status(), top_p.status()}) {
    if (!s.ok()) return FailWith("generate", s);
  }
  engine::SamplingParams params;
  params.temperature = static_cast<float>(*temperature);
  params.top_k = static_cast<int>(*top_k);
  params.top_p = static_cast<float>(*top_p);
  params.seed = static_cast<uint64_t>(*seed);
  params.max_new_tokens = static_cast<int>(*max_new);
  params.ignore_eos = flags->count("ignore-eos") > 0;
  if (absl::Status s = params.Validate(); !s.ok()) return FailWith("generate", s);

  const std::string model_path = flags->at("model");
  auto engine_options = EngineOptionsFromFlags(*flags);
  if (!engine_options.ok()) return FailWith("generate", engine_options.status());
  auto loaded =
      LoadEngine(model_path, flags->count("backend") ? flags->at("backend") : "cpu",
                 static_cast<int>(*threads),
                 flags->count("projector") ? flags->at("projector") : "", *engine_options);
  if (!loaded.ok()) return FailWith("generate", loaded.status());
  const model::ModelConfig& config = loaded->engine->config();

  // Tokenizer: required for --prompt and for text output.
  std::unique_ptr<Tokenizer> tokenizer;
  {
    absl::StatusOr<std::string> path = flags->count("tokenizer")
                                           ? absl::StatusOr<std::string>(flags->at("tokenizer"))
                                           : Tokenizer::FindNextToModel(model_path);
    if (path.ok()) {
      auto tok = Tokenizer::Load(*path);
      if (!tok.ok()) return FailWith("generate", tok.status());
      tokenizer = std::move(*tok);
    } else if (flags->count("prompt") || flags->count("tokenizer")) {
      return FailWith("generate", path.status());
    }
  }
  std::vector<int32_t> prompt;
  const bool add_bos = !flags->count("no-bos");
  if (flags->count("prompt-ids")) {
    for (absl::string_view p : absl::StrSplit(flags->at("prompt-ids"), ',', absl::SkipEmpty())) {
      int32_t id;
      if (!absl::SimpleAtoi(p, &id)) return FailWith("generate", absl::InvalidArgumentError("bad --prompt-ids"));
      prompt.push_back(id);
    }
  } else {
    auto ids = tokenizer->Encode(flags->count("prompt") ? flags->at("prompt") : "", add_bos);
    if (!ids.ok()) return FailWith("generate", ids.status());
    prompt = std::move(*ids);
  }
  if (prompt.empty()) prompt.push_back(config.bos_token_id);

  const std::string mode = flags->count("mode") ? flags->at("mode") : "full";
  auto session = MakeSession(*loaded, mode, static_cast<int>(*window), static_cast<int>(*sink));
  if (!session.ok()) return FailWith("generate", session.status());
  const bool json = flags->count("json") > 0;

  const auto t0 = Clock::now();
  if (absl::Status s = (*session)->Prefill(prompt); !s.ok()) return FailWith("generate", s);
  const auto t1 = Clock::now();
  engine::Sampler sampler(config.vocab_size, params);
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

}  // namespace
}  // namespace kvfold::cli

KVFOLD_REGISTER_COMMAND(generate, "generate text locally with the engine", kvfold::cli::RunGenerate);
