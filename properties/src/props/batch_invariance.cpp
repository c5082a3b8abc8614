// batch_invariance: a sequence's output does not depend on the other sequences of its call. An
// engine schedules requests together, and a kernel that picks its split count, tile shape or
// specialisation from the whole batch (its size, its longest query range, its mix of decode and
// prefill rows, its total keys) changes the fold order of one request's sums when its neighbours
// change, and with it the request's last bits. Each case is a batch (attention_batch_input); the
// subject runs it once, then each victim sequence alone with the same options: every sequence of a
// batch of up to kAllVictims, else the first, the middle and the last (where the generator puts
// its deliberately odd sequence) and one inner position the case's lengths pick (other_victim). The victims'
// rows, in the batch and alone, are judged. The victims' O and LSE must equal their rows of the batch bit for
// bit when the subject declares AC_CAP_BATCH_INVARIANT; undeclared, the property passes and reports the
// spread (outputs that changed, by how many ulps and accuracy budgets). The victims' rows, in the batch and
// alone, are held to the accuracy budget either way. Where a victim's bits changed, a few probe launches
// (changed_by) name the scheduling dimensions that change them, in the failure's message or the reported
// spread.
#include <optional>
#include <sstream>
#include <string_view>

#include "../property.hpp"
#include "attncheck/hash.hpp"
#include "attncheck/names.hpp"

