// split_equals_whole: attention over K[0:a] merged with attention over K[a:] matches attention
// over all of K, for every cut a. The subject's two partial states (O and LSE) are merged exactly,
// reading the LSE in the declared base, so any error is the subject's; the allowance combines the
// parts' own budgets (budgets.cpp, split_merge_allowance).
#include <algorithm>
#include <cmath>
#include <optional>

#include "../property.hpp"
#include "attncheck/reference/fast.hpp"

namespace attncheck::detail {
namespace {

// Cuts: every a for short rows, else 0, N, and six spread points. A subject that refuses zero-key
// ranges is never handed an empty piece: the cuts 0 and N are left out and the others kept.
std::vector<int64_t> cuts_of(int64_t N, bool zero_keys) {
  std::vector<int64_t> cuts;
  if (N <= 16) {
    for (int64_t k = 0; k <= N; ++k) cuts.push_back(k);
  } else {
    for (int64_t k : {int64_t(0), N / 7, N / 3, N / 2, N / 2 + 1, 2 * N / 3, N - 1, N}) cuts.push_back(k);
  }
  if (!zero_keys) std::erase_if(cuts, [N](int64_t k) { return k <= 0 || k >= N; });
  return cuts;
}

// The attention over keys [0, cut) (part 0) or [cut, N) (part 1) of a one-sequence input, `a`
// contiguous (a paged case is gathered first, its parts paged again: check). The variants:
//   - a window is relative to the bottom-right diagonal, which part 1 (the last keys) shares with
//     the whole, so part 1 keeps it; part 0's diagonal is not the whole's, so its window becomes
//     the explicit mask it stands for (generators draw windows into split cases only for subjects
//     that take masks);
//   - a sink is counted once: part 0 keeps the sinks, part 1 has none (AC_VAR_SINKS' contract for
//     states that are merged).
AttentionInput part_of(const AttentionInput& a, int64_t cut, int i) {
  const int64_t N = a.seqlens_k.at(0), D = a.head_size, Dv = a.dv(), Hkv = a.num_kv_heads, TQ = total_q(a);
  const auto split = a.k.begin() + cut * Hkv * D;
  AttentionInput p = a;
  p.seqlens_k = {int32_t(i == 0 ? cut : N - cut)};
  p.k.assign(i == 0 ? a.k.begin() : split, i == 0 ? split : a.k.end());
  const auto vsplit = a.v.begin() + cut * Hkv * Dv;
  p.v.assign(i == 0 ? a.v.begin() : vsplit, i == 0 ? vsplit : a.v.end());
  const bool window = a.window_left != -1 || a.window_right != -1;
  const bool as_mask = i == 0 && window;  // row_keys: the mask, causal and the window together
  if (!a.mask.empty() || as_mask) {
    p.mask.clear();
    for (int64_t t = 0; t < TQ; ++t) {
      const RowKeys rk = as_mask ? row_keys(a, t) : RowKeys{};
      for (int64_t j = 0; j < N; ++j)
        if ((j < cut) == (i == 0))
          p.mask.push_back(as_mask ? rk.visible[size_t(j)] : a.mask[size_t(t * N + j)]);
    }
  }
  if (i == 0) p.window_left = p.window_right = -1;
  if (i == 1) p.sinks.clear();
  return p;
}

class SplitEqualsWhole final : public Property {
 public:
  SplitEqualsWhole()
      : Property({"split_equals_whole",
                  "Attention over K[0:a] merged with attention over K[a:] matches attention over K, for "
                  "every cut a.",
                  "\"The state that gets passed around is the log-sum-exp\"", AC_OP_ATTENTION | AC_OP_SPLITKV,
                  true, kCost}) {}
  // Up to 17 launches a case (two per cut) and their judgements: the gate's longest pairs (12-17 s
  // on the H200, a one-launch property's 1-2 s), started first.
  static constexpr double kCost = 10;

  // The merge needs the partial LSEs.
  bool applies_to(const Subject& s, uint32_t) const override {
    return (s.caps().features & AC_FEAT_LSE) != 0;
  }

  void draw_input(Case& c, const gen::Domain& dom, uint32_t) const override {
    c.input = *gen::attention_split_input(dom);
  }

