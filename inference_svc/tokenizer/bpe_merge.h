// Greedy pairwise BPE merging in O(n log n): a doubly linked list of symbols plus a
// min-heap of candidate pairs with lazy invalidation. Shared by the llama2.c tokenizer
// (best score first) and the tokenizer.json BPE (lowest merge rank first).
#ifndef KVFOLD_INFERENCE_SVC_TOKENIZER_BPE_MERGE_H_
#define KVFOLD_INFERENCE_SVC_TOKENIZER_BPE_MERGE_H_

#include <cstdint>
#include <queue>
#include <vector>

namespace kvfold::tokenizer_internal {

// Repeatedly replaces the adjacent pair (a, b) of `*ids` with the smallest Key by its
// merged id, the LEFTMOST such pair on ties, until no adjacent pair can merge. This is
// exactly the result of the quadratic loop "scan all pairs, keep the first strictly best,
// merge it, repeat" (llama2.c run.c encode, HF BPE merge_word, SentencePiece BPE).
//
// pair_fn(int32_t a, int32_t b, Key* key, int32_t* merged) -> bool: whether (a, b) can
// merge, and if so its priority (smaller merges first) and the resulting id (>= 0).
template <typename Key, typename PairFn>
void GreedyMerge(std::vector<int32_t>* ids, PairFn&& pair_fn) {
  const int32_t n = static_cast<int32_t>(ids->size());
  if (n < 2) return;
  std::vector<int32_t>& sym = *ids;  // sym[i] = -1 once node i has been merged away
  std::vector<int32_t> prev(n), next(n);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    Key key;
    int32_t left;  // node index; list order == index order, so "leftmost" == smallest
    int32_t right;
    int32_t left_id;
    int32_t right_id;
    int32_t merged;
  };
  struct Worse {
    bool operator()(const Candidate& a, const Candidate& b) const {
      if (a.key < b.key) return false;
      if (b.key < a.key) return true;
      return a.left > b.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, Worse> heap;
  auto push = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    Key key;
    int32_t merged;
    if (pair_fn(sym[left], sym[right], &key, &merged)) {
      heap.push(Candidate{key, left, right, sym[left], sym[right], merged});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i, i + 1);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    // Stale when either node changed or died since the candidate was pushed.
    if (sym[c.left] != c.left_id || sym[c.right] != c.right_id || next[c.left] != c.right) {
      continue;
    }
    sym[c.left] = c.merged;
    sym[c.right] = -1;
    next[c.left] = next[c.right];
    if (next[c.right] >= 0) prev[next[c.right]] = c.left;
    push(prev[c.left], c.left);
    push(c.left, next[c.left]);
  }
  int32_t out = 0;
  for (int32_t i = 0; i < n; ++i) {
    if (sym[i] >= 0) sym[out++] = sym[i];
  }
  sym.resize(out);
}

}  // namespace kvfold::tokenizer_internal

#endif  // KVFOLD_INFERENCE_SVC_TOKENIZER_BPE_MERGE_H_
