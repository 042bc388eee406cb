// GGUF models: a model written as llama.cpp's converters write it loads back as the same
// model (the same fingerprint: every tensor's bytes under its HF name, q/k rows back in
// rotate_half order, the config) in F32, F16, BF16 and Q8_0; the real stories260K the same;
// malformed files and what kvfold does not read are precise errors.
#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inference_svc/model/model_file.h"
#include "inference_svc/model/random_model.h"
#include "tests/inference_svc/model/fuzz/parsers_fuzz.h"
#include "tests/inference_svc/model/gguf_writer.h"
#include "tests/testing/shared_dir.h"

namespace kvfold::model {
namespace {

namespace fs = std::filesystem;
using testing::GgufOf;
using testing::GgufWriter;
using ::testing::HasSubstr;

absl::StatusOr<ModelFile> ParseBytes(const std::string& bytes) {
  auto keep = std::make_shared<const std::string>(bytes);
  return ParseGgufModel(*keep, keep, "test.gguf");
}

ModelFile Tiny(DType dtype, bool tie = true) {
  ModelConfig c = *NamedShape("tiny");
  c.tie_word_embeddings = tie;
  return MakeRandomModel(c, 3, dtype);
}

TEST(GgufModelTest, ALlamaModelLoadsBackAsTheSameModel) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8}) {
    for (bool tie : {true, false}) {
      const ModelFile original = Tiny(dtype, tie);
      auto loaded = ParseBytes(GgufOf(original).Bytes());
      ASSERT_TRUE(loaded.ok()) << core::DTypeName(dtype) << ": " << loaded.status();
      EXPECT_EQ(loaded->source_format, "gguf");
      EXPECT_EQ(loaded->config.tie_word_embeddings, tie);
      EXPECT_TRUE(loaded->ValidateTensors().ok());
      EXPECT_EQ(Fingerprint(*loaded), Fingerprint(original))
          << core::DTypeName(dtype) << (tie ? " tied" : " untied");
      for (const auto& [name, t] : original.tensors) {
        ASSERT_TRUE(loaded->tensors.count(name)) << name;
        EXPECT_EQ(loaded->tensors.at(name).dtype, t.dtype) << name;
        EXPECT_EQ(loaded->tensors.at(name).shape, t.shape) << name;
      }
    }
  }
}

// Qwen2 (q/k/v biases; its q/k rows stay as in HF: NEOX rotation).
TEST(GgufModelTest, AQwen2ModelLoadsBackAsTheSameModel) {
  for (DType dtype : {DType::kF32, DType::kQ8}) {
    const ModelFile original = MakeRandomModel(*NamedShape("tiny-qwen2"), 5, dtype);
    auto loaded = ParseBytes(GgufOf(original).Bytes());
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->config.architecture, "Qwen2ForCausalLM");
    EXPECT_TRUE(loaded->config.qkv_bias);
    EXPECT_TRUE(loaded->ValidateTensors().ok());
    EXPECT_EQ(Fingerprint(*loaded), Fingerprint(original)) << core::DTypeName(dtype);
  }
  // A bias a llama model does not have.
  GgufWriter biased = GgufOf(Tiny(DType::kF32));
  biased.Tensor("blk.0.attn_q.bias", {64}, 0, std::string(64 * 4, '\0'));
  EXPECT_THAT(ParseBytes(biased.Bytes()).status().message(),
              HasSubstr("'blk.0.attn_q.bias' is not part of a llama model"));
}

