#include "inference_svc/structured/json_pattern.h"

#include <algorithm>
#include <functional>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "inference_svc/structured/json_regex.h"

namespace kvfold::structured {
namespace {

using regex::Re;

constexpr size_t kMaxPatternBytes = 4096;

struct Info {
  bool nullable = false;
  uint64_t first = 0, last = 0;
};

}  // namespace

absl::StatusOr<Pattern> Pattern::Compile(std::string_view source, int min_length, int max_length) {
  if (min_length > kMaxPatternLength || max_length > kMaxPatternLength) {
    return absl::InvalidArgumentError(absl::StrCat("pattern: minLength / maxLength over ",
                                                   kMaxPatternLength,
                                                   " together with a pattern is not supported"));
  }
  // Bounded work and memory whatever a request sends: 63 positions need no more text.
  if (source.size() > kMaxPatternBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("pattern: over ", kMaxPatternBytes, " bytes is not supported"));
  }
  auto re = regex::Parse(source);
  if (!re.ok()) return re.status();
  std::vector<Lookahead> looks;
  auto p = Positions(*re, &looks);
  if (!p.ok()) return p.status();
  if (!looks.empty()) {
    KVFOLD_RETURN_IF_ERROR(p->Determinize(looks));
    if (min_length > 0 || max_length >= 0) {
      KVFOLD_RETURN_IF_ERROR(p->HoldStateLengths(min_length, max_length));
    }
  } else if (min_length > 0 || max_length >= 0) {
    KVFOLD_RETURN_IF_ERROR(p->HoldLengths(min_length, max_length));
  }
  return p;
}

absl::StatusOr<Pattern> Pattern::Positions(const Re& re, std::vector<Lookahead>* looks) {
  if (re.Leaves() > kMaxPatternPositions) {
    return absl::InvalidArgumentError(absl::StrCat("pattern: more than ", kMaxPatternPositions,
                                                   " character positions is not supported"));
  }
  Pattern p;
  absl::Status status;
  int repeats = 0;  // stars and pluses around the subexpression walked
  // Glushkov: per subexpression whether it matches "", its first and last positions; the
  // positions that may follow each one. A lookahead is a position of its own with no
  // class: what follows it is matched from where it stands.
  std::function<Info(const Re&)> walk = [&](const Re& r) -> Info {
    Info info;
    switch (r.kind) {
      case Re::kEmpty:
        info.nullable = true;
        break;
      case Re::kClass:
      case Re::kLook: {
        const uint64_t bit = uint64_t{1} << p.classes_.size();
        if (r.kind == Re::kLook) {
          // A repeat would pass it many times, each time with its own obligation.
          if (repeats > 0) {
            status = absl::InvalidArgumentError(
                "pattern: a lookahead (or '$') inside '*', '+' or '{n,}' is not supported");
          } else if (looks->size() >= kMaxLookaheads) {
            status = absl::InvalidArgumentError(absl::StrCat("pattern: more than ", kMaxLookaheads,
                                                             " lookaheads is not supported"));
          } else {
            std::vector<Lookahead> none;
            auto body = Positions(r.kids[0], &none);
            if (!body.ok()) {
              status = body.status();
            } else {
              looks->push_back({static_cast<int>(p.classes_.size()),
                                std::make_shared<const Pattern>(std::move(*body)), r.negative,
                                r.at_start});
            }
          }
        }
        p.classes_.push_back(r.ranges);
        p.follow_.push_back(0);
        info.first = info.last = bit;
        break;
      }
      case Re::kCat:
        info.nullable = true;
        for (const Re& k : r.kids) {
          const Info ki = walk(k);
          for (size_t q = 0; q < p.follow_.size(); ++q) {
            if (info.last >> q & 1) p.follow_[q] |= ki.first;
          }
          info.first |= info.nullable ? ki.first : 0;
          info.last = ki.last | (ki.nullable ? info.last : 0);
          info.nullable = info.nullable && ki.nullable;
        }
        break;
      case Re::kAlt:
        for (const Re& k : r.kids) {
          const Info ki = walk(k);
          info.first |= ki.first;
          info.last |= ki.last;
          info.nullable = info.nullable || ki.nullable;
        }
        break;
      case Re::kStar:
      case Re::kPlus:
      case Re::kOpt: {
        const int around = r.kind == Re::kOpt ? 0 : 1;
        repeats += around;
        info = walk(r.kids[0]);
        repeats -= around;
        if (r.kind != Re::kOpt) {  // a repeat: its first positions follow its last
          for (size_t q = 0; q < p.follow_.size(); ++q) {
            if (info.last >> q & 1) p.follow_[q] |= info.first;
          }
        }
        info.nullable = info.nullable || r.kind != Re::kPlus;
        break;
      }
    }
    return info;
  };
  const Info top = walk(re);
  KVFOLD_RETURN_IF_ERROR(status);
  p.first_ = top.first;
  p.last_ = top.last;
  p.nullable_ = top.nullable;
  // A table per byte of positions there are (2 KiB each), the start bit apart (Next).
  p.next_by_byte_.assign((p.follow_.size() + 7) / 8, {});
  for (size_t k = 0; k < p.next_by_byte_.size(); ++k) {
    for (int b = 1; b < 256; ++b) {
      // The set bits of b but its lowest, then the lowest.
      const size_t bit = 8 * k + __builtin_ctz(b);
      const uint64_t one = bit < p.follow_.size() ? p.follow_[bit] : 0;
      p.next_by_byte_[k][b] = p.next_by_byte_[k][b & (b - 1)] | one;
    }
  }
  for (uint32_t c = 0; c < 128; ++c) {
    for (size_t q = 0; q < p.classes_.size(); ++q) {
      if (regex::Intersects(p.classes_[q], c, c)) p.ascii_[c] |= uint64_t{1} << q;
    }
  }
  return p;
}

