#include "inference_svc/structured/json_regex.h"

#include <algorithm>
#include <cctype>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/utf8.h"
#include "inference_svc/structured/json_pattern.h"

namespace kvfold::structured::regex {
namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr int kMaxGroupDepth = 32;

// Sorted and merged.
Ranges Normalized(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const auto& [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
  return out;
}

Ranges Union(Ranges a, const Ranges& b) {
  a.insert(a.end(), b.begin(), b.end());
  return Normalized(std::move(a));
}

// Every character a JSON string holds (no surrogates) outside r.
Ranges Complement(const Ranges& r) {
  Ranges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : Normalized(Union(r, {{0xD800, 0xDFFF}}))) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return out;
}

// r less the surrogates, which are no characters of a JSON string.
Ranges WithoutSurrogates(const Ranges& r) { return Complement(Complement(r)); }

// The shorthands as ECMA-262 and Python's `re` both read them, narrow (what both count as
// members) and wide (what either does).
Ranges Digits() { return {{'0', '9'}}; }
Ranges Word() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
Ranges NonAscii() { return {{0x80, kMaxCodePoint}}; }
Ranges SpaceNarrow() { return {{0x09, 0x0D}, {0x20, 0x20}}; }
Ranges SpaceWide() {
  return {{0x09, 0x0D},     {0x1C, 0x20},     {0x85, 0x85},     {0xA0, 0xA0},
          {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F},
          {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
}

// The class of shorthand letter c (d, D, w, W, s, S), narrow or wide.
Ranges Shorthand(char c, bool wide) {
  switch (c) {
    case 'd':
      return wide ? Union(Digits(), NonAscii()) : Digits();
    case 'D':
      return wide ? Complement(Digits()) : Complement(Union(Digits(), NonAscii()));
    case 'w':
      return wide ? Union(Word(), NonAscii()) : Word();
    case 'W':
      return wide ? Complement(Word()) : Complement(Union(Word(), NonAscii()));
    case 's':
      return wide ? SpaceWide() : SpaceNarrow();
    default:
      return wide ? Complement(SpaceNarrow()) : Complement(SpaceWide());
  }
}

Re Node(Re::Kind kind, std::vector<Re> kids) {
  Re r;
  r.kind = kind;
  r.kids = std::move(kids);
  return r;
}
Re Class(Ranges ranges) {
  Re r;
  r.kind = Re::kClass;
  r.ranges = std::move(ranges);
  return r;
}

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  // The whole pattern: its top-level alternatives, each matched anywhere in the string
  // unless it starts with ^ (ends with $).
  absl::StatusOr<Re> Whole() {
    const Re any = AnyCharacters();
    std::vector<Re> alts;
    while (true) {
      const bool start = At('^');
      if (start) ++i_;
      auto cat = Concatenation();
      if (!cat.ok()) return cat;
      const bool end = At('$');
      if (end) ++i_;
      std::vector<Re> branch;
      if (!start) branch.push_back(any);
      branch.push_back(std::move(*cat));
      if (!end) branch.push_back(any);
      alts.push_back(Node(Re::kCat, std::move(branch)));
      if (!At('|')) break;
      ++i_;
    }
    if (i_ < s_.size()) return Bad("an unmatched ')'");
    return alts.size() == 1 ? std::move(alts[0]) : Node(Re::kAlt, std::move(alts));
  }

 private:
  static Re AnyCharacters() { return Node(Re::kStar, {Class(Complement({}))}); }

  // The body of a lookahead, i_ past its "(?=" or "(?!", through its ')': alternatives
  // matched from where the lookahead stands, each with any characters after it unless it
  // ends with $ (in a negative body also a final line feed, where Python's $ matches too).
  absl::StatusOr<Re> Lookahead(bool negative) {
    if (body_depth_ >= 0) return Bad("a lookaround inside a lookaround");
    body_depth_ = depth_;
    negative_ = negative;
    Re look;
    look.kind = Re::kLook;
    look.negative = negative;
    std::vector<Re> alts;
    while (true) {
      if (At('^')) {
        ++i_;
        look.at_start = true;
      }
      auto cat = Concatenation();
      if (!cat.ok()) return cat;
      std::vector<Re> branch = {std::move(*cat)};
      if (At('$')) {
        ++i_;
        if (negative) branch.push_back(Node(Re::kOpt, {Class({{'\n', '\n'}})}));
      } else {
        branch.push_back(AnyCharacters());
      }
      alts.push_back(Node(Re::kCat, std::move(branch)));
      if (!At('|')) break;
      ++i_;
    }
    body_depth_ = -1;
    negative_ = false;
    if (!At(')')) return Bad("an unclosed '('");
    ++i_;
    look.kids.push_back(alts.size() == 1 ? std::move(alts[0]) : Node(Re::kAlt, std::move(alts)));
    return look;
  }
  absl::Status Bad(std::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("pattern: ", std::string(what), " at offset ", i_, " is not supported"));
  }
  bool At(char c) const { return i_ < s_.size() && s_[i_] == c; }

  absl::StatusOr<Re> Alternation() {
    std::vector<Re> alts;
    while (true) {
      auto cat = Concatenation();
      if (!cat.ok()) return cat;
      alts.push_back(std::move(*cat));
      if (!At('|')) break;
      ++i_;
    }
    return alts.size() == 1 ? std::move(alts[0]) : Node(Re::kAlt, std::move(alts));
  }

  absl::StatusOr<Re> Concatenation() {
    std::vector<Re> items;
    while (i_ < s_.size() && !At('|') && !At(')')) {
      // A top-level alternative's last '$' ends it (Whole), and a lookahead body's
      // alternative's its (Lookahead).
      if (At('$') && depth_ == 0 && (i_ + 1 == s_.size() || s_[i_ + 1] == '|')) break;
      if (At('$') && depth_ == body_depth_ && i_ + 1 < s_.size() &&
          (s_[i_ + 1] == '|' || s_[i_ + 1] == ')')) {
        break;
      }
      auto item = Repeat();
      if (!item.ok()) return item;
      items.push_back(std::move(*item));
    }
    if (items.empty()) return Re{};
    return items.size() == 1 ? std::move(items[0]) : Node(Re::kCat, std::move(items));
  }

  // {n}, {n,}, {n,m} at i_ (past the '{'), each at most 1000.
  bool Bounds(int* lo, int* hi) {
    auto number = [&](int* v) {
      const size_t start = i_;
      *v = 0;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9' && i_ - start < 4) {
        *v = *v * 10 + (s_[i_++] - '0');
      }
      return i_ > start && *v <= 1000;
    };
    if (!number(lo)) return false;
    *hi = *lo;
    if (At(',')) {
      ++i_;
      *hi = -1;
      if (!At('}') && !number(hi)) return false;
    }
    if (!At('}') || (*hi >= 0 && *hi < *lo)) return false;
    ++i_;
    return true;
  }

