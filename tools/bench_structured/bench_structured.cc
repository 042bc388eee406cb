// bench_structured: the per-token cost of structured output. For each tokenizer given, a
// document of each format is tokenized and walked token by token as a constrained turn
// would: JsonConstraint::Mask over the whole vocabulary, then Accept. Prints one JSON
// object: per tokenizer and format, the tokens walked and the mask's median and maximum
// microseconds (median over --rounds walks of each token's time).
#include <chrono>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/command_line.h"
#include "inference_svc/structured/json_grammar.h"
#include "inference_svc/structured/token_constraint.h"
#include "inference_svc/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tools/bench_stats.h"

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// A schema and a document of it; the same document under json_object.
constexpr char kSchema[] = R"({"type":"object","properties":{
  "name":{"type":"string","maxLength":40},
  "age":{"type":"integer"},
  "tags":{"type":"array","items":{"type":"string"}},
  "address":{"type":"object","properties":{"city":{"type":"string"},"zip":{"type":"string"}},
             "required":["city"]},
  "score":{"type":"number"},
  "active":{"type":"boolean"}},
  "required":["name","age","tags","active"]})";
// The same shape with its strings held to patterns and its numbers to bounds: strings
// whose tokens are walked one by one (no string fast path).
constexpr char kPatternSchema[] = R"({"type":"object","properties":{
  "name":{"type":"string","pattern":"^[A-Za-z ]{1,40}$"},
  "age":{"type":"integer","minimum":0,"maximum":120},
  "tags":{"type":"array","items":{"type":"string","pattern":"^[a-z ]+$"}},
  "address":{"type":"object","properties":{"city":{"type":"string","pattern":"^[A-Z][a-z]+$"},
             "zip":{"type":"string","pattern":"^\\d{5}$"}},
             "required":["city"]},
  "score":{"type":"number","minimum":0,"maximum":100},
  "active":{"type":"boolean"}},
  "required":["name","age","tags","active"]})";
