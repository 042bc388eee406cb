#include "inference_svc/memory/projector.h"

#include <cmath>
#include <filesystem>
#include <random>

#include <unistd.h>

#include "gtest/gtest.h"
#include "common/sha256.h"
#include "inference_svc/memory/random_projector.h"
#include "inference_svc/memory/safetensors_lite.h"

namespace kvfold::memory {
namespace {

std::string TempDir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("kvfold_projector_test_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove_all(dir);
  return dir.string();
}

// Every tensor filled from a seeded normal distribution (LayerNorm weights around 1).
Fp32TensorMap RandomTensors(const ProjectorConfig& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  Fp32TensorMap tensors;
  for (const auto& [name, shape] : ProjectorTensorShapes(c)) {
    Fp32Tensor t;
    t.shape = shape;
    size_t n = 1;
    for (int64_t s : shape) n *= s;
    t.data.resize(n);
    const bool ln_weight = name.rfind("ln_", 0) == 0 && name.find(".weight") != std::string::npos;
    for (float& x : t.data) x = (ln_weight ? 1.0f : 0.0f) + normal(rng);
    tensors[name] = std::move(t);
  }
  return tensors;
}

Fp32Tensor Vec(std::vector<float> v) { return {{static_cast<int64_t>(v.size())}, std::move(v)}; }
Fp32Tensor Mat(int64_t rows, int64_t cols, std::vector<float> v) { return {{rows, cols}, std::move(v)}; }

// d = 2, M = 1, one head, ffn_mult 1, ln_eps ~ 0: every LayerNorm maps [a, b] (a > b) to
// [1, -1] exactly, so the whole forward pass can be written down by hand.
TEST(ProjectorTest, HandComputedTinyProjector) {
  ProjectorConfig c;
  c.mem_slots = 1;
  c.hidden_size = 2;
  c.num_heads = 1;
  c.ffn_mult = 1;
  c.ln_eps = 0.0f;
  c.model_fingerprint = "m";
  const std::vector<float> eye = {1, 0, 0, 1};
  const std::vector<float> zero = {0, 0};
  Fp32TensorMap t;
  t["queries"] = Mat(1, 2, {1, -1});
  for (const char* ln : {"ln_q", "ln_x", "ln_self", "ln_ffn"}) {
    t[std::string(ln) + ".weight"] = Vec({1, 1});
    t[std::string(ln) + ".bias"] = Vec(zero);
  }
  t["ln_out.weight"] = Vec({2, 3});
  t["ln_out.bias"] = Vec({0.5f, 0});
  for (const char* p : {"cross.q", "cross.k", "cross.v", "cross.o", "self.q", "self.k", "self.o"}) {
    t[std::string(p) + ".weight"] = Mat(2, 2, eye);
    t[std::string(p) + ".bias"] = Vec(zero);
  }
  t["self.v.weight"] = Mat(2, 2, {0.5f, 0, 0, 0.5f});
  t["self.v.bias"] = Vec({-4.5f, 0});
  t["ffn.up.weight"] = Mat(2, 2, eye);
  t["ffn.up.bias"] = Vec(zero);
  t["ffn.down.weight"] = Mat(2, 2, {0, 0, 0, 1});
  t["ffn.down.bias"] = Vec({0, 0.5f});

  // X = [[2, 0], [0, 2]] (one memory row, one hidden row) -> LN_x rows [1,-1], [-1,1].
  // Cross: q = [1,-1], scores +-2/sqrt(2), attn = tanh(sqrt 2) [1,-1]:
  //   m = (1 + tanh(sqrt 2)) [1,-1]                     m0 - m1 = 3.7768
  // Self (one slot, so attn = v): v = 0.5 [1,-1] + [-4.5, 0]; m += v   m0 - m1 = 0.2768
  // FFN: LN -> [1,-1], GELU -> [0.8413, -0.1587], down keeps row 1, + [0, 0.5]:
  //   m += [0, 0.3413]                                   m0 - m1 = -0.0646 (flips)
  // out = LN_out(m) = [-1, 1] * [2, 3] + [0.5, 0] = [-1.5, 3].
  // A wrong attention scale (2 instead of 2/sqrt 2) or a missing residual would not flip.
  auto projector = Projector::FromTensors(c, t, "fp");
  ASSERT_TRUE(projector.ok()) << projector.status();
  const std::vector<float> mem = {2, 0};
  const std::vector<float> hidden = {0, 2};
  std::vector<float> out(2);
  ProjectorScratch scratch;
  ASSERT_TRUE((*projector)->Forward(mem, hidden, out, &scratch).ok());
  EXPECT_NEAR(out[0], -1.5f, 1e-5);
  EXPECT_NEAR(out[1], 3.0f, 1e-5);

  // Empty memory, X = [[0, 2]]: one key, so cross attn = v = LN_x = [-1, 1] and
  // m = [0, 0]; LN_self of a constant row is 0 (eps > 0 now), so m += v = [-4.5, 0];
  // FFN: LN -> [-1, 1], GELU -> [-0.1587, 0.8413], m += [0, 1.3413];
  // out = [-1, 1] * [2, 3] + [0.5, 0] = [-1.5, 3] again, through another path.
  c.ln_eps = 1e-5f;
  projector = Projector::FromTensors(c, t, "fp");
  ASSERT_TRUE(projector.ok());
  std::vector<float> out_h(2);
  ASSERT_TRUE((*projector)->Forward({}, hidden, out_h, &scratch).ok());
  EXPECT_NEAR(out_h[0], -1.5f, 1e-4);
  EXPECT_NEAR(out_h[1], 3.0f, 1e-4);
}

// An independent double-precision reference, written from the contract's formulas.
using Rows = std::vector<std::vector<double>>;

Rows RefLinear(const Rows& x, const Fp32Tensor& w, const Fp32Tensor& b) {
  const int64_t out = w.shape[0], in = w.shape[1];
  Rows y(x.size(), std::vector<double>(out));
  for (size_t r = 0; r < x.size(); ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = b.data[o];
      for (int64_t i = 0; i < in; ++i) acc += x[r][i] * w.data[o * in + i];
      y[r][o] = acc;
    }
  return y;
}

Rows RefLayerNorm(const Rows& x, const Fp32Tensor& w, const Fp32Tensor& b, double eps) {
  Rows y = x;
  for (auto& row : y) {
    double mean = 0, var = 0;
    for (double v : row) mean += v;
    mean /= row.size();
    for (double v : row) var += (v - mean) * (v - mean);
    var /= row.size();
    for (size_t i = 0; i < row.size(); ++i)
      row[i] = (row[i] - mean) / std::sqrt(var + eps) * w.data[i] + b.data[i];
  }
  return y;
}

Rows RefAttention(const Rows& q, const Rows& k, const Rows& v, int heads) {
  const int d = q[0].size(), hd = d / heads;
  Rows out(q.size(), std::vector<double>(d, 0.0));
  for (int h = 0; h < heads; ++h)
    for (size_t i = 0; i < q.size(); ++i) {
      std::vector<double> p(k.size());
      double mx = -1e300, sum = 0;
      for (size_t j = 0; j < k.size(); ++j) {
        double s = 0;
        for (int t = 0; t < hd; ++t) s += q[i][h * hd + t] * k[j][h * hd + t];
        p[j] = s / std::sqrt(static_cast<double>(hd));
        mx = std::max(mx, p[j]);
      }
      for (double& x : p) sum += (x = std::exp(x - mx));
      for (size_t j = 0; j < k.size(); ++j)
        for (int t = 0; t < hd; ++t) out[i][h * hd + t] += p[j] / sum * v[j][h * hd + t];
    }
  return out;
}

Rows Add(Rows a, const Rows& b) {
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < a[i].size(); ++j) a[i][j] += b[i][j];
  return a;
}

Rows ToRows(const std::vector<float>& flat, int width) {
  Rows r(flat.size() / width);
  for (size_t i = 0; i < r.size(); ++i) r[i].assign(flat.begin() + i * width, flat.begin() + (i + 1) * width);
  return r;
}

Rows RefProjector(const ProjectorConfig& c, const Fp32TensorMap& t, const std::vector<float>& mem,
                  const std::vector<float>& hidden) {
  const int d = c.hidden_size;
  Rows h = ToRows(hidden, c.input_width());
  if (c.input_layers == 3) h = RefLinear(h, t.at("in_proj.weight"), t.at("in_proj.bias"));
  Rows x = ToRows(mem, d);
  x.insert(x.end(), h.begin(), h.end());
  auto L = [&](const std::string& n) -> const Fp32Tensor& { return t.at(n); };
  const Rows queries = ToRows(L("queries").data, d);
  const Rows qn = RefLayerNorm(queries, L("ln_q.weight"), L("ln_q.bias"), c.ln_eps);
  const Rows xn = RefLayerNorm(x, L("ln_x.weight"), L("ln_x.bias"), c.ln_eps);
  Rows a = RefAttention(RefLinear(qn, L("cross.q.weight"), L("cross.q.bias")),
                        RefLinear(xn, L("cross.k.weight"), L("cross.k.bias")),
                        RefLinear(xn, L("cross.v.weight"), L("cross.v.bias")), c.num_heads);
  Rows m = Add(queries, RefLinear(a, L("cross.o.weight"), L("cross.o.bias")));
  const Rows sn = RefLayerNorm(m, L("ln_self.weight"), L("ln_self.bias"), c.ln_eps);
  a = RefAttention(RefLinear(sn, L("self.q.weight"), L("self.q.bias")),
                   RefLinear(sn, L("self.k.weight"), L("self.k.bias")),
                   RefLinear(sn, L("self.v.weight"), L("self.v.bias")), c.num_heads);
  m = Add(m, RefLinear(a, L("self.o.weight"), L("self.o.bias")));
  Rows u = RefLinear(RefLayerNorm(m, L("ln_ffn.weight"), L("ln_ffn.bias"), c.ln_eps),
                     L("ffn.up.weight"), L("ffn.up.bias"));
  for (auto& row : u)
    for (double& z : row) z = 0.5 * z * (1 + std::erf(z / std::sqrt(2.0)));
  m = Add(m, RefLinear(u, L("ffn.down.weight"), L("ffn.down.bias")));
  return RefLayerNorm(m, L("ln_out.weight"), L("ln_out.bias"), c.ln_eps);
}

class ProjectorReferenceTest : public ::testing::TestWithParam<int> {};

TEST_P(ProjectorReferenceTest, MatchesDoubleReferenceThroughFiles) {
  ProjectorConfig c;
  c.mem_slots = 5;
  c.hidden_size = 12;
  c.num_heads = 3;
  c.ffn_mult = 3;
  c.chunk_size = 7;
  c.input_layers = GetParam();
  c.model_fingerprint = "abc123";
  const Fp32TensorMap tensors = RandomTensors(c, 17 + GetParam());
  const std::string dir = TempDir("ref" + std::to_string(GetParam()));
  auto fingerprint = SaveProjector(dir, c, tensors);
  ASSERT_TRUE(fingerprint.ok()) << fingerprint.status();
  auto projector = Projector::Load(dir);
  ASSERT_TRUE(projector.ok()) << projector.status();
  EXPECT_EQ((*projector)->fingerprint(), *fingerprint);
  EXPECT_EQ((*projector)->config().input_layers, GetParam());

  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> mem(c.mem_slots * c.hidden_size), hidden(c.chunk_size * c.input_width());
  for (float& x : mem) x = normal(rng);
  for (float& x : hidden) x = normal(rng);
  for (int case_id : {0, 1, 2}) {
    // 0: first fold (no memory); 1: memory + chunk; 2: fewer rows than slots (2 < M = 5).
    const std::vector<float> m = case_id == 1 ? mem : std::vector<float>{};
    const std::vector<float> h = case_id == 2
        ? std::vector<float>(hidden.begin(), hidden.begin() + 2 * c.input_width()) : hidden;
    std::vector<float> out(c.mem_slots * c.hidden_size);
    ProjectorScratch scratch;  // fresh per case, so undersized buffers would show
    ASSERT_TRUE((*projector)->Forward(m, h, out, &scratch).ok());
    const Rows ref = RefProjector(c, tensors, m, h);
    for (int i = 0; i < c.mem_slots; ++i)
      for (int j = 0; j < c.hidden_size; ++j)
        EXPECT_NEAR(out[i * c.hidden_size + j], ref[i][j], 1e-4) << i << "," << j;
  }
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(InputLayers, ProjectorReferenceTest, ::testing::Values(1, 3));

TEST(ProjectorTest, FingerprintIsSha256OfJsonThenSafetensors) {
  ProjectorConfig c;
  c.hidden_size = 8;
  c.num_heads = 2;
  c.mem_slots = 3;
  c.model_fingerprint = "f";
  const std::string dir = TempDir("fp");
  ASSERT_TRUE(SaveProjector(dir, c, RandomTensors(c, 1)).ok());
  auto json = ReadFileBytes(dir + "/projector.json");
  auto st = ReadFileBytes(dir + "/projector.safetensors");
  ASSERT_TRUE(json.ok() && st.ok());
  auto projector = Projector::Load(dir);
  ASSERT_TRUE(projector.ok());
  EXPECT_EQ((*projector)->fingerprint(), Sha256Hex(*json + *st));
  std::filesystem::remove_all(dir);
}

TEST(ProjectorTest, ModelMismatchIsFailedPrecondition) {
  ProjectorConfig c;
  c.hidden_size = 8;
  c.num_heads = 2;
  c.mem_slots = 3;
  c.model_fingerprint = "aaaa";
  const std::string dir = TempDir("mismatch");
  ASSERT_TRUE(SaveProjector(dir, c, RandomTensors(c, 2)).ok());
  EXPECT_TRUE(Projector::LoadForModel(dir, "aaaa", 8).ok());
  EXPECT_EQ(Projector::LoadForModel(dir, "bbbb", 8).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Projector::LoadForModel(dir, "aaaa", 16).status().code(),
            absl::StatusCode::kFailedPrecondition);
  std::filesystem::remove_all(dir);
}

TEST(ProjectorTest, FileAndShapeErrors) {
  ProjectorConfig c;
  c.hidden_size = 8;
  c.num_heads = 2;
  c.mem_slots = 3;
  c.model_fingerprint = "f";
  const std::string dir = TempDir("errors");
  EXPECT_EQ(Projector::Load(dir).status().code(), absl::StatusCode::kNotFound);

  Fp32TensorMap tensors = RandomTensors(c, 3);
  ASSERT_TRUE(SaveProjector(dir, c, tensors).ok());
  const std::string st = *ReadFileBytes(dir + "/projector.safetensors");
  const std::string json = *ReadFileBytes(dir + "/projector.json");

  // Truncated safetensors.
  ASSERT_TRUE(WriteFileBytes(dir + "/projector.safetensors", st.substr(0, st.size() - 5)).ok());
  EXPECT_EQ(Projector::Load(dir).status().code(), absl::StatusCode::kInvalidArgument);
  // Header length pointing past the end.
  std::string bad = st;
  bad[7] = 0x7f;
  ASSERT_TRUE(WriteFileBytes(dir + "/projector.safetensors", bad).ok());
  EXPECT_EQ(Projector::Load(dir).status().code(), absl::StatusCode::kInvalidArgument);
  // Wrong shape, missing tensor, unexpected tensor (written via the lite writer directly).
  Fp32TensorMap wrong = tensors;
  wrong["cross.q.weight"] = Fp32Tensor{{8, 4}, std::vector<float>(32)};
  ASSERT_TRUE(WriteFileBytes(dir + "/projector.safetensors", SerializeSafetensorsF32(wrong)).ok());
  auto status = Projector::Load(dir).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("cross.q.weight"), std::string::npos) << status;
  wrong = tensors;
  wrong.erase("ln_out.bias");
  ASSERT_TRUE(WriteFileBytes(dir + "/projector.safetensors", SerializeSafetensorsF32(wrong)).ok());
  EXPECT_EQ(Projector::Load(dir).status().code(), absl::StatusCode::kInvalidArgument);
  wrong = tensors;
  wrong["in_proj.bias"] = Fp32Tensor{{8}, std::vector<float>(8)};
  ASSERT_TRUE(WriteFileBytes(dir + "/projector.safetensors", SerializeSafetensorsF32(wrong)).ok());
  EXPECT_EQ(Projector::Load(dir).status().code(), absl::StatusCode::kInvalidArgument);

  // Bad JSON and bad fields.
  ASSERT_TRUE(WriteFileBytes(dir + "/projector.safetensors", st).ok());
  ASSERT_TRUE(Projector::Load(dir).ok());
  for (const std::string& text :
       {std::string("{not json"), std::string("[]"), std::string("{\"format\": \"x\"}")}) {
    ASSERT_TRUE(WriteFileBytes(dir + "/projector.json", text).ok());
    EXPECT_EQ(Projector::Load(dir).status().code(), absl::StatusCode::kInvalidArgument) << text;
  }
  c.num_heads = 3;  // does not divide 8
  ASSERT_TRUE(WriteFileBytes(dir + "/projector.json", ProjectorConfigJson(c)).ok());
  EXPECT_EQ(Projector::Load(dir).status().code(), absl::StatusCode::kInvalidArgument);
  c.num_heads = 2;
  c.input_layers = 2;
  ASSERT_TRUE(WriteFileBytes(dir + "/projector.json", ProjectorConfigJson(c)).ok());
  EXPECT_EQ(Projector::Load(dir).status().code(), absl::StatusCode::kInvalidArgument);

  // sink_tokens: optional, written only when > 0, round-trips, counts in the budget, and a
  // negative count is refused.
  c.input_layers = 1;
  EXPECT_EQ(ProjectorConfigJson(c).find("sink_tokens"), std::string::npos);
  c.sink_tokens = 3;
  auto parsed = ParseProjectorConfig(ProjectorConfigJson(c));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->sink_tokens, 3);
  EXPECT_EQ(parsed->kv_budget(), c.kv_budget());
  EXPECT_EQ(c.kv_budget(), 3 + c.mem_slots + c.window_size + c.chunk_size);
  std::string negative = ProjectorConfigJson(c);
  const std::string field = "\"sink_tokens\": 3";
  negative.replace(negative.find(field), field.size(), "\"sink_tokens\": -1");
  EXPECT_EQ(ParseProjectorConfig(negative).status().code(), absl::StatusCode::kInvalidArgument);
  c.sink_tokens = 0;

