// streamed_kv: attention over K and V larger than any GPU's L2 (RunConfig::streamed_kv_bytes,
// 256 MiB), for subjects whose tensors live in device memory. Every other property's cases fit in
// L2, where a pipeline's loads land long before its math reaches them; here the loads come from
// DRAM and lag, which is when a consumer that waits on the wrong barrier phase, or not at all, reads
// a stage before its data has landed. Such a read is usually nondeterministic and often inexact, so
// each case is launched kLaunches times: every launch after the first must equal the first bit for
// bit over the whole output, and the first is judged against the exact reference on two of its KV
// heads, the first and the last, with all their query heads and rows (a subject declared
// nondeterministic has every launch judged, and the spread reported). A smaller case cannot show
// the failure, so a failing case is kept as it is, unshrunk; kMaxCases per subject bound the run's
// time.
#include "../property.hpp"

namespace attncheck::detail {
namespace {

constexpr int kLaunches = 3, kMaxCases = 2;

// The case restricted to KV heads `kv` (ascending) and their query heads, with the matching part of
// an output: attention heads are independent, so each kept row's exact value is the same. The
// judgement's cost is that of the kept heads (2 of 64 here), not of the 256 MiB.
std::pair<AttentionInput, AttentionOutput> slice_heads(const AttentionInput& a, const AttentionOutput& o,
                                                       const std::vector<int32_t>& kv) {
  const int64_t D = a.head_size, H = a.num_heads, Hkv = a.num_kv_heads, group = H / Hkv;
  const int64_t tq = total_q(a), tk = total_k(a), n = int64_t(kv.size());
  AttentionInput s = a;
  s.num_kv_heads = int32_t(n);
  s.num_heads = int32_t(n * group);
  AttentionOutput so;
  // Rows [t][h][D] of x, for the heads h0 .. h0 + width of each kept group.
  auto take = [&](const Bits& x, int64_t rows, int64_t heads, int64_t width, Bits& out) {
    out.clear();
    out.reserve(size_t(rows * n * width * D));
    for (int64_t t = 0; t < rows; ++t)
      for (const int32_t g : kv) {
        const auto first = x.begin() + (t * heads + g * width) * D;
        out.insert(out.end(), first, first + width * D);
      }
  };
  take(a.q, tq, H, group, s.q);
  take(a.k, tk, Hkv, 1, s.k);
  take(a.v, tk, Hkv, 1, s.v);
  take(o.out, tq, H, group, so.out);
  if (!o.lse.empty())
    for (int64_t t = 0; t < tq; ++t)
      for (const int32_t g : kv)
        for (int64_t i = 0; i < group; ++i) so.lse.push_back(o.lse[size_t(t * H + g * group + i)]);
  return {std::move(s), std::move(so)};
}

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
    std::vector<int32_t> kv{0};
    if (a.num_kv_heads > 1) kv.push_back(a.num_kv_heads - 1);
    for (int i = 0; i < (ctx.cv.nondeterministic ? kLaunches : 1); ++i) {
      const auto [sa, so] = slice_heads(a, outs[size_t(i)], kv);
      const Judgement J = judge_attention(sa, so, ctx.cv, ctx.budget);
      if (i == 0) record_stats(ctx, J);
      rule_accuracy(o, J, false);
      if (!o.ok) {
        // The judgement names heads of the slice: say which of the case's they are.
        std::string heads = "KV head 0";
        if (kv.size() > 1)
          heads += " and " + std::to_string(kv.back()) + " (heads 0 and 1 of the slice judged)";
        o.message = "launch " + std::to_string(i + 1) + " of " + std::to_string(kLaunches) + ", " + heads +
                    ": " + o.message;
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
