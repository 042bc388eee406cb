// ChatTemplate::ForModel: the chat template of a model directory, from
// tokenizer_config.json (chat_template, bos_token, eos_token) and generation_config.json
// (eos_token_id), or of a GGUF model file, from its metadata. See chat_template.h.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/gguf.h"
#include "inference_svc/tokenizer/chat_template.h"
#include "inference_svc/tokenizer/gguf_vocab.h"
#include "nlohmann/json.hpp"

namespace kvfold {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The parsed file, or null when it does not exist. InvalidArgument for bad JSON.
absl::StatusOr<json> ReadJsonIfPresent(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return json(nullptr);
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": not a JSON object"));
  }
  return j;
}

// bos_token / eos_token are a string or an AddedToken object {"content": ...}.
std::string TokenText(const json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return "";
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return "";
}

// chat_template is a string, or a list of {"name", "template"} of which "default" is used.
std::string TemplateText(const json& config) {
  if (!config.is_object() || !config.contains("chat_template")) return "";
  const json& v = config["chat_template"];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    for (const json& entry : v) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string()) {
        return entry["template"].get<std::string>();
      }
    }
  }
  return "";
}

// A ChatML template's built-in system message: the text between "<|im_start|>system" plus
// a newline (a real one, or the two characters \n of a Jinja escape) and "<|im_end|>",
// when it is a literal (no Jinja expression or quote inside).
std::string DefaultSystem(const std::string& jinja) {
  for (const std::string open : {"<|im_start|>system\n", "<|im_start|>system\\n"}) {
    // The first system turn written as a literal (Qwen2.5's template first opens one
    // for its tool block, whose text comes from a variable).
    for (size_t start = jinja.find(open); start != std::string::npos;
         start = jinja.find(open, start + 1)) {
      const size_t text = start + open.size();
      const size_t end = jinja.find("<|im_end|>", text);
      if (end == std::string::npos) break;
      std::string s = jinja.substr(text, end - text);
      if (s.find_first_of("{}'\"") == std::string::npos) return s;
    }
  }
  return "";
}

// A GGUF model file's tokenizer_config.json fields (gguf_vocab.h); null for a file that
// is not GGUF.
absl::StatusOr<json> GgufTokenizerConfigOf(const std::string& path) {
  if (!gguf::IsGgufFile(path)) return json(nullptr);
  auto opened = gguf::Open(path);
  if (!opened.ok()) return opened.status();
  return GgufTokenizerConfig(opened->file);
}

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::ForModel(const std::string& model_path,
                                                    std::string_view override_name,
                                                    const Tokenizer* tokenizer) {
  std::error_code ec;
  fs::path dir(model_path);
  if (!fs::is_directory(dir, ec)) dir = dir.parent_path();
  auto config = fs::is_regular_file(model_path, ec) ? GgufTokenizerConfigOf(model_path)
                                                    : absl::StatusOr<json>(json(nullptr));
  if (!config.ok()) return config.status();
  if (config->is_null()) config = ReadJsonIfPresent(dir / "tokenizer_config.json");
  if (!config.ok()) return config.status();
  auto generation = ReadJsonIfPresent(dir / "generation_config.json");
  if (!generation.ok()) return generation.status();

  const std::string jinja = TemplateText(*config);
  ChatFormat format = ChatFormat::kPlain;
  if (!override_name.empty()) {
    auto parsed = ParseChatFormat(override_name);
    if (!parsed.ok()) return parsed.status();
    format = *parsed;
  } else if (!jinja.empty()) {
    auto detected = DetectChatFormat(jinja);
    if (!detected.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          (dir / "tokenizer_config.json").string(), ": ", detected.status().message(),
          "; pass --chat-template NAME (llama3, llama31, chatml, llama2, mistral, gemma, plain)"));
    }
    format = *detected;
  }

  ChatSpecialTokens special;
  special.bos = TokenText(*config, "bos_token");
  special.eos = TokenText(*config, "eos_token");
  if (format == ChatFormat::kChatMl) special.default_system = DefaultSystem(jinja);
  if (format == ChatFormat::kMistral) {
    special.space_after_eos = jinja.find("eos_token + ' '") != std::string::npos;
  }
  auto created = Create(format, tokenizer, special);
  if (!created.ok()) {
    return absl::Status(created.status().code(),
                        absl::StrCat(created.status().message(), " (model ", model_path, ")"));
  }
  // generation_config.json's eos_token_id (an id or a list) also ends a turn.
  if (generation->is_object() && generation->contains("eos_token_id")) {
    const json& e = (*generation)["eos_token_id"];
    std::vector<int32_t> ids;
    if (e.is_number_integer()) ids.push_back(e.get<int32_t>());
    if (e.is_array()) {
      for (const json& v : e) {
        if (v.is_number_integer()) ids.push_back(v.get<int32_t>());
      }
    }
    for (int32_t id : ids) {
      if (id < 0 || id >= tokenizer->vocab_size()) continue;
      auto& eot = created->end_of_turn_ids_;
      if (std::find(eot.begin(), eot.end(), id) == eot.end()) eot.push_back(id);
    }
  }
  return created;
}

}  // namespace kvfold
