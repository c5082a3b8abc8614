// fp8_descales: an FP8 KV cache's descales are exact scale factors, and the kernel applies them as
// such. The reference judges the codes times their descales, so accuracy already catches a descale
// ignored, applied twice or read at the wrong index wherever the change exceeds the budget; these
// two checks catch each of them bit for bit, whatever the budget and whatever the descales' values:
//
// - Exchange: the codes of KV head g times 2^s_g and that head's descale times 2^-s_g hold the same
//   real values (Q's too, where Q is in FP8: a query head's codes go with its KV head's q_descale). A kernel
//   that multiplies each code by its descale once, or folds the descale into the softmax scale (K) or the
//   output (V) as FlashAttention-3 does, rounds the same reals in the same order: O and LSE keep every bit.
//   Per-KV-head descales get s = 1 and 2 on alternate heads, so that a descale read at another head's index
//   no longer cancels even when the descales are equal; a per-tensor descale gets s = 1.
// - Linearity: V's descale doubled doubles O exactly (every product, sum and quotient of O scales
//   by two with no new rounding), and leaves the LSE alone. A descale applied twice quadruples O;
//   one ignored leaves it.
// - A NaN code: one V code set to NaN (0x7f, then 0xff in e4m3fn and in e5m2; 0x80 in e4m3fnuz) at key 0 of a
//   sequence whose every row sees key 0 (no mask, no window; causal only where Tq <= Tk) must make
//   that column of O NaN on every row of the KV head's query heads, and nothing else NaN: a decode
//   that saturates or zeroes NaN codes hides it, a kernel that spreads it to other columns, heads
//   or sequences leaks it. Every kernel that reads the key multiplies the NaN by its weight (0 or
//   not), so this holds whatever the kernel's tiles and splits.
// - A NaN K code at the same key: the key's logit is NaN on those rows, and the exact attention of
//   the values given is NaN there in every column of O and in the LSE (a sink's term too is summed
//   with it); nothing else is NaN. A row maximum that skips NaN (fmaxf) still lets it through the
//   weight e^(NaN - m); a kernel that hides it (a decode that saturates NaN codes, or a part of the
//   key range holding only that key taken as empty because its maximum stayed -inf) fails here.
//
// The exchange and linearity hold for any kernel whose products stay within the normal ranges (the
// generator keeps every code within a quarter of the format's largest: both exponents stay exact);
// O elements that are subnormal or would overflow when doubled are not compared, nor those small
// enough that fp32's gradual underflow inside the kernel can reach their last bit
// (underflow_floor). The inputs
// (attention_fp8_kv_input) are contiguous, and hold V = 1 everywhere in a quarter of the cases:
// O = 1 on every row with a key (mass conservation), held to the accuracy budget with the rest of
// the base launch (three in four of them one query over kFp8LongRowKeys keys, every weight within
// e^-3/16 of the largest: an accumulator that keeps the row's P V to 13 bits, the e4m3 tensor cores'
// across key tiles, ends far below 1; mutant 37); in another quarter every key but the first has a weight
// between e^-9 and e^-5 and V = 1, the first V = 0, so O is made of weights below e4m3fn's smallest normal:
// what a P held in e4m3fn without FlashAttention-3's offset loses (AC_FP8_P_E4M3, mutant 29).
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>

#include "../property.hpp"

