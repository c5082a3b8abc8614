// fp8_descales: an FP8 KV cache's descales are exact scale factors, and the kernel applies them as
// such. The reference judges the codes times their descales, so accuracy already catches a descale
// ignored, applied twice or read at the wrong index wherever the change exceeds the budget; these
// two checks catch each of them bit for bit, whatever the budget and whatever the descales' values:
//
// - Exchange: the codes of KV head g times 2^s_g and that head's descale times 2^-s_g hold the same
//   real values. A kernel that multiplies each code by its descale once, or folds the descale into
//   the softmax scale (K) or the output (V) as FlashAttention-3 does, rounds the same reals in the
//   same order: O and LSE keep every bit. Per-KV-head descales get s = 1 and 2 on alternate heads,
//   so that a descale read at another head's index no longer cancels even when the descales are
//   equal; a per-tensor descale gets s = 1.
// - Linearity: V's descale doubled doubles O exactly (every product, sum and quotient of O scales
//   by two with no new rounding), and leaves the LSE alone. A descale applied twice quadruples O;
//   one ignored leaves it.
//
// Holds for any kernel whose products stay within the normal ranges (the generator keeps every
// code within a quarter of the format's largest: both exponents stay exact); O elements that are
// subnormal or would overflow when doubled are not compared. The inputs (attention_fp8_kv_input)
// are contiguous, and hold V = 1 everywhere in a quarter of the cases: O = 1 on every row with a
// key (mass conservation), held to the accuracy budget with the rest of the base launch.
#include <cmath>
#include <limits>

#include "../property.hpp"

namespace attncheck::detail {
namespace {

// Codes of tensor t (rows of `width`, KV heads innermost after the row) scaled by 2^s per descale
// group (one per KV head, or one for the tensor) and the descales by 2^-s: s_g as preferred where
// every code of the group stays an exact code and the descale an exact normal float, else 0. Returns
// whether any group moved.
bool exchange(const AttentionInput& a, Bits& t, std::vector<float>& ds, int64_t width, std::string& what) {
  const ref::Fp8Format f = fp8_format(a.kv_dtype);
  const double largest = ref::fp8_spec(f).largest;
  const size_t groups = ds.size();
  std::vector<int> s(groups);
  for (size_t g = 0; g < groups; ++g) s[g] = groups == 1 ? 1 : 1 + int(g % 2);
  auto group_of = [&](size_t i) { return groups == 1 ? 0 : size_t(a.kv_head_of_element(i, width)); };
  auto scaled = [&](uint8_t code, int e, uint8_t& out) {
    const double x = ref::decode_fp8(f, code);
    if (std::isnan(x)) return false;
    const double y = std::ldexp(x, e);
    if (std::fabs(y) > largest) return false;
    out = ref::encode_fp8(f, y, ref::Fp8Overflow::saturate);
    return ref::decode_fp8(f, out) == y;
  };
  for (size_t g = 0; g < groups; ++g) {
    const double d = std::ldexp(double(ds[g]), -s[g]);
    if (double(float(d)) != d || float(d) < std::numeric_limits<float>::min()) s[g] = 0;
  }
  // Each code scaled once; a group that turns out unscalable keeps its codes as they were.
  Bits moved = t;
  for (size_t i = 0; i < t.size(); ++i) {
    uint8_t out = 0;
    const size_t g = group_of(i);
    if (s[g] == 0) continue;
    if (scaled(uint8_t(t[i]), s[g], out))
      moved[i] = out;
    else
      s[g] = 0;
  }
  bool any = false;
  what.clear();
  for (size_t g = 0; g < groups; ++g) {
    what += (g ? ", " : "") + std::to_string(s[g]);
    any = any || s[g] != 0;
    ds[g] = float(std::ldexp(double(ds[g]), -s[g]));
  }
  for (size_t i = 0; i < t.size(); ++i)
    if (s[group_of(i)] != 0) t[i] = moved[i];
  if (groups > 1) what = "(" + what + ") per KV head";
  return any;
}

// `base`'s O with each element doubled where that is exact in the dtype (normal and finite before
// and after), else `got`'s element: the elements compared are the exact ones. The smallest normal
// itself is left out too: a subnormal exact value may have rounded up to it, and doubled it rounds
// in the next binade, at a finer step.
AttentionOutput doubled(const AttentionInput& a, const AttentionOutput& base, const AttentionOutput& got) {
  AttentionOutput want = base;
  const double smallest_normal = a.dtype == AC_DTYPE_F16 ? 0x1p-14 : 0x1p-126;
  for (size_t i = 0; i < want.out.size() && i < got.out.size(); ++i) {
    const double x = decode(a.dtype, base.out[i]);
    const uint32_t twice = round_bits(a.dtype, 2 * x);
    const bool exact = std::isfinite(x) && std::fabs(x) > smallest_normal && finite_bits(a.dtype, twice);
    want.out[i] = exact ? twice : got.out[i];
  }
  return want;
}

class Fp8Descales final : public Property {
 public:
  Fp8Descales()
      : Property({"fp8_descales",
                  "An FP8 KV cache's descales act exactly: codes times 2^s per KV head with descales times "
                  "2^-s keep every bit of O and LSE, V's descale doubled doubles O exactly; V = 1 gives O "
                  "= 1 within budget.",
                  "\"FP8 attention and FP8 KV caches, judged exactly\"", AC_OP_ATTENTION | AC_OP_SPLITKV,
                  true, kCost}) {}
  // The base launch judged, and two launches compared bit for bit.
  static constexpr double kCost = 2;

