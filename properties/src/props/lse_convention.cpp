// lse_convention: the LSE is in the declared base (e or 2) and layout ([tokens, heads] or
// [heads, tokens]); a wrong one is named as base or layout confusion when the other reading fits.
#include "../property.hpp"

namespace attncheck::detail {
namespace {

class LseConvention final : public Property {
 public:
  LseConvention()
      : Property(with_budget_use({"lse_convention", "The LSE matches the declared base (e or 2) and layout.",
                                  "\"The state that gets passed around is the log-sum-exp\"",
                                  AC_OP_MERGE | AC_OP_ATTENTION | AC_OP_SPLITKV, true},
                                 PropertyInfo::BudgetUse::lse_only)) {}

  // A merge always returns an LSE; attention only when it declares AC_FEAT_LSE.
  bool applies_to(const Subject& s, uint32_t op) const override {
    return op == AC_OP_MERGE || (s.caps().features & AC_FEAT_LSE) != 0;
  }

  Outcome check(Ctx& ctx, const Case& c) const override {
    Outcome o;
    const Judgement J = run_once(ctx, c, o);
    rule_lse(o, J, ctx.cv);
    return o;
  }

  bool replay_adds_accuracy() const override { return true; }
};

}  // namespace
AC_REGISTER_PROPERTY(80, LseConvention);
}  // namespace attncheck::detail