  Outcome check(Ctx& ctx, const Case& c) const override {
    Outcome o;
    Subject& s = ctx.subject;
    const auto& given = std::get<AttentionInput>(c.input);
    AttentionInput gathered;
    const AttentionInput& a = contiguous_kv(given, gathered);
    const int64_t N = a.seqlens_k.at(0);
    const std::vector<int64_t> cuts = cuts_of(N, !ctx.cv.refuses_zero_keys);
    before_launch(ctx, c);
    const AttentionOutput whole = s.attention(given, c.options);
    o.digest = digest_bits(whole.out, whole.lse);
    const int64_t TQ = total_q(a), H = a.num_heads, D = a.dv();
    const ref::AttentionProblem whole_p = problem_of(a);
    const bool fast = default_judge_path() == JudgePath::fast;
    // The whole's rows by the certified fast path, once for every cut (check_row_fast).
    std::vector<ref::FastRow> whole_fast;
    if (fast) {
      whole_fast.resize(size_t(TQ * H));
      ref::FastOptions fo;
      fo.threads = 1;
      fo.base = ctx.cv.base;
      const ref::FastAttentionReference ref_fast(whole_p, fo);
      ref_fast.for_each_row([&](int64_t token, int32_t head, const ref::FastRow& fr) {
        whole_fast[size_t(token * H + head)] = fr;
      });
    }
    JudgeCounts& counts = thread_judge_counts();
    for (int64_t cut : cuts) {
      // A paged case's parts are paged too, each in the plainest layout of its page size.
      auto paged_like = [&](AttentionInput p) {
        return given.paged() ? gen::paged_copy(p, given.page_size) : p;
      };
      const AttentionInput part[2] = {paged_like(part_of(a, cut, 0)), paged_like(part_of(a, cut, 1))};
      std::optional<PreparedAttention> prep[2];
      AttentionOutput po[2];
      Judgement pj[2];
      for (int i = 0; i < 2; ++i) {
        Case pc = c;
        pc.input = part[i];
        before_launch(ctx, pc);
        po[i] = s.attention(part[i], c.options);
        prep[i].emplace(part[i], ctx.cv, ctx.budget);
        pj[i] = prep[i]->judge(po[i]);
      }
      // Rows the fast path leaves undecided are checked on the parts' exact judgements of those
      // rows alone (an escalated row of a decode case is one of its heads; the parts' other rows
      // are not recomputed in MPFR), in row order, after the fast rows (which record nothing).
      std::vector<int64_t> escalated;
      for (int64_t t = 0; t < TQ; ++t)
        for (int64_t h = 0; h < H; ++h) {
          ++counts.rows;
          if (!fast) {
            check_row(o, ctx, a, whole_p, po, pj, cut, t, h, D);
            continue;
          }
          if (check_row_fast(ctx, a, po, pj, whole_fast[size_t(t * H + h)], t, h, D)) continue;
          ++counts.rows_escalated;
          if (!whole_fast[size_t(t * H + h)].certified) ++counts.rows_uncertified;
          escalated.push_back(t * H + h);
        }
      if (escalated.empty()) continue;
      const Judgement exact_pj[2] = {prep[0]->judge_exact_rows(po[0], escalated),
                                     prep[1]->judge_exact_rows(po[1], escalated)};
      for (int64_t row : escalated) check_row(o, ctx, a, whole_p, po, exact_pj, cut, row / H, row % H, D);
    }
    return o;
  }

 private:
  // The weights of the two parts' states in the merge (check_row), normalised.
  static void part_weights(const Ctx& ctx, const ref::ExactState (&st)[2], double& w0, double& w1) {
    const double l0 = st[0].lse.convert_to<double>(), l1 = st[1].lse.convert_to<double>();
    const double e0 = l0 == INFINITY ? -INFINITY : l0, e1 = l1 == INFINITY ? -INFINITY : l1;
    const double M = std::max(e0, e1);
    w0 = 0;
    w1 = 0;
    if (M > -INFINITY) {
      w0 = ctx.cv.base == ref::LseBase::two ? std::exp2(e0 - M) : std::exp(e0 - M);
      w1 = ctx.cv.base == ref::LseBase::two ? std::exp2(e1 - M) : std::exp(e1 - M);
      const double ws = w0 + w1;
      w0 /= ws;
      w1 /= ws;
    }
  }