// Llama 3's RoPE scaling, which llama.cpp's converter writes as per-frequency factors
// (rope_freqs), reads back as the config it came from (the fingerprint holds the scaling's
// parameters); factors no Llama 3 scaling gives are Unimplemented.
TEST(GgufModelTest, Llama3RopeFactorsReadBackAsTheirScaling) {
  for (auto [theta, original] : {std::pair{10000.0f, 64}, std::pair{500000.0f, 8192}}) {
    ModelConfig c = *NamedShape("tiny");
    c.rope_theta = theta;
    c.rope_scaling = RopeScaling::kLlama3;
    c.rope_factor = 8;
    c.rope_low_freq_factor = 1;
    c.rope_high_freq_factor = 4;
    c.rope_original_max_position = original;
    const ModelFile original_model = MakeRandomModel(c, 9, DType::kF32);
    auto loaded = ParseBytes(GgufOf(original_model).Bytes());
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->config.rope_scaling, RopeScaling::kLlama3);
    EXPECT_EQ(loaded->config.rope_original_max_position, original);
    EXPECT_EQ(Fingerprint(*loaded), Fingerprint(original_model)) << original;
    EXPECT_EQ(RopeInvFreq(loaded->config, 0), RopeInvFreq(original_model.config, 0));
  }
  ModelConfig c = *NamedShape("tiny");
  c.rope_scaling = RopeScaling::kLlama3;
  c.rope_factor = 8;
  c.rope_original_max_position = 64;
  GgufWriter w = GgufOf(MakeRandomModel(c, 9, DType::kF32));
  ModelConfig other = c;
  other.rope_high_freq_factor = 2;  // factors of another scaling
  ModelFile mismatched = MakeRandomModel(c, 9, DType::kF32);
  mismatched.config = other;
  auto status = ParseBytes(GgufOf(mismatched).Bytes()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << status;
  EXPECT_THAT(status.message(), HasSubstr("as Llama 3's RoPE scaling"));
  GgufWriter twice = w;
  twice.String("llama.rope.scaling.type", "linear");
  EXPECT_THAT(ParseBytes(twice.Bytes()).status().message(),
              HasSubstr("rope_freqs and a rope.scaling.type"));
}

TEST(GgufModelTest, LoadModelReadsAGgufFileByItsMagic) {
  const ModelFile original = Tiny(DType::kQ8);
  const fs::path dir = fs::path(::testing::TempDir()) / "gguf_load_model";
  fs::create_directories(dir);
  const fs::path file = dir / "tiny.weights";  // not the extension: the magic decides
  std::ofstream(file, std::ios::binary) << GgufOf(original).Bytes();
  auto loaded = LoadModel(file.string());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(Fingerprint(*loaded), Fingerprint(original));
  EXPECT_EQ(loaded->source_path, file.string());
  fs::remove_all(dir);
}

// The real stories260K (shared model directory): its GGUF loads with the fingerprint of
// the llama2.c checkpoint.
TEST(GgufModelTest, Stories260KLoadsAsItsCheckpoint) {
  if (!kvfold::testing::HaveStories260K()) {
    GTEST_SKIP() << kvfold::testing::MissingShared("models/stories260K");
  }
  const fs::path file = fs::path(kvfold::testing::Stories260K()) / "stories260K.bin";
  auto original = LoadModel(file.string());
  ASSERT_TRUE(original.ok()) << original.status();
  auto loaded = ParseBytes(GgufOf(*original).Bytes());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(Fingerprint(*loaded), Fingerprint(*original));
}

