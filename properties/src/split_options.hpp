// The split options of split-KV cases (num_splits and fold order), chosen in one place for the
// property runner, the tiling report, split_order_drift and the peer oracles.
#pragma once
#include <algorithm>
#include <cstddef>
#include <vector>

#include "attncheck/names.hpp"
#include "attncheck/plugin_abi.h"

namespace attncheck::detail {

// The largest num_splits a split-KV subject is asked for: its max_splits, or 1 (the unsplit
// combine, which every subject has) when it declares less.
inline int max_num_splits(const ac_caps& caps) { return std::max(1, caps.max_splits); }

// Every num_splits a split-KV subject is asked for, 1..max_num_splits.
inline std::vector<int> split_counts(const ac_caps& caps) {
  std::vector<int> counts(size_t(max_num_splits(caps)));
  for (size_t i = 0; i < counts.size(); ++i) counts[i] = int(i) + 1;
  return counts;
}

// num_splits of a split-KV case: uniform over those of `offered` the subject is asked for (at most
// max_num_splits), its index drawn by pick(n) in [0, n): RapidCheck's generator in the runner, so
// that the choice shrinks with the case, and the oracle's std::mt19937_64 in the peer oracles. 1,
// with no draw, when none of `offered` is.
template <class Pick>
int draw_num_splits(const ac_caps& caps, const std::vector<int>& offered, Pick&& pick) {
  std::vector<int> taken;
  for (int n : offered)
    if (n <= max_num_splits(caps)) taken.push_back(n);
  return taken.empty() ? 1 : taken[size_t(pick(int(taken.size())))];
}

// The fold orders a split-KV subject is run with where every one is tried: those it declares, or
// the left fold (the ABI's default) when it declares none.
inline std::vector<ac_fold> tried_folds(const ac_caps& caps) {
  return caps.fold_orders ? folds_in(caps.fold_orders) : std::vector<ac_fold>{AC_FOLD_LEFT};
}

}  // namespace attncheck::detail
