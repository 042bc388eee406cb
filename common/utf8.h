// Well-formed UTF-8 (Unicode Table 3-7): what a lead byte says about the bytes after it.
// Header-only: the tokenizer's decoder and the structured-output matcher and pattern
// compiler share it.
#ifndef KVFOLD_COMMON_UTF8_H_
#define KVFOLD_COMMON_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kvfold {

struct Utf8Lead {
  int continuation = 0;  // bytes that follow the lead byte
  uint8_t lo = 0x80;     // the range of the first of them (the rest: 0x80..0xBF), which
  uint8_t hi = 0xBF;     // rules out overlong forms, surrogates and values above U+10FFFF
};

// False for a byte that cannot start a character (a continuation byte, 0xC0, 0xC1,
// 0xF5..0xFF). ASCII: continuation 0.
inline bool Utf8LeadOf(uint8_t c, Utf8Lead* lead) {
  *lead = Utf8Lead{};
  if (c < 0x80) return true;
  if (c >= 0xC2 && c <= 0xDF) {
    lead->continuation = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    lead->continuation = 2;
    if (c == 0xE0) lead->lo = 0xA0;
    if (c == 0xED) lead->hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    lead->continuation = 3;
    if (c == 0xF0) lead->lo = 0x90;
    if (c == 0xF4) lead->hi = 0x8F;
  } else {
    return false;
  }
  return true;
}

// Decodes one codepoint at s[pos]; returns its byte length (>= 1). Invalid or truncated
// sequences decode as U+FFFD of length 1.
inline size_t DecodeUtf8(std::string_view s, size_t pos, uint32_t* cp) {
  const unsigned char c = static_cast<unsigned char>(s[pos]);
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  int need;
  uint32_t value;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
    value = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    value = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    value = c & 0x07;
  } else {
    *cp = 0xFFFD;
    return 1;
  }
  if (pos + need >= s.size()) {
    *cp = 0xFFFD;
    return 1;
  }
  for (int k = 1; k <= need; ++k) {
    const unsigned char b = static_cast<unsigned char>(s[pos + k]);
    if ((b & 0xC0) != 0x80) {
      *cp = 0xFFFD;
      return 1;
    }
    value = (value << 6) | (b & 0x3F);
  }
  const bool overlong = (need == 2 && value < 0x800) || (need == 3 && value < 0x10000);
  if (overlong || (value >= 0xD800 && value <= 0xDFFF) || value > 0x10FFFF) {
    *cp = 0xFFFD;
    return 1;
  }
  *cp = value;
  return need + 1;
}

}  // namespace kvfold

#endif  // KVFOLD_COMMON_UTF8_H_
