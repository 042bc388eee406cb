// `kvfold convert (--llama2c FILE | --model PATH) --out DIR [--tokenizer FILE]
// [--dtype f32|f16|bf16|q8]`: a llama2.c checkpoint (or any model LoadModel reads: an HF
// directory or a llama2.c file) to an HF-style directory (config.json + model.safetensors,
// HF tensor names and rotate_half q/k layout). With f32 (the default) the fingerprint of a
// llama2.c source is unchanged. q8: weight matrices as Q8 (docs/model-format.md), norms
// and biases F32. --tokenizer copies the tokenizer next to the model as tokenizer.json,
// tokenizer.model or tokenizer.bin (by its extension), the names the lookup finds.
#include <cstdio>
#include <filesystem>

#include "inference_svc/model/model_file.h"
#include "inference_svc/tokenizer/tokenizer.h"
#include "tools/kvfold/cli_engine.h"
#include "tools/kvfold/command.h"

namespace kvfold::cli {
namespace {

constexpr char kUsage[] =
    "usage: kvfold convert (--llama2c FILE | --model PATH) --out DIR [--tokenizer FILE]\n"
    "                      [--dtype f32|f16|bf16|q8]\n";

int RunConvert(int argc, char** argv) {
  auto flags = ParseEngineFlags(argc, argv, {"llama2c", "model", "out", "tokenizer", "dtype"}, {"help"});
  if (!flags.ok() || flags->count("help") || (flags->count("llama2c") + flags->count("model")) != 1 || !flags->count("out")) {
    if (!flags.ok()) std::fprintf(stderr, "kvfold convert: %s\n", std::string(flags.status().message()).c_str());
    std::fprintf(flags.ok() && flags->count("help") ? stdout : stderr, "%s", kUsage);
    return flags.ok() && flags->count("help") ? 0 : 2;
  }
  // A tokenizer that does not load is refused before anything is written.
  if (flags->count("tokenizer")) {
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::Load(flags->at("tokenizer"));
    if (!tokenizer.ok()) return FailWith("convert", tokenizer.status());
  }
  const std::string dtype_name = flags->count("dtype") ? flags->at("dtype") : "f32";
  kernels::DType dtype;
  if (dtype_name == "f32") {
    dtype = kernels::DType::kF32;
  } else if (dtype_name == "f16") {
    dtype = kernels::DType::kF16;
  } else if (dtype_name == "bf16") {
    dtype = kernels::DType::kBF16;
  } else if (dtype_name == "q8") {
    dtype = kernels::DType::kQ8;
  } else {
    std::fprintf(stderr, "kvfold convert: --dtype must be f32, f16, bf16 or q8\n");
    return 2;
  }
  absl::StatusOr<model::ModelFile> m = flags->count("llama2c") ? model::LoadLlama2c(flags->at("llama2c"))
                                                                 : model::LoadModel(flags->at("model"));
  if (!m.ok()) return FailWith("convert", m.status());
  if (absl::Status s = model::WriteHfDirectory(*m, flags->at("out"), dtype); !s.ok()) {
    return FailWith("convert", s);
  }
  if (flags->count("tokenizer")) {
    namespace fs = std::filesystem;
    const fs::path src = flags->at("tokenizer");
    std::error_code ec;
    // Under the name Tokenizer::FindNextToModel looks for (tokenizer.json/.model/.bin, by
    // the source's extension), so that the converted directory works as --model on its own.
    const std::string ext = src.extension().string();
    const char* name = ext == ".json"    ? "tokenizer.json"
                       : ext == ".model" ? "tokenizer.model"
                                         : "tokenizer.bin";
    fs::copy_file(src, fs::path(flags->at("out")) / name, fs::copy_options::overwrite_existing,
                  ec);
    if (ec) {
      std::fprintf(stderr, "kvfold convert: cannot copy %s: %s\n", src.c_str(), ec.message().c_str());
      return 1;
    }
  }
  std::printf("wrote %s (fingerprint of the source: %s)\n", flags->at("out").c_str(),
              model::Fingerprint(*m).c_str());
  return 0;
}

}  // namespace
}  // namespace kvfold::cli

KVFOLD_REGISTER_COMMAND(convert, "llama2.c checkpoint or model -> HF safetensors directory (f32/f16/bf16/q8)",
                        kvfold::cli::RunConvert);
