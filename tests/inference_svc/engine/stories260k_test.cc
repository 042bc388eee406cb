// The real stories260K model: greedy text from BOS, mean NLL on TinyStories (protocol in
// ../shared/models/README.md), and the llama2.c -> HF conversion round trip.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "inference_svc/engine/engine.h"
#include "inference_svc/engine/sampler.h"
#include "inference_svc/engine/session.h"
#include "inference_svc/model/model_file.h"
#include "inference_svc/tokenizer/tokenizer.h"
#include "tests/testing/shared_dir.h"

namespace kvfold::engine {
namespace {

class Stories260KTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (!testing::HaveStories260K()) {
      GTEST_SKIP() << "stories260K not found under " << testing::Stories260K()
                   << " (set KVFOLD_SHARED_DIR)";
    }
    auto m = model::LoadModel(testing::Stories260K() + "/stories260K.bin");
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
    kernels::CpuBackendOptions bo;
    bo.reference = GetParam();
    bo.num_threads = 2;
    backend_ = kernels::CreateCpuBackend(bo);
    EngineOptions options;
    options.kv_pool_bytes = 32 << 20;
    options.max_batch_tokens = 512;
    auto e = Engine::Create(model_, backend_.get(), options);
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = std::move(*e);
    auto tok = Tokenizer::Load(testing::Stories260K() + "/tok512.bin");
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = std::move(*tok);
  }

