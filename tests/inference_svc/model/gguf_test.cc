// GGUF models: a model written as llama.cpp's converters write it loads back as the same
// model (the same fingerprint: every tensor's bytes under its HF name, q/k rows back in
// rotate_half order, the config) in F32, F16, BF16 and Q8_0; block-quantized matrices
// (Q4_0..Q6_K, IQ4) as Q8 rows of their decoded values; the real stories260K the same;
// malformed files and what kvfold does not read are precise errors.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inference_svc/model/model_file.h"
#include "inference_svc/model/random_model.h"
#include "kernels/quant/ggml_blocks.h"
#include "kernels/quant/weight_q8.h"
#include "tests/inference_svc/model/fuzz/parsers_fuzz.h"
#include "tests/inference_svc/model/gguf_writer.h"
#include "tests/kernels/quant/ggml_test_blocks.h"
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

// A model whose matrices are ggml block-quantized loads as kvfold Q8 rows: Q4_0, Q5_0 and
// Q8_0 rows hold the blocks' numbers, the other types' rows are the decoded values
// quantized again (QuantizeRowQ8), each where the F32 file of the decoded values puts it
// (q/k rows permuted alike); a quantized vector loads as F32.
TEST(GgufModelTest, BlockQuantizedTensorsLoadAsQ8Rows) {
  ModelConfig c = *NamedShape("tiny");
  c.hidden_size = 256;  // K-quant rows are whole super-blocks of 256
  c.intermediate_size = 512;
  c.num_layers = 1;
  c.head_dim = 64;
  const ModelFile shape = MakeRandomModel(c, 9, DType::kF32);
  using gguf::TensorType;
  for (TensorType type :
       {TensorType::kQ4_0, TensorType::kQ4_1, TensorType::kQ5_0, TensorType::kQ5_1,
        TensorType::kQ8_0, TensorType::kQ2_K, TensorType::kQ3_K, TensorType::kQ4_K,
        TensorType::kQ5_K, TensorType::kQ6_K, TensorType::kIQ4_NL, TensorType::kIQ4_XS}) {
    const uint32_t t = static_cast<uint32_t>(type);
    SCOPED_TRACE(gguf::TensorTypeName(t));
    // Every matrix and one norm vector in `type`; `decode` writes the decoded values as F32.
    auto rewrite = [t](bool decode) {
      return [t, decode](const std::string& name, const std::vector<int64_t>& dims,
                         uint32_t* type_out, std::string* data) {
        if (dims.size() != 2 && name != "blk.0.attn_norm.weight") return;
        int64_t n = 1;
        for (int64_t d : dims) n *= d;
        const std::string blocks =
            testing::PseudoRandomGgmlBlocks(t, n, static_cast<uint32_t>(name.size() * 7919));
        *type_out = t;
        *data = blocks;
        if (!decode) return;
        std::vector<float> values(n);
        quant::DequantizeGgmlBlocks(t, reinterpret_cast<const uint8_t*>(blocks.data()), n,
                                    values.data());
        *type_out = static_cast<uint32_t>(TensorType::kF32);
        data->assign(reinterpret_cast<const char*>(values.data()), n * sizeof(float));
      };
    };
    auto quantized = ParseBytes(GgufOf(shape, rewrite(false)).Bytes());
    auto decoded = ParseBytes(GgufOf(shape, rewrite(true)).Bytes());
    ASSERT_TRUE(quantized.ok()) << quantized.status();
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_TRUE(quantized->ValidateTensors().ok());
    for (const auto& [name, f] : decoded->tensors) {
      const HostTensor& q = quantized->tensors.at(name);
      ASSERT_EQ(q.shape, f.shape) << name;
      const auto* values = static_cast<const float*>(f.data);
      if (f.shape.size() != 2) {
        EXPECT_EQ(q.dtype, DType::kF32) << name;
        EXPECT_EQ(std::memcmp(q.data, f.data, f.size_bytes), 0) << name;
        continue;
      }
      ASSERT_EQ(q.dtype, DType::kQ8) << name;
      const int64_t rows = f.shape[0], cols = f.shape[1];
      const size_t row_bytes = core::Q8RowBytes(cols);
      ASSERT_EQ(q.size_bytes, rows * row_bytes) << name;
      std::vector<uint8_t> expected(row_bytes);
      std::vector<float> row_values(cols);
      for (int64_t r = 0; r < rows; ++r) {
        const auto* row = static_cast<const uint8_t*>(q.data) + r * row_bytes;
        if (quant::RepacksToQ8Exactly(t)) {
          quant::DequantizeRowQ8(row, cols, row_values.data());
          ASSERT_EQ(std::memcmp(row_values.data(), values + r * cols, cols * sizeof(float)), 0)
              << name << " row " << r;
        } else {
          quant::QuantizeRowQ8(values + r * cols, cols, expected.data());
          ASSERT_EQ(std::memcmp(row, expected.data(), row_bytes), 0) << name << " row " << r;
        }
      }
    }
  }

  // A row that is not a whole number of blocks is malformed.
  ModelFile bare = shape;
  bare.tensors.clear();
  GgufWriter partial = GgufOf(bare);
  partial.Tensor("token_embd.weight", {128, 256}, static_cast<uint32_t>(gguf::TensorType::kQ4_K),
                 std::string(128 * 144, '\0'));
  auto bad = ParseBytes(partial.Bytes());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
  EXPECT_THAT(bad.status().message(),
              HasSubstr("is Q4_K with rows of 128 elements (not a multiple of 256)"));

  // A NaN or infinite block scale, or values too large for any fp16 Q8 scale, are
  // InvalidArgument naming the tensor and row (never codes cast from NaN).
  const std::pair<gguf::TensorType, uint16_t> kBadScales[] = {
      {gguf::TensorType::kQ4_K, 0x7E00},  // NaN
      {gguf::TensorType::kQ4_0, 0x7C00},  // +inf, repacked as is
      {gguf::TensorType::kQ6_K, 0x7BFF},  // 65504: d * 127 * 31 is beyond 127 * 65504
  };
  for (const auto& [type, bits] : kBadScales) {
    const uint32_t t = static_cast<uint32_t>(type);
    std::string blocks = testing::PseudoRandomGgmlBlocks(t, 256 * 256);
    const gguf::BlockLayout layout = *gguf::BlockOf(t);
    const int field = testing::GgmlHalfFields(t)[0];
    const size_t per_row = 256 / layout.elements;
    const size_t block = 3 * per_row + per_row - 1;  // row 3's last block
    blocks[block * layout.bytes + field] = static_cast<char>(bits & 0xFF);
    blocks[block * layout.bytes + field + 1] = static_cast<char>(bits >> 8);
    if (type == gguf::TensorType::kQ6_K) {
      for (int i = 0; i < 16; ++i) blocks[block * layout.bytes + 192 + i] = 127;
    }
    GgufWriter w = GgufOf(bare);
    w.Tensor("token_embd.weight", {256, 256}, t, blocks);
    auto loaded = ParseBytes(w.Bytes());
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument)
        << gguf::TensorTypeName(t) << ": " << loaded.status();
    EXPECT_THAT(loaded.status().message(),
                HasSubstr(absl::StrCat("'token_embd.weight' (", gguf::TensorTypeName(t),
                                       ") row 3 decodes to a NaN")));
  }
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
  k_quant.Tensor("token_embd.weight", {256, 64}, 16 /* IQ2_XXS */, std::string(64 * 66, '\0'));
  auto iq2 = ParseBytes(k_quant.Bytes());
  EXPECT_EQ(iq2.status().code(), absl::StatusCode::kUnimplemented) << iq2.status();
  EXPECT_THAT(iq2.status().message(), HasSubstr("is IQ2_XXS"));

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