  // Per-layer memory K/V: the three fields round-trip, their tensors are required, and a
  // file that names only some of them is refused.
  c.memory_kv_layers = 2;
  c.memory_kv_dim = 4;
  c.memory_kv_hidden = 6;
  auto with_kv = ParseProjectorConfig(ProjectorConfigJson(c));
  ASSERT_TRUE(with_kv.ok()) << with_kv.status();
  EXPECT_EQ(with_kv->memory_kv_layers, 2);
  EXPECT_EQ(with_kv->memory_kv_dim, 4);
  EXPECT_EQ(with_kv->memory_kv_hidden, 6);
  EXPECT_EQ(Projector::FromTensors(c, tensors, "").status().code(),
            absl::StatusCode::kInvalidArgument);  // no mem_kv.* tensors
  auto kv_projector = Projector::FromTensors(c, RandomTensors(c, 4), "");
  ASSERT_TRUE(kv_projector.ok()) << kv_projector.status();
  std::vector<float> kv_out(2 * 2 * 3 * 4), kv_mem(3 * 8, 0.5f);
  ProjectorScratch kv_scratch;
  EXPECT_TRUE((*kv_projector)->MemoryKv(kv_mem, kv_out, &kv_scratch).ok());
  EXPECT_EQ((*kv_projector)->MemoryKv(kv_mem, std::span<float>(kv_out).first(5), &kv_scratch).code(),
            absl::StatusCode::kInvalidArgument);
  std::string partial = ProjectorConfigJson(c);
  const std::string dim_field = "\"memory_kv_dim\": 4,";
  partial.erase(partial.find(dim_field), dim_field.size());
  auto partial_status = ParseProjectorConfig(partial).status();
  EXPECT_EQ(partial_status.code(), absl::StatusCode::kInvalidArgument) << partial_status;
  EXPECT_NE(partial_status.message().find("memory_kv_dim"), std::string::npos) << partial_status;
  c.memory_kv_layers = c.memory_kv_dim = c.memory_kv_hidden = 0;
  EXPECT_EQ(ProjectorConfigJson(c).find("memory_kv"), std::string::npos);

