// `kvfold convert (--llama2c FILE | --model PATH) --out DIR [--tokenizer FILE]
// [--dtype f32|f16|bf16|q8]`: a llama2.c checkpoint (or any model LoadModel reads: an HF
// directory or a llama2.c file) to an HF-style directory (config.json + model.safetensors,
// HF tensor names and rotate_half q/k layout). With f32 (the default) the fingerprint of a
// llama2.c source is unchanged. q8: weight matrices as Q8 (docs/model-format.md), norms
// and biases F32. --tokenizer copies the tokenizer next to the model as tokenizer.json,
// tokenizer.model or tokenizer.bin (by its extension), the names the lookup finds; a GGUF
// source (or a GGUF --tokenizer) has its vocabulary written as tokenizer.model and its
// chat template as tokenizer_config.json.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "common/command_line.h"
#include "common/gguf.h"
#include "inference_svc/model/model_file.h"
#include "inference_svc/tokenizer/gguf_vocab.h"
#include "inference_svc/tokenizer/tokenizer.h"
#include "tools/kvfold/cli_engine.h"
#include "tools/kvfold/command.h"

namespace kvfold::cli {
namespace {

struct ConvertFlags {
  std::string llama2c;
  std::string model;
  std::string out;
  std::string tokenizer;
  std::string dtype = "f32";
};

// The vocabulary of GGUF file `path` (gguf_vocab.h, WriteGgufTokenizerFiles) into `dir`.
// `only_if_readable`: a file whose vocabulary kvfold does not read (a gpt2 BPE one) is
// skipped with a note instead of failing.
absl::Status WriteGgufTokenizer(const std::string& path, const std::string& dir,
                                bool only_if_readable) {
  auto opened = gguf::Open(path);
  if (!opened.ok()) return opened.status();
  if (only_if_readable && !HasGgufVocabulary(opened->file)) {
    std::fprintf(stderr,
                 "kvfold convert: %s's vocabulary is not one kvfold reads; no tokenizer written "
                 "(pass --tokenizer with the model's tokenizer.json)\n",
                 path.c_str());
    return absl::OkStatus();
  }
  return WriteGgufTokenizerFiles(opened->file, path, dir);
}

int RunConvert(const ConvertFlags& flags) {
  // A tokenizer that does not load is refused before anything is written.
  if (!flags.tokenizer.empty()) {
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::Load(flags.tokenizer);
    if (!tokenizer.ok()) return FailWith("convert", tokenizer.status());
  }
  const std::string& dtype_name = flags.dtype;
  core::DType dtype;
  if (dtype_name == "f32") {
    dtype = core::DType::kF32;
  } else if (dtype_name == "f16") {
    dtype = core::DType::kF16;
  } else if (dtype_name == "bf16") {
    dtype = core::DType::kBF16;
  } else if (dtype_name == "q8") {
    dtype = core::DType::kQ8;
  } else {
    std::fprintf(stderr, "kvfold convert: --dtype must be f32, f16, bf16 or q8\n");
    return 2;
  }
  absl::StatusOr<model::ModelFile> m =
      !flags.llama2c.empty() ? model::LoadLlama2c(flags.llama2c) : model::LoadModel(flags.model);
  if (!m.ok()) return FailWith("convert", m.status());
  if (absl::Status s = model::WriteHfDirectory(*m, flags.out, dtype); !s.ok()) {
    return FailWith("convert", s);
  }
  // A GGUF file's vocabulary (the source's when no --tokenizer is given) becomes
  // tokenizer.model, its chat template and special tokens tokenizer_config.json.
  const std::string gguf_vocabulary =
      !flags.tokenizer.empty() ? (gguf::IsGgufFile(flags.tokenizer) ? flags.tokenizer : "")
                               : (m->source_format == "gguf" ? m->source_path : "");
  if (!gguf_vocabulary.empty()) {
    if (absl::Status s = WriteGgufTokenizer(gguf_vocabulary, flags.out,
                                            /*only_if_readable=*/flags.tokenizer.empty());
        !s.ok()) {
      return FailWith("convert", s);
    }
  } else if (!flags.tokenizer.empty()) {
    namespace fs = std::filesystem;
    const fs::path src = flags.tokenizer;
    std::error_code ec;
    // Under the name Tokenizer::FindNextToModel looks for (tokenizer.json/.model/.bin, by
    // the source's extension), so that the converted directory works as --model on its own.
    const std::string ext = src.extension().string();
    const char* name = ext == ".json"    ? "tokenizer.json"
                       : ext == ".model" ? "tokenizer.model"
                                         : "tokenizer.bin";
    fs::copy_file(src, fs::path(flags.out) / name, fs::copy_options::overwrite_existing, ec);
    if (ec) {
      std::fprintf(stderr, "kvfold convert: cannot copy %s: %s\n", src.c_str(), ec.message().c_str());
      return 1;
    }
  }
  std::printf("wrote %s (fingerprint of the source: %s)\n", flags.out.c_str(),
              model::Fingerprint(*m).c_str());
  return 0;
}

RunFn SetupConvert(CLI::App& app) {
  auto flags = std::make_shared<ConvertFlags>();
  ConvertFlags& f = *flags;
  CLI::Option* llama2c = app.add_option("--llama2c", f.llama2c, "llama2.c checkpoint");
  CLI::Option* model = app.add_option(
      "--model", f.model, "any model kvfold reads (HF directory, GGUF file or llama2.c file)");
  CLI::Option_group* source_group = app.add_option_group("source");
  source_group->add_options(llama2c, model);
  source_group->require_option(1);
  app.add_option("--out", f.out, "output directory")->required();
  app.add_option("--tokenizer", f.tokenizer, "tokenizer to copy next to the converted model");
  app.add_option("--dtype", f.dtype, "weight dtype: f32|f16|bf16|q8")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8"}));
  return [flags] { return RunConvert(*flags); };
}

}  // namespace
}  // namespace kvfold::cli

KVFOLD_REGISTER_COMMAND(convert,
                        "llama2.c checkpoint, GGUF file or model -> HF safetensors directory "
                        "(f32/f16/bf16/q8)",
                        kvfold::cli::SetupConvert);
