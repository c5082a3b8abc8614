// Shrinking attention and split-KV failures by the case's structure instead of RapidCheck's picks
// (shrink.cpp says why). The runner (properties.cpp) runs RapidCheck without shrinking for these
// operations and then shrink_greedily: take the first candidate that fails the same way, start
// again from it, stop when none does or when `stop` says the time bound has passed.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "property.hpp"

namespace attncheck::detail {

// Smaller inputs made from `a`, the largest cuts first. head_sizes: the sizes the subject accepts;
// zero_keys: a sequence may lose every key (else each keeps one); page_sizes: the page sizes the
// subject accepts (a paged case is also offered at each smaller one); head_pairs: the (QK, V) head
// sizes it accepts where V has its own (a case with one shrinks to those and to plain sizes
// within both, never to another pair). The variants (softcap,
// window, sinks) are offered dropped one at a time. A candidate a property cannot use (a split case
// with one key left) simply does not fail, and is passed over.
std::vector<AttentionInput> attention_shrinks(const AttentionInput& a, const std::vector<int32_t>& head_sizes,
                                              bool zero_keys, const std::vector<int32_t>& page_sizes = {},
                                              const std::vector<ac_head_pair>& head_pairs = {});

struct ShrinkHooks {
  std::function<std::vector<AttentionInput>(const AttentionInput&)> candidates;
  std::function<std::optional<Outcome>(const Case&)> check;  // nullopt: the case was refused
  std::function<bool()> stop;                                // the time bound passed, or cancel
};
struct ShrinkResult {
  Case best;
  Outcome outcome;
  bool cut = false;  // stopped by `stop` before every candidate was rejected
  // A candidate crashed (the subject faulted): `best` is that case and `outcome` its crash.
  int64_t tried = 0;
};
ShrinkResult shrink_greedily(const Case& failing, const Outcome&, const ShrinkHooks&);

}  // namespace attncheck::detail