namespace attncheck::detail {
namespace {

// Codes of tensor t scaled by 2^s per descale group (one per KV head or per (sequence, KV head),
// slot_of(i) that of element i, or one for the tensor) and the descales by 2^-s: s_g as preferred
// where every code of the group stays an exact code and the descale an exact normal float, else 0.
// The preferred s alternates 1, 2 over KV heads and over sequences, so a kernel that reads another
// head's or sequence's descale sees other values. Returns whether any group moved. normal_only
// (AC_FP8_TRUNCATED_SUMS): a group holding a subnormal code stays, since the tensor cores align a
// subnormal's product at the smallest normal exponent, which does not move with it (budgets.cpp):
// the same reals may then be truncated on another grid.
template <class SlotOf>
bool exchange(const AttentionInput& a, Bits& t, std::vector<float>& ds, SlotOf slot_of, bool normal_only,
              std::string& what) {
  const ref::Fp8Format f = fp8_format(a.kv_dtype);
  const double largest = ref::fp8_spec(f).largest;
  const double smallest_normal = std::ldexp(1.0, 1 - ref::fp8_spec(f).bias);
  const size_t groups = ds.size(), H = size_t(a.num_kv_heads);
  std::vector<int> s(groups);
  for (size_t g = 0; g < groups; ++g) s[g] = groups == 1 ? 1 : 1 + int((g % H + g / H) % 2);
  auto group_of = [&](size_t i) { return groups == 1 ? 0 : slot_of(i); };
  // moved_code[e][code]: the code of code's value times 2^e, or -1 where that is no exact code
  // (e is 1 or 2; a long row's codes are looked up, not encoded one by one).
  std::array<std::array<int, 256>, 3> moved_code{};
  for (int e = 1; e <= 2; ++e)
    for (int code = 0; code < 256; ++code) {
      int& m = moved_code[size_t(e)][size_t(code)];
      m = -1;
      const double x = ref::decode_fp8(f, uint8_t(code));
      if (std::isnan(x) || (normal_only && x != 0 && std::fabs(x) < smallest_normal)) continue;
      const double y = std::ldexp(x, e);
      if (std::fabs(y) > largest) continue;
      const uint8_t out = ref::encode_fp8(f, y, ref::Fp8Overflow::saturate);
      if (ref::decode_fp8(f, out) == y) m = out;
    }
  auto scaled = [&](uint8_t code, int e, uint8_t& out) {
    const int m = moved_code[size_t(e)][code];
    out = uint8_t(m);
    return m >= 0;
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
  if (groups > 1) what = "(" + what + (groups == H ? ") per KV head" : ") per (sequence, KV head)");
  return any;
}

// Below this magnitude an O element is not compared bit for bit. The exchange and the doubling
// are exact in real arithmetic, and in fp32 while every product stays normal; one that falls below
// 2^-126 (a weight e^-90, a product of a small weight and V's smallest codes, a rescale by a tiny
// alpha) rounds to a multiple of 2^-149 in the units the kernel sums, which neither exchange nor
// doubling moves with it. Such roundings, at most one per product and addition of each of the row's
// keys (fewer than 2 max_keys of them), move O by at most 2 max_keys 2^-150 times what multiplies
// those units afterwards: V's descale (times 4: the exchanged one is up to 2^-2 smaller, or doubled)
// and 1 / p_scale where P's codes are summed (budgets.cpp gradual_underflow_o_allowance). An
// element shows that in its bits only if its own ulp is no larger, |O| < 2^24 times that: below
// max_keys 2^-125 max(1, 4 v_descale) max(1, 1 / p_scale). It stays judged by the first launch's
// accuracy. fp16's O never lies there; fp32 and bf16 outputs of tiny weights or values do.
double underflow_floor(const AttentionInput& a) {
  int64_t keys = 1;
  for (int32_t tk : a.seqlens_k) keys = std::max<int64_t>(keys, tk);
  double vd = 0;
  for (float d : a.v_descale) vd = std::max(vd, double(d));
  return double(keys) * 0x1p-125 * std::max(1.0, 4 * vd) * std::max(1.0, 1.0 / a.p_scale_or_fixed());
}

// `base`'s O with each element made `got`'s where it is not compared: non-finite or below floor in
// either launch.
AttentionOutput compared(const AttentionInput& a, const AttentionOutput& base, const AttentionOutput& got,
                         double floor) {
  AttentionOutput want = base;
  for (size_t i = 0; i < want.out.size() && i < got.out.size(); ++i) {
    const double x = std::fabs(decode(a.dtype, base.out[i])), y = std::fabs(decode(a.dtype, got.out[i]));
    if (!(x >= floor && y >= floor) && !(std::isnan(x) || std::isnan(y))) want.out[i] = got.out[i];
  }
  return want;
}

// `base`'s O with each element doubled where that is exact in the dtype (normal and finite before
// and after), else `got`'s element: the elements compared are the exact ones. The smallest normal
// itself is left out too: a subnormal exact value may have rounded up to it, and doubled it rounds
// in the next binade, at a finer step. Elements below `floor` (underflow_floor) are left out.
AttentionOutput doubled(const AttentionInput& a, const AttentionOutput& base, const AttentionOutput& got,
                        double floor) {
  AttentionOutput want = base;
  const double smallest_normal = a.dtype == AC_DTYPE_F16 ? 0x1p-14 : 0x1p-126;
  for (size_t i = 0; i < want.out.size() && i < got.out.size(); ++i) {
    const double x = decode(a.dtype, base.out[i]);
    const uint32_t twice = round_bits(a.dtype, 2 * x);
    const bool exact =
        std::isfinite(x) && std::fabs(x) > std::max(smallest_normal, floor) && finite_bits(a.dtype, twice);
    want.out[i] = exact ? twice : got.out[i];
  }
  return want;
}

std::string hex_code(uint32_t code) {
  char b[8];
  std::snprintf(b, sizeof b, "0x%02x", code);
  return b;
}

// The V code the NaN check sets: key 0 of the first sequence whose every row sees it, at a KV head
// and column that vary with the case. Returns false where no sequence qualifies.
struct NanSite {
  size_t seq = 0;
  int64_t first_q = 0, first_k = 0;  // the sequence's first query and key rows of the batch
  int32_t kv_head = 0, column = 0;
};
bool nan_site(const AttentionInput& a, NanSite& site) {
  if (!a.mask.empty() || a.window_left != -1 || a.window_right != -1) return false;
  int64_t first_q = 0, first_k = 0;
  for (size_t s = 0; s < a.seqlens_q.size(); ++s) {
    const int32_t tq = a.seqlens_q[s], tk = a.seqlens_k[s];
    if (tq > 0 && tk > 0 && (!a.causal || tq <= tk)) {
      site.seq = s;
      site.first_q = first_q;
      site.first_k = first_k;
      site.kv_head = int32_t((first_q + first_k) % a.num_kv_heads);
      site.column = int32_t((first_k * 7 + 3) % a.dv());
      return true;
    }
    first_q += tq;
    first_k += tk;
  }
  return false;
}

// The outputs against the NaN site's pattern, the NaN in V's code at the site's column or (in_k) in
// K's: "" or the first element out of it. A NaN V code makes that column of O NaN on the rows that
// see it and leaves the LSE; a NaN K code makes every column and the LSE NaN on those rows.
std::string nan_pattern(const AttentionInput& a, const NanSite& site, bool in_k, const AttentionOutput& got) {
  const int64_t H = a.num_heads, Dv = a.dv(), group = a.num_heads / a.num_kv_heads;
  const int64_t tq = a.seqlens_q[site.seq];
  for (int64_t t = 0; t * H * Dv < int64_t(got.out.size()); ++t)
    for (int64_t h = 0; h < H; ++h) {
      const bool hit = t >= site.first_q && t < site.first_q + tq && h / group == site.kv_head;
      for (int64_t c = 0; c < Dv; ++c) {
        const bool nan = std::isnan(decode(a.dtype, got.out[size_t((t * H + h) * Dv + c)]));
        const bool want = hit && (in_k || c == site.column);
        if (nan != want)
          return "O[token " + std::to_string(t) + "][head " + std::to_string(h) + "][" + std::to_string(c) +
                 "] is " + (nan ? "NaN" : "not NaN") + " where it must " + (want ? "be NaN" : "not be");
      }
      const size_t l = size_t(t * H + h);
      if (l < got.lse.size() && std::isnan(got.lse[l]) != (in_k && hit))
        return "LSE[token " + std::to_string(t) + "][head " + std::to_string(h) + "] is " +
               (in_k && hit ? "not NaN where it must be NaN" : "NaN where it must not be") +
               (in_k ? "" : " (a NaN V code leaves every LSE alone)");
    }
  return "";
}

class Fp8Descales final : public Property {
 public:
  Fp8Descales()
      : Property({"fp8_descales",
                  "An FP8 KV cache's descales act exactly: codes times 2^s per KV head with descales times "
                  "2^-s keep every bit of O and LSE, V's descale doubled doubles O exactly; V = 1 gives O "
                  "= 1 within budget; a NaN V code makes its column of O NaN on the rows that see it, a NaN "
                  "K code their every column and LSE, and nothing else.",
                  "\"FP8 attention and FP8 KV caches, judged exactly\"", AC_OP_ATTENTION | AC_OP_SPLITKV,
                  true, kCost}) {}
  // The base launch judged, two launches compared bit for bit, two read for their NaNs.
  static constexpr double kCost = 3;

  bool applies_to(const Subject& s, uint32_t) const override {
    return (s.caps().kv_dtypes & kFp8DtypeBits) != 0;
  }
  void draw_input(Case& c, const gen::Domain& dom, uint32_t) const override {
    c.input = *gen::attention_fp8_kv_input(dom);
  }

  // A file this property cannot judge (its drawn cases are none of these): no FP8 cache to
  // exchange; a v_descale that the doubling would take past the ABI's bound; or a value that is
  // not finite, where the NaN checks read every NaN of O as one the check set (a sink or a code
  // already NaN, an infinite one times a zero weight) and would blame a correct kernel.
  std::string case_problem(const Case& c) const override {
    const auto* a = std::get_if<AttentionInput>(&c.input);
    if (!a || !a->fp8_kv())
      return "fp8_descales judges an FP8 KV cache's descales, and the case has no kv_dtype";
    for (const float d : a->v_descale)
      if (2 * d > AC_MAX_DESCALE) {
        char b[80];
        std::snprintf(b, sizeof b, "fp8_descales doubles v_descale, and %.9g doubled is past ", double(d));
        return b + std::string("AC_MAX_DESCALE (2^32, plugin_abi.h)");
      }
    auto first_nonfinite = [](const Bits& t, ac_dtype dtype, const char* name) -> std::string {
      for (size_t i = 0; i < t.size(); ++i)
        if (!std::isfinite(decode(dtype, t[i])))
          return std::string(name) + "'s element " + std::to_string(i) + " (" + hex_code(t[i]) +
                 ") is not finite";
      return "";
    };
    std::string why = first_nonfinite(a->q, a->q_dtype(), "Q");
    if (why.empty()) why = first_nonfinite(a->k, a->k_dtype(), "K");
    if (why.empty()) why = first_nonfinite(a->v, a->k_dtype(), "V");
    for (size_t h = 0; why.empty() && h < a->sinks.size(); ++h)
      if (!std::isfinite(a->sinks[h])) why = "the sink of query head " + std::to_string(h) + " is not finite";
    return why.empty() ? "" : "fp8_descales sets its own NaN codes and takes finite inputs only: " + why;
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
    std::string k_exp, v_exp, q_exp;
    const std::vector<int32_t> rows = a.kv_row_sequences(), tokens = a.token_sequences();
    const bool normal_only = ctx.cv.truncated_sums && a.fp8_q();
    const bool k_moved = exchange(
        a, ex.k, ex.k_descale,
        [&](size_t i) { return a.kv_descale_slot(ex.k_descale.size(), rows, i, a.head_size); }, normal_only,
        k_exp);
    const bool v_moved = exchange(
        a, ex.v, ex.v_descale,
        [&](size_t i) { return a.kv_descale_slot(ex.v_descale.size(), rows, i, a.dv()); }, normal_only,
        v_exp);
    const bool q_moved =
        a.fp8_q() &&
        exchange(
            a, ex.q, ex.q_descale, [&](size_t i) { return a.q_descale_slot(ex.q_descale.size(), tokens, i); },
            normal_only, q_exp);
    if (k_moved || v_moved || q_moved) {
      before_launch(ctx, c, /*write=*/false);
      const AttentionOutput other = ctx.subject.attention(ex, c.options);
      const std::string d = first_difference(a, compared(a, base, other, underflow_floor(a)), other);
      if (!d.empty()) {
        fail(o, "fp8_descale_exchange",
             "K codes times 2^" + k_exp + " and k_descale times 2^-s, V codes times 2^" + v_exp +
                 " and v_descale times 2^-s" +
                 (a.fp8_q() ? ", Q codes times 2^" + q_exp + " and q_descale times 2^-s" : std::string()) +
                 " (the same values): the outputs (as given, then exchanged) " + d);
        return o;
      }
    }

    AttentionInput twice = a;
    for (float& x : twice.v_descale) x *= 2;
    before_launch(ctx, c, /*write=*/false);
    const AttentionOutput got = ctx.subject.attention(twice, c.options);
    const std::string d = first_difference(a, doubled(a, base, got, underflow_floor(twice)), got);
    if (!d.empty()) {
      fail(o, "fp8_v_descale_linear",
           "v_descale doubled must double O exactly and keep the LSE: the outputs (twice the first launch's, "
           "then the launch with v_descale doubled) " +
               d);
      return o;
    }

    NanSite site;
    if (!nan_site(a, site)) return o;
    const int64_t row = a.kv_row(site.seq, 0, site.first_k);
    // e4m3fnuz's only NaN is 0x80 (its 0x7f and 0xff are +-240). e4m3fn and e5m2 have a NaN of
    // each sign, and a decoder may know one of them only (e4m3fn's 0xff read as -480): each is set,
    // one launch apiece.
    const std::vector<uint32_t> codes =
        a.kv_dtype == AC_DTYPE_E4M3FNUZ ? std::vector<uint32_t>{0x80u} : std::vector<uint32_t>{0x7fu, 0xffu};
    for (const uint32_t code : codes)
      for (const bool in_k : {false, true}) {
        AttentionInput nan = a;
        const int64_t width = in_k ? a.head_size : a.dv();
        (in_k ? nan.k : nan.v)[size_t((row * a.num_kv_heads + site.kv_head) * width + site.column % width)] =
            code;
        before_launch(ctx, c, /*write=*/false);
        if (const std::string p = nan_pattern(a, site, in_k, ctx.subject.attention(nan, c.options));
            !p.empty()) {
          fail(o, in_k ? "fp8_nan_k_code" : "fp8_nan_code",
               std::string(in_k ? "K" : "V") + "'s code at key 0 of sequence " + std::to_string(site.seq) +
                   ", KV head " + std::to_string(site.kv_head) + ", column " +
                   std::to_string(site.column % width) + " set to NaN (" + hex_code(code) + "): " + p);
          return o;
        }
      }
    return o;
  }
};

}  // namespace
AC_REGISTER_PROPERTY(16, Fp8Descales);
}  // namespace attncheck::detail
