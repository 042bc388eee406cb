// Statistics the benchmarks print: a figure over repeated runs is their median, which a
// shared machine's slow or fast moment moves least.
#ifndef KVFOLD_TOOLS_BENCH_STATS_H_
#define KVFOLD_TOOLS_BENCH_STATS_H_

#include <algorithm>
#include <vector>

namespace kvfold::bench {

// The middle value of v (the upper of the two middle ones for an even count); v not empty.
inline double Median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace kvfold::bench

#endif  // KVFOLD_TOOLS_BENCH_STATS_H_
