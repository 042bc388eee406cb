// A pattern with lookaheads as a deterministic automaton (json_pattern.h).
//
// A thread is a set of positions of the pattern's automaton and, for each lookahead its
// path has passed, the state of that lookahead's body's automaton fed every character
// since: what the thread still owes (the paths that owe the same share a thread). A positive lookahead's body must match what follows it (its
// body's state dies: so does the thread; the thread may end only where the body accepts);
// a negative one's must not (its body's state dies: nothing more is owed; the thread may
// not end where the body accepts). A lookahead is passed at most once by a thread (none
// stands inside an unbounded repeat), so one state per lookahead is all a thread needs.
// The automaton's states are the sets of threads reached by the characters written,
// built from the start by the subset construction over the alphabet's atoms (the ranges
// of code points no class boundary splits); the states from which no match can be
// reached are then cut off, so every state left can still be completed.
#include <algorithm>
#include <array>
#include <compare>
#include <functional>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "inference_svc/structured/json_pattern.h"
#include "inference_svc/structured/json_regex.h"

namespace kvfold::structured {
namespace {

constexpr uint64_t kDischarged = ~uint64_t{0};  // a negative body that can match no more
constexpr uint32_t kLastCodePoint = 0x10FFFF;
constexpr size_t kMaxAtoms = 256;
// Thread steps while building, and table cells while holding lengths: bounded work
// whatever a request sends (tens of milliseconds at most; the patterns of
// docs/structured-output.md build in 0.1-8 ms).
constexpr int64_t kMaxThreadSteps = int64_t{1} << 21;
constexpr int64_t kMaxLengthCells = int64_t{1} << 25;

// Per lookahead: 0 not passed, kDischarged, or its body's state.
using Owed = std::array<uint64_t, kMaxLookaheads>;

// Threads that owe the same, at a set of positions (bit 63: before any character).
struct Thread {
  Owed owed{};
  uint64_t positions = 0;
  auto operator<=>(const Thread&) const = default;
};
using Threads = std::vector<Thread>;  // sorted, each `owed` once

// The canonical form of a set of threads, fewer where that keeps what they match: threads
// that owe the same are one (their positions together); threads at the same positions
// that owe the same but for one positive lookahead are one whose body state is the union
// of theirs (a body matches from a union of its states where it matches from either; not
// passed, it owes nothing); and of two such threads differing in a negative lookahead,
// one whose body state holds the other's is dropped (whatever it lets end, the other lets
// end too).
// `negative`: bit i for a negative lookahead i, of `count`.
void Simplify(size_t count, uint32_t negative, Threads* threads) {
  auto merge_owing_the_same = [threads] {
    std::sort(threads->begin(), threads->end());
    Threads out;
    for (const Thread& t : *threads) {
      if (!out.empty() && out.back().owed == t.owed) {
        out.back().positions |= t.positions;
      } else {
        out.push_back(t);
      }
    }
    *threads = std::move(out);
  };
  merge_owing_the_same();
  for (bool fewer = true; fewer;) {
    fewer = false;
    for (size_t i = 0; i < count && threads->size() > 1; ++i) {
      // Sorted by the positions and what is owed but lookahead i, then by that.
      auto key = [i](const Thread& t) {
        Owed rest = t.owed;
        rest[i] = 0;
        return std::make_pair(t.positions, rest);
      };
      std::sort(threads->begin(), threads->end(), [&](const Thread& a, const Thread& b) {
        const auto ka = key(a), kb = key(b);
        return ka != kb ? ka < kb : a.owed[i] < b.owed[i];
      });
      // Not passed, or discharged: owes nothing (an empty body state).
      auto bits = [i](const Thread& t) { return t.owed[i] == kDischarged ? 0 : t.owed[i]; };
      Threads out;
      const Threads& in = *threads;
      for (size_t a = 0, b = 0; a < in.size(); a = b) {
        for (b = a + 1; b < in.size() && key(in[b]) == key(in[a]);) ++b;
        if (!(negative >> i & 1)) {
          Thread one = in[a];
          for (size_t j = a + 1; j < b; ++j) {
            const uint64_t u = one.owed[i], v = in[j].owed[i];
            one.owed[i] = u == 0 || v == 0 ? 0 : u | v;
          }
          out.push_back(one);
          continue;
        }
        for (size_t j = a; j < b; ++j) {
          bool held = false;  // another thread's body state within this one's
          for (size_t o = a; o < b && !held; ++o) {
            held = o != j && (bits(in[o]) & ~bits(in[j])) == 0 &&
                   (bits(in[o]) != bits(in[j]) || o < j);
          }
          if (!held) out.push_back(in[j]);
        }
      }
      fewer = fewer || out.size() < threads->size();
      *threads = std::move(out);
      merge_owing_the_same();
    }
  }
}

absl::Status Refused(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("pattern: ", what));
}

}  // namespace

