// Well-formed UTF-8 (Unicode Table 3-7): what a lead byte says about the bytes after it.
// Header-only: the tokenizer's decoder and the structured-output matcher share it.
#ifndef KVFOLD_COMMON_UTF8_H_
#define KVFOLD_COMMON_UTF8_H_

#include <cstdint>

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

}  // namespace kvfold

#endif  // KVFOLD_COMMON_UTF8_H_
