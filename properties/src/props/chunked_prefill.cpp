// chunked_prefill: a prompt computed whole and in prefill chunks gives the same rows. An engine
// that prefills a long prompt in chunks calls the kernel once per chunk, with the chunk's queries
// over every key up to the chunk's end (the cached prefix and the chunk itself), bottom-right
// causal, so each query sees exactly the keys it sees in the whole prompt. A kernel whose key
// ranges, splits or tiles depend on the call's key count (split-KV with num_splits equal parts of
// T_k, a split count chosen from the call) folds a row's sums in another order per chunking, and
// the row's last bits move with the chunk size the scheduler picked.
//
// Each case is one causal sequence (attention_prefill_input, with the subject's declared variants:
// paged K / V, softcap, window, sinks, an FP8 cache; shrunk, its queries may be the last of more
// keys: a prompt after a cached prefix); the subject runs it whole, then in
// chunks of each size of chunk_sizes (every chunk a call of its own, with the case's options), and
// the chunks' rows, assembled, are judged against the whole's exact reference and compared with the
// whole's bits. Declared bit for bit: an attention subject declaring AC_CAP_BATCH_INVARIANT (it
// picks its own splits and tiles; a call's key count is part of its batch). A split-KV subject's
// parts are num_splits equal parts of the call's keys by contract, so its chunks differ by design:
// the property reports the spread there, as for any undeclared subject. Within budget either way.
// The merge path (prefix state merged with the chunk's state) is split_equals_whole's, within budget;
// it is never bitwise in general, since each state's O is rounded to the storage type before the
// merge while a whole launch folds its fp32 partials.
#include <algorithm>
#include <sstream>

#include "../property.hpp"

namespace attncheck::detail {
namespace {

// The chunk sizes a case of T tokens is prefilled in: half the prompt (two chunks), one 64-key
// tile (chunk ends on tile boundaries) and 17 (ends off them), each below T.
std::vector<int64_t> chunk_sizes(int64_t T) {
  std::vector<int64_t> sizes;
  for (const int64_t c : {(T + 1) / 2, int64_t(64), int64_t(17)})
    if (c < T && std::find(sizes.begin(), sizes.end(), c) == sizes.end()) sizes.push_back(c);
  return sizes;
}

// Queries [q0, q1) of the one sequence of `a` (contiguous) over the keys they can see: causal, the
// keys up to the last query's (bottom-right alignment: T_k - T_q + q1); else all of them. The
// chunk's call.
// Its variants are the prompt's: a window is relative to the bottom-right diagonal, which puts each
// query on the same keys in its chunk as in the whole (local row t - q0 over T_k - T_q + q1 keys);
// the sinks join every row's denominator once, whichever call computes the row; the cap, V's head
// size and an FP8 cache's codes and descales are per element. A page size > 0 pages the chunk in
// it (a paged prompt, gathered once by the caller: the cache an engine reads each chunk through).
AttentionInput chunk_of(const AttentionInput& a, int64_t q0, int64_t q1, int32_t page_size) {
  AttentionInput c = a;
  const int64_t H = a.num_heads, Hkv = a.num_kv_heads, D = a.head_size, Dv = a.dv();
  const int64_t keys = a.causal ? a.seqlens_k.front() - a.seqlens_q.front() + q1 : a.seqlens_k.front();
  c.seqlens_q = {int32_t(q1 - q0)};
  c.seqlens_k = {int32_t(keys)};
  c.q.assign(a.q.begin() + std::ptrdiff_t(q0 * H * D), a.q.begin() + std::ptrdiff_t(q1 * H * D));
  c.k.assign(a.k.begin(), a.k.begin() + std::ptrdiff_t(keys * Hkv * D));
  c.v.assign(a.v.begin(), a.v.begin() + std::ptrdiff_t(keys * Hkv * Dv));
  c.mask.clear();
  return page_size > 0 ? gen::paged_copy(c, page_size) : c;
}

class ChunkedPrefill final : public Property {
 public:
  ChunkedPrefill()
      : Property(
            {"chunked_prefill",
             "A causal prompt computed whole and in prefill chunks (each chunk's queries over the keys up to "
             "its end) agrees bit for bit when an attention subject declares batch invariance (else the "
             "change is reported); the chunks' rows within budget.",
             "\"Bitwise reproducibility is a casualty\"", AC_OP_ATTENTION | AC_OP_SPLITKV, true, kCost}) {}
  // The whole and three chunkings (2, about T / 64 and T / 17 calls), judged against one reference
  // where their bits differ from the whole's: about three launch-and-judge units a case.
  static constexpr double kCost = 3;