absl::Status Pattern::Determinize(const std::vector<Lookahead>& looks) {
  std::vector<int> look_at(classes_.size(), -1);
  for (size_t i = 0; i < looks.size(); ++i) look_at[looks[i].position] = static_cast<int>(i);
  auto is_look = [&](int q) { return look_at[q] >= 0; };

  // A body that asks for the string's start (^) holds only at a lookahead no character
  // comes before: reached from the start through lookaheads alone, and from nowhere else.
  uint64_t at_start = 0, later = 0;
  for (uint64_t reach = first_; reach & ~at_start;) {
    const uint64_t fresh = reach & ~at_start;
    at_start |= fresh;
    reach = 0;
    for (uint64_t m = fresh; m != 0; m &= m - 1) {
      if (is_look(__builtin_ctzll(m))) reach |= follow_[__builtin_ctzll(m)];
    }
  }
  for (size_t q = 0; q < classes_.size(); ++q) {
    if (!is_look(static_cast<int>(q))) later |= follow_[q];
  }
  for (uint64_t grown = later;;) {
    for (uint64_t m = later; m != 0; m &= m - 1) {
      if (is_look(__builtin_ctzll(m))) grown |= follow_[__builtin_ctzll(m)];
    }
    if (grown == later) break;
    later = grown;
  }
  for (const Lookahead& look : looks) {
    const uint64_t bit = uint64_t{1} << look.position;
    if (look.at_start && ((at_start & bit) == 0 || (later & bit) != 0)) {
      return Refused("'^' in a lookahead that does not stand at the string's start");
    }
  }

  // The atoms: every class of the pattern and the bodies is a union of them.
  std::vector<uint32_t> bounds = {0};
  auto cut = [&bounds](const std::vector<Ranges>& classes) {
    for (const Ranges& r : classes) {
      for (const auto& [lo, hi] : r) {
        bounds.push_back(lo);
        if (hi < kLastCodePoint) bounds.push_back(hi + 1);
      }
    }
  };
  cut(classes_);
  for (const Lookahead& look : looks) cut(look.body->classes_);
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  if (bounds.size() > kMaxAtoms) {
    return Refused(
        absl::StrCat("a pattern with lookaheads whose classes split the characters "
                     "into more than ",
                     kMaxAtoms, " ranges is not supported"));
  }
  atom_start_ = bounds;
  const size_t atoms = atom_start_.size();
  for (uint32_t c = 0; c < 128; ++c) {
    atom_of_ascii_[c] = static_cast<uint8_t>(
        std::upper_bound(atom_start_.begin(), atom_start_.end(), c) - atom_start_.begin() - 1);
  }

  // Per atom, the positions whose class holds it.
  std::vector<uint64_t> holds(atoms, 0);
  for (size_t k = 0; k < atoms; ++k) {
    for (size_t q = 0; q < classes_.size(); ++q) {
      if (regex::Intersects(classes_[q], atom_start_[k], atom_start_[k]))
        holds[k] |= uint64_t{1} << q;
    }
  }
  uint64_t look_positions = 0;
  uint32_t negative = 0;
  for (size_t i = 0; i < looks.size(); ++i) {
    look_positions |= uint64_t{1} << looks[i].position;
    negative |= looks[i].negative ? uint32_t{1} << i : 0;
  }

  // Per lookahead, the positions of its body from which every continuation matches:
  // those of a last repeat of any character (the tail of a body that does not end with $),
  // and last positions that such a repeat follows.
  std::vector<uint64_t> anything(looks.size(), 0);
  for (size_t i = 0; i < looks.size(); ++i) {
    const Pattern& body = *looks[i].body;
    uint64_t loops = 0;
    for (size_t q = 0; q < body.classes_.size(); ++q) {
      const uint64_t bit = uint64_t{1} << q;
      const Ranges& r = body.classes_[q];
      const bool every = r.size() == 2 && r[0] == std::make_pair(uint32_t{0}, uint32_t{0xD7FF}) &&
                         r[1] == std::make_pair(uint32_t{0xE000}, kLastCodePoint);
      if (every && (body.follow_[q] & bit) != 0 && (body.last_ & bit) != 0) loops |= bit;
    }
    anything[i] = loops;
    for (size_t q = 0; q < body.classes_.size(); ++q) {
      if ((body.last_ >> q & 1) != 0 && (body.follow_[q] & loops) != 0) {
        anything[i] |= uint64_t{1} << q;
      }
    }
  }

  int64_t steps = 0;
  // Into *out, the threads that atom k leads to from the candidate positions `next` of
  // threads that owe `owed`: those whose class holds it, and past each lookahead among
  // the candidates, what follows it, owing that lookahead too.
  std::function<void(uint64_t, const Owed&, size_t, Threads*)> spread =
      [&](uint64_t next, const Owed& owed, size_t k, Threads* out) {
        ++steps;
        for (uint64_t m = next & look_positions; m != 0; m &= m - 1) {
          const int q = __builtin_ctzll(m);
          Owed passed = owed;
          passed[look_at[q]] = kStart;
          spread(follow_[q], passed, k, out);
        }
        const uint64_t taken = next & holds[k];
        if (taken == 0) return;
        Thread t{owed, taken};
        for (size_t i = 0; i < looks.size(); ++i) {
          if (t.owed[i] == 0 || t.owed[i] == kDischarged) continue;
          t.owed[i] = looks[i].body->Step(t.owed[i], atom_start_[k], 0);
          if (t.owed[i] == 0) {  // the body can match no more
            if (!looks[i].negative) return;
            t.owed[i] = kDischarged;
          } else if ((t.owed[i] & anything[i]) != 0) {  // the body matches whatever follows
            if (looks[i].negative) return;
            t.owed[i] = 0;
          }
        }
        out->push_back(t);
      };
  // Whether the string may end with threads at `positions` that owe `owed`: there, or
  // past lookaheads that follow them.
  std::function<bool(uint64_t, const Owed&)> ends = [&](uint64_t positions, const Owed& owed) {
    bool whole = (positions & last_) != 0 || ((positions & kStart) != 0 && nullable_);
    for (size_t i = 0; i < looks.size() && whole; ++i) {
      if (owed[i] == 0 || owed[i] == kDischarged) continue;
      whole = looks[i].body->Accepts(owed[i]) != looks[i].negative;
    }
    if (whole) return true;
    for (uint64_t m = Next(positions) & look_positions; m != 0; m &= m - 1) {
      const int q = __builtin_ctzll(m);
      Owed passed = owed;
      passed[look_at[q]] = kStart;
      if (ends(uint64_t{1} << q, passed)) return true;
    }
    return false;
  };

  std::map<Threads, int32_t> ids;
  std::vector<Threads> states = {Threads{Thread{Owed{}, kStart}}};
  ids[states[0]] = 0;
  next_state_.clear();
  for (size_t d = 0; d < states.size(); ++d) {
    const Threads threads = states[d];
    for (size_t k = 0; k < atoms; ++k) {
      Threads out;
      for (const Thread& t : threads) spread(Next(t.positions), t.owed, k, &out);
      if (steps > kMaxThreadSteps) {
        return Refused("its lookaheads take too much work to compile; not supported");
      }
      Simplify(looks.size(), negative, &out);
      if (out.empty()) {
        next_state_.push_back(-1);
        continue;
      }
      auto [it, fresh] = ids.emplace(out, static_cast<int32_t>(states.size()));
      if (fresh) {
        if (static_cast<int>(states.size()) >= kMaxLookaheadStates) {
          return Refused(absl::StrCat("its lookaheads make more than ", kMaxLookaheadStates,
                                      " states; not supported"));
        }
        states.push_back(std::move(out));
      }
      next_state_.push_back(it->second);
    }
  }
  accepting_.assign(states.size(), 0);
  for (size_t d = 0; d < states.size(); ++d) {
    for (const Thread& t : states[d]) {
      if (ends(t.positions, t.owed)) {
        accepting_[d] = 1;
        break;
      }
    }
  }

  // Cut off the states no match can be reached from.
  std::vector<std::vector<int32_t>> into(states.size());
  for (size_t d = 0; d < states.size(); ++d) {
    for (size_t k = 0; k < atoms; ++k) {
      if (next_state_[d * atoms + k] >= 0) {
        into[next_state_[d * atoms + k]].push_back(static_cast<int32_t>(d));
      }
    }
  }
  std::vector<uint8_t> live(accepting_);
  std::vector<int32_t> todo;
  for (size_t d = 0; d < states.size(); ++d) {
    if (live[d]) todo.push_back(static_cast<int32_t>(d));
  }
  while (!todo.empty()) {
    const int32_t d = todo.back();
    todo.pop_back();
    for (int32_t from : into[d]) {
      if (!live[from]) {
        live[from] = 1;
        todo.push_back(from);
      }
    }
  }
  if (!live[0]) return Refused("no string matches it (its lookaheads rule out every match)");
  for (int32_t& next : next_state_) {
    if (next >= 0 && !live[next]) next = -1;
  }
  // The tables of the positions are no longer stepped.
  next_by_byte_.clear();
  return absl::OkStatus();
}

