// Loaders: llama2.c (header, permutation, untied classifier), safetensors and HF
// directories, with every malformed-input path returning a clear error; fingerprints.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "gtest/gtest.h"
#include "inference_svc/model/model_file.h"
#include "inference_svc/model/random_model.h"
#include "inference_svc/model/safetensors.h"
#include "nlohmann/json.hpp"
#include "tests/testing/shared_dir.h"

namespace kvfold::model {
namespace {

namespace fs = std::filesystem;

std::string Tmp(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/kvfold_model_test_" + name;
  fs::remove_all(dir);
  return dir;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A llama2.c checkpoint: dim 16, hidden 24, 2 layers, 4 heads, 2 kv heads, vocab 11
// (negative = untied when `untied`), seq_len 8. Float k of the file is k * 0.001.
std::string Llama2cBytes(bool untied) {
  const int32_t dim = 16, hidden = 24, layers = 2, heads = 4, kv_heads = 2, vocab = 11, seq = 8;
  const int32_t header[7] = {dim, hidden, layers, heads, kv_heads, untied ? -vocab : vocab, seq};
  const int kv = dim / heads * kv_heads, hd = dim / heads;
  const int64_t floats = vocab * dim + layers * dim + layers * dim * dim + 2 * layers * kv * dim +
                         layers * dim * dim + layers * dim + 3 * layers * hidden * dim + dim +
                         seq * hd + (untied ? vocab * dim : 0);
  std::string b(reinterpret_cast<const char*>(header), sizeof(header));
  for (int64_t i = 0; i < floats; ++i) {
    const float x = static_cast<float>(i) * 0.001f;
    b.append(reinterpret_cast<const char*>(&x), 4);
  }
  return b;
}

// A directory holding a llama2.c checkpoint and its tokenizer (the layout the k8s README
// mounts) loads like the checkpoint file itself.
TEST(Llama2cTest, DirectoryWithOneCheckpointLoadsIt) {
  const std::string dir = Tmp("l2c_dir");
  fs::create_directories(dir);
  WriteFile(dir + "/tiny.bin", Llama2cBytes(false));
  WriteFile(dir + "/tok11.bin", "not a model");  // a tokenizer is never taken for the model
  absl::StatusOr<ModelFile> from_dir = LoadModel(dir);
  ASSERT_TRUE(from_dir.ok()) << from_dir.status();
  absl::StatusOr<ModelFile> from_file = LoadModel(dir + "/tiny.bin");
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  EXPECT_EQ(from_dir->source_format, "llama2c");
  EXPECT_EQ(Fingerprint(*from_dir), Fingerprint(*from_file));

  WriteFile(dir + "/other.bin", Llama2cBytes(true));
  absl::Status two = LoadModel(dir).status();
  EXPECT_EQ(two.code(), absl::StatusCode::kInvalidArgument) << two;
  EXPECT_NE(two.message().find("several llama2.c checkpoints"), std::string::npos) << two;

  const std::string empty = Tmp("l2c_empty");
  fs::create_directories(empty);
  absl::Status none = LoadModel(empty).status();
  EXPECT_EQ(none.code(), absl::StatusCode::kNotFound) << none;
  EXPECT_NE(none.message().find("neither config.json"), std::string::npos) << none;
}

// The real stories260K directory (../shared/models/stories260K: stories260K.bin, tok512.bin,
// tok512.model).
TEST(Llama2cTest, Stories260kDirectoryLoads) {
  if (!testing::HaveStories260K()) {
    GTEST_SKIP() << "stories260K not found under " << testing::SharedDir()
                 << " (the shared model folder; set KVFOLD_SHARED_DIR)";
  }
  const std::string dir = testing::Stories260K();
  absl::StatusOr<ModelFile> from_dir = LoadModel(dir);
  ASSERT_TRUE(from_dir.ok()) << from_dir.status();
  absl::StatusOr<ModelFile> from_file = LoadModel(dir + "/stories260K.bin");
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  EXPECT_EQ(from_dir->config.vocab_size, 512);
  EXPECT_EQ(Fingerprint(*from_dir), Fingerprint(*from_file));
}

TEST(Llama2cTest, ParsesAndPermutesToHfLayout) {
  auto m = ParseLlama2c(std::make_shared<const std::string>(Llama2cBytes(false)));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->config.hidden_size, 16);
  EXPECT_EQ(m->config.num_kv_heads, 2);
  EXPECT_EQ(m->config.head_dim, 4);
  EXPECT_TRUE(m->config.tie_word_embeddings);
  EXPECT_EQ(m->tensors.count("lm_head.weight"), 0u);
  EXPECT_TRUE(m->ValidateTensors().ok());
  // wq of layer 0 starts after embeddings (11*16) and rms_att (2*16): float index 208.
  // HF row (h, p, i) = llama2.c row (h, 2i + p); head_dim 4: HF row 1 = llama2.c row 2.
  const float* q = static_cast<const float*>(m->tensors.at("model.layers.0.self_attn.q_proj.weight").data);
  EXPECT_FLOAT_EQ(q[0 * 16], 208 * 0.001f);             // row 0 <- row 0
  EXPECT_FLOAT_EQ(q[1 * 16], (208 + 2 * 16) * 0.001f);  // row 1 <- row 2
  EXPECT_FLOAT_EQ(q[2 * 16], (208 + 1 * 16) * 0.001f);  // row 2 <- row 1
  EXPECT_FLOAT_EQ(q[5 * 16], (208 + 6 * 16) * 0.001f);  // head 1: row 5 <- row 6
  auto untied = ParseLlama2c(std::make_shared<const std::string>(Llama2cBytes(true)));
  ASSERT_TRUE(untied.ok()) << untied.status();
  EXPECT_FALSE(untied->config.tie_word_embeddings);
  EXPECT_EQ(untied->tensors.count("lm_head.weight"), 1u);
}

TEST(Llama2cTest, UntiedConvertRoundTripKeepsFingerprint) {
  auto m = ParseLlama2c(std::make_shared<const std::string>(Llama2cBytes(true)));
  ASSERT_TRUE(m.ok());
  const std::string dir = Tmp("untied_convert");
  ASSERT_TRUE(WriteHfDirectory(*m, dir, DType::kF32).ok());
  auto hf = LoadModel(dir);
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_FALSE(hf->config.tie_word_embeddings);
  EXPECT_EQ(Fingerprint(*hf), Fingerprint(*m));
}

// --dtype q8: rank-2 tensors become Q8 (shape kept, Q8RowBytes per row, each weight
// within half a quantization step), norms stay F32; the directory loads and validates;
// converting the result back to Q8 changes no byte; a Q8 tensor of rank 1 is rejected.
TEST(Llama2cTest, Q8ConvertRoundTrip) {
  auto m = ParseLlama2c(std::make_shared<const std::string>(Llama2cBytes(true)));
  ASSERT_TRUE(m.ok());
  const std::string dir = Tmp("q8_convert");
  ASSERT_TRUE(WriteHfDirectory(*m, dir, DType::kQ8).ok());
  auto hf = LoadModel(dir);
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_TRUE(hf->ValidateTensors().ok());
  for (const auto& [name, t] : hf->tensors) {
    const HostTensor& src = m->tensors.at(name);
    EXPECT_EQ(t.shape, src.shape) << name;
    if (src.shape.size() != 2) {
      EXPECT_EQ(t.dtype, DType::kF32) << name;
      continue;
    }
    ASSERT_EQ(t.dtype, DType::kQ8) << name;
    const int64_t cols = t.shape[1];
    ASSERT_EQ(t.size_bytes, static_cast<size_t>(t.shape[0]) * core::Q8RowBytes(cols)) << name;
    auto back = ConvertHostTensor(t, DType::kF32);
    ASSERT_TRUE(back.ok());
    const float* x = static_cast<const float*>(src.data);
    const float* y = static_cast<const float*>(back->data);
    for (int64_t r = 0; r < t.shape[0]; ++r) {
      float amax = 0;  // of the row's widest block: a bound on every block's step
      for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(x[r * cols + c]));
      for (int64_t c = 0; c < cols; ++c) {
        ASSERT_LE(std::fabs(y[r * cols + c] - x[r * cols + c]), amax / 127.0f * 0.51f) << name;
      }
    }
    auto again = ConvertHostTensor(t, DType::kQ8);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(0, std::memcmp(again->data, t.data, t.size_bytes)) << name;
  }
  EXPECT_EQ(ConvertHostTensor(m->tensors.at("model.norm.weight"), DType::kQ8).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Llama2cTest, MalformedFilesAreClearErrors) {
  const std::string good = Llama2cBytes(false);
  auto parse = [](std::string b) { return ParseLlama2c(std::make_shared<const std::string>(std::move(b))); };
  auto truncated = parse(good.substr(0, good.size() - 3));
  EXPECT_EQ(truncated.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(truncated.status().message().find("truncated"), std::string::npos);
  EXPECT_EQ(parse(good + "xxxx").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(parse(good.substr(0, 10)).status().code(), absl::StatusCode::kInvalidArgument);
  std::string bad_heads = good;
  const int32_t three = 3;
  std::memcpy(bad_heads.data() + 12, &three, 4);  // n_heads 3 does not divide dim 16
  EXPECT_EQ(parse(bad_heads).status().code(), absl::StatusCode::kInvalidArgument);
  std::string huge = good;
  const int32_t big = 1 << 30;
  std::memcpy(huge.data(), &big, 4);
  EXPECT_EQ(parse(huge).status().code(), absl::StatusCode::kInvalidArgument);
  std::string magic = good;
  const int32_t ak42 = 0x616b3432;
  std::memcpy(magic.data(), &ak42, 4);
  EXPECT_EQ(parse(magic).status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(LoadModel("/nonexistent/model.bin").status().code(), absl::StatusCode::kNotFound);
}

class HfDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = Tmp(::testing::UnitTest::GetInstance()->current_test_info()->name());
    auto c = NamedShape("tiny-qwen2");
    model_ = MakeRandomModel(*c, 4, DType::kBF16);
    ASSERT_TRUE(WriteHfDirectory(model_, dir_, DType::kBF16).ok());
  }
  absl::StatusCode Load() { return LoadModel(dir_).status().code(); }
  void EditConfig(const std::function<void(nlohmann::json&)>& edit) {
    auto j = nlohmann::json::parse(ReadFile(dir_ + "/config.json"));
    edit(j);
    WriteFile(dir_ + "/config.json", j.dump());
  }
  std::string dir_;
  ModelFile model_;
};

TEST_F(HfDirTest, LoadsWithSameFingerprint) {
  auto m = LoadModel(dir_);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->config.architecture, "Qwen2ForCausalLM");
  EXPECT_TRUE(m->config.qkv_bias);
  EXPECT_EQ(Fingerprint(*m), Fingerprint(model_));
  EXPECT_EQ(m->tensors.at("model.norm.weight").dtype, DType::kBF16);
}

TEST_F(HfDirTest, FingerprintSeesEveryByte) {
  const std::string before = Fingerprint(model_);
  HostTensor& t = model_.tensors.at("model.layers.1.mlp.down_proj.weight");
  std::vector<char> copy(static_cast<const char*>(t.data), static_cast<const char*>(t.data) + t.size_bytes);
  copy[1234] ^= 1;
  t.data = copy.data();
  EXPECT_NE(Fingerprint(model_), before);
}

TEST_F(HfDirTest, ShardedIndexLoads) {
  // Split into two shards plus an index.
  auto tensors = LoadSafetensorsFile(dir_ + "/model.safetensors");
  ASSERT_TRUE(tensors.ok());
  std::map<std::string, HostTensor> a, b;
  nlohmann::json index;
  for (auto& [name, t] : *tensors) {
    const bool first = name < "model.layers.1";
    (first ? a : b)[name] = t;
    index["weight_map"][name] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  WriteFile(dir_ + "/model-00001-of-00002.safetensors", SerializeSafetensors(a));
  WriteFile(dir_ + "/model-00002-of-00002.safetensors", SerializeSafetensors(b));
  WriteFile(dir_ + "/model.safetensors.index.json", index.dump());
  tensors->clear();
  fs::remove(dir_ + "/model.safetensors");
  auto m = LoadModel(dir_);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(Fingerprint(*m), Fingerprint(model_));
}

TEST_F(HfDirTest, TruncatedSafetensors) {
  const std::string bytes = ReadFile(dir_ + "/model.safetensors");
  WriteFile(dir_ + "/model.safetensors", bytes.substr(0, bytes.size() - 100));
  EXPECT_EQ(Load(), absl::StatusCode::kInvalidArgument);
  WriteFile(dir_ + "/model.safetensors", bytes.substr(0, 5));
  EXPECT_EQ(Load(), absl::StatusCode::kInvalidArgument);
}

TEST_F(HfDirTest, BadHeaderJson) {
  std::string bytes = ReadFile(dir_ + "/model.safetensors");
  bytes[8] = '[';
  bytes[9] = '!';
  WriteFile(dir_ + "/model.safetensors", bytes);
  EXPECT_EQ(Load(), absl::StatusCode::kInvalidArgument);
}

TEST_F(HfDirTest, ShapeMismatch) {
  EditConfig([](nlohmann::json& j) { j["intermediate_size"] = 161; });
  auto m = LoadModel(dir_);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("mlp.gate_proj.weight"), std::string::npos) << m.status();
}

TEST_F(HfDirTest, UnknownArchitecture) {
  EditConfig([](nlohmann::json& j) { j["architectures"] = {"GPT2LMHeadModel"}; });
  EXPECT_EQ(Load(), absl::StatusCode::kUnimplemented);
}

TEST_F(HfDirTest, BadConfigJson) {
  WriteFile(dir_ + "/config.json", "{\"hidden_size\": 64,");
  EXPECT_EQ(Load(), absl::StatusCode::kInvalidArgument);
  WriteFile(dir_ + "/config.json", "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": \"x\"}");
  EXPECT_EQ(Load(), absl::StatusCode::kInvalidArgument);
}

TEST_F(HfDirTest, MissingTensor) {
  auto tensors = LoadSafetensorsFile(dir_ + "/model.safetensors");
  ASSERT_TRUE(tensors.ok());
  tensors->erase("model.layers.0.self_attn.k_proj.bias");
  const std::string bytes = SerializeSafetensors(*tensors);
  tensors->clear();
  WriteFile(dir_ + "/model.safetensors", bytes);
  auto m = LoadModel(dir_);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("k_proj.bias"), std::string::npos);
}

TEST(SafetensorsTest, RejectsInconsistentHeaders) {
  auto parse = [](const std::string& json, size_t data_bytes) {
    std::string b(8, '\0');
    const uint64_t n = json.size();
    std::memcpy(b.data(), &n, 8);
    b += json + std::string(data_bytes, '\0');
    return ParseSafetensors(b, nullptr, "test").status().code();
  };
  EXPECT_EQ(parse(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8), absl::StatusCode::kOk);
  EXPECT_EQ(parse(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(parse(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", 8),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(parse(R"({"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", 8),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(parse(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,8]}})", 8),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(parse(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(parse(R"({"a":{"dtype":"F32","shape":"x","data_offsets":[0,8]}})", 8),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(parse(R"({"a":3})", 8), absl::StatusCode::kInvalidArgument);
  // Overlapping tensors (one reader for models and projectors refuses them).
  EXPECT_EQ(parse(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                  R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                  12),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(parse(R"([1,2])", 8), absl::StatusCode::kInvalidArgument);
  std::string lying(8, '\0');
  const uint64_t too_long = 1000;
  std::memcpy(lying.data(), &too_long, 8);
  EXPECT_EQ(ParseSafetensors(lying + "{}", nullptr, "t").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ConfigTest, ParsesRopeScalingAndDefaults) {
  auto c = ParseHfConfig(R"({"architectures":["LlamaForCausalLM"],"hidden_size":64,
    "intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,
    "rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,
    "high_freq_factor":4.0,"original_max_position_embeddings":64},"eos_token_id":[2,3]})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_kv_heads, 4);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->rope_scaling, RopeScaling::kLlama3);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int>{2, 3}));
  // llama3: low frequencies (long wavelengths) divided by the factor, high ones kept.
  const auto inv = RopeInvFreq(*c, 10);
  EXPECT_FLOAT_EQ(inv[0], 1.0f);
  EXPECT_NEAR(inv[7], std::pow(10000.0, -14.0 / 16) / 8, 1e-9);
  // Mistral: sliding_window recorded; linear/dynamic scaling.
  auto mistral = ParseHfConfig(R"({"architectures":["MistralForCausalLM"],"hidden_size":64,
    "intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,
    "vocab_size":100,"sliding_window":4096,"max_position_embeddings":32,
    "rope_scaling":{"type":"dynamic","factor":2.0}})");
  ASSERT_TRUE(mistral.ok()) << mistral.status();
  EXPECT_EQ(mistral->sliding_window, 4096);
  EXPECT_EQ(mistral->rope_scaling, RopeScaling::kDynamic);
  EXPECT_EQ(RopeInvFreq(*mistral, 32), RopeInvFreq(*mistral, 1));  // within the trained range
  // Beyond it the base grows: base * (2 * 64 / 32 - 1)^(16 / 14).
  EXPECT_NEAR(RopeInvFreq(*mistral, 64)[1], std::pow(10000.0 * std::pow(3.0, 16.0 / 14), -2.0 / 16), 1e-7);
  auto round = ParseHfConfig(ToHfConfigJson(*c, "f32"));
  ASSERT_TRUE(round.ok());
  EXPECT_EQ(round->CanonicalString(), c->CanonicalString());
  EXPECT_EQ(ParseHfConfig(R"({"architectures":["LlamaForCausalLM"],"hidden_size":64,
    "intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,
    "rope_scaling":{"rope_type":"yarn","factor":4}})").status().code(),
            absl::StatusCode::kUnimplemented);
}

