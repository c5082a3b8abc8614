// split_order_drift: split-KV attention runs the same case with every num_splits (up to 8) and
// every declared fold order (a case of more than kLargeLogits logits, such as the long suite's
// layer, with num_splits 1, 2, 5 and the largest: whole, halves, ragged pieces and the most
// pieces, at half the launches and judgements of a layer); each must meet the accuracy budget (so two of them
// differ by at most twice it), the largest pairwise difference is reported as drift, and num_splits = 1 must
// be bitwise reproducible run to run (unless the subject declares itself nondeterministic). Which output bits
// differ between fold orders and between split counts is counted per split count (DriftCounts,
// properties.hpp).
#include <algorithm>
#include <cmath>
#include <deque>
#include <optional>

#include "../property.hpp"
#include "../split_options.hpp"

namespace attncheck::detail {
namespace {

class SplitOrderDrift final : public Property {
 public:
  SplitOrderDrift()
      : Property(
            {"split_order_drift",
             "Every num_splits and fold order stays within budget of the exact answer; drift is measured; "
             "num_splits = 1 is bitwise reproducible.",
             "\"Bitwise reproducibility is a casualty\"", AC_OP_SPLITKV, true, kCost}) {}
  // Every split count and fold order a case: 9-10 s a pair on the H200, a one-launch property's
  // 1-2 s.
  static constexpr double kCost = 7;
  // 2^28 logits (T x H x keys): the long suite's layer (8192 x 32 x 8192 = 2^31) is above, every
  // gate case far below.
  static constexpr double kLargeLogits = 0x1p28;

  // The check sweeps split counts and fold orders itself.
  bool draws_split_options() const override { return false; }

  Outcome check(Ctx& ctx, const Case& c) const override {
    Outcome o;
    Subject& s = ctx.subject;
    const auto& a = std::get<AttentionInput>(c.input);
    const ac_caps& caps = s.caps();
    std::vector<AttentionOptions> configs;
    const int32_t most = std::min(max_num_splits(caps), 8);
    const bool large = double(total_q(a)) * a.num_heads * total_k(a) > kLargeLogits;
    for (int32_t n = 1; n <= most; ++n)
      for (ac_fold f : tried_folds(caps))
        if (!large || n == 1 || n == 2 || n == 5 || n == most)
          configs.push_back(AttentionOptions{c.options.tiling, n, f});
    std::vector<AttentionOutput> outs;
    // Configurations often return the same bits (more splits than key blocks, one fold order of
    // two pieces). The judgement is a function of the input and the output bits, so a repeated
    // output reuses a judgement instead of being judged again. A judgement holds every judged
    // element (memory.cpp: the largest part of a case's memory), so at most kHeldJudgements are
    // held: the first configuration's, which drift measures against, and the latest distinct
    // outputs' (a repeat is almost always of a neighbour); an output repeating an older one is
    // judged again, with the same result.
    // Every configuration judges the same input: its reference side is computed once, when the
    // subject has taken the case.
    std::optional<PreparedAttention> judge;
    std::optional<Judgement> first;
    std::deque<std::pair<std::string, Judgement>> recent;  // (output bits, judgement), oldest first
    std::vector<std::string> bits;                         // per config: its output's bits (digest_bits)
    for (const AttentionOptions& opt : configs) {
      Case cc = c;
      cc.options = opt;
      // The write-ahead file holds the case once: its replay sweeps every configuration again.
      before_launch(ctx, outs.empty() ? c : cc, /*write=*/outs.empty());
      outs.push_back(s.attention(a, opt));
      bits.push_back(digest_bits(outs.back().out, outs.back().lse));
      const Judgement* held = first && bits.front() == bits.back() ? &*first : nullptr;
      for (const auto& [b, j] : recent)
        if (!held && b == bits.back()) held = &j;
      if (!held) {
        if (!judge) judge.emplace(a, ctx.cv, ctx.budget);
        Judgement fresh = judge->judge(outs.back());
        if (!first) {
          first = std::move(fresh);
          held = &*first;
        } else {
          if (recent.size() + 1 >= size_t(kHeldJudgements)) recent.pop_front();
          recent.emplace_back(bits.back(), std::move(fresh));
          held = &recent.back().second;
        }
      }
      const Judgement& J = *held;
      record_stats(ctx, J);
      Outcome sub;
      rule_accuracy(sub, J, false);
      if (!sub.ok && o.ok) {
        o = sub;
        o.message = "num_splits=" + std::to_string(opt.num_splits) +
                    " fold=" + std::to_string(int(opt.fold_order)) + ": " + sub.message;
      }
      // A subject declared nondeterministic by design is not held to bitwise repeats (run_to_run
      // reports its spread).
      if (!ctx.cv.nondeterministic && opt.num_splits == 1 && opt.fold_order == configs.front().fold_order) {
        const AttentionOutput again = s.attention(a, opt);
        if (digest_bits(again.out, again.lse) != bits.back())
          fail(o, "nondeterministic", "num_splits = 1 is not bitwise reproducible run to run");
      }
    }
    o.digest = outs.empty() ? std::string() : bits.front();
    if (!outs.empty()) {
      o.drift = drift_ulps(ctx, a, outs, *first);
      o.drift_counts = drift_counts(a, configs, outs, *first);
    }
    return o;
  }

