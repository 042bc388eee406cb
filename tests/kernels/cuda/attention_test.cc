// Paged GQA attention vs a plain double-precision CPU reference that follows the row-field
// contract of kernels/cuda/attention.cuh (== kernels::AttnRow) independently: decode with
// full / memory / sink-window rows in one batch (5125 keys, window 1000), causal prefill,
// memory expansion (bidirectional prefix only), F32 / BF16 / F16 / INT8 caches.
#include "kernels/cuda/attention.cuh"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "common/fp16.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/quant/kv_quant.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace kvfold::kernels::cuda {
namespace {

using testing::DeviceArray;
using testing::ExpectClose;
using testing::ExpectOk;
using testing::RandomFloats;

constexpr int kBlockSize = 16;
constexpr int kVGroup = 32;

struct Row {
  int seq;
  int prefix_visible, prefix_base, prefix_stride;
  int main_front, main_lo, main_hi, main_pos_lo;
};

struct Seq {
  int prefix_len;
  int main_phys_len;  // physical main slots in use (main_front + logical length)
};

// A pool with the sequences' blocks scattered at random, its block tables, and the
// (possibly quantized) cache contents plus their dequantized values for the reference.
struct Pool {
  int num_kv_heads, head_dim, num_blocks;
  core::DType type;
  std::vector<int32_t> tables;
  std::vector<int> prefix_table, main_table;  // per sequence offsets into `tables`
  std::vector<float> k, v;                    // dequantized [num_blocks * bs, kv_dim]
  std::vector<uint8_t> k_raw, v_raw;          // device bytes
  std::vector<float> k_scale, v_scale;        // int8 only

