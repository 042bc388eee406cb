#include "inference_svc/planner/planner_format.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace kvfold::planner {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

Plan MakeLlamaPlan(uint64_t gpu_memory) {
  PlanOptions o;
  o.gpu_memory_bytes = gpu_memory;
  return *MakePlan(*FindPreset("llama-3.1-8b"), o, {1000, 20000},
                   std::vector<KvMode>(std::begin(core::kAllKvModes), std::end(core::kAllKvModes)));
}

TEST(RenderTableTest, HeaderAndRows) {
  std::string table = RenderTable(MakeLlamaPlan(0));
  EXPECT_THAT(table, HasSubstr("model llama-3.1-8b (meta-llama/Llama-3.1-8B config.json)"));
  EXPECT_THAT(table, HasSubstr("32 layers, 8 kv heads of 32 (GQA), head_dim 128"));
  EXPECT_THAT(table, HasSubstr("parameters 8,030,261,248"));
  EXPECT_THAT(table, HasSubstr("131,072 B per token per sequence"));
  EXPECT_THAT(table, HasSubstr("W/C = 4.00 extra prefill tokens per token"));
  EXPECT_THAT(table, HasSubstr("2,621,440,000"));
  EXPECT_THAT(table, HasSubstr("786,432"));
  EXPECT_THAT(table, Not(HasSubstr("fit<95%")));  // no GPU memory, no capacity columns
  // Header, blank line, column titles, 10 rows, blank line, 3 legend lines.
  int rows = 0;
  for (char c : table) rows += c == '\n';
  EXPECT_EQ(rows, 6 + 1 + 1 + 10 + 1 + 3);
}

TEST(RenderTableTest, CapacityColumnsAndWeightsThatDoNotFit) {
  std::string table = RenderTable(MakeLlamaPlan(80ULL << 30));
  EXPECT_THAT(table, HasSubstr("KV pool 61,248,888,832 B"));
  EXPECT_THAT(table, HasSubstr("fit<95%"));
  EXPECT_THAT(RenderTable(MakeLlamaPlan(16ULL << 30)),
              HasSubstr("weights + reserve exceed GPU memory"));
}

TEST(RenderJsonTest, ParsesWithEveryField) {
  nlohmann::json j = nlohmann::json::parse(RenderJson(MakeLlamaPlan(80ULL << 30)));
  EXPECT_EQ(j["bytes_per_token"], 131072);
  EXPECT_EQ(j["kv_pool_bytes"], 61248888832ULL);
  EXPECT_EQ(j["admission_percent"]["reject"], 95.0);
  EXPECT_EQ(j["kv_scale_overhead"], "none");
  ASSERT_EQ(j["estimates"].size(), 10u);
  const nlohmann::json& full20k = j["estimates"][5];
  EXPECT_EQ(full20k["mode"], "full");
  EXPECT_EQ(full20k["context_tokens"], 20000);
  EXPECT_EQ(full20k["kv_bytes"], 2621440000ULL);
  EXPECT_EQ(full20k["sessions_unthrottled"], 16);
  EXPECT_EQ(full20k["sessions_before_single_beam"], 19);
  EXPECT_EQ(full20k["sessions_fit"], 22);
  for (const char* key :
       {"window_tokens", "prefix_tokens", "memory_kv_bytes", "session_bytes", "full_kv_bytes",
        "folds", "memory_expand_tokens_per_token", "exceeds_max_position"}) {
    EXPECT_TRUE(full20k.contains(key)) << key;
  }
}

TEST(RenderJsonTest, InvalidUtf8InANameDoesNotThrow) {
  ModelSpec model = *FindPreset("stories260K");
  model.name = "bad\xff name";
  Plan plan = *MakePlan(model, PlanOptions(), {10}, {KvMode::kFull});
  nlohmann::json j = nlohmann::json::parse(RenderJson(plan));
  EXPECT_EQ(j["model"]["name"], "bad\xEF\xBF\xBD name");  // U+FFFD
}

TEST(QuantizationNoteTest, StatesTheScaleScheme) {
  EXPECT_THAT(QuantizationNote(DType::kI8), HasSubstr("value scales per 32 channels"));
  EXPECT_THAT(QuantizationNote(DType::kF8), HasSubstr("per-tensor"));
  EXPECT_EQ(QuantizationNote(DType::kBF16), "none");
}

}  // namespace
}  // namespace kvfold::planner
