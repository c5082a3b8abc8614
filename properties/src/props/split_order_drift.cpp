// split_order_drift: split-KV attention runs the same case with every num_splits (up to 8) and
// every declared fold order; each must meet the accuracy budget (so two of them differ by at most
// twice it), the largest pairwise difference is reported as drift, and num_splits = 1 must be
// bitwise reproducible run to run (unless the subject declares itself nondeterministic).
#include <algorithm>
#include <cmath>
#include <optional>

#include "../property.hpp"

namespace attncheck::detail {
namespace {

class SplitOrderDrift final : public Property {
 public:
  SplitOrderDrift()
      : Property(
            {"split_order_drift",
             "Every num_splits and fold order stays within budget of the exact answer; drift is measured; "
             "num_splits = 1 is bitwise reproducible.",
             "\"Bitwise reproducibility is a casualty\"", AC_OP_SPLITKV, true}) {}

  // The check sweeps split counts and fold orders itself.
  bool draws_split_options() const override { return false; }

  Outcome check(Ctx& ctx, const Case& c) const override {
    Outcome o;
    Subject& s = ctx.subject;
    const auto& a = std::get<AttentionInput>(c.input);
    const ac_caps& caps = s.caps();
    std::vector<AttentionOptions> configs;
    for (int32_t n = 1; n <= std::max(1, std::min(caps.max_splits, 8)); ++n)
      for (ac_fold f : {AC_FOLD_LEFT, AC_FOLD_RIGHT, AC_FOLD_TREE})
        if ((caps.fold_orders & AC_FOLD_BIT(f)) || (caps.fold_orders == 0 && f == AC_FOLD_LEFT))
          configs.push_back(AttentionOptions{c.options.tiling, n, f});
    std::vector<AttentionOutput> outs;
    // Configurations often return the same bits (more splits than key blocks, one fold order of
    // two pieces). The judgement is a function of the input and the output bits, so a repeated
    // output reuses the judgement of its first occurrence instead of being judged again.
    std::vector<Judgement> judged;
    std::vector<size_t> judgement_of;  // per config: its index in `judged`
    std::vector<std::string> bits;     // per config: its output's bits (digest_bits)
    for (const AttentionOptions& opt : configs) {
      Case cc = c;
      cc.options = opt;
      before_launch(ctx, cc);
      outs.push_back(s.attention(a, opt));
      bits.push_back(digest_bits(outs.back().out, outs.back().lse));
      size_t same = judged.size();
      for (size_t i = 0; i + 1 < outs.size() && same == judged.size(); ++i)
        if (bits[i] == bits.back()) same = judgement_of[i];
      if (same == judged.size()) judged.push_back(judge_attention(a, outs.back(), ctx.cv, ctx.budget));
      judgement_of.push_back(same);
      const Judgement& J = judged[same];
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
    if (!outs.empty()) o.drift = drift_ulps(ctx, a, outs, judged.front());
    return o;
  }

 private:
  // The largest difference of one O element across configs, in ulps of its exact value; J0 is the
  // first config's judgement.
  static double drift_ulps(const Ctx& ctx, const AttentionInput& a, const std::vector<AttentionOutput>& outs,
                           const Judgement& J0) {
    double drift = 0;
    int64_t prev_row = -1, col = 0;
    std::optional<ref::AttentionProblem> exact_p;
    for (const Elem& e : J0.elems) {
      if (e.row != prev_row) {
        prev_row = e.row;
        col = 0;
      }
      if (e.out != Out::O) continue;
      const size_t idx = size_t(e.row * a.head_size + col++);
      if (!e.exact_finite || J0.row_skipped(e.row)) continue;
      double lo = INFINITY, hi = -INFINITY;
      for (const auto& out : outs) {
        const double v = decode(a.dtype, out.out[idx]);
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      if (!std::isfinite(lo) || !std::isfinite(hi)) continue;
      // A fast element near a power of two may not know its exact value's binade: take the
      // exact value then (a zero spread needs none).
      Real exact = e.exact;
      if (!e.binade_known && hi != lo) {
        if (!exact_p) exact_p = problem_of(a);
        exact =
            ref::exact_attention_row(*exact_p, e.row / a.num_heads, int32_t(e.row % a.num_heads), ctx.cv.base)
                .o[size_t(col - 1)];
      }
      drift = std::max(drift, (hi - lo) / ref::ulp_at(fmt(a.dtype), exact).convert_to<double>());
    }
    return drift;
  }
};

}  // namespace
AC_REGISTER_PROPERTY(60, SplitOrderDrift);
}  // namespace attncheck::detail
