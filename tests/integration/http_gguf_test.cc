// A replica started on a GGUF file (stories260K written as llama.cpp's converters write it,
// its vocabulary from tok512.model) finds its tokenizer and chat template in the file and
// answers as the replica on the llama2.c checkpoint does: the same greedy text and counts
// for a chat completion and a raw completion.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "gtest/gtest.h"
#include "inference_svc/model/model_file.h"
#include "inference_svc/tokenizer/sentencepiece_model.h"
#include "tests/inference_svc/model/gguf_writer.h"
#include "tests/integration/http_api_fixture.h"

namespace kvfold::testing {
namespace {

using json = nlohmann::json;

TEST_F(HttpApiTest, AGgufFileServesAsItsCheckpoint) {
  const std::filesystem::path sp = std::filesystem::path(Stories260K()) / "tok512.model";
  if (!std::filesystem::exists(sp))
    GTEST_SKIP() << MissingShared("models/stories260K/tok512.model");
  auto model = model::LoadModel(SharedModel());
  ASSERT_TRUE(model.ok()) << model.status();
  std::ifstream in(sp, std::ios::binary);
  const std::string sp_bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  auto vocab = tokenizer_internal::ParseSentencePieceModel(sp_bytes);
  ASSERT_TRUE(vocab.ok());
  GgufWriter w = GgufOf(*model);
  AddSentencePieceVocabulary(*vocab, &w);
  Cluster gguf_cluster;
  const std::string file = gguf_cluster.MakeDir() + "/stories260K.gguf";
  std::ofstream(file, std::ios::binary) << w.Bytes();
  std::string error;
  ASSERT_TRUE(gguf_cluster.Setup(1, &error, {"--http-port=0", "--insecure-no-auth"}, file))
      << error;
  const int gguf_port = HttpPortOf(gguf_cluster.replica_process(0));
  ASSERT_GT(gguf_port, 0) << gguf_cluster.replica_process(0).output();

  const json chat = {{"messages", {{{"role", "user"}, {"content", "Once upon a time"}}}},
                     {"max_tokens", 24},
                     {"temperature", 0}};
  const json completion = {{"prompt", "The cat sat"}, {"max_tokens", 24}, {"temperature", 0}};
  for (const auto& [path, body] :
       {std::pair{"/v1/chat/completions", chat}, std::pair{"/v1/completions", completion}}) {
    HttpReply want = Post(0, path, body);
    HttpReply got = HttpCall(gguf_port, "POST", path, body.dump(), {});
    ASSERT_EQ(want.status, 200) << want.body;
    ASSERT_EQ(got.status, 200) << got.body;
    const json a = Body(want), b = Body(got);
    const char* field = std::string(path) == "/v1/completions" ? "text" : "message";
    EXPECT_EQ(b["choices"][0][field], a["choices"][0][field]) << path;
    EXPECT_EQ(b["usage"]["prompt_tokens"], a["usage"]["prompt_tokens"]) << path;
    EXPECT_EQ(b["usage"]["completion_tokens"], a["usage"]["completion_tokens"]) << path;
  }
  HttpReply models = HttpCall(gguf_port, "GET", "/v1/models", "", {});
  EXPECT_EQ(Body(models)["data"][0]["id"], "stories260K");
}

}  // namespace
}  // namespace kvfold::testing