  bool applies_to(const Subject& s, uint32_t) const override {
    return (s.caps().kv_dtypes & (AC_DTYPE_BIT(AC_DTYPE_E4M3) | AC_DTYPE_BIT(AC_DTYPE_E5M2))) != 0;
  }
  void draw_input(Case& c, const gen::Domain& dom, uint32_t) const override {
    c.input = *gen::attention_fp8_kv_input(dom);
  }

  Outcome check(Ctx& ctx, const Case& c) const override {
    Outcome o;
    const auto& a = std::get<AttentionInput>(c.input);
    before_launch(ctx, c);
    const AttentionOutput base = ctx.subject.attention(a, c.options);
    o.digest = digest_bits(base.out, base.lse);
    const Judgement J = judge_attention(a, base, ctx.cv, ctx.budget);
    record_stats(ctx, J);
    rule_accuracy(o, J, false);
    if (!o.ok) return o;

    AttentionInput ex = a;
    std::string k_exp, v_exp;
    const bool k_moved = exchange(a, ex.k, ex.k_descale, a.head_size, k_exp);
    const bool v_moved = exchange(a, ex.v, ex.v_descale, a.dv(), v_exp);
    if (k_moved || v_moved) {
      before_launch(ctx, c, /*write=*/false);
      const std::string d = first_difference(a, base, ctx.subject.attention(ex, c.options));
      if (!d.empty()) {
        fail(o, "fp8_descale_exchange",
             "K codes times 2^" + k_exp + " and k_descale times 2^-s, V codes times 2^" + v_exp +
                 " and v_descale times 2^-s (the same values): the outputs (as given, then exchanged) " + d);
        return o;
      }
    }

    AttentionInput twice = a;
    for (float& x : twice.v_descale) x *= 2;
    before_launch(ctx, c, /*write=*/false);
    const AttentionOutput got = ctx.subject.attention(twice, c.options);
    const std::string d = first_difference(a, doubled(a, base, got), got);
    if (!d.empty())
      fail(o, "fp8_v_descale_linear",
           "v_descale doubled must double O exactly and keep the LSE: the outputs (twice the first launch's, "
           "then the launch with v_descale doubled) " +
               d);
    return o;
  }
};

}  // namespace
AC_REGISTER_PROPERTY(16, Fp8Descales);
}  // namespace attncheck::detail
