// fp8_amax: the two maxima an FP8 call writes beside O (plugin_abi.h AC_FP8_AMAX, cuDNN's Amax_S and
// Amax_O), from which an engine sets the next step's scales: the largest normalised softmax weight
// e^(s - LSE) over every row and visible key, and the largest |O| before output_scale and any cast.
// Each must lie in the interval the exact path derives from every row (judge_attention.cpp
// judge_row_exact; budgets.cpp amax_weight_log_allowance and amax_o_allowance); O and the LSE are
// held to their budgets as in accuracy. A maximum taken before the row's division by its sum (always
// 1), or after output_scale, or over one tile, lies outside.
#include <cstdio>

#include "../property.hpp"

namespace attncheck::detail {
namespace {

std::string amax_line(const char* what, float got, double lo, double hi, const char* exact_what, double exact,
                      int64_t row, int64_t heads) {
  char buf[400];
  if (row < 0)
    std::snprintf(buf, sizeof buf, "%s %s (%.9g) outside the allowed [%.9g, %.9g]; no row has a key", what,
                  hexfloat(double(got)).c_str(), double(got), lo, hi);
  else
    std::snprintf(
        buf, sizeof buf,
        "%s %s (%.9g) outside the allowed [%.9g, %.9g]; the exact %s is %.9g, at token %lld head %lld", what,
        hexfloat(double(got)).c_str(), double(got), lo, hi, exact_what, exact, (long long)(row / heads),
        (long long)(row % heads));
  return buf;
}

class Fp8Amax final : public Property {
 public:
  Fp8Amax()
      : Property({"fp8_amax",
                  "The maxima an FP8 call writes (cuDNN's Amax_S and Amax_O) are the largest normalised "
                  "softmax weight and the largest |O| before the output's scale, each within the interval "
                  "the exact attention allows; O and the LSE within budget.",
                  "\"FP8 attention and FP8 KV caches, judged exactly\"", AC_OP_ATTENTION | AC_OP_SPLITKV,
                  true}) {}

  bool applies_to(const Subject& s, uint32_t) const override {
    return (s.caps().kv_dtypes & kFp8DtypeBits) != 0 && (s.caps().fp8 & AC_FP8_AMAX) != 0;
  }
  void draw_input(Case& c, const gen::Domain& dom, uint32_t) const override {
    c.input = *gen::attention_fp8_amax_input(dom);
  }

  std::string case_problem(const Case& c) const override {
    const auto* a = std::get_if<AttentionInput>(&c.input);
    return a && a->want_amax ? ""
                             : "fp8_amax judges the maxima a case asks for, and its input.amax is not true";
  }
  Outcome check(Ctx& ctx, const Case& c) const override {
    Outcome o;
    const Judgement J = run_once(ctx, c, o);
    rule_accuracy(o, J, false);
    if (!o.ok) return o;
    const AmaxBounds& m = J.amax;
    if (!m.asked) {
      fail(o, "internal", "fp8_amax: the case does not ask for the maxima (its input.amax is not true)");
      return o;
    }
    if (!m.complete) {
      fail(o, "internal", "fp8_amax: the case's rows were not all judged (the maxima need every row)");
      return o;
    }
    if (m.got.size() != 2) {
      fail(o, "amax", "the subject wrote no maxima (AC_FP8_AMAX declared)");
      return o;
    }
    if (!m.p_unjudged && !(m.got[0] >= m.p_lo && m.got[0] <= m.p_hi))
      fail(o, "amax",
           amax_line("amax of P", m.got[0], m.p_lo, m.p_hi, "largest weight", m.p_exact, m.p_row,
                     J.num_heads));
    else if (!m.o_unjudged && !(m.got[1] >= m.o_lo && m.got[1] <= m.o_hi))
      fail(o, "amax",
           amax_line("amax of O", m.got[1], m.o_lo, m.o_hi, "largest |O|", m.o_exact, m.o_row, J.num_heads));
    return o;
  }
};

}  // namespace
AC_REGISTER_PROPERTY(19, Fp8Amax);
}  // namespace attncheck::detail