  // Forward with the wrong sizes.
  auto projector = Projector::FromTensors(c, tensors, "");
  ASSERT_TRUE(projector.ok());
  ProjectorScratch scratch;
  std::vector<float> out(3 * 8), hidden(5 * 8), mem(7);
  EXPECT_EQ((*projector)->Forward(mem, hidden, out, &scratch).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*projector)->Forward({}, {}, out, &scratch).code(), absl::StatusCode::kInvalidArgument);
  std::filesystem::remove_all(dir);
}

TEST(SafetensorsLiteTest, F16AndBf16AreConvertedOnLoad) {
  // Hand-built file: "a" F16 [2] = {1.0, -2.0}, "b" BF16 [1] = {0.5}.
  std::string header = R"({"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},)"
                       R"("b":{"dtype":"BF16","shape":[1],"data_offsets":[4,6]}})";
  std::string file(8, '\0');
  file[0] = static_cast<char>(header.size());
  file += header;
  file += std::string("\x00\x3c\x00\xc0\x00\x3f", 6);
  auto tensors = ParseSafetensors(file);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  EXPECT_EQ(tensors->at("a").data, (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(tensors->at("b").data, (std::vector<float>{0.5f}));
  file[8 + header.find("F16")] = 'I';  // "I16": unsupported dtype
  EXPECT_EQ(ParseSafetensors(file).status().code(), absl::StatusCode::kInvalidArgument);
}


TEST(RandomProjectorTest, DeterministicBySeedAndScaledToEmbeddingRms) {
  ProjectorConfig c;
  c.hidden_size = 12;
  c.num_heads = 4;
  c.mem_slots = 5;
  c.input_layers = 3;
  c.model_fingerprint = "f";
  const float rms = RootMeanSquare(std::vector<float>{3.0f, -4.0f});  // sqrt(12.5)
  EXPECT_NEAR(rms, 3.5355339f, 1e-6);
  const Fp32TensorMap a = RandomProjectorTensors(c, rms, 7);
  const Fp32TensorMap b = RandomProjectorTensors(c, rms, 7);
  const Fp32TensorMap other = RandomProjectorTensors(c, rms, 8);
  ASSERT_EQ(a.size(), ProjectorTensorShapes(c).size());
  for (const auto& [name, t] : a) EXPECT_EQ(t.data, b.at(name).data) << name;
  EXPECT_NE(a.at("queries").data, other.at("queries").data);
  for (float w : a.at("ln_out.weight").data) EXPECT_EQ(w, rms);
  for (float w : a.at("ln_q.weight").data) EXPECT_EQ(w, 1.0f);
  for (float w : a.at("cross.q.bias").data) EXPECT_EQ(w, 0.0f);
  // Linear weights ~ N(0, 1/in): the in_proj [12, 36] sample has variance near 1/36.
  EXPECT_NEAR(RootMeanSquare(a.at("in_proj.weight").data), 1.0 / 6.0, 0.03);
  EXPECT_NEAR(RootMeanSquare(a.at("queries").data), rms, 0.5);
  auto projector = Projector::FromTensors(c, a, "");
  ASSERT_TRUE(projector.ok()) << projector.status();
  // The output rows are LayerNorm'ed with weight rms: their RMS is rms (bias 0).
  std::vector<float> hidden(9 * 36, 0.5f), out(5 * 12);
  for (size_t i = 0; i < hidden.size(); ++i) hidden[i] = std::sin(0.37f * i);
  ProjectorScratch scratch;
  ASSERT_TRUE((*projector)->Forward({}, hidden, out, &scratch).ok());
  EXPECT_NEAR(RootMeanSquare(out), rms, 1e-3);
}

}  // namespace
}  // namespace kvfold::memory