  // check_row's verdict decided from the fast path: the whole's exact O within its bound of the
  // fast row's (certified), each part's allowance within [allowed_lo, allowed_hi] (judge_attention.cpp).
  // split_merge_allowance is a sum of products of nonnegative terms in the allowances and
  // within_split_merge_allowance is monotone in it, so a row is certainly within when the largest
  // error (the farther end of the whole's interval: the double subtraction got - want is monotone
  // in want) is within the allowance made of the lower ends. True: the exact check_row records
  // nothing for this row. False: run check_row on exact judgements.
  static bool check_row_fast(const Ctx& ctx, const AttentionInput& a, const AttentionOutput (&po)[2],
                             const Judgement (&pj)[2], const ref::FastRow& whole, int64_t t, int64_t h,
                             int64_t D) {
    const int64_t row = t * a.num_heads + h;
    if (pj[0].row_skipped(row) || pj[1].row_skipped(row)) return true;
    if (!whole.certified) return false;
    // The declared contracts' adjustments (an undefined empty LSE, an accepted flushed zero) are
    // made by the exact check only: rows they could touch go there. A flushed zero (an O of 0 whose
    // |exact| exceeds its allowance, so only the flush rule accepted it) is found below; a zero
    // within its allowance keeps it there, as in check_row.
    if (ctx.cv.empty_lse_undefined && (pj[0].rows[size_t(row)].empty || pj[1].rows[size_t(row)].empty))
      return false;
    ref::ExactState st[2];
    double lse_allowed[2] = {0, 0};
    std::vector<double> o_allowed[2];
    for (int i = 0; i < 2; ++i) {
      st[i].lse = Real(double(po[i].lse[size_t(row)]));
      for (int64_t d = 0; d < D; ++d)
        st[i].o.push_back(Real(decode(a.dtype, po[i].out[size_t(row * D + d)])));
      for (const Elem& e : pj[i].elems)
        if (e.row == row) {
          if (e.out == Out::LSE)
            lse_allowed[i] = e.allowed_lo;
          else if (ctx.cv.flushes_subnormals && e.out_value == 0 &&
                   std::fabs(e.exact.convert_to<double>()) > e.allowed)
            return false;  // a zero the flush rule accepted: the exact check widens its allowance
          else
            o_allowed[i].push_back(e.allowed_lo);
        }
    }
    const ref::ExactState merged = ref::exact_merge({st[0], st[1]}, ctx.cv.base, true);
    double w0 = 0, w1 = 0;
    part_weights(ctx, st, w0, w1);
    const double lse_to_nat = ctx.cv.base == ref::LseBase::two ? std::log(2.0) : 1.0;
    for (int64_t d = 0; d < D; ++d) {
      const double got = merged.o[size_t(d)].convert_to<double>();
      const double approx = whole.o[size_t(d)], bound = whole.o_bound[size_t(d)];
      const double lo = bound == 0 ? approx : std::nextafter(approx - bound, -INFINITY);
      const double hi = bound == 0 ? approx : std::nextafter(approx + bound, INFINITY);
      const double err = std::max(std::fabs(got - lo), std::fabs(got - hi));
      const double oa = st[0].o[size_t(d)].convert_to<double>(), ob = st[1].o[size_t(d)].convert_to<double>();
      const double al0 = o_allowed[0].size() > size_t(d) ? o_allowed[0][size_t(d)] : 0;
      const double al1 = o_allowed[1].size() > size_t(d) ? o_allowed[1][size_t(d)] : 0;
      const double allowed =
          split_merge_allowance(w0, w1, al0, al1, oa, ob, lse_allowed[0], lse_allowed[1], lse_to_nat);
      if (!within_split_merge_allowance(err, allowed * (1 - 0x1p-32))) return false;
    }
    return true;
  }