  absl::StatusOr<Re> Repeat() {
    auto atom = Atom();
    if (!atom.ok()) return atom;
    if (i_ >= s_.size()) return atom;
    int lo = 0, hi = 0;
    const char q = s_[i_];
    if (q == '*' || q == '+' || q == '?') {
      ++i_;
      lo = q == '+' ? 1 : 0;
      hi = q == '?' ? 1 : -1;
    } else if (q == '{') {
      ++i_;
      if (!Bounds(&lo, &hi)) return Bad("a '{' that is no quantifier {n}, {n,} or {n,m}");
    } else {
      return atom;
    }
    if (At('?')) ++i_;  // lazy: the same strings
    if (At('*') || At('+') || At('?') || At('{')) return Bad("a quantifier of a quantifier");
    // lo copies, then hi - lo optional ones; unbounded, lo - 1 copies and a plus (the
    // last copy repeats: its positions once) or for lo 0 a star.
    const int copies = hi < 0 ? std::max(lo, 1) : hi;
    if (static_cast<int64_t>(atom->Leaves()) * copies > kMaxPatternPositions) {
      return Bad(absl::StrCat("more than ", kMaxPatternPositions, " character positions"));
    }
    std::vector<Re> seq;
    for (int k = 0; k < lo - (hi < 0 ? 1 : 0); ++k) seq.push_back(*atom);
    if (hi < 0) {
      seq.push_back(Node(lo > 0 ? Re::kPlus : Re::kStar, {*atom}));
    } else {
      for (int k = lo; k < hi; ++k) seq.push_back(Node(Re::kOpt, {*atom}));
    }
    if (seq.empty()) return Re{};
    return seq.size() == 1 ? std::move(seq[0]) : Node(Re::kCat, std::move(seq));
  }