namespace attncheck::detail {
namespace {

constexpr int64_t kAllVictims = 4;

// A failure of the victims' rows quotes a row of the victims' input, not of the batch: its words,
// row kind and signature read that input (Outcome::judged).
Outcome on_victims(Outcome o, const Case& c, const AttentionInput& v) {
  auto victims = std::make_shared<Case>(c);  // the drawn case with the victims' input, as declared_variants'
  victims->input = v;
  o.judged = std::move(victims);
  return o;
}

// In a batch of more than kAllVictims, one more victim besides the first, the middle and the last:
// an inner position picked by the hash of the sequences' lengths, so a case always picks the same
// one and different cases different ones. A kernel that changes only another position of a large
// batch (the second sequence's, say) is then seen in some cases; with the three fixed ones alone,
// never.
size_t other_victim(const AttentionInput& a) {
  const size_t n = a.seqlens_q.size();
  if (int64_t(n) <= kAllVictims) return 0;
  uint64_t h = hash::kFnv1a64Offset;
  for (const auto* lengths : {&a.seqlens_q, &a.seqlens_k})
    h = hash::fnv1a64(
        std::string_view(reinterpret_cast<const char*>(lengths->data()), lengths->size() * sizeof(int32_t)),
        h);
  return 1 + size_t(hash::splitmix64(h) % (n - 2));
}
// Batches of up to this many sequences are listed in a failure's message, the victim bracketed.
constexpr size_t kNamedBatch = 8;

// One sequence of an input made from a case's sequences: tq query rows of sequence q_from and tk
// keys of sequence k_from, each taken in turn from the source's and again from its first where it
// has fewer (the source has at least one where the piece asks for any). A whole sequence keeps its
// mask block; a made-up one sees every key (the causal limit and the call's variants still apply).
struct Piece {
  size_t q_from = 0, k_from = 0;
  int64_t tq = 0, tk = 0;
};
Piece whole(const AttentionInput& a, size_t i) { return {i, i, a.seqlens_q[i], a.seqlens_k[i]}; }

// The pieces as an input of their own, in order, with the case's heads, flags and variants. A
// paged case's sequences are gathered and paged again in their own pool with the case's page size
// (where a key is stored changes no arithmetic).
AttentionInput assemble(const AttentionInput& given, const std::vector<Piece>& pieces) {
  if (given.paged()) return gen::paged_copy(assemble(gather_pages(given), pieces), given.page_size);
  const AttentionInput& a = given;
  AttentionInput s = a.without_tensors();
  s.seqlens_q.clear();
  s.seqlens_k.clear();
  const int64_t H = a.num_heads, Hkv = a.num_kv_heads, D = a.head_size, Dv = a.dv();
  const size_t n = a.seqlens_q.size();
  std::vector<int64_t> q0(n + 1, 0), k0(n + 1, 0), m0(n + 1, 0);
  for (size_t j = 0; j < n; ++j) {
    q0[j + 1] = q0[j] + a.seqlens_q[j];
    k0[j + 1] = k0[j] + a.seqlens_k[j];
    m0[j + 1] = m0[j] + int64_t(a.seqlens_q[j]) * a.seqlens_k[j];
  }
  auto append = [](Bits& to, const Bits& from, int64_t row, int64_t width) {
    to.insert(to.end(), from.begin() + std::ptrdiff_t(row * width),
              from.begin() + std::ptrdiff_t((row + 1) * width));
  };
  // Descales per (sequence, KV head): a piece reads K's and V's of the sequence its keys come from,
  // Q's of the one its queries come from.
  std::vector<size_t> k_from, q_from;
  std::vector<int32_t> all_heads(size_t(a.num_kv_heads));
  for (int32_t h = 0; h < a.num_kv_heads; ++h) all_heads[size_t(h)] = h;
  for (const Piece& p : pieces) {
    k_from.push_back(p.k_from);
    q_from.push_back(p.q_from);
  }
  s.k_descale = a.descales_for(a.k_descale, k_from, all_heads);
  s.v_descale = a.descales_for(a.v_descale, k_from, all_heads);
  s.q_descale = a.descales_for(a.q_descale, q_from, all_heads);
  for (const Piece& p : pieces) {
    s.seqlens_q.push_back(int32_t(p.tq));
    s.seqlens_k.push_back(int32_t(p.tk));
    const int64_t sq = a.seqlens_q[p.q_from], sk = a.seqlens_k[p.k_from];
    for (int64_t t = 0; t < p.tq; ++t) append(s.q, a.q, q0[p.q_from] + t % sq, H * D);
    for (int64_t j = 0; j < p.tk; ++j) {
      append(s.k, a.k, k0[p.k_from] + j % sk, Hkv * D);
      append(s.v, a.v, k0[p.k_from] + j % sk, Hkv * Dv);
    }
    if (a.mask.empty()) continue;
    if (p.q_from == p.k_from && p.tq == sq && p.tk == sk)
      s.mask.insert(s.mask.end(), a.mask.begin() + std::ptrdiff_t(m0[p.q_from]),
                    a.mask.begin() + std::ptrdiff_t(m0[p.q_from + 1]));
    else
      s.mask.insert(s.mask.end(), size_t(p.tq * p.tk), uint8_t{1});
  }
  return s;
}

// Sequences `keep` of `a`, whole and in order.
AttentionInput sequences_of(const AttentionInput& a, const std::vector<size_t>& keep) {
  std::vector<Piece> pieces;
  for (const size_t i : keep) pieces.push_back(whole(a, i));
  return assemble(a, pieces);
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

// Which scheduling dimensions change victim i's bits: a mask of BatchDimension bits, each from
// two launches built from the case's sequences that differ in that dimension alone, the victim
// first unless its position is what is probed (`out_alone`: its output alone; `batched`: the
// case's). Batch size: alone against copies of itself to the batch's size (each copy no larger
// than a sequence of the batch, so the probe stays within the batch's memory bound). Neighbour
// lengths: beside a neighbour of its own kind and keys against one of the batch's longest query
// range and most keys. Position: the batch with the victim moved to the other end against the
// batch as it came. Decode/prefill mix: beside a copy of itself against beside the shortest
// neighbour of the other kind. A decode victim's prefill neighbour has 2 queries: the mix raises
// the longest query range from 1 to 2, a change no probe can keep apart from it, and the
// neighbour-lengths probe of a decode victim keeps such a neighbour on both sides.
uint32_t changed_by(Ctx& ctx, const Case& c, const AttentionInput& a, size_t i,
                    const AttentionOutput& out_alone, const AttentionOutput& batched) {
  const size_t n = a.seqlens_q.size();
  using MaybeBits = std::optional<std::string>;
  // The victim's bits from a launch of `pieces`, where it is piece `at`; none where the subject
  // refuses the launch (its probe then names nothing).
  auto victim_bits = [&](const std::vector<Piece>& pieces, size_t at) -> MaybeBits {
    before_launch(ctx, c, /*write=*/false);
    const AttentionInput in = assemble(a, pieces);
    try {
      const AttentionOutput r = rows_of(in, ctx.subject.attention(in, c.options), {at});
      return digest_bits(r.out, r.lse);
    } catch (const SubjectError& e) {
      if (e.kind != SubjectError::Kind::unsupported) throw;
      return std::nullopt;
    }
  };
  uint32_t mask = 0;
  auto differ = [&](BatchDimension d, const MaybeBits& x, const MaybeBits& y) {
    if (x && y && *x != *y) mask |= 1u << d;
  };
  const Piece victim = whole(a, i);
  size_t longest_q = 0, most_keys = 0;
  for (size_t j = 0; j < n; ++j) {
    if (a.seqlens_q[j] > a.seqlens_q[longest_q]) longest_q = j;
    if (a.seqlens_k[j] > a.seqlens_k[most_keys]) most_keys = j;
  }
  const bool decode = victim.tq == 1;
  const Piece other_kind{i, i, decode ? 2 : 1, victim.tk};
  const Piece long_neighbour{longest_q, most_keys, a.seqlens_q[longest_q], a.seqlens_k[most_keys]};
  differ(kBatchSize, victim_bits(std::vector<Piece>(n, victim), 0),
         digest_bits(out_alone.out, out_alone.lse));
  const MaybeBits beside_copy = victim_bits({victim, victim}, 0);
  const MaybeBits beside_other = victim_bits({victim, other_kind}, 0);
  const bool mixed_long = decode && long_neighbour.tq > 1;
  differ(kNeighbourLengths, victim_bits({victim, long_neighbour}, 0),
         mixed_long ? beside_other : beside_copy);
  std::vector<Piece> moved;
  for (size_t j = 0; j < n; ++j)
    if (j != i) moved.push_back(whole(a, j));
  moved.insert(i == 0 ? moved.end() : moved.begin(), victim);
  const AttentionOutput as_batched = rows_of(a, batched, {i});
  differ(kPosition, victim_bits(moved, i == 0 ? n - 1 : 0), digest_bits(as_batched.out, as_batched.lse));
  differ(kDecodePrefillMix, beside_other, beside_copy);
  return mask;
}

class BatchInvariance final : public Property {
 public:
  BatchInvariance()
      : Property({"batch_invariance",
                  "A sequence's O and LSE alone and among other sequences agree bit for bit when the subject "
                  "declares batch invariance (else the change is reported, with the dimensions that "
                  "triggered it); the victims' rows within budget; a failure shrinks for at most " +
                      std::to_string(int(kBatchShrinkSeconds)) + " s.",
                  "\"Bitwise reproducibility is a casualty\"", AC_OP_ATTENTION | AC_OP_SPLITKV, true, kCost,
                  0, true, PropertyInfo::BudgetUse::every_output, kCaseShare}) {}
  // The batch and up to four victims alone, and the victims' judgement (a second one where their
  // bits changed, and then five probe launches, changed_by): about five launch-and-judge units a
  // case, for kCaseShare of the cases: on the H200 its pairs take 4-8 s, a one-launch property's
  // 1-2 s.
  static constexpr double kCost = 3;
  // Each case is a batch of up to 140 sequences (kMaxBatchDevice) and up to four victims alone: 50
  // cases hold about 2500 sequences. At the run's full --cases the property added 26% to the
  // H200's gate wall time, at 60% of them 21% (the batch written ahead, generated, staged, its
  // victims' calls queued behind the other pairs' on the device server, and judged).
  static constexpr double kCaseShare = 0.5;

  double shrink_seconds(const RunConfig& cfg) const override {
    return std::min(cfg.shrink_seconds, cfg.batch_shrink_seconds);
  }

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
    const size_t other = other_victim(a);
    std::vector<size_t> victims;
    for (size_t i = 0; i < n; ++i)
      if (a.seqlens_q[i] > 0 &&
          (int64_t(n) <= kAllVictims || i == 0 || i == (n - 1) / 2 || i + 1 == n || i == other))
        victims.push_back(i);
    if (victims.empty()) return o;
    const AttentionInput v = sequences_of(a, victims);
    const AttentionOutput in_batch = rows_of(a, batched, victims);
    AttentionOutput alone;
    std::string first_changed;
    std::optional<size_t> changed;  // the first victim whose bits changed
    AttentionOutput changed_alone;
    for (const size_t i : victims) {
      before_launch(ctx, c, /*write=*/false);  // the batch is the case; its replay runs the victims again
      const AttentionInput one = sequences_of(a, {i});
      const AttentionOutput out = s.attention(one, c.options);
      alone.out.insert(alone.out.end(), out.out.begin(), out.out.end());
      alone.lse.insert(alone.lse.end(), out.lse.begin(), out.lse.end());
      if (!changed)
        if (const std::string d = first_difference(one, rows_of(a, batched, {i}), out); !d.empty()) {
          first_changed = batch_phrase(a, i) + ": in the batch (first) and alone (second) the outputs " + d;
          changed = i;
          changed_alone = out;
        }
    }
    PreparedAttention judge(v, ctx.cv, ctx.budget);
    const Judgement J = judge.judge(in_batch);
    record_stats(ctx, J);
    rule_accuracy(o, J, false);
    if (!o.ok) return on_victims(std::move(o), c, v);
    // Undeclared, what was compared is reported whether or not anything changed.
    if (!ctx.cv.batch_invariant) o.spread = spread_of(v.dtype, in_batch, alone);
    if (!changed) return o;
    rule_accuracy(o, judge.judge(alone), false);
    if (!o.ok) {
      o.message = "alone: " + o.message;
      return on_victims(std::move(o), c, v);
    }
    const uint32_t dims = changed_by(ctx, c, a, *changed, changed_alone, batched);
    if (ctx.cv.batch_invariant) {
      const std::string how = c.op == op_name(AC_OP_SPLITKV)
                                  ? " (num_splits " + std::to_string(c.options.num_splits) + ", fold " +
                                        fold_name(c.options.fold_order) + ")"
                                  : "";
      fail(o, "batch_variant", first_changed + how + "; triggered by " + batch_dimensions_phrase(dims));
      return o;
    }
    o.spread.max_budget = budget_spread(v, J, in_batch, alone);
    o.spread.probed = 1;
    o.spread.none_isolated = dims == 0;
    for (int d = 0; d < kBatchDimensions; ++d) o.spread.triggered[size_t(d)] = (dims >> d) & 1u;
    return o;
  }
};

}  // namespace
AC_REGISTER_PROPERTY(66, BatchInvariance);
}  // namespace attncheck::detail
