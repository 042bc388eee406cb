#include "inference_svc/tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/gguf.h"
#include "common/utf8.h"
#include "inference_svc/tokenizer/gguf_vocab.h"
#include "inference_svc/tokenizer/hf_tokenizer.h"
#include "inference_svc/tokenizer/llama2c_tokenizer.h"
#include "inference_svc/tokenizer/sentencepiece_tokenizer.h"

namespace kvfold {
namespace {

namespace fs = std::filesystem;

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open tokenizer file ", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading ", path));
  return std::move(ss).str();
}

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(),
                                                suffix.data(), suffix.size()) == 0;
}

template <typename T>
absl::StatusOr<std::unique_ptr<Tokenizer>> Upcast(absl::StatusOr<std::unique_ptr<T>> t,
                                                  const std::string& path) {
  if (!t.ok()) {
    return absl::Status(t.status().code(), absl::StrCat(t.status().message(), " [", path, "]"));
  }
  return std::unique_ptr<Tokenizer>(std::move(*t));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    auto found = FindNextToModel(path);
    if (!found.ok()) return found.status();
    return Load(*found);
  }
  if (gguf::IsGgufFile(path)) {
    // The vocabulary of a GGUF model: the file is mapped (it holds the weights too).
    auto opened = gguf::Open(path);
    if (!opened.ok()) return opened.status();
    return Upcast(GgufTokenizer(opened->file, path), path);
  }
  auto bytes = ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  const std::string dir = fs::path(path).parent_path().string();
  if (EndsWith(path, ".json")) return Upcast(HfTokenizer::Parse(*bytes, dir), path);
  if (EndsWith(path, ".model")) return Upcast(SentencePieceTokenizer::Parse(*bytes), path);
  if (EndsWith(path, ".bin")) return Upcast(Llama2cTokenizer::Parse(*bytes), path);
  // Unknown extension: sniff. JSON starts with '{'; otherwise try llama2.c, whose parser
  // is strict about the whole file, then SentencePiece.
  const size_t first = bytes->find_first_not_of(" \t\r\n");
  if (first != std::string::npos && (*bytes)[first] == '{') {
    return Upcast(HfTokenizer::Parse(*bytes, dir), path);
  }
  auto l2c = Llama2cTokenizer::Parse(*bytes);
  if (l2c.ok()) return std::unique_ptr<Tokenizer>(std::move(*l2c));
  auto sp = SentencePieceTokenizer::Parse(*bytes);
  if (sp.ok()) return std::unique_ptr<Tokenizer>(std::move(*sp));
  return absl::InvalidArgumentError(absl::StrCat(
      "cannot tell the format of tokenizer ", path, ": not JSON; as llama2.c: ",
      l2c.status().message(), "; as SentencePiece: ", sp.status().message()));
}

absl::StatusOr<std::string> Tokenizer::FindNextToModel(const std::string& model_path) {
  std::error_code ec;
  // A GGUF model with a vocabulary kvfold reads is its own tokenizer.
  if (fs::is_regular_file(model_path, ec) && gguf::IsGgufFile(model_path)) {
    auto opened = gguf::Open(model_path);
    if (opened.ok() && HasGgufVocabulary(opened->file)) return model_path;
  }
  fs::path dir(model_path);
  if (!fs::is_directory(dir, ec)) dir = dir.parent_path();
  if (dir.empty()) dir = ".";
  for (const char* name : {"tokenizer.json", "tokenizer.model", "tokenizer.bin"}) {
    const fs::path p = dir / name;
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  std::vector<std::string> tok_bins;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("tok") && EndsWith(name, ".bin") && entry.is_regular_file(ec)) {
      tok_bins.push_back(entry.path().string());
    }
  }
  if (!tok_bins.empty()) return *std::min_element(tok_bins.begin(), tok_bins.end());
  return absl::NotFoundError(absl::StrCat(
      "no tokenizer next to model ", model_path, ": looked in ", dir.string(),
      " for tokenizer.json, tokenizer.model, tokenizer.bin, tok*.bin"));
}

std::string Tokenizer::Decode(std::span<const int32_t> ids) const {
  IncrementalDecoder decoder(this, /*at_text_start=*/true);
  std::string out;
  for (int32_t id : ids) out += decoder.Push(id);
  out += decoder.Flush();
  return out;
}

IncrementalDecoder::IncrementalDecoder(const Tokenizer* tokenizer, bool at_text_start)
    : tokenizer_(tokenizer), at_start_(at_text_start) {}

std::string IncrementalDecoder::Push(int32_t id) {
  if (id < 0 || id >= tokenizer_->vocab_size()) return {};
  if (tokenizer_->IsSpecial(id)) {
    if (id == tokenizer_->bos_id()) at_start_ = true;  // run.c strips after every BOS
    return {};
  }
  std::string_view bytes = tokenizer_->TokenBytes(id);
  if (bytes.empty()) return {};
  if (at_start_ && tokenizer_->StartsWithDummySpace(id)) bytes.remove_prefix(1);
  at_start_ = false;
  pending_.append(bytes);
  std::string out;
  DrainUtf8(&pending_, /*final=*/false, &out);
  return out;
}

std::string IncrementalDecoder::Flush() {
  std::string out;
  DrainUtf8(&pending_, /*final=*/true, &out);
  return out;
}

void DrainUtf8(std::string* pending, bool final, std::string* out) {
  const std::string& p = *pending;
  const size_t n = p.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = static_cast<unsigned char>(p[i]);
    if (c < 0x80) {
      out->push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    // Unicode Table 3-7: well-formed sequences (no overlongs, surrogates, > U+10FFFF).
    Utf8Lead lead;
    if (!Utf8LeadOf(c, &lead)) {
      out->append(kReplacement);
      ++i;
      continue;
    }
    const int need = lead.continuation;
    const unsigned char lo = lead.lo, hi = lead.hi;
    int k = 0;
    bool bad = false;
    for (; k < need && i + 1 + k < n; ++k) {
      const unsigned char b = static_cast<unsigned char>(p[i + 1 + k]);
      const unsigned char l = k == 0 ? lo : 0x80, h = k == 0 ? hi : 0xBF;
      if (b < l || b > h) {
        bad = true;
        break;
      }
    }
    if (bad) {
      out->append(kReplacement);  // the maximal valid prefix; the bad byte is re-examined
      i += 1 + k;
      continue;
    }
    if (k < need) {  // ran out of bytes: hold the incomplete sequence back
      if (final) {
        out->append(kReplacement);
        i = n;
      }
      break;
    }
    out->append(p, i, need + 1);
    i += need + 1;
  }
  pending->erase(0, i);
}

}  // namespace kvfold
