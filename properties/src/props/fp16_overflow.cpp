// fp16_overflow: a subject that declares a naive exp (AC_FEAT_NAIVE_EXP) must overflow exactly
// where the exact exp rounds to inf in the storage type, and nowhere else; safe and online
// variants never overflow. Cases straddle the overflow band (fp16: 11.0859375 / 11.09375).
#include "../property.hpp"

namespace attncheck::detail {
namespace {

class Fp16Overflow final : public Property {
 public:
  Fp16Overflow()
      : Property(with_budget_use(
            {"fp16_overflow",
             "A declared naive exp overflows exactly where the exact exp rounds to inf in the storage "
             "type; safe "
             "and online variants never do.",
             "\"(1) Naive softmax, and why it is unusable\"", AC_OP_SOFTMAX | AC_OP_ATTENTION | AC_OP_SPLITKV,
             true},
            PropertyInfo::BudgetUse::none)) {}

  void draw_input(Case& c, const gen::Domain& dom, uint32_t op) const override {
    if (op == AC_OP_SOFTMAX)
      c.input = *gen::softmax_overflow_band_input(dom);
    else
      c.input = *gen::attention_overflow_band_input(dom);
  }

  Outcome check(Ctx& ctx, const Case& c) const override {
    Outcome o;
    const Judgement J = run_once(ctx, c, o);
    rule_overflow(o, J, ctx.cv);
    return o;
  }

  bool replay_adds_accuracy() const override { return true; }
};

}  // namespace
AC_REGISTER_PROPERTY(70, Fp16Overflow);
}  // namespace attncheck::detail
