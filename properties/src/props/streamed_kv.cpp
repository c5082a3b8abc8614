// streamed_kv: attention over K and V larger than any GPU's L2 (RunConfig::streamed_kv_bytes,
// 256 MiB), for subjects whose tensors live in device memory. Every other property's cases fit in
// L2, where a pipeline's loads land long before its math reaches them; here the loads come from
// DRAM and lag, which is when a consumer that waits on the wrong barrier phase, or not at all, reads
// a stage before its data has landed. Such a read is usually nondeterministic and often inexact, so
// each case is launched kLaunches times: every launch after the first must equal the first bit for
// bit, and the first is judged against the exact reference on sampled rows (a subject declared
// nondeterministic has every launch judged, and the spread reported). A smaller case cannot show the failure,
// so a failing case is kept as it is, unshrunk; kMaxCases per subject bound the run's time.
#include "../property.hpp"

namespace attncheck::detail {
namespace {

// kJudgedRows of the rows judge_attention samples (a replay judges them all): the reference's cost
// grows with the keys, which are many here.
constexpr int kLaunches = 3, kMaxCases = 2, kJudgedRows = 64;

class StreamedKv final : public Property {
 public:
  StreamedKv()
      : Property(
            {"streamed_kv",
             "With K and V past the device's L2 (256 MiB), so the loads lag the math, every launch is within "
             "budget on sampled rows and repeats the first bit for bit.",
             "\"Bitwise reproducibility is a casualty\"", AC_OP_ATTENTION | AC_OP_SPLITKV, true,
             /*relative_cost=*/4, kMaxCases}) {}

  bool applies_to(const Subject& s, uint32_t) const override { return s.caps().memory == AC_MEMORY_CUDA; }
  void draw_input(Case& c, const gen::Domain& dom, uint32_t) const override {
    c.input = *gen::attention_streamed_input(dom);
  }
  bool shrinks() const override { return false; }

  Outcome check(Ctx& ctx, const Case& c) const override {
    Outcome o;
    const auto& a = std::get<AttentionInput>(c.input);
    std::vector<AttentionOutput> outs;
    for (int i = 0; i < kLaunches; ++i) {
      before_launch(ctx, c, /*write=*/i == 0);  // one write-ahead of the case serves every launch
      outs.push_back(ctx.subject.attention(a, c.options));
    }
    o.digest = digest_bits(outs[0].out, outs[0].lse);
    // The bits first: they cost nothing, and a read ahead of the data mostly shows as a difference.
    for (int i = 1; i < kLaunches && !ctx.cv.nondeterministic; ++i) {
      const std::string diff = first_difference(a, outs[0], outs[size_t(i)]);
      if (!diff.empty()) {
        fail(o, "nondeterministic", "launches 1 and " + std::to_string(i + 1) + " on the same input " + diff);
        return o;
      }
    }
    // Equal bits need one judgement; a subject declared nondeterministic has each launch judged.
    const PreparedAttention judge(a, ctx.cv, ctx.budget, kJudgedRows);
    for (int i = 0; i < (ctx.cv.nondeterministic ? kLaunches : 1); ++i) {
      const Judgement J = judge.judge(outs[size_t(i)]);
      if (i == 0) record_stats(ctx, J);
      rule_accuracy(o, J, false);
      if (!o.ok) {
        o.message = "launch " + std::to_string(i + 1) + " of " + std::to_string(kLaunches) + ": " + o.message;
        return o;
      }
      if (i > 0) o.spread.add(spread_of(a.dtype, outs[0], outs[size_t(i)]));
    }
    return o;
  }
};

}  // namespace
AC_REGISTER_PROPERTY(67, StreamedKv);
}  // namespace attncheck::detail