  // Chunks need causal masking (each chunk's queries are the last of its call).
  bool applies_to(const Subject& s, uint32_t) const override {
    return (s.caps().features & AC_FEAT_CAUSAL) != 0;
  }

  void draw_input(Case& c, const gen::Domain& dom, uint32_t) const override {
    c.input = *gen::attention_prefill_input(dom);
  }

  Outcome check(Ctx& ctx, const Case& c) const override {
    Outcome o;
    Subject& s = ctx.subject;
    const auto& a = std::get<AttentionInput>(c.input);
    before_launch(ctx, c);
    const AttentionOutput whole = s.attention(a, c.options);
    o.digest = digest_bits(whole.out, whole.lse);
    PreparedAttention judge(a, ctx.cv, ctx.budget);
    const Judgement J = judge.judge(whole);
    record_stats(ctx, J);
    rule_accuracy(o, J, false);
    if (!o.ok) return o;
    // A prompt is one sequence, its queries the last of its keys and no mask (a shrunk case may be
    // anything the shrinker made of one: it is chunked where it still is a prompt).
    if (a.seqlens_q.size() != 1 || a.seqlens_q.front() > a.seqlens_k.front() || !a.mask.empty()) return o;
    // O's rows have V's head size.
    const int64_t T = a.seqlens_q.front(), H = a.num_heads, D = a.dv();
    const bool bitwise = ctx.cv.batch_invariant && c.op == op_name(AC_OP_ATTENTION);
    AttentionInput gathered;
    const AttentionInput& prompt = contiguous_kv(a, gathered);
    Spread spread;
    double max_budget = 0;
    std::string first_changed;
    for (const int64_t size : chunk_sizes(T)) {
      AttentionOutput chunked;
      chunked.out.resize(whole.out.size());
      chunked.lse.resize(whole.lse.size());
      for (int64_t q0 = 0; q0 < T; q0 += size) {
        const int64_t q1 = std::min(T, q0 + size), n = q1 - q0;
        before_launch(ctx, c, /*write=*/false);  // the prompt is the case; its replay chunks it again
        const AttentionOutput part = s.attention(chunk_of(prompt, q0, q1, a.page_size), c.options);
        if (part.out.size() != size_t(n * H * D) ||
            part.lse.size() != (whole.lse.empty() ? 0 : size_t(n * H))) {
          fail(o, "chunked_prefill",
               "a chunk of " + std::to_string(n) + " queries returned outputs of another size");
          return o;
        }
        // Outputs as the subject wrapper hands them over: O [tokens, heads, d], LSE [tokens, heads].
        std::copy(part.out.begin(), part.out.end(), chunked.out.begin() + std::ptrdiff_t(q0 * H * D));
        std::copy(part.lse.begin(), part.lse.end(), chunked.lse.begin() + std::ptrdiff_t(q0 * H));
      }
      spread.add(spread_of(a.dtype, whole, chunked));
      const std::string d = first_difference(a, whole, chunked);
      if (d.empty()) continue;  // the whole's bits, already judged
      rule_accuracy(o, judge.judge(chunked), false);
      if (!o.ok) {
        o.message = "in chunks of " + std::to_string(size) + ": " + o.message;
        return o;
      }
      if (first_changed.empty())
        first_changed = "a prompt of " + std::to_string(T) + " tokens whole (first) and in chunks of " +
                        std::to_string(size) + " (second): the outputs " + d;
      max_budget = std::max(max_budget, budget_spread(a, J, whole, chunked));
    }
    if (bitwise && !first_changed.empty()) {
      fail(o, "chunk_variant", first_changed);
      return o;
    }
    if (!bitwise) {
      o.spread = spread;
      o.spread.max_budget = max_budget;
    }
    return o;
  }
};

}  // namespace
AC_REGISTER_PROPERTY(68, ChunkedPrefill);
}  // namespace attncheck::detail
