// `kvfold tokenize`: encode text to ids or decode ids to text with any tokenizer kvfold
// reads (llama2.c .bin, SentencePiece .model, HF tokenizer.json).
#include <cstdio>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "inference_svc/tokenizer/tokenizer.h"
#include "tools/kvfold/command.h"

namespace kvfold::cli {
namespace {

constexpr char kUsage[] =
    "usage: kvfold tokenize (--tokenizer PATH | --model PATH) (--text T | --file F)\n"
    "                       [--ids] [--no-bos] [--json]\n"
    "  --tokenizer PATH  tokenizer.bin / .model / tokenizer.json, or a directory\n"
    "  --model PATH      find the tokenizer next to this model file or directory\n"
    "  --text T          the text to encode (with --ids: ids like \"1,403,407\")\n"
    "  --file F          read the text (or ids) from a file instead\n"
    "  --ids             decode: the input is token ids, print the text\n"
    "  --no-bos          encode without the BOS token\n"
    "  --json            print {\"ids\": [...], \"pieces\": [...]} instead of \"1,2,3\"\n";

struct Args {
  std::string tokenizer, model, text, file;
  bool has_text = false, ids = false, no_bos = false, json = false;
};

// Returns false (after printing why) on bad usage.
bool Parse(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    const size_t eq = arg.find('=');
    bool has_value = false;
    if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_value = true;
    }
    auto take = [&](std::string* out) {
      if (!has_value) {
        if (i + 1 >= argc) {
          std::fprintf(stderr, "kvfold tokenize: %s needs a value\n", arg.c_str());
          return false;
        }
        value = argv[++i];
      }
      *out = value;
      return true;
    };
    if (arg == "--tokenizer") {
      if (!take(&a->tokenizer)) return false;
    } else if (arg == "--model") {
      if (!take(&a->model)) return false;
    } else if (arg == "--text") {
      if (!take(&a->text)) return false;
      a->has_text = true;
    } else if (arg == "--file") {
      if (!take(&a->file)) return false;
    } else if (arg == "--ids") {
      a->ids = true;
    } else if (arg == "--no-bos") {
      a->no_bos = true;
    } else if (arg == "--json") {
      a->json = true;
    } else {
      std::fprintf(stderr, "kvfold tokenize: unknown argument '%s'\n", argv[i]);
      return false;
    }
  }
  if (a->tokenizer.empty() == a->model.empty()) {
    std::fprintf(stderr, "kvfold tokenize: give exactly one of --tokenizer, --model\n");
    return false;
  }
  if (a->has_text == !a->file.empty()) {
    std::fprintf(stderr, "kvfold tokenize: give exactly one of --text, --file\n");
    return false;
  }
  return true;
}

// "1,2, 3\n4" -> {1,2,3,4}; false on anything else.
bool ParseIds(const std::string& s, std::vector<int32_t>* ids) {
  std::string token;
  std::string clean = s;
  for (char& c : clean) {
    if (c == ',' || c == '\n' || c == '\t' || c == '[' || c == ']') c = ' ';
  }
  std::istringstream words(clean);
  while (words >> token) {
    char* end = nullptr;
    const long v = std::strtol(token.c_str(), &end, 10);
    if (*end != '\0' || v < INT32_MIN || v > INT32_MAX) return false;
    ids->push_back(static_cast<int32_t>(v));
  }
  return true;
}

int Run(int argc, char** argv) {
  if (argc >= 2 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  Args a;
  if (!Parse(argc, argv, &a)) {
    std::fputs(kUsage, stderr);
    return 2;
  }
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
    std::vector<int32_t> ids;
    if (!ParseIds(input, &ids)) {
      std::fprintf(stderr, "kvfold tokenize: --ids input must be integers like 1,403,407\n");
      return 2;
    }
    for (int32_t id : ids) {
      if (id < 0 || id >= (*tok)->vocab_size()) {
        std::fprintf(stderr, "kvfold tokenize: id %d outside the vocabulary [0, %d)\n", id,
                     (*tok)->vocab_size());
        return 2;
      }
    }
    const std::string text = (*tok)->Decode(ids);
    if (a.json) {
      std::printf("%s\n", nlohmann::json({{"text", text}}).dump().c_str());
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
    std::printf("%s\n", out.dump().c_str());
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

}  // namespace

KVFOLD_REGISTER_COMMAND(tokenize, "encode text to token ids or decode ids to text", Run);

}  // namespace kvfold::cli
