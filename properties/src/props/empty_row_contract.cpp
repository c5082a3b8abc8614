// empty_row_contract: a row that sees no key has no softmax to take; the contract is O = 0 exactly
// and the declared LSE sentinel (-inf, or +inf for FlashAttention-2-compatible subjects).
#include "../property.hpp"

namespace attncheck::detail {
namespace {

class EmptyRowContract final : public Property {
 public:
  EmptyRowContract()
      : Property(with_budget_use(
            {"empty_row_contract",
             "A row with no visible key gives O = 0 exactly and the declared LSE sentinel (softmax: Y = 0).",
             "\"The base case is a NaN factory\"", AC_OP_SOFTMAX | AC_OP_ATTENTION | AC_OP_SPLITKV, true},
            PropertyInfo::BudgetUse::none)) {}

  // A subject refusing zero keys has empty attention rows only through a mask or causal alignment.
  bool applies_to(const Subject& s, uint32_t op) const override {
    return op == AC_OP_SOFTMAX || gen::can_draw_empty_attention_rows(gen::domain_for(s, 64));
  }

  void draw_input(Case& c, const gen::Domain& dom, uint32_t op) const override {
    if (op == AC_OP_SOFTMAX)
      c.input = *gen::softmax_input(dom);
    else
      c.input = *gen::attention_empty_rows_input(dom);
  }

  Outcome check(Ctx& ctx, const Case& c) const override {
    Outcome o;
    const Judgement J = run_once(ctx, c, o);
    rule_empty(o, J, ctx.cv);
    return o;
  }

  bool replay_adds_accuracy() const override { return true; }
};

}  // namespace
AC_REGISTER_PROPERTY(30, EmptyRowContract);
}  // namespace attncheck::detail
