// quantize_exact: a KV-cache quantiser (AC_OP_QUANTIZE) writes, for every element, a code the
// contract of plugin_abi.h allows: x / scale (the real quotient or its fp32 rounding) rounded to
// nearest with ties to even, overflow and infinities saturated where the subject declares
// AC_FP8_SATURATE and NaN / inf otherwise, NaN kept NaN. Judged element by element, no budget
// (judge_quantize.cpp). The failure names its class: rounding (a tie or a value rounded the wrong
// way: truncation, ties away from zero, a reciprocal scale), overflow (saturation against the
// declaration either way), nan_hidden (a NaN input written as a number).
//
// The attention properties judge a kernel on the codes it is given, so a quantiser's error never
// reaches them: this is where it is caught.
#include "../property.hpp"

namespace attncheck::detail {
namespace {

class QuantizeExact final : public Property {
 public:
  QuantizeExact()
      : Property(
            with_budget_use({"quantize_exact",
                             "A KV-cache quantiser writes the code of x / scale rounded to nearest even, "
                             "saturated or overflowing as declared, NaN kept NaN: element by element.",
                             "\"FP8 attention and FP8 KV caches, judged exactly\"", AC_OP_QUANTIZE, true},
                            PropertyInfo::BudgetUse::none)) {}

  void draw_input(Case& c, const gen::Domain& dom, uint32_t) const override {
    c.input = *gen::quantize_input(dom);
  }

  Outcome check(Ctx& ctx, const Case& c) const override {
    Outcome o;
    const Judgement J = run_once(ctx, c, o);
    const auto& q = std::get<QuantizeInput>(c.input);
    for (const Elem& e : J.elems)
      if (!e.within) fail_at(o, quantize_failure_class(q, e), "code outside the contract: ", e);
    return o;
  }
};

}  // namespace
AC_REGISTER_PROPERTY(17, QuantizeExact);
}  // namespace attncheck::detail
