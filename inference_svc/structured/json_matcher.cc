#include "inference_svc/structured/json_matcher.h"

#include <algorithm>
#include <utility>

#include "common/utf8.h"

namespace kvfold::structured {
namespace {

// kSeen: a value an array with uniqueItems over strings or integers holds (`bits`: a
// string's hash, an integer's value); these frames lie right below their array's frame and
// go with it.
enum FrameType : uint8_t { kValue, kObject, kArray, kString, kNumber, kLiteral, kSeen };

// Object and array phases.
enum : uint8_t { kOpen, kKey, kColon, kAfterValue, kComma };
// String phases.
enum : uint8_t { kChars, kEscape, kHex, kUtf8 };
// Number phases; kZero, kInt, kFrac and kExpDigits may end the number.
enum : uint8_t { kStart, kMinus, kZero, kInt, kDot, kFrac, kExp, kExpSign, kExpDigits };

bool IsWs(uint8_t c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
bool IsDigit(uint8_t c) { return c >= '0' && c <= '9'; }
bool IsHex(uint8_t c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool NumberMayEnd(uint8_t phase) {
  return phase == kZero || phase == kInt || phase == kFrac || phase == kExpDigits;
}

// The code points a UTF-8 character may still become: v its bits so far, `left`
// continuation bytes to come, the next one in [lo, hi] and any after it in 0x80..0xBF.
std::pair<uint32_t, uint32_t> Utf8Span(int32_t v, int left, uint8_t lo, uint8_t hi) {
  const uint32_t bits = static_cast<uint32_t>(v);
  if (left == 0) return {bits, bits};
  const int rest = 6 * (left - 1);
  return {(bits << 6 | (lo & 0x3Fu)) << rest,
          ((bits << 6 | (hi & 0x3Fu)) << rest) | ((1u << rest) - 1)};
}

// A string item of an array with uniqueItems carries the hash of its characters so far
// (its code points, however escaped: "a" and "\u0061" hash alike) in the frame's
// `pattern`, never 0 (0: no hash). A fixed function, so every replica masks alike. An
// integer item (`pattern` 1) carries its magnitude so far in `bits` and its sign in `ws`:
// its value, compared exactly.
constexpr uint64_t kHashStart = 0x9E3779B97F4A7C15ull;
uint64_t HashStep(uint64_t h, uint32_t cp) {
  h ^= cp + 0x632BE59BD9B4E019ull;
  h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
  h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
  return (h ^ (h >> 31)) | 1;
}

// The index of the array frame of stack s whose item is s.back() (a string or an integer
// being written), when that array holds such items unique by hash; -1 otherwise.
int UniqueItemsArray(const Grammar& g, const JsonMatcher::Stack& s) {
  if (s.size() < 2) return -1;
  const JsonMatcher::Frame& parent = s[s.size() - 2];
  if (parent.type != kArray || !g.node(parent.node).unique_items) return -1;
  const NodeKind items = g.node(g.node(parent.node).items).kind;
  return items == NodeKind::kString || items == NodeKind::kInteger ? static_cast<int>(s.size()) - 2
                                                                   : -1;
}

// The value of a whole integer item (number frame f) as a kSeen frame holds it: -0 and 0
// are one.
uint64_t IntegerKey(const JsonMatcher::Frame& f) {
  const int64_t magnitude = static_cast<int64_t>(f.bits);
  return static_cast<uint64_t>(f.ws ? -magnitude : magnitude);
}

// Whether an integer item of bounded node n, from frame f (a number just past a sign or a
// digit), may still become a value in n's bounds that the array at s[array] does not hold:
// those values against the held ones among them, interval by interval of the magnitudes it
// may reach (its digits so far, then k more).
bool UnheldReachable(const Node& n, const JsonMatcher::Stack& s, int array,
                     const JsonMatcher::Frame& f) {
  const bool negative = f.ws == 1;
  const int64_t lo = n.min_value, hi = n.max_value;  // integers: inclusive
  // The values of magnitudes [from, to] with f's sign, within the bounds, and how many of
  // them the array holds.
  auto unheld = [&](int64_t from, int64_t to) {
    const int64_t v0 = negative ? std::max(-to, lo) : std::max(from, lo);
    const int64_t v1 = negative ? std::min(-from, hi) : std::min(to, hi);
    if (v0 > v1) return false;
    int64_t held = 0;
    for (int i = array - 1; i >= 0 && s[i].type == kSeen; --i) {
      const int64_t v = static_cast<int64_t>(s[i].bits);
      held += v >= v0 && v <= v1;
    }
    return held < v1 - v0 + 1;
  };
  switch (f.phase) {
    case kMinus:
      return unheld(0, kMaxBoundMagnitude);
    case kZero:
      return unheld(0, 0);
    case kInt: {
      const int64_t p = static_cast<int64_t>(f.bits);
      int64_t scale = 1;
      for (int k = 0; f.a + k <= kMaxBoundedDigits; ++k, scale *= 10) {
        if (unheld(p * scale, (p + 1) * scale - 1)) return true;
      }
      return false;
    }
    default:
      return true;
  }
}

// Whether the array at s[array] holds an item of hash h.
bool Seen(const JsonMatcher::Stack& s, int array, uint64_t h) {
  for (int i = array - 1; i >= 0 && s[i].type == kSeen; --i) {
    if (s[i].bits == h) return true;
  }
  return false;
}

// The item s.back() (a string of hash h, an integer of value h) is whole: false when the
// array holds it already; otherwise it is popped and h held below the array's frame.
bool EndUniqueItem(const Grammar& g, JsonMatcher::Stack& s, uint64_t h) {
  const int array = UniqueItemsArray(g, s);
  if (Seen(s, array, h)) return false;
  JsonMatcher::Frame seen;
  seen.type = kSeen;
  seen.bits = h;
  s.pop_back();
  s.insert(s.begin() + array, seen);
  return true;
}

// The character a one-letter JSON escape (\n, \", ...) writes; -1 for none.
int EscapedChar(uint8_t c) {
  switch (c) {
    case '"':
      return '"';
    case '\\':
      return '\\';
    case '/':
      return '/';
    case 'b':
      return '\b';
    case 'f':
      return '\f';
    case 'n':
      return '\n';
    case 'r':
      return '\r';
    case 't':
      return '\t';
    default:
      return -1;
  }
}

int HexValue(uint8_t c) { return IsDigit(c) ? c - '0' : (c | 0x20) - 'a' + 10; }

// A bounded number's frame (Node::bounded): ws 1 when it is negative, bits its integer
// part, a that part's digits, b 1 once a fraction digit is not 0. With integer bounds
// and 0 < f < 1, p + f lies within them exactly when the integer p does within
// [min, max - 1]: so whether some value of integer part p in [lo, hi] and a fraction
// that is 0 (zero_ok) or not (part_ok) lies within the node's bounds is a question about
// integer intervals. With multipleOf the value is an integer p, a multiple of it.
bool SomeValueWithin(const Node& n, bool negative, int64_t lo, int64_t hi, bool zero_ok,
                     bool part_ok) {
  auto meets = [&](int64_t from, int64_t to) {
    return n.multiple_of != 0 ? MultipleWithin(std::max(lo, from), std::min(hi, to), n.multiple_of)
                              : std::max(lo, from) <= std::min(hi, to);
  };
  if (n.multiple_of != 0) part_ok = false;
  const int64_t min_in = n.min_value + (n.min_exclusive ? 1 : 0);
  const int64_t max_in = n.max_value - (n.max_exclusive ? 1 : 0);
  if (!negative) {
    // p itself: min_in <= p <= max_in; p + f: min <= p <= max - 1.
    return (zero_ok && meets(min_in, max_in)) || (part_ok && meets(n.min_value, n.max_value - 1));
  }
  // -p: -max_in <= p <= -min_in; -(p + f): -max <= p <= -min - 1.
  return (zero_ok && meets(-max_in, -min_in)) || (part_ok && meets(-n.max_value, -n.min_value - 1));
}

// Whether some way to go on from frame f (a number of bounded node n) ends in bounds.
bool NumberReachable(const Node& n, const JsonMatcher::Frame& f) {
  const bool negative = f.ws == 1;
  const bool fractions = n.kind == NodeKind::kNumber && n.multiple_of == 0;
  switch (f.phase) {
    case kMinus:
      return SomeValueWithin(n, true, 0, kMaxBoundMagnitude, true, fractions);
    case kZero:
      return SomeValueWithin(n, negative, 0, 0, true, fractions);
    case kInt: {
      // p itself, or k more digits: [p 10^k, (p + 1) 10^k - 1]; a fraction digit needs one
      // digit left.
      const int64_t p = static_cast<int64_t>(f.bits);
      int64_t scale = 1;
      for (int k = 0; f.a + k <= kMaxBoundedDigits; ++k, scale *= 10) {
        const bool part = fractions && f.a + k < kMaxBoundedDigits;
        if (SomeValueWithin(n, negative, p * scale, (p + 1) * scale - 1, true, part)) return true;
      }
      return false;
    }
    case kDot:
    case kFrac: {
      // A fraction still all 0 may stay 0; it is (or may become) more than 0 when a
      // digit is not 0 or another may come.
      const int64_t p = static_cast<int64_t>(f.bits);
      const int written = f.phase == kFrac ? f.aux : 0;
      const bool more = f.a + written < kMaxBoundedDigits;
      return SomeValueWithin(n, negative, p, p, f.b == 0, f.b == 1 || more);
    }
    default:
      return true;
  }
}

// Whether the bounded number of frame f, ended here, lies in n's bounds.
bool NumberInBounds(const Node& n, const JsonMatcher::Frame& f) {
  const int64_t p = static_cast<int64_t>(f.bits);
  return SomeValueWithin(n, f.ws == 1, p, p, f.b == 0, f.b == 1);
}

// Whether whitespace byte c may come next in frame f; `after_separator`: f's next byte
// follows a ':' or ','.
bool WhitespaceAllowed(const Grammar& g, const JsonMatcher::Frame& f, uint8_t c,
                       bool after_separator) {
  if (!g.compact()) return f.ws < kMaxWhitespaceRun;
  return after_separator && c == ' ' && f.ws == 0;
}

uint64_t FirstN(size_t n) { return n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1; }

// Containers open in s.
int Depth(const JsonMatcher::Stack& s) {
  int d = 0;
  for (const JsonMatcher::Frame& f : s) d += f.type == kObject || f.type == kArray;
  return d;
}

// Listed properties that may be written after property `last`: the next ones up to and
// including the first required one.
uint64_t KeyCandidates(const Node& n, int last) {
  uint64_t c = 0;
  for (int j = last + 1; j < static_cast<int>(n.properties.size()); ++j) {
    c |= uint64_t{1} << j;
    if (n.properties[j].required) break;
  }
  return c;
}

// Whether some literal of n starts with byte c.
bool LiteralStartsWith(const Node& n, uint8_t c) {
  if (n.ranged) {
    const auto [from, to] = NarrowRun(n.literals, 0, n.literals.size(), 0, c);
    return from < to;
  }
  return std::any_of(n.literals.begin(), n.literals.end(), [c](const std::string& l) {
    return !l.empty() && static_cast<uint8_t>(l[0]) == c;
  });
}

// Value frame *v of a literals node offers only the literals not in `written` (an item of
// a uniqueItems array, a map's listed key); the kLiterals case of a value reads it.
void OfferUnwritten(const Grammar& g, uint64_t written, JsonMatcher::Frame* v) {
  v->b = 1;
  v->bits = FirstN(g.node(v->node).literals.size()) & ~written;
}

bool RequiredAfter(const Node& n, int last) {
  for (int j = last + 1; j < static_cast<int>(n.properties.size()); ++j) {
    if (n.properties[j].required) return true;
  }
  return false;
}

}  // namespace

JsonMatcher::JsonMatcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  Frame root;
  root.type = kValue;
  root.node = grammar_->root();
  // One space may start a compact document (SentencePiece's word-start pieces).
  root.aux = grammar_->leading_space() ? 1 : 0;
  stacks_.push_back(Stack{root});
}

void JsonMatcher::Feed(Stack& s, uint8_t c, std::vector<Stack>* out) const {
  const Grammar& g = *grammar_;
  // Each turn of the loop hands c to the innermost frame; a frame that ends before c
  // (a number, a literal) pops and the loop hands c to its parent.
  while (!s.empty()) {
    Frame& f = s.back();
    const Node& n = g.node(f.node);
    switch (f.type) {
      case kValue: {
        // Whitespace before a value is JSON's, except as the first byte of a literal
        // (a raw choice may begin with a space; no JSON literal does).
        const bool literal_byte = n.kind == NodeKind::kLiterals && LiteralStartsWith(n, c);
        if (IsWs(c) && !literal_byte) {
          if (!WhitespaceAllowed(g, f, c, /*after_separator=*/f.aux == 1)) return;
          ++f.ws;
          out->push_back(std::move(s));
          return;
        }
        switch (n.kind) {
          case NodeKind::kAnyOf:
            for (int alt : n.alternatives) {
              Stack fork = s;
              fork.back().node = alt;
              Feed(fork, c, out);
            }
            return;
          case NodeKind::kAny:
            if (c == '{') {
              f.node = Grammar::kAnyObject;
            } else if (c == '[') {
              f.node = Grammar::kAnyArray;
            } else if (c == '"') {
              f.node = Grammar::kAnyString;
            } else if (c == '-' || IsDigit(c)) {
              f.node = Grammar::kAnyNumber;
            } else if (c == 't' || c == 'f' || c == 'n') {
              f.node = Grammar::kAnyLiteral;
            } else {
              return;
            }
            continue;
          case NodeKind::kObject:
          case NodeKind::kArray: {
            const uint8_t open = n.kind == NodeKind::kObject ? '{' : '[';
            if (c != open || Depth(s) >= kMaxDepth) return;
            const int32_t node = f.node;
            f = Frame{};
            f.type = n.kind == NodeKind::kObject ? kObject : kArray;
            f.phase = kOpen;
            f.node = node;
            f.a = n.kind == NodeKind::kObject ? -1 : 0;
            out->push_back(std::move(s));
            return;
          }
          case NodeKind::kString: {
            if (c != '"') return;
            const int32_t node = f.node;
            f = Frame{};
            f.type = kString;
            f.phase = kChars;
            f.node = node;
            if (n.pattern != nullptr) f.pattern = Pattern::kStart;
            if (UniqueItemsArray(g, s) >= 0) f.pattern = kHashStart;
            out->push_back(std::move(s));
            return;
          }
          case NodeKind::kNumber:
          case NodeKind::kInteger: {
            const int32_t node = f.node;
            f = Frame{};
            f.type = kNumber;
            f.phase = kStart;
            f.node = node;
            if (UniqueItemsArray(g, s) >= 0) f.pattern = 1;  // its value is kept
            continue;
          }
          case NodeKind::kLiterals: {
            // Only the literals not written yet where OfferUnwritten set them. A ranged
            // node's candidates: the run [0, size), its ends in bits' halves.
            const uint64_t allowed = n.ranged   ? uint64_t{n.literals.size()} << 32
                                     : f.b == 1 ? f.bits
                                                : FirstN(n.literals.size());
            const int32_t node = f.node;
            f = Frame{};
            f.type = kLiteral;
            f.node = node;
            f.bits = allowed;
            continue;
          }
        }
        return;
      }

      case kObject: {
        const bool ws = IsWs(c);
        if (ws && f.phase != kKey) {
          if (!WhitespaceAllowed(g, f, c, /*after_separator=*/f.phase == kComma)) return;
          ++f.ws;
          out->push_back(std::move(s));
          return;
        }
        f.ws = 0;
        switch (f.phase) {
          case kOpen:
          case kComma:
            if (c == '}' && f.phase == kOpen &&
                (n.free_keys ? n.min_properties == 0 : !RequiredAfter(n, f.a))) {
              s.pop_back();
              out->push_back(std::move(s));
              return;
            }
            if (c != '"') return;
            if (n.free_keys) {
              // A map's key (f.a + 1: the keys before it): a value of propertyNames' node
              // (any string without it), whose frame takes the quote; of listed keys, those
              // not written yet (f.bits).
              if (n.max_properties == 0) return;
              ++f.a;
              f.phase = kColon;
              Frame key;
              key.type = kValue;
              key.node = n.keys < 0 ? Grammar::kAnyString : n.keys;
              if (g.node(key.node).kind == NodeKind::kLiterals) OfferUnwritten(g, f.bits, &key);
              s.push_back(key);
              continue;
            } else {
              f.phase = kKey;
              f.b = 1;
              f.bits = KeyCandidates(n, f.a);
              if (f.bits == 0) return;
            }
            out->push_back(std::move(s));
            return;
          case kKey: {
            uint64_t next = 0;
            int done = -1;
            for (uint64_t m = f.bits; m != 0; m &= m - 1) {
              const int j = __builtin_ctzll(m);
              const std::string& key = n.properties[j].key;
              if (static_cast<int>(key.size()) > f.b && static_cast<uint8_t>(key[f.b]) == c) {
                next |= uint64_t{1} << j;
                if (static_cast<int>(key.size()) == f.b + 1) done = j;
              }
            }
            if (next == 0) return;
            if (done >= 0) {
              f.a = done;
              f.b = 0;
              f.bits = 0;
              f.phase = kColon;
            } else {
              f.bits = next;
              ++f.b;
            }
            out->push_back(std::move(s));
            return;
          }
          case kColon: {
            if (c != ':') return;
            f.phase = kAfterValue;
            Frame value;
            value.type = kValue;
            value.aux = 1;  // after ':'
            value.node = n.free_keys ? n.values : n.properties[f.a].value;
            s.push_back(value);
            out->push_back(std::move(s));
            return;
          }
          case kAfterValue:
            // A map: f.a + 1 keys written.
            if (c == ',' && (n.free_keys ? n.max_properties < 0 || f.a + 1 < n.max_properties
                                         : KeyCandidates(n, f.a) != 0)) {
              f.phase = kComma;
            } else if (c == '}' &&
                       (n.free_keys ? f.a + 1 >= n.min_properties : !RequiredAfter(n, f.a))) {
              s.pop_back();
            } else {
              return;
            }
            out->push_back(std::move(s));
            return;
        }
        return;
      }

      case kArray: {
        if (f.phase == kComma) {
          // The next item: its own value frame takes any whitespace before it.
          ++f.a;
          f.phase = kAfterValue;
          f.ws = 0;
          Frame item;
          item.type = kValue;
          item.aux = f.a > 1 ? 1 : 0;  // after ',' (the first item follows '[')
          item.node =
              f.a <= static_cast<int>(n.prefix_items.size()) ? n.prefix_items[f.a - 1] : n.items;
          if (n.unique_items) OfferUnwritten(g, f.bits, &item);
          s.push_back(item);
          continue;
        }
        if (IsWs(c)) {
          if (!WhitespaceAllowed(g, f, c, /*after_separator=*/false)) return;
          ++f.ws;
          out->push_back(std::move(s));
          return;
        }
        f.ws = 0;
        if (f.phase == kOpen) {
          if (c == ']') {
            if (n.min_items > 0) return;
            s.pop_back();
            out->push_back(std::move(s));
            return;
          }
          if (n.max_items == 0) return;
          f.phase = kComma;  // the first item starts with c
          continue;
        }
        // kAfterValue
        if (c == ',' && (n.max_items < 0 || f.a < n.max_items)) {
          f.phase = kComma;
        } else if (c == ']' && f.a >= n.min_items) {
          s.pop_back();
          while (!s.empty() && s.back().type == kSeen) s.pop_back();  // its items' hashes
        } else {
          return;
        }
        out->push_back(std::move(s));
        return;
      }

      case kString: {
        // With a pattern (and only then: f.b, the code point being written, is kept for
        // it), the automaton takes each whole character cp...
        // (`written`: the string's characters with this one, as the length bounds count.)
        // An item of an array with uniqueItems (`hashed`) takes each whole character into
        // its hash; a character that fills it to maxLength may not make it an item the array
        // holds (nothing could follow it but the closing quote, which that item refuses).
        const Pattern* pattern = n.pattern.get();
        const bool hashed = pattern == nullptr && f.pattern != 0;
        const bool code_points = pattern != nullptr || hashed;
        auto take = [&](uint32_t cp, int written) {
          if (hashed) {
            f.pattern = HashStep(f.pattern, cp);
            return written != n.max_length || !Seen(s, UniqueItemsArray(g, s), f.pattern);
          }
          f.pattern = pattern->Step(f.pattern, cp, written);
          return f.pattern != 0;
        };
        // ... and a character's first bytes only while some code point they may still
        // become, in [lo, hi] (surrogates aside), can follow.
        auto may = [&](std::pair<uint32_t, uint32_t> span, int written) {
          if (hashed) return true;
          const auto [lo, hi] = span;
          const uint32_t below = std::min<uint32_t>(hi, 0xD7FF),
                         above = std::max<uint32_t>(lo, 0xE000);
          return (lo <= below && pattern->AnyIn(f.pattern, lo, below, written)) ||
                 (above <= hi && pattern->AnyIn(f.pattern, above, hi, written));
        };
        switch (f.phase) {
          case kChars: {
            if (c == '"') {
              if (f.a < n.min_length) return;
              if (pattern != nullptr && !pattern->Accepts(f.pattern)) return;
              if (hashed) {
                if (!EndUniqueItem(g, s, f.pattern)) return;  // held from now on
              } else {
                s.pop_back();
              }
              out->push_back(std::move(s));
              return;
            }
            if (c < 0x20) return;
            if (n.max_length >= 0 && f.a >= n.max_length) return;
            if (c == '\\') {
              if (code_points && !may({0, 0xFFFF}, f.a + 1)) return;  // what an escape writes
              f.phase = kEscape;
            } else if (c >= 0x80) {
              // A UTF-8 lead byte: how many continuation bytes, and the first one's range
              // (no overlong forms, no surrogates, nothing above U+10FFFF).
              Utf8Lead lead;
              if (!Utf8LeadOf(c, &lead) || lead.continuation == 0) return;
              if (code_points) {
                f.b = c & (0x3F >> lead.continuation);
                if (!may(Utf8Span(f.b, lead.continuation, lead.lo, lead.hi), f.a + 1)) return;
              }
              f.aux = static_cast<uint8_t>(lead.continuation);
              f.phase = kUtf8;
              f.bits = lead.lo | (uint64_t{lead.hi} << 8);
            } else if (code_points && !take(c, f.a + 1)) {
              return;
            }
            ++f.a;
            out->push_back(std::move(s));
            return;
          }
          case kUtf8: {
            const uint8_t lo = f.bits & 0xFF, hi = (f.bits >> 8) & 0xFF;
            if (c < lo || c > hi) return;
            f.bits = 0x80 | (uint64_t{0xBF} << 8);
            if (--f.aux == 0) f.phase = kChars;
            if (code_points) {
              f.b = f.b << 6 | (c & 0x3F);
              if (f.aux == 0 ? !take(static_cast<uint32_t>(f.b), f.a)
                             : !may(Utf8Span(f.b, f.aux, 0x80, 0xBF), f.a)) {
                return;
              }
            }
            out->push_back(std::move(s));
            return;
          }
          case kEscape:
            if (c == 'u') {
              f.phase = kHex;
              f.aux = 0;
              f.bits = 0;
              f.b = 0;
            } else if (const int cp = EscapedChar(c); cp >= 0) {
              f.phase = kChars;
              if (code_points && !take(static_cast<uint32_t>(cp), f.a)) return;
            } else {
              return;
            }
            out->push_back(std::move(s));
            return;
          case kHex:
            if (!IsHex(c)) return;
            // \uD800..\uDFFF (surrogates) are refused: a lone one is not valid JSON text
            // for strict parsers, and raw UTF-8 writes the characters they would pair to.
            if (f.aux == 0 && (c == 'd' || c == 'D')) f.bits = 1;
            if (f.aux == 1 && f.bits == 1 && !(c >= '0' && c <= '7')) return;
            if (++f.aux == 4) {
              f.phase = kChars;
              f.bits = 0;
            }
            if (code_points) {
              f.b = f.b * 16 + HexValue(c);
              // The code points the digits so far may still become.
              const int rest = 4 * (4 - f.aux);
              const uint32_t v = static_cast<uint32_t>(f.b);
              if (f.aux == 4 ? !take(v, f.a) : !may({v << rest, ((v + 1) << rest) - 1}, f.a)) {
                return;
              }
            }
            out->push_back(std::move(s));
            return;
        }
        return;
      }

      case kNumber: {
        const bool integer = n.kind == NodeKind::kInteger || n.multiple_of != 0;
        // A bounded number has no exponent and kMaxBoundedDigits digits in all.
        const bool exponent = !n.bounded;
        const bool more_digits =
            !n.bounded || f.a + (f.phase == kFrac ? f.aux : 0) < kMaxBoundedDigits;
        uint8_t next = 0xFF;
        switch (f.phase) {
          case kStart:
            if (c == '-') next = kMinus;
            [[fallthrough]];
          case kMinus:
            if (c == '0') next = kZero;
            if (c >= '1' && c <= '9') next = kInt;
            break;
          case kInt:
            if (IsDigit(c) && f.aux < kMaxIntegerDigits) next = kInt;
            [[fallthrough]];
          case kZero:
            if (!integer && c == '.' && more_digits) next = kDot;
            if (!integer && exponent && (c == 'e' || c == 'E')) next = kExp;
            break;
          case kDot:
            if (!IsDigit(c)) return;
            next = kFrac;
            break;
          case kFrac:
            if (IsDigit(c) && f.aux < kMaxFractionDigits && more_digits) next = kFrac;
            if (exponent && (c == 'e' || c == 'E')) next = kExp;
            break;
          case kExp:
            if (c == '+' || c == '-') next = kExpSign;
            [[fallthrough]];
          case kExpSign:
            if (IsDigit(c)) next = kExpDigits;
            if (next == 0xFF) return;
            break;
          case kExpDigits:
            if (IsDigit(c) && f.aux < kMaxExponentDigits) next = kExpDigits;
            break;
        }
        // An integer item of an array with uniqueItems (`kept`) keeps its value (bounded:
        // as any bounded number does); unbounded, a digit after which no other may come (a
        // 0, the kMaxIntegerDigits-th) may not make it an item the array holds.
        const bool kept = f.pattern != 0;
        if (next == 0xFF) {
          if (!NumberMayEnd(f.phase)) return;
          if (n.bounded && !NumberInBounds(n, f)) return;
          if (kept) {
            if (!EndUniqueItem(g, s, IntegerKey(f))) return;
          } else {
            s.pop_back();  // the number ended before c
          }
          continue;
        }
        if (next != f.phase) f.aux = 0;
        if (IsDigit(c)) ++f.aux;
        if (kept && !n.bounded) {
          if (c == '-') f.ws = 1;
          if (IsDigit(c)) f.bits = f.bits * 10 + (c - '0');
          if ((next == kZero || f.aux == kMaxIntegerDigits) &&
              Seen(s, UniqueItemsArray(g, s), IntegerKey(f))) {
            return;
          }
        }
        if (n.bounded) {
          // The sign, the integer part and its digits, whether a fraction digit is not 0.
          if (c == '-' && next == kMinus) f.ws = 1;
          if (next == kInt || next == kZero) {
            f.bits = f.bits * 10 + (c - '0');
            f.a = f.aux;
          }
          if (next == kFrac && c != '0') f.b = 1;
        }
        f.phase = next;
        if (n.bounded && !NumberReachable(n, f)) return;
        // A bounded integer item (its value in bits and ws, as any bounded number's) may
        // not head only for values the array holds.
        if (kept && n.bounded && !UnheldReachable(n, s, UniqueItemsArray(g, s), f)) return;
        out->push_back(std::move(s));
        return;
      }

      case kLiteral: {
        if (n.ranged) {
          // The run of candidates that share the f.a bytes so far: one of exactly f.a
          // bytes sorts first; c narrows the rest to those with c next.
          uint32_t lo = static_cast<uint32_t>(f.bits), hi = static_cast<uint32_t>(f.bits >> 32);
          const bool whole = lo < hi && n.literals[lo].size() == static_cast<size_t>(f.a);
          const auto [from, to] = NarrowRun(n.literals, lo + (whole ? 1 : 0), hi, f.a, c);
          if (from < to) {
            f.bits = uint64_t{from} | uint64_t{to} << 32;
            ++f.a;
            out->push_back(std::move(s));
            return;
          }
          if (!whole) return;
          s.pop_back();  // the literal ended before c
          continue;
        }
        uint64_t next = 0;
        int complete = -1;
        for (uint64_t m = f.bits; m != 0; m &= m - 1) {
          const int j = __builtin_ctzll(m);
          const std::string& lit = n.literals[j];
          if (static_cast<int>(lit.size()) == f.a) complete = j;
          if (static_cast<int>(lit.size()) > f.a && static_cast<uint8_t>(lit[f.a]) == c) {
            next |= uint64_t{1} << j;
          }
        }
        if (next != 0) {
          f.bits = next;
          ++f.a;
          out->push_back(std::move(s));
          return;
        }
        if (complete < 0) return;
        s.pop_back();  // the literal ended before c
        // An item of a uniqueItems array, or a listed key of a map: written, so not again
        // in this array or object.
        if (!s.empty() && ((s.back().type == kArray && g.node(s.back().node).unique_items) ||
                           (s.back().type == kObject && s.back().phase == kColon))) {
          s.back().bits |= uint64_t{1} << complete;
        }
        continue;
      }
    }
    return;
  }
}

bool JsonMatcher::AdvanceInto(uint8_t byte, JsonMatcher* next) const {
  next->grammar_ = grammar_;
  for (Stack& s : next->stacks_) next->spare_.push_back(std::move(s));
  next->stacks_.clear();
  for (const Stack& s : stacks_) {
    Stack buffer;
    if (!next->spare_.empty()) {
      buffer = std::move(next->spare_.back());
      next->spare_.pop_back();
    }
    buffer.assign(s.begin(), s.end());
    Feed(buffer, byte, &next->stacks_);
    if (buffer.capacity() > 0) next->spare_.push_back(std::move(buffer));  // refused: kept
  }
  // Forks that met again (anyOf alternatives of one shape) are kept once.
  if (next->stacks_.size() > 1) {
    std::vector<Stack>& v = next->stacks_;
    for (size_t i = 0; i < v.size(); ++i) {
      for (size_t j = v.size(); j-- > i + 1;) {
        if (v[j] == v[i]) v.erase(v.begin() + j);
      }
    }
  }
  // Alternatives that stay alike over nested values multiply: past kMaxStacks the byte is
  // refused (fewer documents, never a wrong one) rather than the work growing without end.
  if (next->stacks_.size() > static_cast<size_t>(kMaxStacks)) next->stacks_.clear();
  return !next->stacks_.empty();
}

bool JsonMatcher::Advance(std::string_view bytes) {
  JsonMatcher next(*this);
  for (char c : bytes) {
    if (!AdvanceInto(static_cast<uint8_t>(c), &next)) {
      stacks_.clear();
      return false;
    }
    std::swap(stacks_, next.stacks_);
  }
  return true;
}

bool JsonMatcher::IsComplete() const {
  for (const Stack& s : stacks_) {
    if (s.empty()) return true;
    if (s.size() != 1) continue;
    const Frame& f = s[0];
    const Node& n = grammar_->node(f.node);
    if (f.type == kNumber && NumberMayEnd(f.phase) && (!n.bounded || NumberInBounds(n, f))) {
      return true;
    }
    if (f.type == kLiteral && n.ranged) {
      const uint32_t lo = static_cast<uint32_t>(f.bits), hi = static_cast<uint32_t>(f.bits >> 32);
      if (lo < hi && n.literals[lo].size() == static_cast<size_t>(f.a)) return true;
    } else if (f.type == kLiteral) {
      for (uint64_t m = f.bits; m != 0; m &= m - 1) {
        if (static_cast<int>(n.literals[__builtin_ctzll(m)].size()) == f.a) return true;
      }
    }
  }
  return false;
}

bool JsonMatcher::InStringText(int* written, int* max_length, bool* last_checked) const {
  if (stacks_.size() != 1 || stacks_[0].empty()) return false;
  const Frame& f = stacks_[0].back();
  if (f.type != kString || f.phase != kChars) return false;
  // A pattern's automaton takes each character.
  if (grammar_->node(f.node).pattern != nullptr) return false;
  *written = f.a;
  *max_length = grammar_->node(f.node).max_length;
  // An item of a set of strings: a character that fills it is checked against the items
  // written (the hash in f.pattern).
  *last_checked = f.pattern != 0 && *max_length >= 0;
  return true;
}

bool JsonMatcher::CanContinue() const {
  JsonMatcher next(grammar_);
  for (int c = 0; c < 256; ++c) {
    if (AdvanceInto(static_cast<uint8_t>(c), &next)) return true;
  }
  return false;
}

}  // namespace kvfold::structured