TEST(GgufModelTest, WhatKvfoldDoesNotReadIsUnimplemented) {
  const ModelFile original = Tiny(DType::kF32);
  GgufWriter gemma;
  gemma.String("general.architecture", "gemma2");
  auto arch = ParseBytes(gemma.Bytes());
  EXPECT_EQ(arch.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(arch.status().message(), HasSubstr("architecture 'gemma2'"));

  ModelFile bare = original;
  bare.tensors.clear();
  GgufWriter k_quant = GgufOf(bare);
  k_quant.Tensor("token_embd.weight", {256, 64}, 12 /* Q4_K */, std::string(64 * 144, '\0'));
  auto q4 = ParseBytes(k_quant.Bytes());
  EXPECT_EQ(q4.status().code(), absl::StatusCode::kUnimplemented) << q4.status();
  EXPECT_THAT(q4.status().message(), HasSubstr("is Q4_K"));

  GgufWriter freqs = GgufOf(original);
  freqs.Tensor("rope_freqs.weight", {8}, 0, std::string(32, '\0'));  // factors of 0
  EXPECT_EQ(ParseBytes(freqs.Bytes()).status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(ParseBytes(freqs.Bytes()).status().message(), HasSubstr("rope_freqs factor 0"));

  GgufWriter scaled = GgufOf(original);
  scaled.String("llama.rope.scaling.type", "yarn");
  EXPECT_THAT(ParseBytes(scaled.Bytes()).status().message(), HasSubstr("rope scaling 'yarn'"));
  GgufWriter linear = GgufOf(original);
  linear.String("llama.rope.scaling.type", "linear");
  linear.F32("llama.rope.scaling.factor", 4);
  auto linear_model = ParseBytes(linear.Bytes());
  ASSERT_TRUE(linear_model.ok()) << linear_model.status();
  EXPECT_EQ(linear_model->config.rope_scaling, RopeScaling::kLinear);
  EXPECT_EQ(linear_model->config.rope_factor, 4.0f);

  std::string v1 = GgufOf(original).Bytes();
  v1[4] = 1;
  EXPECT_EQ(ParseBytes(v1).status().code(), absl::StatusCode::kUnimplemented);
}

TEST(GgufModelTest, MalformedFilesArePreciseErrors) {
  const ModelFile original = Tiny(DType::kF16);
  const std::string good = GgufOf(original).Bytes();
  ASSERT_TRUE(ParseBytes(good).ok());
  auto error = [&](const std::string& bytes) { return ParseBytes(bytes).status(); };
  EXPECT_THAT(error("GGML").message(), HasSubstr("not a GGUF file"));
  std::string huge_count = good;
  const uint64_t many = uint64_t{1} << 40;
  std::memcpy(huge_count.data() + 16, &many, 8);  // the metadata count
  EXPECT_THAT(error(huge_count).message(), HasSubstr("cannot fit in the file"));
  // Every truncation: an error, never a crash (the data's tail: the last tensor).
  for (size_t n = 0; n < good.size(); n += 1 + n / 16) {
    const absl::Status s = error(good.substr(0, n));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << n << ": " << s;
  }
  EXPECT_THAT(error(good.substr(0, good.size() - 1)).message(), HasSubstr("runs past the end"));

  GgufWriter missing = GgufOf(original);
  missing.Tensor("blk.9.attn_q.weight", {64, 64}, 0, std::string(64 * 64 * 4, '\0'));
  EXPECT_THAT(error(missing.Bytes()).message(),
              HasSubstr("'blk.9.attn_q.weight' is not part of a llama model"));
  GgufWriter twice = GgufOf(original);
  twice.U32("llama.block_count", 2);
  EXPECT_THAT(error(twice.Bytes()).message(), HasSubstr("appears twice"));
  GgufWriter no_heads;
  no_heads.String("general.architecture", "llama");
  no_heads.U32("llama.embedding_length", 64);
  EXPECT_THAT(error(no_heads.Bytes()).message(), HasSubstr("lacks llama.feed_forward_length"));
  ModelFile no_eos = original;
  no_eos.config.eos_token_ids = {-1};  // written as 4294967295, llama.cpp's "none"
  EXPECT_THAT(error(GgufOf(no_eos).Bytes()).message(),
              HasSubstr("eos_token_id must be a token id"));
  GgufWriter zero = GgufOf(original);
  zero.Tensor("blk.0.bad.weight", {0}, 0, "");
  EXPECT_THAT(error(zero.Bytes()).message(), HasSubstr("empty or too large"));
  GgufWriter odd_q8 = GgufOf(original);
  odd_q8.Tensor("blk.0.odd.weight", {48, 2}, 8, std::string(2 * 34 * 2, '\0'));
  EXPECT_THAT(error(odd_q8.Bytes()).message(), HasSubstr("not a multiple of 32"));
}

// Seeded mutations of a valid file: every one parses or is InvalidArgument / Unimplemented
// naming the file, never a crash (run under the sanitizers by the ASan build).
TEST(GgufModelTest, MutatedFilesParseOrArePreciseErrors) {
  const std::string seed = GgufOf(Tiny(DType::kQ8)).Bytes();
  std::mt19937_64 rng(11);
  int parsed = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string b = seed;
    for (int e = 0, edits = 1 + static_cast<int>(rng() % 4); e < edits; ++e) {
      switch (rng() % 3) {
        case 0:
          b[rng() % b.size()] ^= static_cast<char>(1 << (rng() % 8));
          break;
        case 1: {
          const uint64_t values[] = {0, 1, 0xffffffff, ~0ULL, 1ULL << 40, 7};
          const uint64_t v = values[rng() % 6];
          const size_t at = rng() % std::min<size_t>(b.size() - 8, 2048);
          std::memcpy(b.data() + at, &v, 8);
          break;
        }
        default:
          b.resize(8 + rng() % (b.size() - 8));
      }
    }
    fuzz::FuzzGguf(reinterpret_cast<const uint8_t*>(b.data()), b.size());
    const absl::StatusOr<ModelFile> m = ParseBytes(b);
    if (m.ok()) {
      ++parsed;
      continue;
    }
    // A precise error: malformed or unread, naming the file.
    const absl::StatusCode code = m.status().code();
    ASSERT_TRUE(code == absl::StatusCode::kInvalidArgument ||
                code == absl::StatusCode::kUnimplemented)
        << i << ": " << m.status();
    ASSERT_THAT(m.status().message(), HasSubstr("test.gguf: ")) << i;
  }
  EXPECT_LT(parsed, 3000);
}

}  // namespace
}  // namespace kvfold::model
