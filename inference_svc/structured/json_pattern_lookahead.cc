// A pattern with lookaheads as a deterministic automaton (json_pattern.h).
//
// A thread is a position of the pattern's automaton and, for each lookahead the thread
// has passed, the state of that lookahead's body's automaton fed every character since:
// what the thread still owes. A positive lookahead's body must match what follows it (its
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

constexpr int kBefore = 63;                     // a thread's position before any character
constexpr uint64_t kDischarged = ~uint64_t{0};  // a negative body that can match no more
constexpr uint32_t kLastCodePoint = 0x10FFFF;
constexpr size_t kMaxAtoms = 256;
// Thread steps while building, and table cells while holding lengths: bounded work
// whatever a request sends (a few milliseconds at most).
constexpr int64_t kMaxThreadSteps = int64_t{1} << 21;
constexpr int64_t kMaxLengthCells = int64_t{1} << 25;

struct Thread {
  int position = kBefore;
  std::array<uint64_t, kMaxLookaheads> owed{};  // per lookahead: 0 not passed
  auto operator<=>(const Thread&) const = default;
};
using Threads = std::vector<Thread>;  // sorted, distinct

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

  int64_t steps = 0;
  // The threads code point c leads to from a thread at `position` that owes `owed`,
  // through the lookaheads that follow it, into *out.
  std::function<void(uint64_t, const std::array<uint64_t, kMaxLookaheads>&, uint32_t, Threads*)>
      follow = [&](uint64_t next, const std::array<uint64_t, kMaxLookaheads>& owed, uint32_t c,
                   Threads* out) {
        for (; next != 0; next &= next - 1) {
          const int q = __builtin_ctzll(next);
          ++steps;
          if (is_look(q)) {
            auto passed = owed;
            passed[look_at[q]] = kStart;
            follow(follow_[q], passed, c, out);
            continue;
          }
          if (!regex::Intersects(classes_[q], c, c)) continue;
          Thread t{q, owed};
          bool alive = true;
          for (size_t i = 0; i < looks.size() && alive; ++i) {
            if (t.owed[i] == 0 || t.owed[i] == kDischarged) continue;
            t.owed[i] = looks[i].body->Step(t.owed[i], c, 0);
            if (t.owed[i] == 0) {
              alive = looks[i].negative;
              t.owed[i] = kDischarged;
            }
          }
          if (alive) out->push_back(t);
        }
      };
  auto next_of = [&](int position) { return position == kBefore ? first_ : follow_[position]; };
  // Whether the string may end with a thread at `position` that owes `owed`: there, or
  // past lookaheads that follow it.
  std::function<bool(int, const std::array<uint64_t, kMaxLookaheads>&)> ends =
      [&](int position, const std::array<uint64_t, kMaxLookaheads>& owed) {
        bool whole = position == kBefore ? nullable_ : (last_ >> position & 1) != 0;
        for (size_t i = 0; i < looks.size() && whole; ++i) {
          const uint64_t s = owed[i];
          if (s == 0 || s == kDischarged) continue;
          whole = looks[i].body->Accepts(s) != looks[i].negative;
        }
        if (whole) return true;
        for (uint64_t m = next_of(position); m != 0; m &= m - 1) {
          const int q = __builtin_ctzll(m);
          if (!is_look(q)) continue;
          auto passed = owed;
          passed[look_at[q]] = kStart;
          if (ends(q, passed)) return true;
        }
        return false;
      };

  std::map<Threads, int32_t> ids;
  std::vector<Threads> states = {Threads{Thread{}}};
  ids[states[0]] = 0;
  next_state_.clear();
  for (size_t d = 0; d < states.size(); ++d) {
    const Threads threads = states[d];
    for (size_t k = 0; k < atoms; ++k) {
      Threads out;
      for (const Thread& t : threads) follow(next_of(t.position), t.owed, atom_start_[k], &out);
      if (steps > kMaxThreadSteps) {
        return Refused("its lookaheads take too much work to compile; not supported");
      }
      std::sort(out.begin(), out.end());
      out.erase(std::unique(out.begin(), out.end()), out.end());
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
      if (ends(t.position, t.owed)) {
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
