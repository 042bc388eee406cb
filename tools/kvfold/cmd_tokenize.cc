// `kvfold tokenize`: encode text to ids or decode ids to text with any tokenizer kvfold
// reads (llama2.c .bin, SentencePiece .model, HF tokenizer.json).
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/command_line.h"
#include "inference_svc/tokenizer/tokenizer.h"
#include "tools/kvfold/cli_token_ids.h"
#include "tools/kvfold/command.h"

namespace kvfold::cli {
namespace {

struct Args {
  std::string tokenizer, model, text, file;
  bool ids = false, no_bos = false, json = false;
};

int Run(const Args& a) {
  std::string path = a.tokenizer;
  if (!a.model.empty()) {
    auto found = Tokenizer::FindNextToModel(a.model);
    if (!found.ok()) {
      std::fprintf(stderr, "kvfold tokenize: %s\n", std::string(found.status().message()).c_str());
      return 2;
    }
    path = *found;
  }
  auto tok = Tokenizer::Load(path);
  if (!tok.ok()) {
    std::fprintf(stderr, "kvfold tokenize: %s\n", std::string(tok.status().message()).c_str());
    return absl::IsNotFound(tok.status()) ? 1 : 2;
  }
  std::string input = a.text;
  if (!a.file.empty()) {
    std::ifstream in(a.file, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "kvfold tokenize: cannot read %s\n", a.file.c_str());
      return 1;
    }
    std::ostringstream ss;
    ss << in.rdbuf();
    input = ss.str();
  }
  if (a.ids) {
    auto parsed = ParseTokenIds(input, "--ids input");
    if (!parsed.ok()) {
      std::fprintf(stderr, "kvfold tokenize: %s (ids look like 1,403,407)\n",
                   std::string(parsed.status().message()).c_str());
      return 2;
    }
    const std::vector<int32_t>& ids = *parsed;
    for (int32_t id : ids) {
      if (id < 0 || id >= (*tok)->vocab_size()) {
        std::fprintf(stderr, "kvfold tokenize: id %d outside the vocabulary [0, %d)\n", id,
                     (*tok)->vocab_size());
        return 2;
      }
    }
    const std::string text = (*tok)->Decode(ids);
    if (a.json) {
      std::printf("%s\n", nlohmann::json({{"text", text}})
                              .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                              .c_str());
    } else {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fputc('\n', stdout);
    }
    return 0;
  }
  auto ids = (*tok)->Encode(input, !a.no_bos);
  if (!ids.ok()) {
    std::fprintf(stderr, "kvfold tokenize: %s\n", std::string(ids.status().message()).c_str());
    return 2;
  }
  if (a.json) {
    nlohmann::json pieces = nlohmann::json::array();
    for (int32_t id : *ids) {
      // Pieces may be partial UTF-8 (byte tokens): shown lossily, as Decode of one id.
      std::string bytes((*tok)->TokenBytes(id));
      std::string pending = bytes, shown;
      DrainUtf8(&pending, /*final=*/true, &shown);
      pieces.push_back(shown);
    }
    nlohmann::json out = {{"tokenizer", path}, {"num_tokens", ids->size()}, {"ids", *ids},
                          {"pieces", pieces}};
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::string line;
  for (size_t i = 0; i < ids->size(); ++i) {
    if (i) line += ',';
    line += std::to_string((*ids)[i]);
  }
  std::printf("%s\n", line.c_str());
  return 0;
}

RunFn Setup(CLI::App& app) {
  auto args = std::make_shared<Args>();
  Args& a = *args;
  CLI::Option* tokenizer = app.add_option(
      "--tokenizer", a.tokenizer, "tokenizer.bin / .model / tokenizer.json, or a directory");
  CLI::Option* model =
      app.add_option("--model", a.model, "find the tokenizer next to this model file or directory");
  CLI::Option_group* tokenizer_group = app.add_option_group("tokenizer");
  tokenizer_group->add_options(tokenizer, model);
  tokenizer_group->require_option(1);
  CLI::Option* text =
      app.add_option("--text", a.text, "the text to encode (with --ids: ids like \"1,403,407\")");
  CLI::Option* file =
      app.add_option("--file", a.file, "read the text (or ids) from a file instead");
  CLI::Option_group* input_group = app.add_option_group("input");
  input_group->add_options(text, file);
  input_group->require_option(1);
  AddSwitch(app, "--ids", a.ids, "decode: the input is token ids, print the text");
  AddSwitch(app, "--no-bos", a.no_bos, "encode without the BOS token");
  AddSwitch(app, "--json", a.json,
            "print {\"ids\": [...], \"pieces\": [...]} instead of \"1,2,3\"");
  return [args] { return Run(*args); };
}

}  // namespace

KVFOLD_REGISTER_COMMAND(tokenize, "encode text to token ids or decode ids to text", Setup);

}  // namespace kvfold::cli
