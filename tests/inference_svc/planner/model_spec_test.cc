#include "inference_svc/planner/model_spec.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvfold::planner {
namespace {

using ::testing::HasSubstr;

// The public Llama-3.1-8B config.json (fields the planner reads, plus a few it ignores).
constexpr char kLlama31Config[] = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "bos_token_id": 128000,
  "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
  "max_position_embeddings": 131072, "model_type": "llama", "num_attention_heads": 32,
  "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "rope_type": "llama3"}, "rope_theta": 500000.0,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 128256})";

constexpr char kMistralConfig[] = R"({
  "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 32768,
  "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32,
  "num_key_value_heads": 8, "sliding_window": 4096, "tie_word_embeddings": false,
  "vocab_size": 32000})";

constexpr char kQwen05Config[] = R"({
  "hidden_size": 896, "intermediate_size": 4864, "max_position_embeddings": 32768,
  "max_window_layers": 21, "model_type": "qwen2", "num_attention_heads": 14,
  "num_hidden_layers": 24, "num_key_value_heads": 2, "sliding_window": 32768,
  "tie_word_embeddings": true, "use_sliding_window": false, "vocab_size": 151936})";

// Published parameter counts (HF model cards / safetensors metadata).
TEST(PresetTest, ParameterCountsMatchPublishedSizes) {
  const std::pair<const char*, uint64_t> expected[] = {
      {"llama-3.1-8b", 8030261248ULL},    {"llama-2-7b", 6738415616ULL},
      {"mistral-7b-v0.1", 7241732096ULL}, {"qwen2.5-7b", 7615616512ULL},
      {"qwen2.5-0.5b", 494032768ULL},     {"llama-3.2-1b", 1235814400ULL},
      {"stories260K", 260032ULL}};
  ASSERT_EQ(Presets().size(), std::size(expected));
  for (const auto& [name, params] : expected) {
    absl::StatusOr<ModelSpec> spec = FindPreset(name);
    ASSERT_TRUE(spec.ok()) << name << ": " << spec.status();
    EXPECT_TRUE(ValidateModelSpec(*spec).ok()) << name;
    absl::StatusOr<uint64_t> count = ParameterCount(*spec);
    ASSERT_TRUE(count.ok()) << name;
    EXPECT_EQ(*count, params) << name;
  }
}

TEST(PresetTest, ShapesOfThePublicConfigs) {
  ModelSpec llama2 = *FindPreset("llama-2-7b");
  EXPECT_EQ(llama2.num_kv_heads, llama2.num_heads);  // MHA
  ModelSpec mistral = *FindPreset("mistral-7b-v0.1");
  EXPECT_EQ(mistral.sliding_window, 4096u);
  EXPECT_EQ(mistral.num_kv_heads, 8u);
  ModelSpec stories = *FindPreset("stories260K");
  EXPECT_EQ(stories.hidden_size, 64u);
  EXPECT_EQ(stories.num_layers, 5u);
  EXPECT_EQ(stories.num_heads, 8u);
  EXPECT_EQ(stories.num_kv_heads, 4u);
  EXPECT_EQ(stories.head_dim, 8u);
  EXPECT_EQ(stories.vocab_size, 512u);
  EXPECT_EQ(stories.intermediate_size, 172u);
  EXPECT_EQ(stories.max_position_embeddings, 512u);
  ModelSpec qwen7 = *FindPreset("qwen2.5-7b");
  EXPECT_EQ(qwen7.head_dim, 128u);
  EXPECT_TRUE(qwen7.qkv_bias);
  EXPECT_EQ(qwen7.sliding_window, 0u);  // use_sliding_window: false
}

TEST(PresetTest, LookupIsCaseInsensitiveAndUnknownListsNames) {
  EXPECT_TRUE(FindPreset("LLAMA-3.1-8B").ok());
  EXPECT_TRUE(FindPreset("stories260k").ok());
  absl::StatusOr<ModelSpec> missing = FindPreset("gpt-5");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("gpt-5"));
  EXPECT_THAT(missing.status().message(), HasSubstr("llama-3.1-8b"));
}

TEST(ParseHfConfigTest, LlamaConfigEqualsPreset) {
  absl::StatusOr<ModelSpec> spec = ParseHfConfig(kLlama31Config);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ModelSpec preset = *FindPreset("llama-3.1-8b");
  EXPECT_EQ(spec->name, "llama");
  EXPECT_EQ(spec->hidden_size, preset.hidden_size);
  EXPECT_EQ(spec->num_layers, preset.num_layers);
  EXPECT_EQ(spec->num_heads, preset.num_heads);
  EXPECT_EQ(spec->num_kv_heads, preset.num_kv_heads);
  EXPECT_EQ(spec->head_dim, preset.head_dim);
  EXPECT_EQ(spec->vocab_size, preset.vocab_size);
  EXPECT_EQ(spec->intermediate_size, preset.intermediate_size);
  EXPECT_EQ(spec->max_position_embeddings, 131072u);
  EXPECT_EQ(spec->sliding_window, 0u);
  EXPECT_FALSE(spec->tie_word_embeddings);
  EXPECT_EQ(*ParameterCount(*spec), 8030261248ULL);
}

