// fp8_output: O asked for in FP8 (plugin_abi.h AC_FP8_OUT, cuDNN's FP8 output with scale_o) is, for
// every element, a code the contract allows: O within the fp32 output's budget of the exact
// attention, divided by output_scale in fp32, cast to the format to nearest even, saturating where
// the subject declares AC_FP8_SATURATE and overflowing to NaN (e5m2: infinity) otherwise
// (judge_attention.cpp, budgets.cpp fp8_output_interval). The scales are drawn around max|V| /
// largest (attention_fp8_output_input): rows at the largest code, past it, and on the subnormals.
// The LSE stays fp32 and is held to its budget as in accuracy.
#include "../property.hpp"

namespace attncheck::detail {
namespace {

class Fp8Output final : public Property {
 public:
  Fp8Output()
      : Property({"fp8_output",
                  "O asked for in FP8 is, element by element, the code of O / output_scale the contract "
                  "allows: O within the fp32 budget, one fp32 division, rounded to nearest even, saturated "
                  "or overflowing as declared; the LSE within budget.",
                  "\"FP8 attention and FP8 KV caches, judged exactly\"", AC_OP_ATTENTION | AC_OP_SPLITKV,
                  true}) {}

  bool applies_to(const Subject& s, uint32_t) const override {
    return (s.caps().kv_dtypes & kFp8DtypeBits) != 0 && (s.caps().fp8 & AC_FP8_OUT) != 0;
  }
  void draw_input(Case& c, const gen::Domain& dom, uint32_t) const override {
    c.input = *gen::attention_fp8_output_input(dom);
  }

  Outcome check(Ctx& ctx, const Case& c) const override { return check_accuracy(ctx, c, false); }
};

}  // namespace
AC_REGISTER_PROPERTY(18, Fp8Output);
}  // namespace attncheck::detail
