// batch_invariance: a sequence's output does not depend on the other sequences of its call. An
// engine schedules requests together, and a kernel that picks its split count, tile shape or
// specialisation from the whole batch (its size, its longest query range, its mix of decode and
// prefill rows, its total keys) changes the fold order of one request's sums when its neighbours
// change, and with it the request's last bits. Each case is a batch (attention_batch_input); the
// subject runs it once, then each victim sequence alone with the same options: every sequence of a
// batch of up to kAllVictims, else the first, the middle and the last (where the generator puts
// its deliberately odd sequence). The victims' rows, in the batch and alone, are judged. The victims' O and
// LSE must equal their rows of the batch bit for bit when the subject declares AC_CAP_BATCH_INVARIANT;
// undeclared, the property passes and reports the spread (outputs that changed, by how many ulps and accuracy
// budgets). The victims' rows, in the batch and alone, are held to the accuracy budget either way.
#include <sstream>

#include "../property.hpp"
#include "attncheck/names.hpp"

namespace attncheck::detail {
namespace {

constexpr int64_t kAllVictims = 4;
// Batches of up to this many sequences are listed in a failure's message, the victim bracketed.
constexpr size_t kNamedBatch = 8;

// Sequences `keep` of `a` (ascending) as an input of their own: their q rows, k and v rows and
// mask blocks, in order. A paged batch's sequences are gathered and paged again in their own pool
// with the batch's page size (where a key is stored changes no arithmetic).
AttentionInput sequences_of(const AttentionInput& given, const std::vector<size_t>& keep) {
  if (given.paged()) return gen::paged_copy(sequences_of(gather_pages(given), keep), given.page_size);
  const AttentionInput& a = given;
  AttentionInput s = a;
  s.seqlens_q.clear();
  s.seqlens_k.clear();
  s.q.clear();
  s.k.clear();
  s.v.clear();
  s.mask.clear();
  const int64_t H = a.num_heads, Hkv = a.num_kv_heads, D = a.head_size, Dv = a.dv();
  int64_t q0 = 0, k0 = 0, m0 = 0;
  size_t next = 0;
  for (size_t j = 0; j < a.seqlens_q.size() && next < keep.size(); ++j) {
    const int64_t tq = a.seqlens_q[j], tk = a.seqlens_k[j];
    if (j == keep[next]) {
      ++next;
      s.seqlens_q.push_back(int32_t(tq));
      s.seqlens_k.push_back(int32_t(tk));
      auto append = [](Bits& to, const Bits& from, int64_t first, int64_t n) {
        to.insert(to.end(), from.begin() + std::ptrdiff_t(first), from.begin() + std::ptrdiff_t(first + n));
      };
      append(s.q, a.q, q0 * H * D, tq * H * D);
      append(s.k, a.k, k0 * Hkv * D, tk * Hkv * D);
      append(s.v, a.v, k0 * Hkv * Dv, tk * Hkv * Dv);
      if (!a.mask.empty())
        s.mask.insert(s.mask.end(), a.mask.begin() + std::ptrdiff_t(m0),
                      a.mask.begin() + std::ptrdiff_t(m0 + tq * tk));
    }
    q0 += tq;
    k0 += tk;
    m0 += tq * tk;
  }
  return s;
}

// The rows of sequences `keep` of an output of `a` ([tokens, heads, d] and [tokens, heads]).
AttentionOutput rows_of(const AttentionInput& a, const AttentionOutput& out,
                        const std::vector<size_t>& keep) {
  AttentionOutput r;
  const int64_t H = a.num_heads, D = a.dv();
  int64_t q0 = 0;
  size_t next = 0;
  for (size_t j = 0; j < a.seqlens_q.size() && next < keep.size(); ++j) {
    const int64_t tq = a.seqlens_q[j];
    if (j == keep[next]) {
      ++next;
      r.out.insert(r.out.end(), out.out.begin() + std::ptrdiff_t(q0 * H * D),
                   out.out.begin() + std::ptrdiff_t((q0 + tq) * H * D));
      if (!out.lse.empty())
        r.lse.insert(r.lse.end(), out.lse.begin() + std::ptrdiff_t(q0 * H),
                     out.lse.begin() + std::ptrdiff_t((q0 + tq) * H));
    }
    q0 += tq;
  }
  return r;
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
    << keys << " keys in all";
  // A small batch, as shrinking leaves it, is named whole: the neighbour set that changes the bits.
  if (n <= kNamedBatch) {
    o << "; queries x keys:";
    for (size_t i = 0; i < n; ++i)
      o << (i ? ", " : " ") << (i == victim ? "[" : "") << a.seqlens_q[i] << "x" << a.seqlens_k[i]
        << (i == victim ? "]" : "");
  }
  o << ")";
  return o.str();
}

class BatchInvariance final : public Property {
 public:
  BatchInvariance()
      : Property({"batch_invariance",
                  "A sequence's O and LSE alone and among other sequences agree bit for bit when the subject "
                  "declares batch invariance (else the change is reported); the victims' rows within budget.",
                  "\"Bitwise reproducibility is a casualty\"", AC_OP_ATTENTION | AC_OP_SPLITKV, true,
                  kCost}) {}
  // The batch and up to four victims alone, and the victims' judgement (a second one where their
  // bits changed): about four launch-and-judge units a case.
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
    // The victims (with query rows), each run alone; their rows of the batch and their outputs
    // alone are what is compared and judged (a batch of 140 sequences judged whole would cost more
    // than the rest of the gate; every other row's accuracy is the other properties' to judge).
    const size_t n = a.seqlens_q.size();
    std::vector<size_t> victims;
    for (size_t i = 0; i < n; ++i)
      if (a.seqlens_q[i] > 0 && (int64_t(n) <= kAllVictims || i == 0 || i == (n - 1) / 2 || i + 1 == n))
        victims.push_back(i);
    if (victims.empty()) return o;
    const AttentionInput v = sequences_of(a, victims);
    const AttentionOutput in_batch = rows_of(a, batched, victims);
    AttentionOutput alone;
    std::string first_changed;
    for (const size_t i : victims) {
      before_launch(ctx, c, /*write=*/false);  // the batch is the case; its replay runs the victims again
      const AttentionInput one = sequences_of(a, {i});
      const AttentionOutput out = s.attention(one, c.options);
      alone.out.insert(alone.out.end(), out.out.begin(), out.out.end());
      alone.lse.insert(alone.lse.end(), out.lse.begin(), out.lse.end());
      if (first_changed.empty())
        if (const std::string d = first_difference(one, rows_of(a, batched, {i}), out); !d.empty())
          first_changed = batch_phrase(a, i) + ": in the batch (first) and alone (second) the outputs " + d;
    }
    PreparedAttention judge(v, ctx.cv, ctx.budget);
    const Judgement J = judge.judge(in_batch);
    record_stats(ctx, J);
    rule_accuracy(o, J, false);
    if (!o.ok) return o;
    // Undeclared, what was compared is reported whether or not anything changed.
    if (!ctx.cv.batch_invariant) o.spread = spread_of(v.dtype, in_batch, alone);
    if (first_changed.empty()) return o;
    rule_accuracy(o, judge.judge(alone), false);
    if (!o.ok) {
      o.message = "alone: " + o.message;
      return o;
    }
    if (ctx.cv.batch_invariant) {
      const std::string how = c.op == op_name(AC_OP_SPLITKV)
                                  ? " (num_splits " + std::to_string(c.options.num_splits) + ", fold " +
                                        fold_name(c.options.fold_order) + ")"
                                  : "";
      fail(o, "batch_variant", first_changed + how);
      return o;
    }
    o.spread.max_budget = budget_spread(v, J, in_batch, alone);
    return o;
  }
};

}  // namespace
AC_REGISTER_PROPERTY(66, BatchInvariance);
}  // namespace attncheck::detail
