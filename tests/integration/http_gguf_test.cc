// A replica started on a GGUF file (stories260K written as llama.cpp's converters write it,
// its vocabulary from tok512.model) finds its tokenizer and chat template in the file and
// answers as the replica on the llama2.c checkpoint does: the same greedy text and counts
// for a chat completion and a raw completion. A replica on a GGUF whose matrices are
// K-quants answers as a replica on the q8 directory `kvfold convert` makes of it.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "common/fp16.h"
#include "common/gguf.h"
#include "gtest/gtest.h"
#include "inference_svc/model/model_file.h"
#include "inference_svc/model/random_model.h"
#include "inference_svc/tokenizer/gguf_vocab.h"
#include "inference_svc/tokenizer/sentencepiece_model.h"
#include "tests/inference_svc/model/gguf_writer.h"
#include "tests/integration/http_api_fixture.h"
#include "tests/kernels/quant/ggml_test_blocks.h"

namespace kvfold::testing {
namespace {

using json = nlohmann::json;

// stories260K's SentencePiece vocabulary (tok512.model), or an error when it is absent.
absl::StatusOr<tokenizer_internal::SentencePieceModelProto> Stories260KVocabulary(
    const std::string& stories_dir) {
  const std::filesystem::path sp = std::filesystem::path(stories_dir) / "tok512.model";
  std::ifstream in(sp, std::ios::binary);
  if (!in) return absl::NotFoundError(sp.string());
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return tokenizer_internal::ParseSentencePieceModel(bytes);
}

// A greedy chat completion and a raw completion from `want(path, body)` and from the
// replica at `got_port` (no auth): the same text and counts.
void ExpectSameAnswers(const std::function<HttpReply(const char*, const json&)>& want,
                       int got_port) {
  const json chat = {{"messages", {{{"role", "user"}, {"content", "Once upon a time"}}}},
                     {"max_tokens", 24},
                     {"temperature", 0}};
  const json completion = {{"prompt", "The cat sat"}, {"max_tokens", 24}, {"temperature", 0}};
  for (const auto& [path, body] :
       {std::pair{"/v1/chat/completions", chat}, std::pair{"/v1/completions", completion}}) {
    HttpReply a_reply = want(path, body);
    HttpReply b_reply = HttpCall(got_port, "POST", path, body.dump(), {});
    ASSERT_EQ(a_reply.status, 200) << a_reply.body;
    ASSERT_EQ(b_reply.status, 200) << b_reply.body;
    const json a = Body(a_reply), b = Body(b_reply);
    const char* field = std::string(path) == "/v1/completions" ? "text" : "message";
    EXPECT_EQ(b["choices"][0][field], a["choices"][0][field]) << path;
    EXPECT_EQ(b["usage"]["prompt_tokens"], a["usage"]["prompt_tokens"]) << path;
    EXPECT_EQ(b["usage"]["completion_tokens"], a["usage"]["completion_tokens"]) << path;
    EXPECT_GT(b["usage"]["completion_tokens"].get<int>(), 0) << path;
  }
}

TEST_F(HttpApiTest, AGgufFileServesAsItsCheckpoint) {
  auto vocab = Stories260KVocabulary(Stories260K());
  if (!vocab.ok()) GTEST_SKIP() << MissingShared("models/stories260K/tok512.model");
  auto model = model::LoadModel(SharedModel());
  ASSERT_TRUE(model.ok()) << model.status();
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

  ExpectSameAnswers([this](const char* path, const json& body) { return Post(0, path, body); },
                    gguf_port);
  HttpReply models = HttpCall(gguf_port, "GET", "/v1/models", "", {});
  EXPECT_EQ(Body(models)["data"][0]["id"], "stories260K");
}

// Stories260K's vocabulary over a random model whose matrices are Q4_K, the classifier
// Q6_K (as llama-quantize's Q4_K_M lays a model out), in rows of 256: the GGUF replica and
// one on the directory `kvfold convert --model FILE --dtype q8` writes (the loader's Q8 rows,
// the file's vocabulary) give the same greedy text and counts.
TEST_F(HttpApiTest, AKQuantGgufServesAsItsQ8Conversion) {
  auto vocab = Stories260KVocabulary(Stories260K());
  if (!vocab.ok()) GTEST_SKIP() << MissingShared("models/stories260K/tok512.model");
  model::ModelConfig c = *model::NamedShape("tiny");
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.head_dim = 64;
  c.vocab_size = 512;
  c.tie_word_embeddings = false;
  const model::ModelFile shape = model::MakeRandomModel(c, 11, core::DType::kF32);
  GgufWriter w = GgufOf(shape, [](const std::string& name, const std::vector<int64_t>& dims,
                                  uint32_t* type, std::string* data) {
    if (dims.size() != 2) return;
    const auto t = static_cast<uint32_t>(name == "output.weight" ? gguf::TensorType::kQ6_K
                                                                 : gguf::TensorType::kQ4_K);
    *data = PseudoRandomGgmlBlocks(t, dims[0] * dims[1], static_cast<uint32_t>(name.size()));
    // Scales of 2^-13 keep the weights at the size of a trained model's (|w| < 0.4).
    const gguf::BlockLayout block = *gguf::BlockOf(t);
    const uint16_t small = Fp32ToFp16(1.0f / 8192);
    for (size_t b = 0; b < data->size() / block.bytes; ++b) {
      for (int field : GgmlHalfFields(t)) {
        std::memcpy(data->data() + b * block.bytes + field, &small, sizeof(small));
      }
    }
    *type = t;
  });
  AddSentencePieceVocabulary(*vocab, &w);
  Cluster k_cluster;
  const std::string dir = k_cluster.MakeDir();
  const std::string file = dir + "/tiny-q4_k_m.gguf";
  std::ofstream(file, std::ios::binary) << w.Bytes();
  auto loaded = model::LoadModel(file);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_TRUE(model::WriteHfDirectory(*loaded, dir + "/q8", core::DType::kQ8).ok());
  auto opened = gguf::Open(file);
  ASSERT_TRUE(opened.ok()) << opened.status();
  ASSERT_TRUE(WriteGgufTokenizerFiles(opened->file, file, dir + "/q8").ok());

  std::string error;
  ASSERT_TRUE(k_cluster.Setup(1, &error, {"--http-port=0", "--insecure-no-auth"}, file)) << error;
  Cluster q8_cluster;
  ASSERT_TRUE(q8_cluster.Setup(1, &error, {"--http-port=0", "--insecure-no-auth"}, dir + "/q8"))
      << error;
  const int k_port = HttpPortOf(k_cluster.replica_process(0));
  const int q8_port = HttpPortOf(q8_cluster.replica_process(0));
  ASSERT_GT(k_port, 0) << k_cluster.replica_process(0).output();
  ASSERT_GT(q8_port, 0) << q8_cluster.replica_process(0).output();
  ExpectSameAnswers(
      [q8_port](const char* path, const json& body) {
        return HttpCall(q8_port, "POST", path, body.dump(), {});
      },
      k_port);
}

}  // namespace
}  // namespace kvfold::testing
