// merge_sentinels: merging with an empty state returns the other state; +inf (FlashAttention-2's
// sentinel) is read as empty; two empty states give O = 0 and -inf, never NaN. Judged by the
// accuracy rule on merge inputs with at least one empty side per row.
#include "../property.hpp"

namespace attncheck::detail {
namespace {

class MergeSentinels final : public Property {
 public:
  MergeSentinels()
      : Property({"merge_sentinels",
                  "Merging with an empty state returns the other state; +inf is empty; two empty states give "
                  "O = 0 and "
                  "-inf, never NaN.",
                  "\"The base case is a NaN factory\"", AC_OP_MERGE, true}) {}

  void draw_input(Case& c, const gen::Domain& dom, uint32_t) const override {
    c.input = *gen::merge_sentinel_input(dom);
  }

  Outcome check(Ctx& ctx, const Case& c) const override {
    Outcome o;
    const Judgement J = run_once(ctx, c, o);
    rule_accuracy(o, J, false);
    if (!o.ok && o.failure_class != "nonfinite") o.failure_class = "sentinel";
    return o;
  }

  bool replay_adds_accuracy() const override { return true; }
};

}  // namespace
AC_REGISTER_PROPERTY(40, MergeSentinels);
}  // namespace attncheck::detail