  int kv_dim() const { return num_kv_heads * head_dim; }
};

Pool MakePool(const std::vector<Seq>& seqs, int num_kv_heads, int head_dim, core::DType type,
              uint32_t seed) {
  Pool p{num_kv_heads, head_dim, 0, type, {}, {}, {}, {}, {}, {}, {}, {}, {}};
  int blocks = 0;
  for (const Seq& s : seqs) {
    blocks += (s.prefix_len + kBlockSize - 1) / kBlockSize;
    blocks += (s.main_phys_len + kBlockSize - 1) / kBlockSize;
  }
  p.num_blocks = blocks + 3;  // a few unused blocks
  std::vector<int32_t> ids(p.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937 rng(seed);
  std::shuffle(ids.begin(), ids.end(), rng);
  int next = 0;
  for (const Seq& s : seqs) {
    p.prefix_table.push_back(static_cast<int>(p.tables.size()));
    for (int b = 0; b < (s.prefix_len + kBlockSize - 1) / kBlockSize; ++b) p.tables.push_back(ids[next++]);
    p.main_table.push_back(static_cast<int>(p.tables.size()));
    for (int b = 0; b < (s.main_phys_len + kBlockSize - 1) / kBlockSize; ++b) p.tables.push_back(ids[next++]);
  }
  p.tables.push_back(0);  // never empty
  const int64_t slots = static_cast<int64_t>(p.num_blocks) * kBlockSize;
  const int kv_dim = p.kv_dim();
  p.k = RandomFloats(slots * kv_dim, seed + 1, -2, 2);
  p.v = RandomFloats(slots * kv_dim, seed + 2, -2, 2);
  for (int64_t i = 0; i < slots; ++i) p.k[i * kv_dim + 5 % kv_dim] *= 8;  // an outlier channel
  const size_t es = core::DTypeSize(type);
  p.k_raw.resize(slots * kv_dim * es);
  p.v_raw.resize(slots * kv_dim * es);
  if (type == core::DType::kI8) {
    const int64_t groups = quant::NumValueGroups(kv_dim, kVGroup);
    p.k_scale.resize(static_cast<size_t>(p.num_blocks) * kv_dim);
    p.v_scale.resize(slots * groups);
    for (int b = 0; b < p.num_blocks; ++b) {
      const int64_t off = static_cast<int64_t>(b) * kBlockSize * kv_dim;
      EXPECT_TRUE(quant::QuantizeKeys(&p.k[off], kBlockSize, kv_dim, {.group_size = kBlockSize},
                                      reinterpret_cast<int8_t*>(&p.k_raw[off]),
                                      &p.k_scale[static_cast<size_t>(b) * kv_dim]).ok());
    }
    EXPECT_TRUE(quant::QuantizeValues(p.v.data(), slots, kv_dim, {.group_size = kVGroup},
                                      reinterpret_cast<int8_t*>(p.v_raw.data()),
                                      p.v_scale.data()).ok());
    std::vector<float> back(p.k.size());
    for (int b = 0; b < p.num_blocks; ++b) {
      const int64_t off = static_cast<int64_t>(b) * kBlockSize * kv_dim;
      EXPECT_TRUE(quant::DequantizeKeys(reinterpret_cast<int8_t*>(&p.k_raw[off]),
                                        &p.k_scale[static_cast<size_t>(b) * kv_dim], kBlockSize,
                                        kv_dim, kBlockSize, &back[off]).ok());
    }
    p.k = back;
    EXPECT_TRUE(quant::DequantizeValues(reinterpret_cast<int8_t*>(p.v_raw.data()),
                                        p.v_scale.data(), slots, kv_dim, kVGroup,
                                        back.data()).ok());
    p.v = back;
    return p;
  }
  // p.k, p.v stay [slots, kv_dim] for the reference; the float caches the kernel reads are
  // head-major within a block (kernels::FloatKvIndex).
  for (size_t i = 0; i < p.k.size(); ++i) {
    const int64_t slot = static_cast<int64_t>(i) / kv_dim, c = static_cast<int64_t>(i) % kv_dim;
    const int64_t at = kernels::FloatKvIndex(slot, c / p.head_dim, c % p.head_dim, p.num_kv_heads,
                                             kBlockSize, p.head_dim);
    for (auto [src, raw] : {std::pair{&p.k, &p.k_raw}, std::pair{&p.v, &p.v_raw}}) {
      float& x = (*src)[i];
      if (type == core::DType::kF32) {
        std::memcpy(&(*raw)[at * 4], &x, 4);
      } else {
        const uint16_t h = type == core::DType::kBF16 ? Fp32ToBf16(x) : Fp32ToFp16(x);
        x = type == core::DType::kBF16 ? Bf16ToFp32(h) : Fp16ToFp32(h);
        std::memcpy(&(*raw)[at * 2], &h, 2);
      }
    }
  }
  return p;
}

// The reference: straight from the contract, in double.
std::vector<double> Reference(const Pool& p, const std::vector<Row>& rows,
                              const std::vector<float>& q, const std::vector<float>& rope,
                              int rope_rows, int num_heads, float scale) {
  const int hd = p.head_dim, half = hd / 2, kv_dim = p.kv_dim();
  const int group = num_heads / p.num_kv_heads;
  std::vector<double> out(rows.size() * num_heads * hd, 0.0);
  for (size_t r = 0; r < rows.size(); ++r) {
    const Row& row = rows[r];
    // (slot, position) of every visible key, prefix first.
    std::vector<std::pair<int64_t, int>> keys;
    for (int j = 0; j < row.prefix_visible; ++j) {
      const int b = p.tables[p.prefix_table[row.seq] + j / kBlockSize];
      keys.push_back({int64_t{b} * kBlockSize + j % kBlockSize,
                      row.prefix_base + j * row.prefix_stride});
    }
    for (int j = row.main_lo; j < row.main_hi; ++j) {
      const int s = row.main_front + j;
      const int b = p.tables[p.main_table[row.seq] + s / kBlockSize];
      keys.push_back({int64_t{b} * kBlockSize + s % kBlockSize, row.main_pos_lo + (j - row.main_lo)});
    }
    if (keys.empty()) continue;
    for (int h = 0; h < num_heads; ++h) {
      const int kvh = h / group;
      const float* qh = &q[(r * num_heads + h) * hd];
      std::vector<double> scores(keys.size());
      for (size_t j = 0; j < keys.size(); ++j) {
        const float* k = &p.k[keys[j].first * kv_dim + kvh * hd];
        const float* cs = &rope[static_cast<size_t>(std::min(keys[j].second, rope_rows - 1)) * hd];
        double dot = 0;
        for (int i = 0; i < half; ++i) {
          const double r0 = double{k[i]} * cs[i] - double{k[i + half]} * cs[half + i];
          const double r1 = double{k[i + half]} * cs[i] + double{k[i]} * cs[half + i];
          dot += qh[i] * r0 + qh[i + half] * r1;
        }
        scores[j] = dot * scale;
      }
      const double mx = *std::max_element(scores.begin(), scores.end());
      double total = 0;
      for (double& s : scores) total += (s = std::exp(s - mx));
      double* o = &out[(r * num_heads + h) * hd];
      for (size_t j = 0; j < keys.size(); ++j) {
        const float* v = &p.v[keys[j].first * kv_dim + kvh * hd];
        for (int d = 0; d < hd; ++d) o[d] += scores[j] / total * v[d];
      }
    }
  }
  return out;
}

void RunCase(const std::vector<Seq>& seqs, const std::vector<Row>& rows, int num_heads,
             int num_kv_heads, int head_dim, core::DType type, double tol, double eps,
             const std::string& what) {
  const Pool pool = MakePool(seqs, num_kv_heads, head_dim, type, 77);
  const int rope_rows = 6000;
  const auto rope = testing::RopeTable(rope_rows, head_dim);
  const auto q = RandomFloats(rows.size() * num_heads * head_dim, 78, -1, 1);
  std::vector<kernels::AttnRow> fields(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    const Row& w = rows[r];
    kernels::AttnRow& f = fields[r];
    f.prefix_table = pool.prefix_table[w.seq];
    f.prefix_visible = w.prefix_visible;
    f.prefix_pos_base = w.prefix_base;
    f.prefix_pos_stride = w.prefix_stride;
    f.main_table = pool.main_table[w.seq];
    f.main_front = w.main_front;
    f.main_lo = w.main_lo;
    f.main_hi = w.main_hi;
    f.main_pos_lo = w.main_pos_lo;
  }
  DeviceArray<float> d_q(q), d_out(q.size()), d_rope(rope), d_ks(pool.k_scale),
      d_vs(pool.v_scale);
  DeviceArray<kernels::AttnRow> d_rows(fields);
  DeviceArray<int32_t> d_tables(pool.tables);
  DeviceArray<uint8_t> d_k(pool.k_raw), d_v(pool.v_raw);
  DeviceArray<uint8_t> ws(AttentionWorkspaceBytes(num_heads, num_kv_heads, head_dim));
  AttentionParams p;
  p.q = d_q.get();
  p.out = d_out.get();
  p.rows = d_rows.get();
  p.block_tables = d_tables.get();
  p.k_cache = d_k.get();
  p.v_cache = d_v.get();
  p.cache_type = type;
  p.k_scale = d_ks.get();
  p.v_scale = d_vs.get();
  p.v_group_size = kVGroup;
  p.rope_table = d_rope.get();
  p.rope_rows = rope_rows;
  p.num_rows = static_cast<int32_t>(rows.size());
  p.num_heads = num_heads;
  p.num_kv_heads = num_kv_heads;
  p.head_dim = head_dim;
  p.block_size = kBlockSize;
  p.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  ExpectOk(Attention(p, ws.get(), ws.size(), nullptr));
  const auto got = d_out.ToHost();
  const auto ref = Reference(pool, rows, q, rope, rope_rows, num_heads, p.scale);
  ExpectClose(got, ref, tol, eps,
              what + " (" + core::DTypeName(type) + ", splits " +
                  std::to_string(AttentionNumSplits(p.num_rows, num_kv_heads)) + ")");
}

// Three sessions decoding together: full (5125 keys), memory mode (16 memory slots at
// position 0, 1000 main entries from position 1, 5 dropped front slots), sink + window
// (4 sink tokens, window 1000 after 37 dropped entries), and an empty row.
std::vector<Seq> DecodeSeqs() { return {{0, 5125}, {16, 1005}, {4, 3 + 1037}, {0, 0}}; }
std::vector<Row> DecodeRows() {
  return {{0, 0, 0, 1, 0, 0, 5125, 0},
          {1, 16, 0, 0, 5, 0, 1000, 1},
          {2, 4, 0, 1, 3, 37, 1037, 4},
          {3, 0, 0, 1, 0, 0, 0, 0}};
}

TEST(CudaAttention, DecodeMixedModesF32) {
  KVFOLD_SKIP_WITHOUT_GPU();
  RunCase(DecodeSeqs(), DecodeRows(), 8, 2, 64, core::DType::kF32, 2e-5, 1e-4, "decode");
  RunCase(DecodeSeqs(), DecodeRows(), 32, 8, 128, core::DType::kF32, 2e-5, 1e-4, "decode 8B heads");
  RunCase(DecodeSeqs(), DecodeRows(), 14, 2, 62, core::DType::kF32, 2e-5, 1e-4, "decode group 7");
  RunCase(DecodeSeqs(), DecodeRows(), 16, 1, 32, core::DType::kF32, 2e-5, 1e-4, "decode group 16");
}

TEST(CudaAttention, DecodeHalfAndInt8Caches) {
  KVFOLD_SKIP_WITHOUT_GPU();
  // The reference reads the same rounded / dequantized cache, so the tolerance is the
  // fp32-vs-double one.
  for (core::DType t : {core::DType::kBF16, core::DType::kF16, core::DType::kI8}) {
    RunCase(DecodeSeqs(), DecodeRows(), 8, 2, 64, t, 2e-5, 1e-4, "decode");
  }
}

TEST(CudaAttention, CausalPrefillOverMemory) {
  KVFOLD_SKIP_WITHOUT_GPU();
  // 1000 new rows after 16 memory slots: row i sees the memory and main [0, i].
  for (int heads_kv : {3, 2}) {  // 3 kv heads: 3000 blocks, 1 split; the other 2 splits
    std::vector<Row> rows;
    const int n = heads_kv == 3 ? 1000 : 300;
    for (int i = 0; i < n; ++i) rows.push_back({0, 16, 0, 0, 0, 0, i + 1, 1});
    RunCase({{16, n}}, rows, 6, heads_kv, 96, core::DType::kF32, 2e-5, 1e-4, "prefill");
  }
}

TEST(CudaAttention, MemoryExpansionIsBidirectionalOverThePrefixOnly) {
  KVFOLD_SKIP_WITHOUT_GPU();
  // 16 memory rows see all 16 prefix entries (also later ones) and none of the 200 main.
  std::vector<Row> rows;
  for (int i = 0; i < 16; ++i) rows.push_back({0, 16, 0, 0, 0, 0, 0, 1});
  RunCase({{16, 200}}, rows, 4, 4, 32, core::DType::kF32, 2e-5, 1e-4, "memory expansion");
}

TEST(CudaAttention, RejectsBadShapes) {
  AttentionParams p;
  p.num_rows = 1;
  p.num_heads = 6;
  p.num_kv_heads = 4;
  p.head_dim = 64;
  EXPECT_EQ(Attention(p, nullptr, 0, nullptr).code(), absl::StatusCode::kInvalidArgument);
  p.num_kv_heads = 2;
  p.head_dim = 258;
  EXPECT_EQ(Attention(p, nullptr, 0, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AttentionNumSplits(1, 8), 64);
  EXPECT_EQ(AttentionNumSplits(32, 8), 4);
  EXPECT_EQ(AttentionNumSplits(1000, 8), 1);
}

}  // namespace
}  // namespace kvfold::kernels::cuda