// kPatternSchema with lookaheads in its patterns (each a deterministic automaton) and the
// score a number or a decimal in a string under Pydantic's pattern for a Decimal.
std::string LookaheadSchema() {
  std::string schema = kPatternSchema;
  const std::pair<std::string, std::string> edits[] = {
      {R"("^[A-Za-z ]{1,40}$")", R"("^(?=.*[a-z])(?!.*  )[A-Za-z ]{1,40}$")"},
      {R"("^[a-z ]+$")", R"("^(?! )[a-z ]+$")"},
      {R"("^[A-Z][a-z]+$")", R"("^(?=[A-Z])[A-Za-z]+$")"},
      {R"("^\\d{5}$")", R"j("^(?!0{5})\\d{5}$")j"},
      {R"("score":{"type":"number","minimum":0,"maximum":100})",
       R"j("score":{"anyOf":[{"type":"number","minimum":0,"maximum":100},)j"
       R"j({"type":"string","pattern":"^(?!^[-+.]*$)[+-]?0*\\d*\\.?\\d*$"}]})j"}};
  for (const auto& [from, to] : edits) {
    const size_t at = schema.find(from);
    if (at == std::string::npos) return "";  // FromSchema refuses it: the bench fails
    schema.replace(at, from.size(), to);
  }
  return schema;
}
// kSchema with the city one of kMaxValues names (a long enum, matched by runs of its
// sorted values): "Springfield", the document's, and "Town 1" ... "Town 4095".
std::string LongEnumSchema() {
  std::string schema = kSchema;
  json cities = json::array({"Springfield"});
  for (int i = 1; i < kvfold::structured::kMaxValues; ++i) {
    cities.push_back(absl::StrCat("Town ", i));
  }
  const std::string city = R"("city":{"type":"string"})";
  return schema.replace(schema.find(city), city.size(),
                        absl::StrCat(R"("city":{"enum":)", cities.dump(), "}"));
}
// kSchema with its tags a set of strings (uniqueItems; bounded, so every token of a tag
// is walked: a character that fills one is checked against the tags before it).
std::string SetSchema() {
  std::string schema = kSchema;
  const std::string tags = R"("tags":{"type":"array","items":{"type":"string"}})";
  return schema.replace(
      schema.find(tags), tags.size(),
      R"("tags":{"type":"array","items":{"type":"string","maxLength":12},"uniqueItems":true})");
}
constexpr char kDocument[] =
    R"({"name": "Lily and her little dog Max", "age": 7, "tags": ["park", "ball", "sunny day"], )"
    R"("address": {"city": "Springfield", "zip": "12345"}, "score": 98.5, "active": true})";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> tokenizers;
  int rounds = 5;
  CLI::App app{"Per-token cost of structured output (vocabulary mask and advance)",
               "bench_structured"};
  kvfold::ApplyConvention(app);
  app.add_option("--tokenizer", tokenizers, "tokenizer files (tokenizer.bin/.model/.json)")
      ->required();
  app.add_option("--rounds", rounds, "walks of each document; a token's time is their median");
  if (std::optional<int> rc = kvfold::ParseCommandLine(app, argc, argv)) return *rc;

  json out = {{"benchmark", "bench_structured"}, {"rounds", rounds}, {"results", json::array()}};
  for (const std::string& path : tokenizers) {
    auto tok = kvfold::Tokenizer::Load(path);
    if (!tok.ok()) {
      std::fprintf(stderr, "bench_structured: %s\n", std::string(tok.status().message()).c_str());
      return kvfold::kExitFailure;
    }
    const auto t0 = Clock::now();
    auto table = std::make_shared<kvfold::structured::TokenTable>(**tok);
    const double table_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    auto ids = (*tok)->Encode(kDocument, /*add_bos=*/false);
    if (!ids.ok()) return kvfold::kExitFailure;
    auto schema = kvfold::structured::Grammar::FromSchema(kSchema);
    auto patterns = kvfold::structured::Grammar::FromSchema(kPatternSchema);
    auto long_enum = kvfold::structured::Grammar::FromSchema(LongEnumSchema());
    auto lookaheads = kvfold::structured::Grammar::FromSchema(LookaheadSchema());
    auto sets = kvfold::structured::Grammar::FromSchema(SetSchema());
    if (!schema.ok() || !patterns.ok() || !long_enum.ok() || !lookaheads.ok() || !sets.ok()) {
      return kvfold::kExitFailure;
    }
    for (const auto& [name, grammar] :
         {std::pair{"json_object", kvfold::structured::Grammar::JsonObject()},
          std::pair{"json_schema", *schema}, std::pair{"json_schema_patterns", *patterns},
          std::pair{"json_schema_long_enum", *long_enum},
          std::pair{"json_schema_lookaheads", *lookaheads}, std::pair{"json_schema_sets", *sets}}) {
      std::vector<std::vector<double>> us(ids->size());
      std::vector<float> logits(table->vocab_size(), 0.0f), masked;
      bool whole = false;
      for (int r = 0; r < rounds; ++r) {
        kvfold::structured::JsonConstraint c(grammar, table, {(*tok)->eos_id()});
        for (size_t i = 0; i < ids->size(); ++i) {
          const auto m0 = Clock::now();
          if (!c.Mask(logits, &masked).ok() || masked[(*ids)[i]] != 0.0f) {
            std::fprintf(stderr, "bench_structured: token %zu of the document is masked\n", i);
            return kvfold::kExitFailure;
          }
          us[i].push_back(std::chrono::duration<double, std::micro>(Clock::now() - m0).count());
          c.Accept((*ids)[i]);
        }
        whole = c.Finished();
      }
      std::vector<double> per_token;
      double max_us = 0;
      for (auto& v : us) {
        per_token.push_back(kvfold::bench::Median(v));
        max_us = std::max(max_us, per_token.back());
      }
      out["results"].push_back({{"tokenizer", path},
                                {"vocab_size", table->vocab_size()},
                                {"table_ms", table_ms},
                                {"format", name},
                                {"tokens", ids->size()},
                                {"document_whole", whole},
                                {"mask_us_median", kvfold::bench::Median(per_token)},
                                {"mask_us_max", max_us}});
    }
  }
  std::printf("%s\n", out.dump(2).c_str());
  return kvfold::kExitOk;
}