TEST(ParseHfConfigTest, SlidingWindowTiedEmbeddingsAndQwenBiases) {
  ModelSpec mistral = *ParseHfConfig(kMistralConfig, "mistral");
  EXPECT_EQ(mistral.name, "mistral");
  EXPECT_EQ(mistral.sliding_window, 4096u);
  EXPECT_EQ(mistral.head_dim, 128u);  // derived: 4096 / 32
  EXPECT_EQ(*ParameterCount(mistral), 7241732096ULL);

  ModelSpec qwen = *ParseHfConfig(kQwen05Config);
  EXPECT_EQ(qwen.sliding_window, 0u);  // use_sliding_window: false wins
  EXPECT_TRUE(qwen.tie_word_embeddings);
  EXPECT_TRUE(qwen.qkv_bias);
  EXPECT_EQ(qwen.head_dim, 64u);
  EXPECT_EQ(*ParameterCount(qwen), 494032768ULL);
}

TEST(ParseHfConfigTest, DefaultsAndMqa) {
  // No num_key_value_heads -> MHA; num_key_value_heads 1 -> MQA; null sliding_window.
  ModelSpec mha = *ParseHfConfig(R"({"hidden_size": 72, "num_hidden_layers": 3,
      "num_attention_heads": 6, "vocab_size": 301, "intermediate_size": 200,
      "sliding_window": null})");
  EXPECT_EQ(mha.num_kv_heads, 6u);
  EXPECT_EQ(mha.head_dim, 12u);
  EXPECT_EQ(mha.sliding_window, 0u);
  ModelSpec mqa = *ParseHfConfig(R"({"hidden_size": 72, "num_hidden_layers": 3,
      "num_attention_heads": 6, "num_key_value_heads": 1, "vocab_size": 301,
      "intermediate_size": 200, "head_dim": 16, "attention_bias": true})");
  EXPECT_EQ(mqa.num_kv_heads, 1u);
  EXPECT_EQ(mqa.head_dim, 16u);  // explicit head_dim need not equal hidden / heads
  EXPECT_TRUE(mqa.qkv_bias);
  EXPECT_TRUE(mqa.o_bias);
  // embed 301*72 twice; per layer: attn 72*(96+96+16+16), bias 96+32+72, mlp 3*72*200,
  // norms 144; final norm 72.
  uint64_t per_layer = 72 * (96 + 96 + 16 + 16) + (96 + 32 + 72) + 3 * 72 * 200 + 144;
  EXPECT_EQ(*ParameterCount(mqa), 3 * per_layer + 2 * 301 * 72 + 72);
}

struct BadConfig {
  const char* json;
  const char* message;
};

class ParseHfConfigBadTest : public ::testing::TestWithParam<BadConfig> {};

TEST_P(ParseHfConfigBadTest, IsInvalidArgumentWithAClearMessage) {
  absl::StatusOr<ModelSpec> spec = ParseHfConfig(GetParam().json);
  ASSERT_FALSE(spec.ok()) << GetParam().json;
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr(GetParam().message));
}

#define BASE \
  R"("num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10, "intermediate_size": 8)"
INSTANTIATE_TEST_SUITE_P(
    All, ParseHfConfigBadTest,
    ::testing::Values(
        BadConfig{"", "malformed JSON"}, BadConfig{"{\"hidden_size\": 64,", "malformed JSON"},
        BadConfig{"[1, 2]", "must be an object"},
        BadConfig{"{" BASE "}", "missing required field hidden_size"},
        BadConfig{R"({"hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10,
                    "intermediate_size": 8})",
                  "missing required field num_hidden_layers"},
        BadConfig{R"({"hidden_size": 0, )" BASE "}", "hidden_size must be > 0"},
        BadConfig{R"({"hidden_size": -64, )" BASE "}", "hidden_size must be > 0, got -64"},
        BadConfig{R"({"hidden_size": 64.5, )" BASE "}", "hidden_size must be an integer"},
        BadConfig{R"({"hidden_size": "64", )" BASE "}", "hidden_size must be a positive integer"},
        BadConfig{R"({"hidden_size": 64, "num_key_value_heads": 0, )" BASE "}",
                  "num_key_value_heads must be > 0"},
        BadConfig{R"({"hidden_size": 64, "num_key_value_heads": 3, )" BASE "}",
                  "must be a multiple of num_key_value_heads"},
        BadConfig{R"({"hidden_size": 64, "num_key_value_heads": 8, )" BASE "}",
                  "must be a multiple of num_key_value_heads"},
        BadConfig{R"({"hidden_size": 66, )" BASE "}", "not a multiple of num_attention_heads"},
        BadConfig{R"({"hidden_size": 64, "head_dim": 0, )" BASE "}", "head_dim must be > 0"},
        BadConfig{R"({"hidden_size": 64, "sliding_window": 0, )" BASE "}",
                  "sliding_window must be > 0 or null"},
        BadConfig{R"({"hidden_size": 64, "sliding_window": -1, )" BASE "}",
                  "sliding_window must be > 0"},
        BadConfig{R"({"hidden_size": 64, "tie_word_embeddings": "yes", )" BASE "}",
                  "tie_word_embeddings must be true or false"},
        BadConfig{R"({"hidden_size": 64, "intermediate_size": -8, "num_hidden_layers": 2,
                    "num_attention_heads": 4, "vocab_size": 10})",
                  "intermediate_size must be > 0"},
        BadConfig{R"({"hidden_size": 4294967296, "num_hidden_layers": 4294967296,
                    "num_attention_heads": 1, "vocab_size": 4294967296,
                    "intermediate_size": 4294967296})",
                  "hidden_size 4294967296 is larger than"},
        BadConfig{"{\"hidden_size\": 64, \"tie_word_embeddings\": \"\xff\", " BASE "}",
                  "malformed JSON"},
        BadConfig{R"({"hidden_size": 100000000000000000000000, )" BASE "}",
                  "hidden_size must be an integer"}));
#undef BASE

}  // namespace
}  // namespace kvfold::planner