  model::ModelFile model_;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST_P(Stories260KTest, GreedyFromBosReproducesReferenceText) {
  auto session = CreatePlainSession(engine_.get(), SessionOptions());
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE((*session)->Prefill(std::vector<int32_t>{1}).ok());
  std::vector<int32_t> out;
  for (int i = 0; i < 200; ++i) {
    const int32_t id = Argmax((*session)->Logits());
    out.push_back(id);
    ASSERT_TRUE((*session)->Append(id).ok());
  }
  std::string expected = ReadAll(testing::Stories260K() + "/greedy_from_bos_200.txt");
  while (!expected.empty() && expected.back() == '\n') expected.pop_back();
  EXPECT_EQ(tokenizer_->Decode(out), expected);
}

// Mean NLL (nats/token) of the first 100 stories (each cut at 512 tokens), by prefill;
// *count gets the number of predicted tokens.
double MeanNll(Engine& engine, const Tokenizer& tokenizer, const std::string& text, int64_t* count) {
  double total_nll = 0;
  *count = 0;
  size_t pos = 0;
  ForwardResult r;
  for (int story = 0; story < 100; ++story) {
    size_t end = text.find("<|endoftext|>", pos);
    if (end == std::string::npos) end = text.size();
    std::string s = text.substr(pos, end - pos);
    pos = end + 13;
    const size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
    s = b == std::string::npos ? "" : s.substr(b, e - b + 1);
    auto ids = tokenizer.Encode(s, /*add_bos=*/true);
    EXPECT_TRUE(ids.ok());
    if (!ids.ok()) return 0;
    if (ids->size() > 512) ids->resize(512);
    auto cache = engine.NewCache(KvPolicy::Full());
    SequenceInput in;
    in.cache = cache.get();
    in.token_ids = *ids;
    in.logits = RowSelect::kAll;
    const absl::Status st = engine.Forward(std::span<const SequenceInput>(&in, 1), &r);
    EXPECT_TRUE(st.ok()) << st;
    if (!st.ok()) return 0;
    const int vocab = engine.config().vocab_size;
    for (size_t t = 0; t + 1 < ids->size(); ++t) {
      const float* l = r.outputs[0].logits.data() + t * vocab;
      double mx = l[0], sum = 0;
      for (int v = 0; v < vocab; ++v) mx = std::max<double>(mx, l[v]);
      for (int v = 0; v < vocab; ++v) sum += std::exp(l[v] - mx);
      total_nll += -(l[(*ids)[t + 1]] - mx - std::log(sum));
      ++*count;
    }
  }
  return total_nll / std::max<int64_t>(1, *count);
}

// 1.408 +- 0.002 nats/token over 37,072 predicted tokens.
TEST_P(Stories260KTest, MeanNllOnTinyStories) {
  // The reference backend gives the same logits up to rounding (BitwiseTest covers its
  // paths); one full NLL pass keeps CI time down.
  if (GetParam()) GTEST_SKIP() << "NLL runs on the optimised backend only";
  const std::string text = ReadAll(testing::SharedDir() + "/text/tinystories_train_sample.txt");
  if (text.empty()) GTEST_SKIP() << "tinystories_train_sample.txt not found";
  int64_t count = 0;
  const double nll = MeanNll(*engine_, *tokenizer_, text, &count);
  EXPECT_EQ(count, 37072);
  EXPECT_NEAR(nll, 1.408, 0.002);
  std::printf("mean NLL %.5f over %lld tokens\n", nll, static_cast<long long>(count));
}

// Q8 weights (every weight matrix quantized, as `kvfold convert --dtype q8`): mean NLL
// within 0.5 % of the F32 model's on the same tokens.
TEST_P(Stories260KTest, Q8WeightsKeepNllWithinHalfAPercent) {
  if (GetParam()) GTEST_SKIP() << "NLL runs on the optimised backend only";
  const std::string text = ReadAll(testing::SharedDir() + "/text/tinystories_train_sample.txt");
  if (text.empty()) GTEST_SKIP() << "tinystories_train_sample.txt not found";
  model::ModelFile q8 = model_;
  for (auto& [name, t] : q8.tensors) {
    if (t.shape.size() != 2) continue;
    auto q = model::ConvertHostTensor(t, core::DType::kQ8);
    ASSERT_TRUE(q.ok()) << name << ": " << q.status();
    t = *std::move(q);
  }
  EngineOptions options;
  options.kv_pool_bytes = 32 << 20;
  options.max_batch_tokens = 512;
  auto e = Engine::Create(q8, backend_.get(), options);
  ASSERT_TRUE(e.ok()) << e.status();
  int64_t n32 = 0, n8 = 0;
  const double f32 = MeanNll(*engine_, *tokenizer_, text, &n32);
  const double q = MeanNll(**e, *tokenizer_, text, &n8);
  EXPECT_EQ(n32, n8);
  EXPECT_LT(std::abs(q - f32) / f32, 0.005) << "f32 " << f32 << " q8 " << q;
  EXPECT_NE(q, f32);  // the weights did change
  std::printf("mean NLL f32 %.5f q8 %.5f (%+.3f %%)\n", f32, q, (q - f32) / f32 * 100);
}

TEST_P(Stories260KTest, ConvertRoundTripKeepsFingerprintAndLogits) {
  const std::string dir = ::testing::TempDir() + "/stories260k_hf_" + (GetParam() ? "ref" : "opt");
  ASSERT_TRUE(model::WriteHfDirectory(model_, dir, core::DType::kF32).ok());
  auto hf = model::LoadModel(dir);
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(model::Fingerprint(*hf), engine_->fingerprint());
  auto e2 = Engine::Create(*hf, backend_.get());
  ASSERT_TRUE(e2.ok());
  EXPECT_EQ((*e2)->fingerprint(), engine_->fingerprint());
  const std::vector<int32_t> ids = {1, 403, 407, 261, 378, 275, 395, 301};
  auto run = [&](Engine& e) {
    auto cache = e.NewCache(KvPolicy::Full());
    SequenceInput in;
    in.cache = cache.get();
    in.token_ids = ids;
    in.logits = RowSelect::kAll;
    ForwardResult r;
    EXPECT_TRUE(e.Forward(std::span<const SequenceInput>(&in, 1), &r).ok());
    return std::vector<float>(r.outputs[0].logits.begin(), r.outputs[0].logits.end());
  };
  EXPECT_EQ(run(*engine_), run(**e2));
  // A bf16 conversion changes the bytes, hence the fingerprint.
  const std::string dir16 = dir + "_bf16";
  ASSERT_TRUE(model::WriteHfDirectory(model_, dir16, core::DType::kBF16).ok());
  auto hf16 = model::LoadModel(dir16);
  ASSERT_TRUE(hf16.ok());
  EXPECT_NE(model::Fingerprint(*hf16), engine_->fingerprint());
}

INSTANTIATE_TEST_SUITE_P(Backends, Stories260KTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "reference" : "optimized"; });

}  // namespace
}  // namespace kvfold::engine
