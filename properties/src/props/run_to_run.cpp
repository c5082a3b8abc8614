// run_to_run: an attention or split-KV subject launched twice on the same input gives the same
// bits, O and LSE. Split-KV cases draw their split count and fold order, so every split count and
// fold order is launched twice over a run. A combine whose order depends on timing (atomics, an
// unordered reduction) fails here whatever its accuracy; the first differing element is shown with
// both launches' bits. A subject declared nondeterministic by design (AC_CAP_NONDETERMINISTIC)
// passes instead, and the run reports the spread: how many outputs differed and by how many ulps.
#include <cmath>

#include "../property.hpp"
#include "attncheck/names.hpp"

namespace attncheck::detail {
namespace {

class RunToRun final : public Property {
 public:
  RunToRun()
      : Property({"run_to_run",
                  "Two launches on the same input give the same bits (O and LSE), for every split count and "
                  "fold order.",
                  "\"Bitwise reproducibility is a casualty\"", AC_OP_ATTENTION | AC_OP_SPLITKV, true}) {}

  Outcome check(Ctx& ctx, const Case& c) const override {
    Outcome o;
    const auto& a = std::get<AttentionInput>(c.input);
    before_launch(ctx, c);
    const AttentionOutput first = ctx.subject.attention(a, c.options);
    before_launch(ctx, c, /*write=*/false);  // the same case is already in the write-ahead file
    const AttentionOutput second = ctx.subject.attention(a, c.options);
    o.digest = digest_bits(first.out, first.lse);
    if (ctx.cv.nondeterministic) {
      o.spread = spread_of(a.dtype, first, second);
      if (o.spread.differing > 0)
        o.spread.max_budget = budget_spread(a, judge_attention(a, first, ctx.cv, ctx.budget), first, second);
      return o;
    }
    const std::string diff = first_difference(a, first, second);
    if (!diff.empty()) {
      const std::string how = c.op == op_name(AC_OP_SPLITKV)
                                  ? " (num_splits " + std::to_string(c.options.num_splits) + ", fold " +
                                        fold_name(c.options.fold_order) + ")"
                                  : "";
      fail(o, "nondeterministic", "two launches on the same input " + diff + how);
    }
    return o;
  }
};

}  // namespace
AC_REGISTER_PROPERTY(65, RunToRun);
}  // namespace attncheck::detail