  // Merge the subject's two states of one row exactly and compare with the exact attention over
  // all keys.
  static void check_row(Outcome& o, const Ctx& ctx, const AttentionInput& a,
                        const ref::AttentionProblem& whole_p, const AttentionOutput (&po)[2],
                        const Judgement (&pj)[2], int64_t cut, int64_t t, int64_t h, int64_t D) {
    const int64_t row = t * a.num_heads + h;
    if (pj[0].row_skipped(row) || pj[1].row_skipped(row)) return;
    ref::ExactState st[2];
    double lse_allowed[2] = {0, 0};
    std::vector<double> o_allowed[2];
    for (int i = 0; i < 2; ++i) {
      st[i].lse = Real(double(po[i].lse[size_t(row)]));
      // A piece whose row sees no key has a meaningless LSE when the subject declares it so; the
      // caller merging the pieces stands in the empty state's -inf.
      if (ctx.cv.empty_lse_undefined && pj[i].rows[size_t(row)].empty) st[i].lse = Real(-INFINITY);
      for (int64_t d = 0; d < D; ++d)
        st[i].o.push_back(Real(decode(a.dtype, po[i].out[size_t(row * D + d)])));
      for (const Elem& e : pj[i].elems)
        if (e.row == row) {
          if (e.out == Out::LSE)
            lse_allowed[i] = e.allowed;
          else if (ctx.cv.flushes_subnormals && e.within && e.out_value == 0 && e.exact_finite)
            // A zero the flush rule accepted (budgets.cpp) is off by |exact|: that is its allowance.
            o_allowed[i].push_back(std::max(e.allowed, std::fabs(e.exact.convert_to<double>())));
          else
            o_allowed[i].push_back(e.allowed);
        }
    }
    const ref::ExactState merged = ref::exact_merge({st[0], st[1]}, ctx.cv.base, true);
    const ref::ExactRow ex = ref::exact_attention_row(whole_p, t, int32_t(h), ctx.cv.base);
    const double l0 = st[0].lse.convert_to<double>(), l1 = st[1].lse.convert_to<double>();
    double w0 = 0, w1 = 0;
    part_weights(ctx, st, w0, w1);
    const double lse_to_nat = ctx.cv.base == ref::LseBase::two ? std::log(2.0) : 1.0;
    for (int64_t d = 0; d < D; ++d) {
      const double got = merged.o[size_t(d)].convert_to<double>();
      const double want = ex.o[size_t(d)].convert_to<double>();
      const double oa = st[0].o[size_t(d)].convert_to<double>(), ob = st[1].o[size_t(d)].convert_to<double>();
      const double al0 = o_allowed[0].size() > size_t(d) ? o_allowed[0][size_t(d)] : 0;
      const double al1 = o_allowed[1].size() > size_t(d) ? o_allowed[1][size_t(d)] : 0;
      const double allowed =
          split_merge_allowance(w0, w1, al0, al1, oa, ob, lse_allowed[0], lse_allowed[1], lse_to_nat);
      const double err = std::fabs(got - want);
      if (within_split_merge_allowance(err, allowed)) continue;
      Elem e;
      e.out = Out::O;
      e.dtype = a.dtype;
      e.row = row;
      e.where = "O[token=" + std::to_string(t) + ",head=" + std::to_string(h) + ",d=" + std::to_string(d) +
                "] cut=" + std::to_string(cut);
      e.exact = ex.o[size_t(d)];
      // The merged value as the output format holds it, measured in that format's ulps (what every
      // other O element reports), so the line and replay quote one consistent set of numbers.
      e.out_value = got;
      e.out_bits = round_bits(a.dtype, got);
      e.out_finite = std::isfinite(got);
      e.ulp = ref::ulp_error_value(fmt(a.dtype), got, e.exact).ulps;
      e.ratio = err / allowed;
      e.allowed = allowed;
      e.inputs = "lse parts " + hexfloat(l0) + ", " + hexfloat(l1);
      fail_at(o, "split",
              "merge(attention(K[0:" + std::to_string(cut) + "]), attention(K[" + std::to_string(cut) +
                  ":])) != attention(K): ",
              e);
    }
  }
};

}  // namespace
AC_REGISTER_PROPERTY(50, SplitEqualsWhole);
}  // namespace attncheck::detail
