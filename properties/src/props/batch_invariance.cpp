// batch_invariance: a sequence's output does not depend on the other sequences of its call. An
// engine schedules requests together, and a kernel that picks its split count, tile shape or
// specialisation from the whole batch (its size, its longest query range, its mix of decode and
// prefill rows, its total keys) changes the fold order of one request's sums when its neighbours
// change, and with it the request's last bits. Each case is a batch (attention_batch_input); the
// subject runs it once, then each victim sequence alone with the same options: every sequence of a
// batch of up to kAllVictims, else the first, the middle and the last (where the generator puts
// its deliberately odd sequence). The victims' O and LSE must equal their rows of the batch bit for
// bit when the subject declares AC_CAP_BATCH_INVARIANT; undeclared, the property passes and
// reports the spread (outputs that changed, by how many ulps and accuracy budgets). Every launch,
// batch and alone, is held to the accuracy budget either way.
#include <sstream>

#include "../property.hpp"
#include "attncheck/names.hpp"

namespace attncheck::detail {
namespace {

constexpr int64_t kAllVictims = 4;

// Sequence i of `a` as an input of its own (its q rows, its k and v rows and its mask block).
AttentionInput sequence_alone(const AttentionInput& a, size_t i) {
  AttentionInput s = a;
  int64_t q0 = 0, k0 = 0, m0 = 0;
  for (size_t j = 0; j < i; ++j) {
    q0 += a.seqlens_q[j];
    k0 += a.seqlens_k[j];
    m0 += int64_t(a.seqlens_q[j]) * a.seqlens_k[j];
  }
  const int64_t tq = a.seqlens_q[i], tk = a.seqlens_k[i], H = a.num_heads, Hkv = a.num_kv_heads,
                D = a.head_size;
  s.seqlens_q = {int32_t(tq)};
  s.seqlens_k = {int32_t(tk)};
  auto rows = [](const Bits& b, int64_t first, int64_t n) {
    return Bits(b.begin() + std::ptrdiff_t(first), b.begin() + std::ptrdiff_t(first + n));
  };
  s.q = rows(a.q, q0 * H * D, tq * H * D);
  s.k = rows(a.k, k0 * Hkv * D, tk * Hkv * D);
  s.v = rows(a.v, k0 * Hkv * D, tk * Hkv * D);
  if (!a.mask.empty())
    s.mask.assign(a.mask.begin() + std::ptrdiff_t(m0), a.mask.begin() + std::ptrdiff_t(m0 + tq * tk));
  return s;
}

// The scheduling dimensions of a batch that engines choose from, in one phrase.
std::string batch_phrase(const AttentionInput& a, size_t victim) {
  const size_t n = a.seqlens_q.size();
  int64_t decode = 0, max_q = 0, keys = 0;
  for (size_t i = 0; i < n; ++i) {
    decode += a.seqlens_q[i] == 1;
    max_q = std::max<int64_t>(max_q, a.seqlens_q[i]);
    keys += a.seqlens_k[i];
  }
  std::ostringstream o;
  o << "sequence " << victim << " of a batch of " << n << " ("
    << (victim == 0       ? "first"
        : victim + 1 == n ? "last"
                          : "middle")
    << "; " << decode << " decode and " << n - size_t(decode)
    << " prefill rows; max_seqlen_q x group = " << max_q * (a.num_heads / std::max(1, a.num_kv_heads)) << "; "
    << keys << " keys in all)";
  return o.str();
}

class BatchInvariance final : public Property {
 public:
  BatchInvariance()
      : Property({"batch_invariance",
                  "A sequence's O and LSE alone and among other sequences agree bit for bit when the subject "
                  "declares batch invariance (else the change is reported); every launch within budget.",
                  "\"Bitwise reproducibility is a casualty\"", AC_OP_ATTENTION | AC_OP_SPLITKV, true,
                  kCost}) {}
  // The batch and up to three victims alone (all of up to four): about four launches and two
  // judgements a case.
  static constexpr double kCost = 4;

  // A batch needs several sequences in one call.
  bool applies_to(const Subject& s, uint32_t) const override {
    return (s.caps().features & AC_FEAT_VARLEN) != 0;
  }

  void draw_input(Case& c, const gen::Domain& dom, uint32_t) const override {
    c.input = *gen::attention_batch_input(dom);
  }

  Outcome check(Ctx& ctx, const Case& c) const override {
    Outcome o;
    Subject& s = ctx.subject;
    const auto& a = std::get<AttentionInput>(c.input);
    before_launch(ctx, c);
    const AttentionOutput batched = s.attention(a, c.options);
    o.digest = digest_bits(batched.out, batched.lse);
    // The victims' rows of the batch replaced by their outputs alone: the batch's output as it
    // would be if every sequence ran by itself.
    AttentionOutput alone = batched;
    const size_t n = a.seqlens_q.size();
    std::vector<size_t> victims;
    for (size_t i = 0; i < n; ++i)
      if (int64_t(n) <= kAllVictims || i == 0 || i == (n - 1) / 2 || i + 1 == n) victims.push_back(i);
    const int64_t H = a.num_heads, D = a.head_size;
    std::string first_changed;
    for (const size_t i : victims) {
      if (a.seqlens_q[i] == 0) continue;
      before_launch(ctx, c, /*write=*/false);  // the batch is the case; its replay runs the victims again
      const AttentionOutput one = s.attention(sequence_alone(a, i), c.options);
      int64_t q0 = 0;
      for (size_t j = 0; j < i; ++j) q0 += a.seqlens_q[j];
      std::copy(one.out.begin(), one.out.end(), alone.out.begin() + std::ptrdiff_t(q0 * H * D));
      if (!one.lse.empty() && !alone.lse.empty())
        std::copy(one.lse.begin(), one.lse.end(), alone.lse.begin() + std::ptrdiff_t(q0 * H));
      if (first_changed.empty() && !first_difference(a, alone, batched).empty())
        first_changed = batch_phrase(a, i);
    }
    PreparedAttention judge(a, ctx.cv, ctx.budget);
    const Judgement J = judge.judge(batched);
    record_stats(ctx, J);
    rule_accuracy(o, J, false);
    if (!o.ok) return o;
    const std::string diff = first_difference(a, batched, alone);
    // Undeclared, what was compared is reported whether or not anything changed.
    if (!ctx.cv.batch_invariant) o.spread = spread_of(a.dtype, batched, alone);
    if (diff.empty()) return o;
    const Judgement J_alone = judge.judge(alone);
    rule_accuracy(o, J_alone, false);
    if (!o.ok) {
      o.message = "alone (" + first_changed + "): " + o.message;
      return o;
    }
    if (ctx.cv.batch_invariant) {
      const std::string how = c.op == op_name(AC_OP_SPLITKV)
                                  ? " (num_splits " + std::to_string(c.options.num_splits) + ", fold " +
                                        fold_name(c.options.fold_order) + ")"
                                  : "";
      fail(o, "batch_variant",
           first_changed + ": the batch's outputs (first) and the sequences' alone (second) " + diff + how);
      return o;
    }
    o.spread.max_budget = budget_spread(a, J, batched, alone);
    return o;
  }
};

}  // namespace
AC_REGISTER_PROPERTY(66, BatchInvariance);
}  // namespace attncheck::detail
