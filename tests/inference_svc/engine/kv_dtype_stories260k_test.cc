// The F16 and INT8 KV caches on the real stories260K model (skipped without ../shared):
// mean next-token NLL over a few TinyStories (the `kvfold eval` scoring, prefill of each
// story with all-row logits, which equals token-by-token decode bit for bit) with each
// cache vs the F32 cache, in full and sliding mode: within 0.01 % (f16) or 1 % (int8), and
// not identical (the cache type is really on).
#include <cmath>

#include "gtest/gtest.h"
#include "inference_svc/engine/engine.h"
#include "inference_svc/model/model_file.h"
#include "inference_svc/tokenizer/tokenizer.h"
#include "tests/inference_svc/tokenizer/test_util.h"
#include "tests/testing/shared_dir.h"

namespace kvfold::engine {
namespace {

// Mean NLL (nats/token) of the first `num_stories` stories under `policy`.
double MeanNll(Engine& engine, const Tokenizer& tokenizer, const std::string& text,
               const KvPolicy& policy, int num_stories, int64_t* count) {
  double total = 0;
  *count = 0;
  ForwardResult r;
  const int vocab = engine.config().vocab_size;
  for (const std::string& s : testing::FirstStories(text, num_stories)) {
    auto ids = tokenizer.Encode(s, /*add_bos=*/true);
    EXPECT_TRUE(ids.ok());
    if (ids->size() > 512) ids->resize(512);
    auto cache = engine.NewCache(policy);
    SequenceInput in;
    in.cache = cache.get();
    in.token_ids = *ids;
    in.logits = RowSelect::kAll;
    EXPECT_TRUE(engine.Forward(std::span<const SequenceInput>(&in, 1), &r).ok());
    for (size_t t = 0; t + 1 < ids->size(); ++t) {
      const float* l = r.outputs[0].logits.data() + t * vocab;
      double mx = l[0], sum = 0;
      for (int v = 0; v < vocab; ++v) mx = std::max<double>(mx, l[v]);
      for (int v = 0; v < vocab; ++v) sum += std::exp(l[v] - mx);
      total += -(l[(*ids)[t + 1]] - mx - std::log(sum));
      ++*count;
    }
  }
  return total / *count;
}

struct DTypeCase {
  core::DType dtype;
  double max_relative_change;
};

class KvDTypeStories260KTest : public ::testing::TestWithParam<DTypeCase> {};

TEST_P(KvDTypeStories260KTest, NllCloseToF32) {
  if (!testing::HaveStories260K()) {
    GTEST_SKIP() << "stories260K not found under " << testing::Stories260K()
                 << " (set KVFOLD_SHARED_DIR)";
  }
  const std::string text = testing::ReadAll(testing::SharedDir() + "/text/tinystories_train_sample.txt");
  if (text.empty()) GTEST_SKIP() << "tinystories_train_sample.txt not found";
  auto m = model::LoadModel(testing::Stories260K() + "/stories260K.bin");
  ASSERT_TRUE(m.ok()) << m.status();
  auto tokenizer = Tokenizer::Load(testing::Stories260K() + "/tok512.bin");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto backend = kernels::CreateCpuBackend({.num_threads = 2});
  EngineOptions options;
  options.kv_pool_bytes = 16 << 20;
  options.max_batch_tokens = 512;
  auto f32 = Engine::Create(*m, backend.get(), options);
  options.kv_dtype = GetParam().dtype;
  auto other = Engine::Create(*m, backend.get(), options);
  ASSERT_TRUE(f32.ok() && other.ok());
  const char* name = core::DTypeName(GetParam().dtype);
  for (const KvPolicy& policy : {KvPolicy::Full(), KvPolicy::Sliding(112)}) {
    int64_t n_f32 = 0, n_other = 0;
    const double nll_f32 = MeanNll(**f32, **tokenizer, text, policy, 20, &n_f32);
    const double nll = MeanNll(**other, **tokenizer, text, policy, 20, &n_other);
    EXPECT_EQ(n_f32, n_other);
    EXPECT_NE(nll_f32, nll);
    EXPECT_LT(std::fabs(nll - nll_f32) / nll_f32, GetParam().max_relative_change);
    std::printf("window %d: f32 %.5f %s %.5f (%+.4f%%) over %lld tokens\n", policy.window, nll_f32,
                name, nll, 100.0 * (nll - nll_f32) / nll_f32, static_cast<long long>(n_f32));
  }
}

INSTANTIATE_TEST_SUITE_P(KvDTypes, KvDTypeStories260KTest,
                         ::testing::Values(DTypeCase{core::DType::kF16, 0.0001},
                                           DTypeCase{core::DType::kI8, 0.01}),
                         [](const auto& info) {
                           return std::string(core::DTypeName(info.param.dtype));
                         });

}  // namespace
}  // namespace kvfold::engine
