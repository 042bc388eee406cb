// json_walk: random documents of JSON Schemas, for an independent validator to check.
// Reads a JSON array of schemas from the file given, writes one JSON line per document:
// {"schema": <index>, "document": "<the document's text>"}. A schema the compiler refuses
// gets one line {"schema": <index>, "error": "<message>"}. Exit 1 when a walk ends with no
// byte admitted before its document is whole, or passes 8 KiB (the message says which).
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "inference_svc/structured/json_grammar.h"
#include "nlohmann/json.hpp"
#include "tests/inference_svc/structured/random_document.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: json_walk SCHEMAS.json [DOCUMENTS_PER_SCHEMA] [SEED]\n");
    return 2;
  }
  const int count = argc > 2 ? std::atoi(argv[2]) : 50;
  std::mt19937_64 rng(argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 1);
  std::ifstream in(argv[1]);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json schemas = nlohmann::json::parse(text.str());
  for (size_t i = 0; i < schemas.size(); ++i) {
    auto grammar = kvfold::structured::Grammar::FromSchema(schemas[i].dump());
    if (!grammar.ok()) {
      std::printf(
          "%s\n",
          nlohmann::json{{"schema", i}, {"error", grammar.status().message()}}.dump().c_str());
      continue;
    }
    for (int k = 0; k < count; ++k) {
      bool too_long = false;
      auto doc = kvfold::testing::RandomDocument(*grammar, rng, 48, 8192, &too_long);
      if (!doc.has_value()) {
        std::fprintf(stderr, "json_walk: schema %zu: %s\n", i,
                     too_long ? "a walk passed 8192 bytes before its document was whole"
                              : "a walk found no byte to go on with (a dead end)");
        return 1;
      }
      // The document's bytes are UTF-8 (the matcher admits nothing else).
      std::printf("%s\n", nlohmann::json{{"schema", i}, {"document", *doc}}.dump().c_str());
    }
  }
  return 0;
}
