// tokenizer.json: parsing into an HfTokenizer::Impl (this file) and the encode pipeline
// (hf_tokenizer_encode.cc).
#include "inference_svc/tokenizer/hf_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "inference_svc/tokenizer/hf_tokenizer_impl.h"

namespace kvfold {
namespace {

using json = nlohmann::json;
using tokenizer_internal::AppendUtf8;
using tokenizer_internal::DecodeUtf8;

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", what));
}
absl::Status Unsupported(const std::string& what) {
  return absl::UnimplementedError(absl::StrCat("tokenizer.json: unsupported ", what));
}

std::string TypeOf(const json& j) {
  if (!j.is_object()) return "";
  auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

// A string field, or `fallback` when absent/null.
std::string StringField(const json& j, const char* key, const std::string& fallback = "") {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

bool BoolField(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

// The flattened list of components of a normalizer / pre-tokenizer / decoder.
std::vector<const json*> Flatten(const json& j, const char* list_key) {
  std::vector<const json*> out;
  if (j.is_null()) return out;
  if (TypeOf(j) == "Sequence") {
    auto it = j.find(list_key);
    if (it != j.end() && it->is_array()) {
      for (const auto& child : *it) {
        for (const json* c : Flatten(child, list_key)) out.push_back(c);
      }
    }
    return out;
  }
  out.push_back(&j);
  return out;
}

absl::Status ParseNormalizer(const json& j, HfTokenizer::Impl* impl) {
  for (const json* n : Flatten(j, "normalizers")) {
    const std::string type = TypeOf(*n);
    if (type == "Prepend") {
      impl->normalizer_steps.push_back({HfTokenizer::Impl::Step::kPrepend,
                                        StringField(*n, "prepend"), ""});
    } else if (type == "Replace") {
      const json& pattern = n->value("pattern", json());
      if (!pattern.is_object() || !pattern.contains("String") || !pattern["String"].is_string()) {
        return Unsupported("normalizer Replace with a regex pattern");
      }
      impl->normalizer_steps.push_back({HfTokenizer::Impl::Step::kReplace,
                                        pattern["String"].get<std::string>(),
                                        StringField(*n, "content")});
    } else if (type == "NFC") {
      impl->approximations.push_back("NFC normalization is not applied (input assumed NFC)");
    } else {
      return Unsupported(absl::StrCat("normalizer '", type, "'"));
    }
  }
  return absl::OkStatus();
}

absl::Status ParsePreTokenizer(const json& j, HfTokenizer::Impl* impl) {
  using Pre = HfTokenizer::Impl::PreTokenizer;
  for (const json* p : Flatten(j, "pretokenizers")) {
    const std::string type = TypeOf(*p);
    Pre pre;
    if (type == "Split") {
      const std::string behavior = StringField(*p, "behavior");
      if (behavior != "Isolated" || BoolField(*p, "invert", false)) {
        return Unsupported(absl::StrCat("Split behavior '", behavior, "' (only Isolated)"));
      }
      const json& pattern = p->value("pattern", json());
      if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
        auto recognized =
            tokenizer_internal::RecognizeSplitPattern(pattern["Regex"].get<std::string>());
        if (!recognized) {
          return Unsupported(absl::StrCat("Split regex '", pattern["Regex"].get<std::string>(),
                                          "' (kvfold knows the GPT-2, Llama-3 and Qwen2 ones)"));
        }
        pre.kind = Pre::kRegex;
        pre.pattern = *recognized;
      } else if (pattern.is_object() && pattern.contains("String") &&
                 pattern["String"].is_string()) {
        pre.kind = Pre::kLiteral;
        pre.literal = pattern["String"].get<std::string>();
        if (pre.literal.empty()) return Bad("Split with an empty String pattern");
      } else {
        return Bad("Split pre-tokenizer without a pattern");
      }
    } else if (type == "ByteLevel") {
      pre.kind = Pre::kByteLevel;
      pre.add_prefix_space = BoolField(*p, "add_prefix_space", false);
      pre.use_regex = BoolField(*p, "use_regex", true);
      impl->byte_level = true;
    } else if (type == "Metaspace") {
      pre.kind = Pre::kMetaspace;
      pre.literal = StringField(*p, "replacement", "\xE2\x96\x81");
      std::string scheme = StringField(*p, "prepend_scheme", "");
      if (scheme.empty()) scheme = BoolField(*p, "add_prefix_space", true) ? "always" : "never";
      if (scheme != "always" && scheme != "first" && scheme != "never") {
        return Unsupported(absl::StrCat("Metaspace prepend_scheme '", scheme, "'"));
      }
      pre.prepend = scheme;
      pre.split = BoolField(*p, "split", true);
      impl->metaspace = pre.literal;
      if (scheme != "never") impl->dummy_prefix = true;
    } else {
      return Unsupported(absl::StrCat("pre-tokenizer '", type, "'"));
    }
    impl->pre_tokenizers.push_back(std::move(pre));
  }
  return absl::OkStatus();
}

// "<0xAB>" -> 0xAB, else -1.
int BytePieceValue(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  int v = 0;
  for (char c : piece.substr(3, 2)) {
    int h = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (h < 0) return -1;
    v = v * 16 + h;
  }
  return v;
}

absl::Status ParseModel(const json& model, HfTokenizer::Impl* impl) {
  const std::string type = TypeOf(model).empty() ? "BPE" : TypeOf(model);
  if (type != "BPE") return Unsupported(absl::StrCat("model type '", type, "' (only BPE)"));
  if (!StringField(model, "continuing_subword_prefix").empty() ||
      !StringField(model, "end_of_word_suffix").empty()) {
    return Unsupported("BPE continuing_subword_prefix / end_of_word_suffix");
  }
  impl->byte_fallback = BoolField(model, "byte_fallback", false);
  impl->ignore_merges = BoolField(model, "ignore_merges", false);
  impl->fuse_unk = BoolField(model, "fuse_unk", false);
  auto vocab_it = model.find("vocab");
  if (vocab_it == model.end() || !vocab_it->is_object()) return Bad("model.vocab missing");
  for (auto it = vocab_it->begin(); it != vocab_it->end(); ++it) {
    if (!it.value().is_number_integer()) return Bad(absl::StrCat("model.vocab['", it.key(), "'] is not an integer"));
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id >= (1 << 24)) return Bad(absl::StrCat("model.vocab id ", id, " out of range"));
    impl->vocab[it.key()] = static_cast<int32_t>(id);
    if (static_cast<size_t>(id) >= impl->pieces.size()) impl->pieces.resize(id + 1);
    impl->pieces[id] = it.key();
  }
  const std::string unk = StringField(model, "unk_token");
  if (!unk.empty()) {
    auto it = impl->vocab.find(unk);
    if (it == impl->vocab.end()) return Bad(absl::StrCat("unk_token '", unk, "' not in vocab"));
    impl->unk_id = it->second;
  }
  auto merges_it = model.find("merges");
  if (merges_it == model.end() || !merges_it->is_array()) return Bad("model.merges missing");
  int32_t rank = 0;
  for (const auto& m : *merges_it) {
    std::string a, b;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ', 1);  // a piece never starts with ' ' in "a b" form
      if (space == std::string::npos) return Bad(absl::StrCat("merge '", s, "' has no space"));
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      return Bad(absl::StrCat("merges[", rank, "] is neither \"a b\" nor [a, b]"));
    }
    auto ia = impl->vocab.find(a), ib = impl->vocab.find(b), im = impl->vocab.find(a + b);
    if (ia == impl->vocab.end() || ib == impl->vocab.end() || im == impl->vocab.end()) {
      return Bad(absl::StrCat("merges[", rank, "] ('", a, "', '", b, "') uses a piece not in vocab"));
    }
    const uint64_t key = HfTokenizer::Impl::PairKey(ia->second, ib->second);
    impl->merges.try_emplace(key, HfTokenizer::Impl::Merge{rank, im->second});
    ++rank;
  }
  return absl::OkStatus();
}

absl::Status ParseAddedTokens(const json& root, HfTokenizer::Impl* impl) {
  auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_array()) return Bad("added_tokens is not an array");
  for (const auto& t : *it) {
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() ||
        !t.contains("content") || !t["content"].is_string()) {
      return Bad("added_tokens entry without integer id and string content");
    }
    const int64_t id = t["id"].get<int64_t>();
    if (id < 0 || id >= (1 << 24)) return Bad(absl::StrCat("added token id ", id, " out of range"));
    HfTokenizer::Impl::Added added{t["content"].get<std::string>(), static_cast<int32_t>(id),
                                   BoolField(t, "special", false)};
    if (added.content.empty()) return Bad("added token with empty content");
    if (static_cast<size_t>(id) >= impl->pieces.size()) impl->pieces.resize(id + 1);
    impl->pieces[id] = added.content;
    impl->vocab[added.content] = added.id;
    impl->added.push_back(std::move(added));
  }
  return absl::OkStatus();
}

