// no_spurious_nonfinite: no NaN or Inf where the exact result is finite, except the infinity that
// is its correct rounding (an exact value past the output format's largest finite one). Rows where a
// declared naive exp is predicted to overflow are the subject's stated hazard and are skipped.
#include "../property.hpp"

namespace attncheck::detail {
namespace {

class NoSpuriousNonfinite final : public Property {
 public:
  NoSpuriousNonfinite()
      : Property(with_budget_use(
            {"no_spurious_nonfinite",
             "No NaN or Inf where the exact result is finite and rounds to a finite output "
             "(declared naive-exp hazard rows excepted).",
             "\"(2) Safe softmax, and why it costs three passes\", \"The base case is a NaN factory\"",
             AC_OP_MERGE | AC_OP_SOFTMAX | AC_OP_ATTENTION | AC_OP_SPLITKV, true},
            PropertyInfo::BudgetUse::none)) {}

  Outcome check(Ctx& ctx, const Case& c) const override { return check_accuracy(ctx, c, true); }
};

}  // namespace
AC_REGISTER_PROPERTY(20, NoSpuriousNonfinite);
}  // namespace attncheck::detail
