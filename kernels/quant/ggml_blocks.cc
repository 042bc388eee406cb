#include "kernels/quant/ggml_blocks.h"

#include <cstring>

#include "common/fp16.h"
#include "common/gguf.h"
#include "core/dtype.h"
#include "kernels/check.h"

namespace kvfold::quant {
namespace {

using gguf::TensorType;

float HalfAt(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof(h));
  return Fp16ToFp32(h);
}

uint32_t U32At(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Blocks of 32: element j and j + 16 share byte j of the 16 code bytes (low, high nibble);
// Q5's fifth bits are bit j of a little-endian uint32.
// [d fp16][qs 16]: d * (q - 8)
void Q4_0Block(const uint8_t* b, float* y) {
  const float d = HalfAt(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>((qs[j] & 0x0F) - 8);
    y[j + 16] = d * static_cast<float>((qs[j] >> 4) - 8);
  }
}

// [d fp16][m fp16][qs 16]: d * q + m
void Q4_1Block(const uint8_t* b, float* y) {
  const float d = HalfAt(b), m = HalfAt(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(qs[j] & 0x0F) + m;
    y[j + 16] = d * static_cast<float>(qs[j] >> 4) + m;
  }
}

// The 5-bit codes of a Q5 block: `qh` the fifth bits, `qs` the nibbles.
void Q5Codes(uint32_t qh, const uint8_t* qs, int* q) {
  for (int j = 0; j < 16; ++j) {
    q[j] = (qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
    q[j + 16] = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
  }
}

// [d fp16][qh 4][qs 16]: d * (q - 16)
void Q5_0Block(const uint8_t* b, float* y) {
  const float d = HalfAt(b);
  int q[32];
  Q5Codes(U32At(b + 2), b + 6, q);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(q[j] - 16);
}

// [d fp16][m fp16][qh 4][qs 16]: d * q + m
void Q5_1Block(const uint8_t* b, float* y) {
  const float d = HalfAt(b), m = HalfAt(b + 2);
  int q[32];
  Q5Codes(U32At(b + 4), b + 8, q);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(q[j]) + m;
}

// [d fp16][qs 32 int8]: d * q
void Q8_0Block(const uint8_t* b, float* y) {
  const float d = HalfAt(b);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(static_cast<int8_t>(b[2 + j]));
}

// K-quants. The 2-bit planes of Q2_K/Q3_K: element 128 h + 32 s + l is bits 2s..2s+1 of
// code byte 32 h + l.
int TwoBits(const uint8_t* qs, int e) {
  const int h = e / 128, s = (e % 128) / 32, l = e % 32;
  return (qs[32 * h + l] >> (2 * s)) & 3;
}

// [scales 16][qs 64][d fp16][dmin fp16]: sub-block of 16 i, scale byte = (m << 4) | sc:
// (d * sc) * q - dmin * m
void Q2_KBlock(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* qs = b + 16;
  const float d = HalfAt(b + 80), dmin = HalfAt(b + 82);
  for (int i = 0; i < 16; ++i) {
    const float dl = d * static_cast<float>(scales[i] & 0x0F);
    const float ml = dmin * static_cast<float>(scales[i] >> 4);
    for (int e = 16 * i; e < 16 * i + 16; ++e) y[e] = dl * static_cast<float>(TwoBits(qs, e)) - ml;
  }
}

// [hmask 32][qs 64][scales 12][d fp16]: 16 signed 6-bit scales (low nibbles in bytes 0..7,
// byte i's low nibble for i < 8 and high nibble for i - 8; top 2 bits in bytes 8..11,
// bits 2 (i / 4) of byte 8 + i % 4), minus 32; code = 2 bits - 4 unless the element's bit
// in hmask (bit e / 32 of byte e % 32) is set: (d * scale) * code
void Q3_KBlock(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const uint8_t* sc = b + 96;
  const float d = HalfAt(b + 108);
  for (int i = 0; i < 16; ++i) {
    const int low = i < 8 ? (sc[i] & 0x0F) : (sc[i - 8] >> 4);
    const int high = (sc[8 + i % 4] >> (2 * (i / 4))) & 3;
    const float dl = d * static_cast<float>((low | (high << 4)) - 32);
    for (int e = 16 * i; e < 16 * i + 16; ++e) {
      const int hbit = (hmask[e % 32] >> (e / 32)) & 1;
      y[e] = dl * static_cast<float>(TwoBits(qs, e) - (hbit ? 0 : 4));
    }
  }
}

// The 6-bit scale and minimum of sub-block j (0..7) of a Q4_K/Q5_K block's 12 scale bytes:
// j < 4: low 6 bits of bytes j and j + 4; j >= 4: nibbles of byte j + 4 below the top two
// bits of bytes j - 4 and j.
void ScaleMin(const uint8_t* s, int j, int* scale, int* min) {
  if (j < 4) {
    *scale = s[j] & 63;
    *min = s[j + 4] & 63;
  } else {
    *scale = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    *min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q4_K [d fp16][dmin fp16][scales 12][qs 128] and Q5_K [... scales 12][qh 32][qs 128]:
// sub-block of 32 j = 2 c + h is nibble h of code bytes 32 c .. 32 c + 31 (Q5_K: bit j of
// qh byte l the fifth bit): (d * scale) * q - dmin * min
void QK4or5Block(const uint8_t* b, bool five, float* y) {
  const float d = HalfAt(b), dmin = HalfAt(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = five ? b + 48 : b + 16;
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    ScaleMin(scales, j, &sc, &m);
    const float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(m);
    const uint8_t* bytes = qs + 32 * (j / 2);
    for (int l = 0; l < 32; ++l) {
      int q = (bytes[l] >> (4 * (j % 2))) & 0x0F;
      if (five) q |= ((qh[l] >> j) & 1) << 4;
      y[32 * j + l] = dl * static_cast<float>(q) - ml;
    }
  }
}

// [ql 128][qh 64][scales 16 int8][d fp16]: element e = 128 a + 64 s + j has nibble s of ql
// byte 64 a + j; with e = 128 a + 32 t + l its top two bits are bits 2t of qh byte 32 a + l:
// (d * scale[e / 16]) * (q - 32)
void Q6_KBlock(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = HalfAt(b + 208);
  for (int e = 0; e < 256; ++e) {
    const int a = e / 128, r = e % 128;
    const int low = (ql[64 * a + r % 64] >> (4 * (r / 64))) & 0x0F;
    const int high = (qh[32 * a + r % 32] >> (2 * (r / 32))) & 3;
    y[e] = d * static_cast<float>(scales[e / 16]) * static_cast<float>((low | (high << 4)) - 32);
  }
}

// IQ4_NL and IQ4_XS index these 16 int8 levels with 4-bit codes.
constexpr int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                   1,    13,   25,  38,  53,  69,  89,  113};

// [d fp16][qs 16], codes placed as Q4_0's: d * level[q]
void IQ4_NLBlock(const uint8_t* b, float* y) {
  const float d = HalfAt(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(kIq4Levels[qs[j] & 0x0F]);
    y[j + 16] = d * static_cast<float>(kIq4Levels[qs[j] >> 4]);
  }
}

// [d fp16][scales_h uint16][scales_l 4][qs 128]: sub-block of 32 i has the 6-bit scale
// nibble i % 2 of scales_l byte i / 2 under bits 2i of scales_h, minus 32, and its codes in
// bytes 16 i .. 16 i + 15 placed as Q4_0's: (d * scale) * level[q]
void IQ4_XSBlock(const uint8_t* b, float* y) {
  const float d = HalfAt(b);
  uint16_t scales_h;
  std::memcpy(&scales_h, b + 2, sizeof(scales_h));
  const uint8_t* scales_l = b + 4;
  const uint8_t* qs = b + 8;
  for (int i = 0; i < 8; ++i) {
    const int ls = ((scales_l[i / 2] >> (4 * (i % 2))) & 0x0F) | (((scales_h >> (2 * i)) & 3) << 4);
    const float dl = d * static_cast<float>(ls - 32);
    for (int j = 0; j < 16; ++j) {
      y[32 * i + j] = dl * static_cast<float>(kIq4Levels[qs[16 * i + j] & 0x0F]);
      y[32 * i + j + 16] = dl * static_cast<float>(kIq4Levels[qs[16 * i + j] >> 4]);
    }
  }
}

}  // namespace

bool IsGgmlBlockType(uint32_t type) {
  switch (static_cast<TensorType>(type)) {
    case TensorType::kQ4_0:
    case TensorType::kQ4_1:
    case TensorType::kQ5_0:
    case TensorType::kQ5_1:
    case TensorType::kQ8_0:
    case TensorType::kQ2_K:
    case TensorType::kQ3_K:
    case TensorType::kQ4_K:
    case TensorType::kQ5_K:
    case TensorType::kQ6_K:
    case TensorType::kIQ4_NL:
    case TensorType::kIQ4_XS:
      return true;
    default:
      return false;
  }
}

void DequantizeGgmlBlocks(uint32_t type, const uint8_t* src, int64_t n, float* out) {
  KVFOLD_CHECK(IsGgmlBlockType(type));
  const gguf::BlockLayout block = *gguf::BlockOf(type);
  KVFOLD_CHECK(n % block.elements == 0);
  for (int64_t i = 0; i < n / block.elements; ++i) {
    const uint8_t* b = src + i * block.bytes;
    float* y = out + i * block.elements;
    switch (static_cast<TensorType>(type)) {
      case TensorType::kQ4_0:
        Q4_0Block(b, y);
        break;
      case TensorType::kQ4_1:
        Q4_1Block(b, y);
        break;
      case TensorType::kQ5_0:
        Q5_0Block(b, y);
        break;
      case TensorType::kQ5_1:
        Q5_1Block(b, y);
        break;
      case TensorType::kQ8_0:
        Q8_0Block(b, y);
        break;
      case TensorType::kQ2_K:
        Q2_KBlock(b, y);
        break;
      case TensorType::kQ3_K:
        Q3_KBlock(b, y);
        break;
      case TensorType::kQ4_K:
        QK4or5Block(b, /*five=*/false, y);
        break;
      case TensorType::kQ5_K:
        QK4or5Block(b, /*five=*/true, y);
        break;
      case TensorType::kQ6_K:
        Q6_KBlock(b, y);
        break;
      case TensorType::kIQ4_NL:
        IQ4_NLBlock(b, y);
        break;
      case TensorType::kIQ4_XS:
        IQ4_XSBlock(b, y);
        break;
      default:
        KVFOLD_CHECK(false);
    }
  }
}

bool RepacksToQ8Exactly(uint32_t type) {
  const auto t = static_cast<TensorType>(type);
  return t == TensorType::kQ4_0 || t == TensorType::kQ5_0 || t == TensorType::kQ8_0 ||
         t == TensorType::kIQ4_NL;
}

void RepackGgmlRowToQ8(uint32_t type, const uint8_t* src, int64_t cols, uint8_t* row) {
  KVFOLD_CHECK(RepacksToQ8Exactly(type) && cols % core::kQ8Block == 0);
  const gguf::BlockLayout block = *gguf::BlockOf(type);
  const int64_t blocks = cols / core::kQ8Block;
  auto* codes = reinterpret_cast<int8_t*>(row + blocks * sizeof(uint16_t));
  for (int64_t i = 0; i < blocks; ++i) {
    const uint8_t* b = src + i * block.bytes;
    std::memcpy(row + i * sizeof(uint16_t), b, sizeof(uint16_t));  // the fp16 scale as is
    int8_t* c = codes + i * core::kQ8Block;
    switch (static_cast<TensorType>(type)) {
      case TensorType::kQ4_0:
        for (int j = 0; j < 16; ++j) {
          c[j] = static_cast<int8_t>((b[2 + j] & 0x0F) - 8);
          c[j + 16] = static_cast<int8_t>((b[2 + j] >> 4) - 8);
        }
        break;
      case TensorType::kQ5_0: {
        int q[32];
        Q5Codes(U32At(b + 2), b + 6, q);
        for (int j = 0; j < 32; ++j) c[j] = static_cast<int8_t>(q[j] - 16);
        break;
      }
      case TensorType::kIQ4_NL:
        for (int j = 0; j < 16; ++j) {
          c[j] = kIq4Levels[b[2 + j] & 0x0F];
          c[j + 16] = kIq4Levels[b[2 + j] >> 4];
        }
        break;
      default:  // Q8_0
        std::memcpy(c, b + 2, 32);
    }
  }
}

}  // namespace kvfold::quant