int32_t LookupToken(const HfTokenizer::Impl& impl, const json& value) {
  std::string name;
  if (value.is_string()) name = value.get<std::string>();
  if (value.is_object()) name = StringField(value, "content");
  if (name.empty()) return -1;
  auto it = impl.vocab.find(name);
  return it == impl.vocab.end() ? -1 : it->second;
}

void FindBosEos(const json& root, const std::string& dir, HfTokenizer::Impl* impl) {
  // 1. tokenizer_config.json next to the file.
  if (!dir.empty()) {
    std::ifstream in(std::filesystem::path(dir) / "tokenizer_config.json");
    if (in) {
      std::stringstream ss;
      ss << in.rdbuf();
      json config = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
      if (config.is_object()) {
        if (config.contains("bos_token")) impl->bos_id = LookupToken(*impl, config["bos_token"]);
        if (config.contains("eos_token")) impl->eos_id = LookupToken(*impl, config["eos_token"]);
        if (impl->bos_id >= 0 || impl->eos_id >= 0) return;
      }
    }
  }
  // 2. A TemplateProcessing post-processor that puts a special token before $A.
  const json& post = root.value("post_processor", json());
  for (const json* p : Flatten(post, "processors")) {
    if (TypeOf(*p) != "TemplateProcessing") continue;
    const json& single = p->value("single", json());
    if (single.is_array() && !single.empty() && single[0].is_object() &&
        single[0].contains("SpecialToken")) {
      impl->bos_id = LookupToken(*impl, single[0]["SpecialToken"].value("id", json()));
    }
  }
  // 3. Conventional names.
  auto first_of = [&](std::initializer_list<const char*> names) {
    for (const char* n : names) {
      auto it = impl->vocab.find(n);
      if (it != impl->vocab.end()) return it->second;
    }
    return -1;
  };
  if (impl->bos_id < 0) impl->bos_id = first_of({"<s>", "<|begin_of_text|>", "<|startoftext|>"});
  impl->eos_id = first_of({"</s>", "<|end_of_text|>", "<|endoftext|>"});
}