 private:
  // for_each_measured over the O elements of J0 (the first config's judgement): what drift measures.
  template <class F>
  static void for_each_measured_o(const AttentionInput& a, const Judgement& J0, F f) {
    for_each_measured(a, J0, [&](const Elem& e, size_t idx, int64_t col) {
      if (e.out == Out::O) f(e, idx, col);
    });
  }

  // The largest difference of one O element across configs, in ulps of its exact value.
  static double drift_ulps(const Ctx& ctx, const AttentionInput& a, const std::vector<AttentionOutput>& outs,
                           const Judgement& J0) {
    double drift = 0;
    std::optional<ref::AttentionProblem> exact_p;
    for_each_measured_o(a, J0, [&](const Elem& e, size_t idx, int64_t col) {
      double lo = INFINITY, hi = -INFINITY;
      for (const auto& out : outs) {
        const double v = decode(a.dtype, out.out[idx]);
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      if (!std::isfinite(lo) || !std::isfinite(hi)) return;
      // A fast element near a power of two may not know its exact value's binade: take the
      // exact value then (a zero spread needs none).
      Real exact = e.exact;
      if (!e.binade_known && hi != lo) {
        if (!exact_p) exact_p = problem_of(a);
        exact =
            ref::exact_attention_row(*exact_p, e.row / a.num_heads, int32_t(e.row % a.num_heads), ctx.cv.base)
                .o[size_t(col)];
      }
      drift = std::max(drift, (hi - lo) / ref::ulp_at(fmt(a.dtype), exact).convert_to<double>());
    });
    return drift;
  }

  // |x - y| in units of ulp_F(S) (`unit`, the unit of the element's cancellation-aware error):
  // +inf when either is not finite and the bits differ. The unit is 0 where the first config's
  // output is not finite (its judgement has no cancellation-aware error); a difference between two
  // finite outputs of other configs then counts as differing bits only.
  static double units_apart(ac_dtype d, uint32_t bx, uint32_t by, double unit) {
    if (bx == by) return 0;
    const double x = decode(d, bx), y = decode(d, by);
    if (!std::isfinite(x) || !std::isfinite(y)) return INFINITY;
    return unit > 0 ? std::fabs(x - y) / unit : 0;
  }

  // The bits that differ between fold orders (same split count) and between each split count and
  // num_splits = 1 (same fold order), per split count (DriftCounts).
  static std::vector<DriftCounts> drift_counts(const AttentionInput& a,
                                               const std::vector<AttentionOptions>& configs,
                                               const std::vector<AttentionOutput>& outs,
                                               const Judgement& J0) {
    std::vector<DriftCounts> counts;
    std::vector<std::vector<size_t>> at;  // per split count (in configs' order): its configs
    for (size_t i = 0; i < configs.size(); ++i) {
      if (counts.empty() || counts.back().num_splits != configs[i].num_splits) {
        counts.push_back(DriftCounts{});
        counts.back().num_splits = configs[i].num_splits;
        at.emplace_back();
      }
      at.back().push_back(i);
    }
    // The config at num_splits = 1 with the fold order of config i.
    auto unsplit = [&](size_t i) {
      for (size_t j : at.front())
        if (configs[j].fold_order == configs[i].fold_order) return j;
      return at.front().front();
    };
    for_each_measured_o(a, J0, [&](const Elem& e, size_t idx, int64_t) {
      for (size_t n = 0; n < counts.size(); ++n) {
        DriftCounts& d = counts[n];
        const std::vector<size_t>& here = at[n];
        if (here.size() > 1) {
          double worst = 0;
          bool differ = false;
          for (size_t x = 0; x < here.size(); ++x)
            for (size_t y = x + 1; y < here.size(); ++y) {
              const uint32_t bx = outs[here[x]].out[idx], by = outs[here[y]].out[idx];
              differ = differ || bx != by;
              worst = std::max(worst, units_apart(a.dtype, bx, by, e.cancel_unit));
            }
          ++d.fold_outputs;
          d.fold_differ += differ;
          d.fold_max_ulp = std::max(d.fold_max_ulp, worst);
        }
        if (d.num_splits > 1) {
          double worst = 0;
          bool differ = false;
          for (size_t i : here) {
            const uint32_t bi = outs[i].out[idx], b1 = outs[unsplit(i)].out[idx];
            differ = differ || bi != b1;
            worst = std::max(worst, units_apart(a.dtype, bi, b1, e.cancel_unit));
          }
          ++d.splits_outputs;
          d.splits_differ += differ;
          d.splits_max_ulp = std::max(d.splits_max_ulp, worst);
        }
      }
    });
    return counts;
  }
};

}  // namespace
AC_REGISTER_PROPERTY(60, SplitOrderDrift);
}  // namespace attncheck::detail