absl::Status Pattern::HoldLengths(int min_length, int max_length) {
  max_length_ = max_length;
  // ends[l]: the positions from which a match ends after exactly l more characters. A
  // path of 63 or more characters repeats a position, so a position with unboundedly
  // long matches has one in every window of 64 lengths past its shortest.
  const int horizon = (max_length >= 0 ? max_length : min_length) + 64;
  std::vector<uint64_t> ends(horizon + 1);
  ends[0] = last_;
  for (int l = 1; l <= horizon; ++l) {
    for (size_t q = 0; q < follow_.size(); ++q) {
      if (follow_[q] & ends[l - 1]) ends[l] |= uint64_t{1} << q;
    }
  }
  // Allowed(w): a match may still end after l more characters, l in [min - w, max - w]
  // (no maximum: [min - w, min - w + 63], which holds one of each position's lengths if
  // it has any that long).
  const int table = max_length >= 0 ? max_length + 1 : min_length;
  allowed_.assign(table, 0);
  for (int w = 1; w < table; ++w) {
    const int from = std::max(0, min_length - w);
    const int to = max_length >= 0 ? max_length - w : from + 63;
    for (int l = from; l <= to; ++l) allowed_[w] |= ends[l];
  }
  // The empty string, or a first character that leads somewhere.
  const bool empty = nullable_ && min_length == 0;
  if (!empty && (first_ & Allowed(1)) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pattern: no match has a length in [", min_length, ", ",
        max_length >= 0 ? absl::StrCat(max_length) : std::string("any"), "] characters"));
  }
  return absl::OkStatus();
}

uint64_t Pattern::Allowed(int written) const {
  if (written < static_cast<int>(allowed_.size())) return allowed_[written];
  // Past the table: with a maximum, past it (no character may come); else the minimum
  // is met.
  return max_length_ >= 0 ? 0 : ~kStart;
}

uint64_t Pattern::Next(uint64_t s) const {
  uint64_t next = (s & kStart) != 0 ? first_ : 0;
  s &= ~kStart;
  for (size_t k = 0; k < next_by_byte_.size() && s != 0; ++k, s >>= 8) {
    next |= next_by_byte_[k][s & 0xFF];
  }
  return next;
}

size_t Pattern::MemoryBytes() const {
  size_t bytes = sizeof(Pattern) + next_by_byte_.size() * sizeof(next_by_byte_[0]) +
                 follow_.size() * sizeof(uint64_t) + allowed_.size() * sizeof(uint64_t) +
                 next_state_.size() * sizeof(int32_t) + accepting_.size() +
                 atom_start_.size() * sizeof(uint32_t);
  for (const Ranges& r : classes_) bytes += r.size() * sizeof(r[0]);
  for (const auto& row : allowed_states_) bytes += row.size() * sizeof(uint64_t);
  return bytes;
}

uint64_t Pattern::Step(uint64_t s, uint32_t c, int written) const {
  if (!accepting_.empty()) {
    const int32_t d = StateStep(s == kStart ? 0 : static_cast<int32_t>(s - 1), c, written);
    return d < 0 ? 0 : static_cast<uint64_t>(d) + 1;
  }
  if (c < 128) return Next(s) & Allowed(written) & ascii_[c];
  uint64_t out = 0;
  for (uint64_t m = Next(s) & Allowed(written); m != 0; m &= m - 1) {
    const int q = __builtin_ctzll(m);
    if (regex::Intersects(classes_[q], c, c)) out |= uint64_t{1} << q;
  }
  return out;
}

bool Pattern::AnyIn(uint64_t s, uint32_t lo, uint32_t hi, int written) const {
  if (!accepting_.empty()) {
    const int32_t d = s == kStart ? 0 : static_cast<int32_t>(s - 1);
    for (auto k = std::upper_bound(atom_start_.begin(), atom_start_.end(), lo) - 1;
         k != atom_start_.end() && *k <= hi; ++k) {
      if (StateStep(d, std::max(lo, *k), written) >= 0) return true;
    }
    return false;
  }
  for (uint64_t m = Next(s) & Allowed(written); m != 0; m &= m - 1) {
    if (regex::Intersects(classes_[__builtin_ctzll(m)], lo, hi)) return true;
  }
  return false;
}

}  // namespace kvfold::structured
