#include "inference_svc/planner/planner_proto.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvfold::planner {
namespace {

using ::testing::HasSubstr;

const v1::ModeEstimate& ModeOf(const v1::EstimateKvCacheResponse& r, v1::KvMode mode) {
  for (const v1::ModeEstimate& m : r.modes()) {
    if (m.mode() == mode) return m;
  }
  ADD_FAILURE() << "mode " << mode << " missing";
  return r.modes(0);
}

TEST(EstimateKvCacheTest, PresetWithDefaults) {
  v1::EstimateKvCacheRequest req;
  req.set_preset("llama-3.1-8b");
  req.set_context_tokens(20000);
  absl::StatusOr<v1::EstimateKvCacheResponse> resp = EstimateKvCache(req, nullptr);
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(resp->model(), "llama-3.1-8b");
  EXPECT_EQ(resp->parameter_count(), 8030261248ULL);
  EXPECT_EQ(resp->weight_bytes(), 16060522496ULL);  // bf16 default
  EXPECT_EQ(resp->kv_pool_bytes(), 0u);             // no GPU memory given
  ASSERT_EQ(resp->modes_size(), 5);
  EXPECT_EQ(resp->modes(0).mode(), v1::KV_MODE_FULL);
  EXPECT_EQ(resp->modes(4).mode(), v1::KV_MODE_MEMORY_ONLY);
  const v1::ModeEstimate& full = ModeOf(*resp, v1::KV_MODE_FULL);
  EXPECT_EQ(full.bytes_per_token(), 131072u);
  EXPECT_EQ(full.kv_bytes(), 2621440000ULL);
  EXPECT_EQ(full.resident_tokens(), 20000u);
  EXPECT_EQ(full.sessions_fit(), 0u);
  const v1::ModeEstimate& memory = ModeOf(*resp, v1::KV_MODE_MEMORY);
  EXPECT_EQ(memory.resident_tokens(), 1024u + 256 + 96);
  EXPECT_EQ(memory.memory_block_bytes(), 786432u);
  EXPECT_EQ(memory.memory_kv_bytes(), 96u * 131072);
  EXPECT_DOUBLE_EQ(memory.fold_prefill_tokens_per_token(), 4.0);
  EXPECT_EQ(ModeOf(*resp, v1::KV_MODE_SLIDING).kv_bytes(), 1024u * 131072);
  EXPECT_EQ(ModeOf(*resp, v1::KV_MODE_SINK).kv_bytes(), 1028u * 131072);
}

TEST(EstimateKvCacheTest, EveryFieldMapsThrough) {
  v1::EstimateKvCacheRequest req;
  req.set_preset("llama-3.1-8b");
  req.set_context_tokens(20000);
  req.set_batch_size(2);
  req.set_num_beams(4);  // B = 8 -> 1 MiB per token
  req.set_kv_dtype(v1::DTYPE_FP16);
  req.set_weight_dtype(v1::DTYPE_INT4);
  req.set_window_size(2048);
  req.set_sink_tokens(16);
  req.set_mem_slots(64);
  req.set_chunk_size(512);
  req.set_gpu_memory_bytes(80ULL << 30);
  req.set_activation_reserve_bytes(4ULL << 30);
  v1::EstimateKvCacheResponse resp = *EstimateKvCache(req, nullptr);
  EXPECT_EQ(resp.weight_bytes(), 4517021952ULL);
  EXPECT_EQ(resp.kv_pool_bytes(), (80ULL << 30) - 4517021952ULL - (4ULL << 30));
  const v1::ModeEstimate& full = ModeOf(resp, v1::KV_MODE_FULL);
  EXPECT_EQ(full.kv_bytes(), 20000ULL << 20);
  EXPECT_EQ(full.sessions_fit(), resp.kv_pool_bytes() * 95 / 100 / (20000ULL << 20));
  EXPECT_EQ(ModeOf(resp, v1::KV_MODE_SINK).resident_tokens(), 2048u + 16);
  const v1::ModeEstimate& memory = ModeOf(resp, v1::KV_MODE_MEMORY);
  EXPECT_EQ(memory.resident_tokens(), 2048u + 512 + 64);
  EXPECT_EQ(memory.memory_block_bytes(), 64u * 4096 * 2);
  EXPECT_GT(memory.sessions_fit(), full.sessions_fit());
  EXPECT_DOUBLE_EQ(ModeOf(resp, v1::KV_MODE_MEMORY_ONLY).fold_prefill_tokens_per_token(), 0.0);
}

TEST(EstimateKvCacheTest, ConfigJsonAndServedModel) {
  v1::EstimateKvCacheRequest req;
  req.set_config_json(R"({"hidden_size": 4096, "intermediate_size": 14336,
      "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
      "sliding_window": 4096, "vocab_size": 32000, "model_type": "mistral"})");
  req.set_context_tokens(8192);
  v1::EstimateKvCacheResponse resp = *EstimateKvCache(req, nullptr);
  EXPECT_EQ(resp.model(), "mistral");
  EXPECT_EQ(ModeOf(resp, v1::KV_MODE_FULL).kv_bytes(), 536870912u);

  ModelSpec served = *FindPreset("stories260K");
  v1::EstimateKvCacheRequest plain;
  plain.set_context_tokens(100);
  resp = *EstimateKvCache(plain, &served);
  EXPECT_EQ(resp.model(), "stories260K");
  EXPECT_EQ(ModeOf(resp, v1::KV_MODE_FULL).bytes_per_token(), 640u);
}

TEST(EstimateKvCacheTest, BadRequestsAreInvalidArgument) {
  auto expect_invalid = [](const v1::EstimateKvCacheRequest& req, const char* message) {
    absl::StatusOr<v1::EstimateKvCacheResponse> resp = EstimateKvCache(req, nullptr);
    ASSERT_FALSE(resp.ok()) << req.DebugString();
    EXPECT_EQ(resp.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(resp.status().message(), HasSubstr(message));
  };
  v1::EstimateKvCacheRequest req;
  req.set_context_tokens(10);
  expect_invalid(req, "no served model");
  req.set_preset("nope");
  expect_invalid(req, "unknown preset 'nope'");
  req.set_config_json("{}");
  expect_invalid(req, "not both");
  req.clear_preset();
  req.set_config_json("{not json");
  expect_invalid(req, "malformed JSON");
  req.set_config_json("");
  req.set_preset("llama-3.1-8b");
  req.set_context_tokens(0);
  expect_invalid(req, "context_tokens must be > 0");
  req.set_context_tokens(10);
  req.set_kv_dtype(static_cast<v1::Dtype>(42));
  expect_invalid(req, "unknown dtype 42");
  req.set_kv_dtype(v1::DTYPE_FP32);
  req.set_context_tokens(1ULL << 62);
  expect_invalid(req, "overflow");
}

}  // namespace
}  // namespace kvfold::planner
