// accuracy: every output within the subject's budget of the exact reference. The budget is the
// cancellation-aware bound of budgets.cpp; the plain ulp error is reported beside it, never gated.
#include "../property.hpp"

namespace attncheck::detail {
namespace {

class Accuracy final : public Property {
 public:
  Accuracy()
      : Property({"accuracy",
                  "Every output is within the subject's ulp budget of the exact reference "
                  "(cancellation-aware bound; "
                  "plain ulp reported).",
                  "\"Verify it on numbers\", \"What has to be fp32\"",
                  AC_OP_MERGE | AC_OP_SOFTMAX | AC_OP_ATTENTION | AC_OP_SPLITKV, true}) {}

  Outcome check(Ctx& ctx, const Case& c) const override { return check_accuracy(ctx, c, false); }
};

}  // namespace
AC_REGISTER_PROPERTY(10, Accuracy);
}  // namespace attncheck::detail