absl::Status Pattern::HoldStateLengths(int min_length, int max_length) {
  max_length_ = max_length;
  const int64_t states = static_cast<int64_t>(accepting_.size());
  const int64_t atoms = static_cast<int64_t>(atom_start_.size());
  const size_t words = static_cast<size_t>((states + 63) / 64);
  // ends[l]: the states from which a match ends after exactly l more characters. A path
  // at least `states` longer than l holds a loop it can leave out, so a state with a match
  // of length l or more has one shorter than l + states.
  const int horizon = (max_length >= 0 ? max_length : min_length) + static_cast<int>(states);
  if (static_cast<int64_t>(horizon) * states * atoms > kMaxLengthCells) {
    return Refused(
        "minLength / maxLength beside this pattern's lookaheads take too much work; not "
        "supported");
  }
  std::vector<std::vector<uint64_t>> ends(horizon + 1, std::vector<uint64_t>(words));
  for (int64_t d = 0; d < states; ++d) {
    if (accepting_[d]) ends[0][d / 64] |= uint64_t{1} << (d % 64);
  }
  for (int l = 1; l <= horizon; ++l) {
    for (int64_t d = 0; d < states; ++d) {
      for (int64_t k = 0; k < atoms; ++k) {
        const int32_t next = next_state_[d * atoms + k];
        if (next >= 0 && (ends[l - 1][next / 64] >> (next % 64) & 1)) {
          ends[l][d / 64] |= uint64_t{1} << (d % 64);
          break;
        }
      }
    }
  }
  const int table = max_length >= 0 ? max_length + 1 : min_length;
  allowed_states_.assign(table, std::vector<uint64_t>(words));
  for (int w = 1; w < table; ++w) {
    const int from = std::max(0, min_length - w);
    const int to = max_length >= 0 ? max_length - w : from + static_cast<int>(states);
    for (int l = from; l <= to; ++l) {
      for (size_t i = 0; i < words; ++i) allowed_states_[w][i] |= ends[l][i];
    }
  }
  // The empty string, or a first character that leads somewhere.
  bool some = accepting_[0] && min_length == 0;
  for (int64_t k = 0; k < atoms && !some; ++k) some = StateStep(0, atom_start_[k], 1) >= 0;
  if (!some) {
    return Refused(absl::StrCat("no match has a length in [", min_length, ", ",
                                max_length >= 0 ? absl::StrCat(max_length) : std::string("any"),
                                "] characters"));
  }
  return absl::OkStatus();
}

bool Pattern::StateAllowed(int32_t d, int written) const {
  if (written < static_cast<int>(allowed_states_.size())) {
    return (allowed_states_[written][d / 64] >> (d % 64) & 1) != 0;
  }
  // Past the table: with a maximum, past it; else the minimum is met.
  return max_length_ < 0;
}

int32_t Pattern::StateStep(int32_t d, uint32_t c, int written) const {
  const size_t atom =
      c < 128 ? atom_of_ascii_[c]
              : static_cast<size_t>(std::upper_bound(atom_start_.begin(), atom_start_.end(), c) -
                                    atom_start_.begin() - 1);
  const int32_t next = next_state_[d * atom_start_.size() + atom];
  return next >= 0 && StateAllowed(next, written) ? next : -1;
}

}  // namespace kvfold::structured
