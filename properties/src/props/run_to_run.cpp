// run_to_run: an attention or split-KV subject launched three times on the same input gives the
// same bits, O and LSE. Split-KV cases draw their split count and fold order, so every split count
// and fold order is launched three times over a run. A combine whose order depends on timing (atomics, an
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
      : Property(
            {"run_to_run",
             "Three launches on the same input give the same bits (O and LSE), for every split count and "
             "fold order.",
             "\"Bitwise reproducibility is a casualty\"", AC_OP_ATTENTION | AC_OP_SPLITKV, true}) {}

  Outcome check(Ctx& ctx, const Case& c) const override {
    Outcome o;
    const auto& a = std::get<AttentionInput>(c.input);
    before_launch(ctx, c);
    const AttentionOutput first = ctx.subject.attention(a, c.options);
    // Two more launches, each compared with the first: a kernel whose bits move from a later
    // launch of the same input on (a tuner that settles after a call or two, a cache filled by the
    // first calls) differs at the second or the third.
    AttentionOutput later[2];
    for (AttentionOutput& l : later) {
      before_launch(ctx, c, /*write=*/false);  // the same case is already in the write-ahead file
      l = ctx.subject.attention(a, c.options);
    }
    o.digest = digest_bits(first.out, first.lse);
    if (ctx.cv.nondeterministic) {  // the spread of each later launch from the first, as streamed_kv's
      for (const AttentionOutput& l : later) o.spread.add(spread_of(a.dtype, first, l));
      if (o.spread.differing > 0) {
        const Judgement J = judge_attention(a, first, ctx.cv, ctx.budget);
        for (const AttentionOutput& l : later)
          o.spread.max_budget = std::max(o.spread.max_budget, budget_spread(a, J, first, l));
      }
      return o;
    }
    for (int i = 0; i < 2; ++i) {
      const std::string diff = first_difference(a, first, later[i], i == 0 ? "second" : "third");
      if (diff.empty()) continue;
      const std::string how = c.op == op_name(AC_OP_SPLITKV)
                                  ? " (num_splits " + std::to_string(c.options.num_splits) + ", fold " +
                                        fold_name(c.options.fold_order) + ")"
                                  : "";
      fail(o, "nondeterministic",
           std::string(i == 0 ? "two launches" : "the first and third launches") + " on the same input " +
               diff + how);
      break;
    }
    return o;
  }
};

}  // namespace
AC_REGISTER_PROPERTY(65, RunToRun);
}  // namespace attncheck::detail
