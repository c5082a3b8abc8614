// streamed_kv: attention over K and V larger than any GPU's L2 (RunConfig::streamed_kv_bytes,
// 256 MiB), for subjects whose tensors live in device memory. Every other property's cases fit in
// L2, where a pipeline's loads land long before its math reaches them; here the loads come from
// DRAM and lag, which is when a consumer that waits on the wrong barrier phase, or not at all, reads
// a stage before its data has landed. Such a read is usually nondeterministic and often inexact, so
// each case is launched kLaunches times: every launch after the first must equal the first bit for
// bit over the whole output, and the first is judged against the exact reference on a slice: two
// KV heads, the first and the last, with their query heads, and of a single unmasked non-causal
// sequence (the generated case) the first and last kSliceTokens query tokens (a subject declared
// nondeterministic has every launch judged, and the spread reported). A smaller case cannot show
// the failure, so a failing case is kept as it is, unshrunk; kMaxCases per subject bound the run's
// time.
#include <numeric>
#include <sstream>

#include "../property.hpp"

namespace attncheck::detail {
namespace {

constexpr int kLaunches = 3, kMaxCases = 1, kSliceTokens = 16;

// The judged part of a case: KV heads (ascending) with their query heads, and query tokens
// (ascending) of its one sequence (all tokens when empty).
struct Slice {
  std::vector<int32_t> kv;
  std::vector<int64_t> tokens;
  std::string describe() const {
    std::ostringstream s;
    s << "KV heads";
    for (const int32_t g : kv) s << ' ' << g;
    if (!tokens.empty())
      s << ", tokens 0-" << kSliceTokens - 1 << " and " << tokens.back() - kSliceTokens + 1 << '-'
        << tokens.back();
    s << " (judged as a case of those alone, its heads and tokens counted from 0)";
    return s.str();
  }
};
Slice slice_of(const AttentionInput& a) {
  Slice sl;
  sl.kv.push_back(0);
  if (a.num_kv_heads > 1) sl.kv.push_back(a.num_kv_heads - 1);
  const int64_t tq = total_q(a);
  if (a.seqlens_q.size() == 1 && !a.causal && a.mask.empty() && tq > 2 * kSliceTokens)
    for (int64_t t = 0; t < tq; ++t)
      if (t < kSliceTokens || t >= tq - kSliceTokens) sl.tokens.push_back(t);
  return sl;
}

// The case restricted to a slice: attention heads are independent, and so are the query rows of an
// unmasked non-causal sequence, so each kept row's exact value is the case's. The judgement's cost
// is the slice's (2 of 64 heads, 32 of 130 tokens here), not the 256 MiB case's.
struct Sliced {
  const AttentionInput& a;
  const Slice& sl;
  int64_t D = a.head_size, H = a.num_heads, group = a.num_heads / a.num_kv_heads;
  std::vector<int64_t> qt;  // the query tokens kept
  Sliced(const AttentionInput& case_input, const Slice& slice) : a(case_input), sl(slice), qt(sl.tokens) {
    if (qt.empty()) {
      qt.resize(size_t(total_q(a)));
      std::iota(qt.begin(), qt.end(), int64_t(0));
    }
  }
  // Rows [t][h][D] of x, for the heads g * width .. + width of each kept group g.
  void take(const Bits& x, const std::vector<int64_t>& rows, int64_t heads, int64_t width, Bits& out) const {
    out.reserve(rows.size() * sl.kv.size() * size_t(width * D));
    for (const int64_t t : rows)
      for (const int32_t g : sl.kv) {
        const auto first = x.begin() + (t * heads + g * width) * D;
        out.insert(out.end(), first, first + width * D);
      }
  }
  AttentionInput input() const {
    AttentionInput s;  // a's metadata, not its 256 MiB
    s.dtype = a.dtype;
    s.head_size = a.head_size;
    s.seqlens_q = sl.tokens.empty() ? a.seqlens_q : std::vector<int32_t>{int32_t(qt.size())};
    s.seqlens_k = a.seqlens_k;
    s.causal = a.causal;
    s.mask = a.mask;
    s.softmax_scale = a.softmax_scale;
    s.num_kv_heads = int32_t(sl.kv.size());
    s.num_heads = int32_t(int64_t(sl.kv.size()) * group);
    std::vector<int64_t> kt(size_t(total_k(a)));
    std::iota(kt.begin(), kt.end(), int64_t(0));
    take(a.q, qt, H, group, s.q);
    take(a.k, kt, a.num_kv_heads, 1, s.k);
    take(a.v, kt, a.num_kv_heads, 1, s.v);
    return s;
  }
  AttentionOutput output(const AttentionOutput& o) const {
    AttentionOutput so;
    take(o.out, qt, H, group, so.out);
    if (!o.lse.empty())
      for (const int64_t t : qt)
        for (const int32_t g : sl.kv)
          for (int64_t i = 0; i < group; ++i) so.lse.push_back(o.lse[size_t(t * H + g * group + i)]);
    return so;
  }
};

class StreamedKv final : public Property {
 public:
  StreamedKv()
      : Property(
            {"streamed_kv",
             "With K and V past the device's L2 (256 MiB), so the loads lag the math, every launch "
             "repeats the first bit for bit and is within budget on a slice of two KV heads and 32 query "
             "tokens.",
             "\"Bitwise reproducibility is a casualty\"", AC_OP_ATTENTION | AC_OP_SPLITKV, true,
             /*relative_cost=*/4, kMaxCases, /*in_long=*/false}) {}

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
    const Slice sl = slice_of(a);
    const Sliced sliced(a, sl);
    const AttentionInput sa = sliced.input();
    // The reference side once: the launches differ in their outputs only.
    const PreparedAttention judge(sa, ctx.cv, ctx.budget);
    for (int i = 0; i < (ctx.cv.nondeterministic ? kLaunches : 1); ++i) {
      const Judgement J = judge.judge(sliced.output(outs[size_t(i)]));
      if (i == 0) record_stats(ctx, J);
      rule_accuracy(o, J, false);
      if (!o.ok) {
        // The judgement names heads and tokens of the slice: say which of the case's they are.
        o.message = "launch " + std::to_string(i + 1) + " of " + std::to_string(kLaunches) + ", on " +
                    sl.describe() + ": " + o.message;
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