// ReadHfConfig is the one reader (the planner's too): it reads what the engine does not run
// (planning needs only the shapes), and the same strict field rules hold for both.
TEST(ConfigTest, ReadHfConfigReadsUnsupportedModelsAndRefusesBadFields) {
  constexpr char kGemma[] = R"({"architectures":["GemmaForCausalLM"],"model_type":"gemma",
    "hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,
    "num_key_value_heads":1,"head_dim":32,"vocab_size":100,"attention_bias":true,
    "rope_scaling":{"rope_type":"yarn","factor":4},"sliding_window":16,
    "use_sliding_window":false})";
  absl::StatusOr<ModelConfig> read = ReadHfConfig(kGemma);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->architecture, "GemmaForCausalLM");
  EXPECT_EQ(read->model_type, "gemma");
  EXPECT_EQ(read->head_dim, 32);
  EXPECT_TRUE(read->qkv_bias);
  EXPECT_TRUE(read->o_bias);
  EXPECT_EQ(read->sliding_window, 0);  // use_sliding_window false
  EXPECT_EQ(read->unsupported_rope_type, "yarn");
  EXPECT_EQ(ParseHfConfig(kGemma).status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(read->CheckSupported().code(), absl::StatusCode::kUnimplemented);

  for (const char* bad : {
           R"({"hidden_size":64.5,"intermediate_size":8,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":10})",
           R"({"hidden_size":64,"intermediate_size":8,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":10,"rms_norm_eps":"small"})",
           R"({"hidden_size":64,"intermediate_size":8,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":10,"eos_token_id":[2,"x"]})",
           R"({"hidden_size":64,"intermediate_size":8,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":10,"bos_token_id":10})",
           R"({"hidden_size":64,"intermediate_size":8,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":10,"architectures":"LlamaForCausalLM"})"}) {
    absl::StatusOr<ModelConfig> c = ReadHfConfig(bad);
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(c.status().message().find("config.json"), std::string::npos) << c.status();
  }
}

}  // namespace
}  // namespace kvfold::model