// The GPT-2 byte <-> unicode table: printable bytes map to themselves, the rest to
// U+0100 + n in byte order.
void BuildByteLevelTables(HfTokenizer::Impl* impl) {
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    const uint32_t cp = printable ? b : 256 + n++;
    impl->byte_to_unicode[b].clear();
    AppendUtf8(cp, &impl->byte_to_unicode[b]);
    impl->unicode_to_byte[cp] = static_cast<unsigned char>(b);
  }
}

absl::Status Finish(HfTokenizer::Impl* impl) {
  const int32_t n = static_cast<int32_t>(impl->pieces.size());
  impl->token_bytes.resize(n);
  impl->special.assign(n, false);
  impl->dummy_space.assign(n, false);
  for (size_t k = 0; k < impl->added.size(); ++k) {
    const auto& a = impl->added[k];
    if (a.special) impl->special[a.id] = true;
    impl->added_by_first_byte[static_cast<unsigned char>(a.content[0])].push_back(
        static_cast<int32_t>(k));
  }
  std::vector<bool> is_added(n, false);
  for (const auto& a : impl->added) is_added[a.id] = true;
  for (int32_t id = 0; id < n; ++id) {
    const std::string& piece = impl->pieces[id];
    std::string& out = impl->token_bytes[id];
    if (is_added[id]) {
      out = piece;
    } else if (impl->byte_level) {
      for (size_t pos = 0; pos < piece.size();) {
        uint32_t cp;
        const size_t len = DecodeUtf8(piece, pos, &cp);
        auto it = impl->unicode_to_byte.find(cp);
        if (it != impl->unicode_to_byte.end()) {
          out.push_back(static_cast<char>(it->second));
        } else {
          out.append(piece, pos, len);
        }
        pos += len;
      }
    } else if (const int b = BytePieceValue(piece); b >= 0 && impl->byte_fallback) {
      out = std::string(1, static_cast<char>(b));
    } else {
      const std::string& meta = impl->metaspace;
      out = meta.empty() ? piece : tokenizer_internal::ReplaceAll(piece, meta, " ");
      impl->dummy_space[id] = impl->dummy_prefix && !meta.empty() && piece.starts_with(meta);
    }
  }
  if (impl->byte_fallback) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      auto it = impl->vocab.find(name);
      impl->byte_ids[b] = it == impl->vocab.end() ? -1 : it->second;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::Parse(const std::string& text,
                                                                const std::string& dir) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    return Bad(absl::StrCat("not valid JSON: ", e.what()));
  }
  if (!root.is_object()) return Bad("top level is not an object");
  auto impl = std::make_unique<Impl>();
  try {
    const json& model = root.value("model", json());
    if (!model.is_object()) return Bad("no \"model\" object");
    if (auto s = ParseModel(model, impl.get()); !s.ok()) return s;
    if (auto s = ParseAddedTokens(root, impl.get()); !s.ok()) return s;
    if (auto s = ParseNormalizer(root.value("normalizer", json()), impl.get()); !s.ok()) return s;
    if (auto s = ParsePreTokenizer(root.value("pre_tokenizer", json()), impl.get()); !s.ok()) {
      return s;
    }
    // Llama-2 style: Prepend("▁") + Replace(" ", "▁") normalizers act as the metaspace.
    for (const auto& step : impl->normalizer_steps) {
      if (step.kind == Impl::Step::kReplace && step.from == " " && !step.to.empty()) {
        impl->metaspace = step.to;
      }
      if (step.kind == Impl::Step::kPrepend && !step.from.empty()) impl->dummy_prefix = true;
    }
    const std::string decoder_type = TypeOf(root.value("decoder", json()));
    if (decoder_type == "ByteLevel") impl->byte_level = true;
    if (impl->byte_level) BuildByteLevelTables(impl.get());
    FindBosEos(root, dir, impl.get());
    if (auto s = Finish(impl.get()); !s.ok()) return s;
  } catch (const json::exception& e) {
    return Bad(absl::StrCat("unexpected structure: ", e.what()));
  }
  if (impl->pieces.empty()) return Bad("empty vocabulary");
  return std::unique_ptr<HfTokenizer>(new HfTokenizer(std::move(impl)));
}

HfTokenizer::HfTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HfTokenizer::~HfTokenizer() = default;

std::string_view HfTokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return impl_->token_bytes[id];
}
bool HfTokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < vocab_size() && impl_->special[id];
}
bool HfTokenizer::StartsWithDummySpace(int32_t id) const {
  return id >= 0 && id < vocab_size() && impl_->dummy_space[id];
}
int32_t HfTokenizer::vocab_size() const { return static_cast<int32_t>(impl_->pieces.size()); }
int32_t HfTokenizer::bos_id() const { return impl_->bos_id; }
int32_t HfTokenizer::eos_id() const { return impl_->eos_id; }
const std::vector<std::string>& HfTokenizer::approximations() const {
  return impl_->approximations;
}

}  // namespace kvfold