  // One character of the pattern (a JSON string's: valid UTF-8, no surrogates).
  uint32_t Char() {
    uint32_t cp = 0;
    i_ += DecodeUtf8(s_, i_, &cp);
    return cp;
  }

  // \x, \u or a control escape's hex digits.
  absl::StatusOr<uint32_t> Hex(int digits) {
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k, ++i_) {
      if (i_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[i_]))) {
        return Bad("a short hex escape");
      }
      const char h = static_cast<char>(std::tolower(static_cast<unsigned char>(s_[i_])));
      v = v * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : h - 'a' + 10);
    }
    if (v >= 0xD800 && v <= 0xDFFF) return Bad("a surrogate");
    return v;
  }

  // The escape at i_ (past the backslash): a single character (*single) or a class.
  absl::StatusOr<Ranges> Escape(bool in_class, bool wide, bool* single) {
    if (i_ >= s_.size()) return Bad("a trailing backslash");
    const char c = s_[i_];
    *single = true;
    if (std::string_view("dDwWsS").find(c) != std::string_view::npos) {
      ++i_;
      *single = false;
      return Shorthand(c, wide);
    }
    uint32_t cp = 0;
    switch (c) {
      case 'n':
        cp = '\n';
        break;
      case 't':
        cp = '\t';
        break;
      case 'r':
        cp = '\r';
        break;
      case 'f':
        cp = '\f';
        break;
      case 'v':
        cp = '\v';
        break;
      case 'b':
        if (!in_class) return Bad("a word boundary \\b");
        cp = '\b';
        break;
      case '0':
        if (i_ + 1 < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_ + 1]))) {
          return Bad("an octal escape");
        }
        cp = 0;
        break;
      case 'x':
      case 'u': {
        ++i_;
        auto v = Hex(c == 'x' ? 2 : 4);
        if (!v.ok()) return v.status();
        return Ranges{{*v, *v}};
      }
      default:
        if (std::isalnum(static_cast<unsigned char>(c))) {
          return Bad(absl::StrCat("the escape \\", std::string(1, c),
                                  " (backreferences, \\B, \\c, \\k, \\p and letters without a "
                                  "meaning)"));
        }
        if (static_cast<unsigned char>(c) >= 0x80) return Bad("an escaped non-ASCII character");
        cp = static_cast<uint8_t>(c);
    }
    ++i_;
    return Ranges{{cp, cp}};
  }

  // A character or an escape inside a class (*single: one character, not a shorthand).
  absl::StatusOr<Ranges> ClassMember(bool negated, bool* single) {
    *single = true;
    if (!At('\\')) {
      const uint32_t cp = Char();
      return Ranges{{cp, cp}};
    }
    ++i_;
    return Escape(/*in_class=*/true, /*wide=*/negated != negative_, single);
  }

  absl::StatusOr<Re> CharClass() {
    ++i_;  // '['
    const bool negated = At('^');
    if (negated) ++i_;
    if (At(']')) return Bad("a class that starts with ']' (empty in ECMA-262, not in Python)");
    Ranges members;
    while (!At(']')) {
      if (i_ >= s_.size()) return Bad("an unclosed '['");
      if (At('[') && i_ + 1 < s_.size() &&
          std::string_view(":=.").find(s_[i_ + 1]) != std::string_view::npos) {
        return Bad("a POSIX class or a nested set");
      }
      bool single = true;
      auto item = ClassMember(negated, &single);
      if (!item.ok()) return item.status();
      // A range a-b (a '-' before ']' is itself).
      if (At('-') && i_ + 1 < s_.size() && s_[i_ + 1] != ']') {
        ++i_;
        bool end_single = true;
        auto end = ClassMember(negated, &end_single);
        if (!end.ok()) return end.status();
        if (!single || !end_single) return Bad("a range with a shorthand end");
        if ((*end)[0].first < (*item)[0].first) return Bad("a range out of order");
        item = Ranges{{(*item)[0].first, (*end)[0].first}};
      }
      members = Union(std::move(members), *item);
    }
    ++i_;  // ']'
    // Surrogates are no characters of a JSON string.
    Ranges chars = negated ? Complement(members) : WithoutSurrogates(members);
    if (chars.empty()) return Bad("a class that matches no character");
    return Class(std::move(chars));
  }

  absl::StatusOr<Re> Atom() {
    const char c = s_[i_];
    switch (c) {
      case '(': {
        if (depth_ >= kMaxGroupDepth) return Bad("groups nested more than 32 deep");
        ++i_;
        if (At('?')) {
          ++i_;
          if (At(':')) {
            ++i_;
          } else if (At('=') || At('!')) {
            const bool negative = At('!');
            ++i_;
            ++depth_;
            auto look = Lookahead(negative);
            --depth_;
            return look;
          } else if (At('<') && i_ + 1 < s_.size() && (s_[i_ + 1] == '=' || s_[i_ + 1] == '!')) {
            return Bad("a lookbehind");
          } else if (At('<')) {
            const size_t close = s_.find('>', i_);
            if (close == std::string_view::npos) return Bad("an unclosed group name");
            i_ = close + 1;
          } else {
            return Bad("an inline flag");
          }
        }
        ++depth_;
        auto inner = Alternation();
        --depth_;
        if (!inner.ok()) return inner;
        if (!At(')')) return Bad("an unclosed '('");
        ++i_;
        return inner;
      }
      case '[':
        return CharClass();
      case '.':
        ++i_;
        // Python's '.' takes '\r', U+2028 and U+2029, ECMA-262's does not.
        return Class(negative_ ? Complement({{'\n', '\n'}})
                               : Complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
      case '\\': {
        ++i_;
        bool single = true;
        auto r = Escape(/*in_class=*/false, /*wide=*/negative_, &single);
        if (!r.ok()) return r.status();
        return Class(std::move(*r));
      }
      case '^':
        return Bad("'^' other than at the start of a top-level alternative or a lookahead's");
      case '$': {
        // Elsewhere than a top-level alternative's end: a lookahead that nothing follows.
        if (body_depth_ >= 0) return Bad("'$' inside a lookahead other than at its end");
        ++i_;
        Re end;
        end.kind = Re::kLook;
        end.kids.push_back(Re{});
        return end;
      }
      case ')':
        return Bad("an unmatched ')'");
      case '*':
      case '+':
      case '?':
        return Bad("a quantifier with nothing to repeat");
      case '{':
        return Bad("a '{' that is no quantifier {n}, {n,} or {n,m}");
      default: {
        const uint32_t cp = Char();
        return Class({{cp, cp}});
      }
    }
  }

  std::string_view s_;
  size_t i_ = 0;
  int depth_ = 0;          // groups open at i_
  int body_depth_ = -1;    // inside a lookahead's body: the groups open outside it
  bool negative_ = false;  // inside a negative lookahead's body
};

}  // namespace

int Re::Leaves() const {
  if (kind == kClass || kind == kLook) return 1;
  int n = 0;
  for (const Re& k : kids) n += k.Leaves();
  return n;
}

absl::StatusOr<Re> Parse(std::string_view source) { return Parser(source).Whole(); }

bool Intersects(const Ranges& r, uint32_t lo, uint32_t hi) {
  // The first range ending at or after lo.
  auto it = std::lower_bound(
      r.begin(), r.end(), lo,
      [](const std::pair<uint32_t, uint32_t>& x, uint32_t v) { return x.second < v; });
  return it != r.end() && it->first <= hi;
}

}  // namespace kvfold::structured::regex
