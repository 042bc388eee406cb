#include "inference_svc/planner/kv_planner.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inference_svc/planner/admission.h"

namespace kvfold::planner {
namespace {

using ::testing::HasSubstr;

ModelSpec Preset(const char* name) { return *FindPreset(name); }

ModeEstimate Estimate(const ModelSpec& model, KvMode mode, uint64_t t, PlanOptions o = {}) {
  absl::StatusOr<PlanOptions> resolved = ResolveOptions(model, o);
  EXPECT_TRUE(resolved.ok()) << resolved.status();
  absl::StatusOr<ModeEstimate> e = EstimateMode(model, *resolved, mode, t);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.value_or(ModeEstimate{});
}

// ---- The pinned figures ------------------------------------------------------

TEST(PinnedFiguresTest, Llama31BytesPerTokenAnd20kContext) {
  ModelSpec llama = Preset("llama-3.1-8b");
  EXPECT_EQ(*KvBytesPerToken(llama, DType::kF16), 131072u);
  ModeEstimate full = Estimate(llama, KvMode::kFull, 20000);
  EXPECT_EQ(full.bytes_per_token, 131072u);
  EXPECT_EQ(full.resident_tokens, 20000u);
  EXPECT_EQ(full.kv_bytes, 2621440000ULL);
  EXPECT_EQ(full.session_bytes, 2621440000ULL);
}

TEST(PinnedFiguresTest, MistralSlidingWindowCapsTheCache) {
  ModelSpec mistral = Preset("mistral-7b-v0.1");
  ModeEstimate at8k = Estimate(mistral, KvMode::kFull, 8192);
  ModeEstimate at4k = Estimate(mistral, KvMode::kFull, 4096);
  EXPECT_EQ(at8k.kv_bytes, 536870912u);
  EXPECT_EQ(at4k.kv_bytes, 536870912u);
  EXPECT_EQ(at8k.resident_tokens, 4096u);
  // Sliding mode defaults to the model's own window.
  EXPECT_EQ(Estimate(mistral, KvMode::kSliding, 8192).kv_bytes, 536870912u);
  // Below the window the cache grows with T.
  EXPECT_EQ(Estimate(mistral, KvMode::kFull, 1000).kv_bytes, 1000u * 131072u);
}

TEST(PinnedFiguresTest, MistralMhaCounterpart) {
  ModelSpec mha = Preset("mistral-7b-v0.1");
  mha.num_kv_heads = 32;
  ASSERT_TRUE(ValidateModelSpec(mha).ok());
  EXPECT_EQ(Estimate(mha, KvMode::kFull, 4096).kv_bytes, 2147483648ULL);
  EXPECT_EQ(Estimate(mha, KvMode::kFull, 8192).kv_bytes, 2147483648ULL);
}

TEST(PinnedFiguresTest, BatchOfEightIsOneMebibytePerToken) {
  ModelSpec llama = Preset("llama-3.1-8b");
  PlanOptions batch8;
  batch8.batch_size = 8;
  EXPECT_EQ(Estimate(llama, KvMode::kFull, 1, batch8).kv_bytes, 1048576u);
  EXPECT_EQ(Estimate(llama, KvMode::kFull, 20000, batch8).kv_bytes, 20000ULL * 1048576);
  PlanOptions beams;  // B = batch * beams
  beams.batch_size = 2;
  beams.num_beams = 4;
  EXPECT_EQ(Estimate(llama, KvMode::kFull, 1, beams).kv_bytes, 1048576u);
}

TEST(PinnedFiguresTest, Llama31MemoryBlock) {
  ModeEstimate memory = Estimate(Preset("llama-3.1-8b"), KvMode::kMemory, 20000);
  EXPECT_EQ(memory.memory_block_bytes, 786432u);  // 96 * 4096 * 2
  EXPECT_EQ(memory.memory_kv_bytes, 96u * 131072u);
}

// ---- dtypes ---------------------------------------------------------------------------

TEST(DtypeTest, EveryDtypeWithScaleOverhead) {
  ModelSpec llama = Preset("llama-3.1-8b");
  // 2 * 32 layers * 8 heads = 512 head-vectors of 128 elements per token.
  EXPECT_EQ(*KvBytesPerToken(llama, DType::kF32), 512u * 512);
  EXPECT_EQ(*KvBytesPerToken(llama, DType::kF16), 512u * 256);
  EXPECT_EQ(*KvBytesPerToken(llama, DType::kBF16), 512u * 256);
  EXPECT_EQ(*KvBytesPerToken(llama, DType::kF8), 512u * 128);
  // The engine's int8 pool (16-token blocks, kv_dim 1024): per layer and token, K and V
  // codes (2 * 1024), key scales (1024 fp16 per block / 16 tokens = 128 B) and value
  // scales (1024 / 32 groups * 2 B = 64 B).
  EXPECT_EQ(*KvBytesPerToken(llama, DType::kI8), 32u * (2048 + 128 + 64));  // 71,680
  EXPECT_EQ(*KvBytesPerToken(llama, DType::kI4), 32u * (1024 + 128 + 64));  // 38,912
  // stories260K (kv_dim 32): one value group per token.
  ModelSpec stories = Preset("stories260K");
  EXPECT_EQ(*KvBytesPerToken(stories, DType::kF16), 2u * 5 * 4 * 16);
  EXPECT_EQ(*KvBytesPerToken(stories, DType::kI8), 5u * (64 + 32 * 2 / 16 + 2));
  EXPECT_EQ(*KvBytesPerToken(stories, DType::kI4), 5u * (32 + 32 * 2 / 16 + 2));
  // Odd head_dim 33 (kv_dim 132, 5 value groups): per 16-token block and layer,
  // int4 codes 2 * 16 * 66, key scales 132 * 2, value scales 16 * 5 * 2; rounded up.
  ModelSpec odd = stories;
  odd.head_dim = 33;
  EXPECT_EQ(*KvBytesPerToken(odd, DType::kI4), (5u * (2 * 16 * 66 + 264 + 160) + 15) / 16);
  EXPECT_EQ(*KvBytesPerToken(odd, DType::kI8), (5u * (2 * 16 * 132 + 264 + 160) + 15) / 16);
  EXPECT_EQ(KvBytesPerToken(llama, DType::kQ8).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DtypeTest, WeightBytes) {
  const uint64_t params = 8030261248ULL;  // llama-3.1-8b
  EXPECT_EQ(*WeightBytes(params, DType::kBF16), 16060522496ULL);
  EXPECT_EQ(*WeightBytes(params, DType::kF32), 32121044992ULL);
  EXPECT_EQ(*WeightBytes(params, DType::kF8), params);
  EXPECT_EQ(*WeightBytes(params, DType::kI8), params + params / 32 * 2);
  EXPECT_EQ(*WeightBytes(params, DType::kI4), params / 2 + params / 32 * 2);
  EXPECT_EQ(*WeightBytes(33, DType::kI4), 17u + 2 * 2);
}

// ---- modes ----------------------------------------------------------------------------

TEST(ModeTest, EveryModeAt20kForLlama31) {
  ModelSpec llama = Preset("llama-3.1-8b");  // W 1024, S 4, M 96, C 256 (defaults)
  ModeEstimate sliding = Estimate(llama, KvMode::kSliding, 20000);
  EXPECT_EQ(sliding.resident_tokens, 1024u);
  EXPECT_EQ(sliding.kv_bytes, 1024u * 131072);
  ModeEstimate sink = Estimate(llama, KvMode::kSink, 20000);
  EXPECT_EQ(sink.prefix_tokens, 4u);
  EXPECT_EQ(sink.window_tokens, 1024u);
  EXPECT_EQ(sink.kv_bytes, 1028u * 131072);
  ModeEstimate memory = Estimate(llama, KvMode::kMemory, 20000);
  EXPECT_EQ(memory.window_tokens, 1024u + 256);
  EXPECT_EQ(memory.prefix_tokens, 96u);
  EXPECT_EQ(memory.kv_bytes, 1376u * 131072);
  EXPECT_EQ(memory.session_bytes, 1376u * 131072 + 786432);
  EXPECT_EQ(memory.folds, (20000u - 1024) / 256);
  EXPECT_DOUBLE_EQ(memory.fold_prefill_tokens_per_token, 4.0);  // W / C
  EXPECT_DOUBLE_EQ(memory.memory_expand_tokens_per_token, 96.0 / 256);
  EXPECT_EQ(memory.full_kv_bytes, 2621440000ULL);
  ModeEstimate only = Estimate(llama, KvMode::kMemoryOnly, 20000);
  EXPECT_EQ(only.window_tokens, 256u);
  EXPECT_EQ(only.kv_bytes, 352u * 131072);
  EXPECT_EQ(only.folds, 20000u / 256);
  EXPECT_DOUBLE_EQ(only.fold_prefill_tokens_per_token, 0.0);  // W = 0
}

TEST(ModeTest, ShortContextsAndFoldBoundaries) {
  ModelSpec llama = Preset("llama-3.1-8b");
  for (KvMode mode : core::kAllKvModes) {
    EXPECT_EQ(Estimate(llama, mode, 3).resident_tokens, 3u) << core::KvModeName(mode);
  }
  EXPECT_EQ(Estimate(llama, KvMode::kSink, 3).prefix_tokens, 3u);
  // memory: the first fold happens when the window holds W + C = 1280 tokens.
  ModeEstimate before = Estimate(llama, KvMode::kMemory, 1279);
  EXPECT_EQ(before.resident_tokens, 1279u);
  EXPECT_EQ(before.folds, 0u);
  EXPECT_EQ(before.session_bytes, before.kv_bytes);             // no memory yet, no block
  EXPECT_DOUBLE_EQ(before.fold_prefill_tokens_per_token, 0.0);  // no fold yet
  ModeEstimate at = Estimate(llama, KvMode::kMemory, 1280);
  EXPECT_EQ(at.resident_tokens, 1280u + 96);
  EXPECT_EQ(at.folds, 1u);
  EXPECT_EQ(at.session_bytes, at.kv_bytes + 786432);
  EXPECT_DOUBLE_EQ(at.fold_prefill_tokens_per_token, 4.0);
  EXPECT_EQ(Estimate(llama, KvMode::kMemory, 1535).folds, 1u);
  EXPECT_EQ(Estimate(llama, KvMode::kMemory, 1536).folds, 2u);
  EXPECT_EQ(Estimate(llama, KvMode::kMemoryOnly, 255).resident_tokens, 255u);
  EXPECT_EQ(Estimate(llama, KvMode::kMemoryOnly, 256).resident_tokens, 256u + 96);
  // Memory modes stay constant however long the session grows.
  EXPECT_EQ(Estimate(llama, KvMode::kMemory, 128000).kv_bytes,
            Estimate(llama, KvMode::kMemory, 100000000).kv_bytes);
}

TEST(ModeTest, ExplicitGeometryAndAttentionKinds) {
  ModelSpec llama = Preset("llama-3.1-8b");
  PlanOptions o;
  o.window_size = 2048;
  o.sink_tokens = 16;
  o.mem_slots = 64;
  o.chunk_size = 512;
  EXPECT_EQ(Estimate(llama, KvMode::kSliding, 5000, o).resident_tokens, 2048u);
  EXPECT_EQ(Estimate(llama, KvMode::kSink, 5000, o).resident_tokens, 2064u);
  ModeEstimate memory = Estimate(llama, KvMode::kMemory, 5000, o);
  EXPECT_EQ(memory.resident_tokens, 2048u + 512 + 64);
  EXPECT_EQ(memory.memory_block_bytes, 64u * 4096 * 2);
  EXPECT_DOUBLE_EQ(memory.fold_prefill_tokens_per_token, 4.0);
  EXPECT_EQ(Estimate(llama, KvMode::kMemoryOnly, 5000, o).resident_tokens, 512u + 64);
  // MHA (llama-2-7b) is 4x GQA-8 per token; MQA is 1/8 of GQA-8.
  EXPECT_EQ(*KvBytesPerToken(Preset("llama-2-7b"), DType::kF16), 4u * 131072);
  ModelSpec mqa = llama;
  mqa.num_kv_heads = 1;
  EXPECT_EQ(*KvBytesPerToken(mqa, DType::kF16), 131072u / 8);
}

// ---- capacity ---------------------------------------------------------------------------

TEST(CapacityTest, Llama31On80GiB) {
  PlanOptions o;
  o.gpu_memory_bytes = 80ULL << 30;
  absl::StatusOr<Plan> plan =
      MakePlan(Preset("llama-3.1-8b"), o, {20000}, {KvMode::kFull, KvMode::kMemory});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->parameter_count, 8030261248ULL);
  EXPECT_EQ(plan->weight_bytes, 16060522496ULL);
  EXPECT_EQ(plan->activation_reserve_bytes, 8589934592ULL);  // 10 %
  const uint64_t pool = 85899345920ULL - 16060522496ULL - 8589934592ULL;
  EXPECT_EQ(plan->kv_pool_bytes, pool);
  EXPECT_TRUE(plan->weights_fit);
  ASSERT_EQ(plan->estimates.size(), 2u);
  const ModeEstimate& full = plan->estimates[0];
  // 2,621,440,000 B per session: 16 below 70 %, 19 below 85 %, 22 below 95 %.
  EXPECT_EQ(full.sessions_unthrottled, 16u);
  EXPECT_EQ(full.sessions_before_single_beam, 19u);
  EXPECT_EQ(full.sessions_fit, 22u);
  const ModeEstimate& memory = plan->estimates[1];
  const uint64_t per_session = 1376ULL * 131072 + 786432;
  EXPECT_EQ(memory.sessions_fit, (pool * 95 / 100) / per_session);
  EXPECT_LT(memory.sessions_fit * per_session * 100, pool * 95);
  EXPECT_GE((memory.sessions_fit + 1) * per_session * 100, pool * 95);
}

TEST(CapacityTest, ExplicitReserveWeightsThatDoNotFitAndNoGpu) {
  PlanOptions o;
  o.gpu_memory_bytes = 40ULL << 30;
  o.activation_reserve_bytes = 1ULL << 30;
  o.weight_dtype = DType::kI4;
  Plan plan = *MakePlan(Preset("llama-3.1-8b"), o, {1000}, {KvMode::kFull});
  EXPECT_EQ(plan.kv_pool_bytes, (40ULL << 30) - (1ULL << 30) - 4517021952ULL);
  o = PlanOptions();
  o.gpu_memory_bytes = 16ULL << 30;  // 16.06e9 B of bf16 weights + 1.6 GiB reserve
  plan = *MakePlan(Preset("llama-3.1-8b"), o, {1000}, {KvMode::kFull});
  EXPECT_FALSE(plan.weights_fit);
  EXPECT_EQ(plan.kv_pool_bytes, 0u);
  EXPECT_EQ(plan.estimates[0].sessions_fit, 0u);
  plan = *MakePlan(Preset("llama-3.1-8b"), PlanOptions(), {1000}, {KvMode::kFull});
  EXPECT_EQ(plan.kv_pool_bytes, 0u);
  EXPECT_EQ(plan.activation_reserve_bytes, 0u);
  EXPECT_EQ(plan.estimates[0].sessions_fit, 0u);
}

TEST(CapacityTest, ContextsMajorOrder) {
  Plan plan = *MakePlan(Preset("stories260K"), PlanOptions(), {1000, 8000},
                        {KvMode::kFull, KvMode::kSliding, KvMode::kMemory});
  ASSERT_EQ(plan.estimates.size(), 6u);
  EXPECT_EQ(plan.estimates[0].context_tokens, 1000u);
  EXPECT_EQ(plan.estimates[2].mode, KvMode::kMemory);
  EXPECT_EQ(plan.estimates[3].context_tokens, 8000u);
  EXPECT_EQ(plan.estimates[3].mode, KvMode::kFull);
  // T above stories260K's 512 positions is flagged for full mode only.
  EXPECT_TRUE(plan.estimates[3].exceeds_max_position);
  EXPECT_FALSE(plan.estimates[4].exceeds_max_position);
}

// ---- bad input ----------------------------------------------------------------------------

TEST(BadInputTest, ZeroSizesAndOverflow) {
  ModelSpec llama = Preset("llama-3.1-8b");
  const char* fields[] = {"batch_size", "num_beams", "sink_tokens", "mem_slots", "chunk_size"};
  for (int i = 0; i < 5; ++i) {
    PlanOptions o;
    uint64_t* slot[] = {&o.batch_size, &o.num_beams, &o.sink_tokens, &o.mem_slots, &o.chunk_size};
    *slot[i] = 0;
    absl::StatusOr<Plan> plan = MakePlan(llama, o, {1000}, {KvMode::kFull});
    ASSERT_FALSE(plan.ok()) << fields[i];
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(plan.status().message(), HasSubstr(std::string(fields[i]) + " must be > 0"));
  }
  EXPECT_THAT(MakePlan(llama, PlanOptions(), {0}, {KvMode::kFull}).status().message(),
              HasSubstr("context must be > 0"));
  EXPECT_FALSE(MakePlan(llama, PlanOptions(), {}, {KvMode::kFull}).ok());
  EXPECT_FALSE(MakePlan(llama, PlanOptions(), {1000}, {}).ok());
  PlanOptions reserve;
  reserve.reserve_percent = 100;
  EXPECT_FALSE(MakePlan(llama, reserve, {1000}, {KvMode::kFull}).ok());

  // T * bytes/token overflows 64 bits.
  absl::StatusOr<Plan> huge = MakePlan(llama, PlanOptions(), {1ULL << 50}, {KvMode::kFull});
  ASSERT_FALSE(huge.ok());
  EXPECT_THAT(huge.status().message(), HasSubstr("overflow"));
  // ... but the bounded modes handle the same T.
  EXPECT_TRUE(MakePlan(llama, PlanOptions(), {1ULL << 50}, {KvMode::kMemory}).ok());
  PlanOptions wide;
  wide.batch_size = 1ULL << 40;
  wide.num_beams = 1ULL << 40;
  EXPECT_THAT(MakePlan(llama, wide, {1}, {KvMode::kFull}).status().message(),
              HasSubstr("overflow"));
  ModelSpec absurd = llama;
  absurd.num_layers = 1ULL << 62;
  EXPECT_THAT(KvBytesPerToken(absurd, DType::kF32).status().message(), HasSubstr("overflow"));
  ModelSpec zero = llama;
  zero.head_dim = 0;
  EXPECT_THAT(MakePlan(zero, PlanOptions(), {1}, {KvMode::kFull}).status().message(),
              HasSubstr("head_dim must be > 0"));
}

}  // namespace
}  // namespace kvfold::planner
