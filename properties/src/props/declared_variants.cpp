// declared_variants: a subject that declares the engines' variants (plugin_abi.h AC_VAR_*) accepts
// every one of them. The ABI's rule is "a subject that declares one must accept every call that uses
// it within its other declarations"; the other properties draw variants at random and take a
// refusal for a skipped case, so a subject refusing one declared page size would pass each of them.
// Here each declared item gets one small case of its own, the same plain case with that item alone:
// every page size (the case's K / V paged at it, gen::paged_copy, and two sequences over three
// shuffled pages of it, the first shared: over_shared_pages), every (QK, V) head pair, the
// softcap, a window, sinks, and each declared FP8 KV cache format (per KV head too where declared,
// O in each format under AC_FP8_OUT, the maxima under AC_FP8_AMAX). A merge or a quantiser that
// declares FP8 outputs (caps.kv_dtypes) gets a small plain merge or quantisation and one item per
// declared format (a quantiser's also with a scale per head where declared).
// The plain case runs first: a refusal of it is an ordinary refusal
// (a skipped case). A refusal of an item then breaks the declaration and fails (`refused_declared`)
// naming the item; each output is held to the accuracy budget as well. The items are enumerated,
// not drawn, so one case per subject covers them all (kMaxCases).
#include <cmath>

#include "../property.hpp"
#include "attncheck/hash.hpp"
#include "attncheck/names.hpp"

namespace attncheck::detail {
namespace {

constexpr int kMaxCases = 1;
// The plain case: one sequence of 2 queries over 7 keys (a last page part-filled at every page size
// but 1 and 7), two query heads.
constexpr int32_t kQueries = 2, kKeys = 7, kHeads = 2;

// n values in [-1, 1] rounded to `dtype`, a fixed function of (salt, index): the case is the same on
// every run and for every subject.
Bits fixed_values(ac_dtype dtype, int64_t n, uint64_t salt) {
  Bits x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    x[size_t(i)] = round_bits(
        dtype, double(int64_t(hash::splitmix64(salt * 1000003u + uint64_t(i)) % 2001) - 1000) / 1000);
  return x;
}

// The plain case at head sizes d (Q, K) and dv (V, O; 0: d), or its sequences' lengths `tq`, `tk`;
// kv_heads KV heads (0: one under GQA, else kHeads), each with kHeads query heads under GQA.
AttentionInput plain_case(ac_dtype dtype, int32_t d, int32_t dv, bool gqa,
                          std::vector<int32_t> tq = {kQueries}, std::vector<int32_t> tk = {kKeys},
                          int32_t kv_heads = 0) {
  AttentionInput a;
  a.dtype = dtype;
  a.num_kv_heads = kv_heads > 0 ? kv_heads : gqa ? 1 : kHeads;
  a.num_heads = gqa ? kHeads * a.num_kv_heads : a.num_kv_heads;
  a.head_size = d;
  a.head_size_v = dv;
  a.seqlens_q = std::move(tq);
  a.seqlens_k = std::move(tk);
  a.softmax_scale = float(1 / std::sqrt(double(d)));
  int64_t queries = 0, keys = 0;
  for (size_t s = 0; s < a.seqlens_q.size(); ++s) queries += a.seqlens_q[s], keys += a.seqlens_k[s];
  a.q = fixed_values(dtype, queries * a.num_heads * d, 1);
  a.k = fixed_values(dtype, keys * a.num_kv_heads * d, 2);
  a.v = fixed_values(dtype, keys * a.num_kv_heads * a.dv(), 3);
  return a;
}

// Two sequences spanning pages of P (queries as the plain case's): 2P + 3 keys, two whole pages
// and 3 keys of a third, and P + 5. The plain case's 7 keys fit in one page of 7 or more; these have
// page boundaries at every page size.
AttentionInput spanning_pages(const AttentionInput& plain, int32_t P) {
  return plain_case(plain.dtype, plain.head_size, plain.head_size_v, plain.num_kv_heads < plain.num_heads,
                    {kQueries, kQueries}, {2 * P + 3, P + 5});
}
// `a` (spanning_pages' case, or its FP8 copy) in pages of P shuffled over the pool, sequence 1's
// first page sequence 0's (prefix caching, gen::paged_copy's `shared`: sequence 1 reads sequence 0's
// first P keys, or codes, each with its own descales). A kernel that takes a sequence's pages as
// consecutive after its first, or reads a shared page as another sequence's, fails.
AttentionInput over_shared_pages(const AttentionInput& a, int32_t P) {
  return gen::paged_copy(a, P, /*shuffle=*/hash::splitmix64(uint64_t(P)), /*shared=*/1);
}

// One declared item and its case.
struct Item {
  std::string name;
  AttentionInput input;
};
std::vector<Item> declared_items(const ac_caps& caps, const AttentionInput& plain) {
  std::vector<Item> items;
  const bool paged = (caps.variants & AC_VAR_PAGED_KV) && caps.page_sizes && caps.num_page_sizes > 0;
  for (int32_t i = 0; paged && i < caps.num_page_sizes; ++i) {
    const int32_t P = caps.page_sizes[i];
    items.push_back({"page size " + std::to_string(P), gen::paged_copy(plain, P)});
    items.push_back({"page size " + std::to_string(P) + " over 3 pages, the first shared by 2 sequences",
                     over_shared_pages(spanning_pages(plain, P), P)});
  }
  if (caps.variants & AC_VAR_HEAD_SIZE_V)
    for (int32_t i = 0; caps.head_pairs && i < caps.num_head_pairs; ++i) {
      const ac_head_pair p = caps.head_pairs[i];
      items.push_back({"head sizes (QK " + std::to_string(p.qk) + ", V " + std::to_string(p.v) + ")",
                       plain_case(plain.dtype, p.qk, p.v, plain.num_kv_heads < plain.num_heads)});
    }
  if (caps.variants & AC_VAR_V_IN_K)
    for (int32_t i = 0; caps.head_pairs && i < caps.num_head_pairs; ++i) {
      const ac_head_pair p = caps.head_pairs[i];
      if (p.v >= p.qk) continue;
      items.push_back({"V inside K (QK " + std::to_string(p.qk) + ", V " + std::to_string(p.v) + ")",
                       plain_case(plain.dtype, p.qk, p.v, plain.num_kv_heads < plain.num_heads)});
      items.back().input.share_v_with_k();
    }
  if (caps.variants & AC_VAR_SOFTCAP) {
    items.push_back({"softcap (1)", plain});
    items.back().input.softcap = 1.0f;
  }
  if (caps.variants & AC_VAR_WINDOW) {
    items.push_back({"window (left 1, right 0)", plain});
    items.back().input.window_left = 1;
    items.back().input.window_right = 0;
  }
  if (caps.variants & AC_VAR_SINKS) {
    items.push_back({"sinks (0.5 per head)", plain});
    items.back().input.sinks.assign(size_t(plain.num_heads), 0.5f);
  }
  // An FP8 KV cache: each declared format, descales per tensor (2^-6, so that values up to 1 use
  // the upper codes), and per KV head (2^-6 and 3 2^-7) where declared; Q in FP8 as well, with the
  // same descales, where declared (AC_FP8_Q); under AC_FP8_Q_REQUIRED Q is in FP8 in every item.
  const bool kv_alone = !(caps.fp8 & AC_FP8_Q_REQUIRED);
  for (const auto& [f, name] : kv_dtype_spellings()) {
    if (!(caps.kv_dtypes & AC_DTYPE_BIT(f))) continue;
    if (kv_alone)
      items.push_back({std::string("FP8 KV cache ") + name, gen::fp8_copy(plain, f, {0x1p-6f}, {0x1p-6f})});
    if (caps.fp8 & AC_FP8_Q)
      items.push_back(
          {std::string("Q, K and V in ") + name, gen::fp8_copy(plain, f, {0x1p-6f}, {0x1p-6f}, {0x1p-6f})});
    // The items below: the cache alone where allowed, else Q, K and V, at the descales d.
    const std::string fp8 = std::string(kv_alone ? "FP8 KV cache " : "Q, K and V in ") + name;
    // The format by copy: clang 14 (the sanitizer build's compiler) cannot capture a structured binding.
    auto in_fp8 = [&, fmt = f](const AttentionInput& x, const std::vector<float>& d) {
      return kv_alone ? gen::fp8_copy(x, fmt, d, d) : gen::fp8_copy(x, fmt, d, d, d);
    };
    if (caps.fp8 & AC_FP8_P_SCALE) {  // P's scale per call, one whose reciprocal is inexact
      items.push_back({fp8 + " (p_scale 300.5)", in_fp8(plain, {0x1p-6f})});
      items.back().input.p_scale = 300.5f;
    }
    if (caps.fp8 & AC_FP8_OUT) {  // O in this format too, divided by an output scale of 2^-1
      items.push_back({fp8 + ", O in " + name + " (output_scale 0.5)", in_fp8(plain, {0x1p-6f})});
      items.back().input.out_dtype = f;
      items.back().input.output_scale = 0.5f;
    }
    if (caps.fp8 & AC_FP8_AMAX) {
      items.push_back({fp8 + " (the maxima asked)", in_fp8(plain, {0x1p-6f})});
      items.back().input.want_amax = true;
    }
    if (caps.fp8 & AC_FP8_DESCALE_PER_KV_HEAD) {
      // Two KV heads at least: a GQA subject's plain case has one, whose one descale is per tensor.
      const AttentionInput heads =
          plain.num_kv_heads > 1 ? plain
                                 : plain_case(plain.dtype, plain.head_size, plain.head_size_v,
                                              plain.num_kv_heads < plain.num_heads, {kQueries}, {kKeys}, 2);
      std::vector<float> d(size_t(heads.num_kv_heads), 0x1p-6f);
      d.back() = 3 * 0x1p-7f;
      if (kv_alone)
        items.push_back(
            {std::string("FP8 KV cache ") + name + " (descales per KV head)", gen::fp8_copy(heads, f, d, d)});
      if (caps.fp8 & AC_FP8_Q)
        items.push_back({std::string("Q, K and V in ") + name + " (descales per KV head)",
                         gen::fp8_copy(heads, f, d, d, d)});
    }
    if (caps.fp8 & AC_FP8_DESCALE_PER_SEQUENCE) {
      // Two sequences (the plain one twice), the second's last KV head with a descale of its own.
      AttentionInput two = plain;
      two.seqlens_q.push_back(plain.seqlens_q.front());
      two.seqlens_k.push_back(plain.seqlens_k.front());
      for (auto [to, from] :
           {std::pair{&two.q, &plain.q}, std::pair{&two.k, &plain.k}, std::pair{&two.v, &plain.v}})
        to->insert(to->end(), from->begin(), from->end());
      std::vector<float> d(2 * size_t(plain.num_kv_heads), 0x1p-6f);
      d.back() = 3 * 0x1p-7f;
      items.push_back({fp8 + " (descales per (sequence, KV head))", in_fp8(two, d)});
      // Paged too: the page the two sequences share read with each one's descales (the first
      // declared page size).
      if (paged) {
        const int32_t P = caps.page_sizes[0];
        items.push_back({fp8 + " (descales per (sequence, KV head)) over pages of " + std::to_string(P) +
                             ", the first shared by 2 sequences",
                         over_shared_pages(in_fp8(spanning_pages(plain, P), d), P)});
      }
    }
  }
  return items;
}

// A merge's and a quantiser's plain case: 2 tokens x 2 heads x d, fixed values in [-1, 1] (a
// merge's LSEs finite: no empty state), out in dtype (a merge) or the codes of the first
// declared format at one scale of 2^-1 (a quantiser).
MergeInput plain_merge(ac_dtype dtype, int32_t d) {
  MergeInput m;
  m.dtype = dtype;
  m.num_tokens = 2;
  m.num_heads = kHeads;
  m.head_size = d;
  m.prefix_out = fixed_values(dtype, int64_t(m.num_tokens) * m.num_heads * d, 4);
  m.suffix_out = fixed_values(dtype, int64_t(m.num_tokens) * m.num_heads * d, 5);
  m.prefix_lse = {0.5f, -1.0f, 2.0f, 0.25f};
  m.suffix_lse = {1.0f, 0.75f, -0.5f, 3.0f};
  return m;
}
QuantizeInput plain_quantize(ac_dtype dtype, int32_t d, ac_dtype out) {
  QuantizeInput q;
  q.dtype = dtype;
  q.out_dtype = out;
  q.num_tokens = 2;
  q.num_heads = kHeads;
  q.head_size = d;
  q.x = fixed_values(dtype, int64_t(q.num_tokens) * q.num_heads * d, 6);
  q.scales = {0.5f};
  return q;
}

// A merge's items: its output in each declared FP8 format, divided by 2^-1. A quantiser's: each
// declared format at one scale, and at a scale per head where declared.
using Input = decltype(Case::input);
std::vector<std::pair<std::string, Input>> declared_items_of(const ac_caps& caps, const Input& plain) {
  std::vector<std::pair<std::string, Input>> items;
  for (const auto& [f, name] : kv_dtype_spellings()) {
    if (!(caps.kv_dtypes & AC_DTYPE_BIT(f))) continue;
    if (const auto* m = std::get_if<MergeInput>(&plain)) {
      MergeInput x = *m;
      x.out_dtype = f;
      x.output_scale = 0.5f;
      items.emplace_back(std::string("output in ") + name + " (output_scale 0.5)", x);
    } else if (const auto* q = std::get_if<QuantizeInput>(&plain)) {
      QuantizeInput x = *q;
      x.out_dtype = f;
      items.emplace_back(std::string("codes in ") + name, x);
      if (caps.fp8 & AC_FP8_DESCALE_PER_KV_HEAD) {
        x.scales.assign(size_t(x.num_heads), 0.5f);
        x.scales.back() = 0.375f;
        items.emplace_back(std::string("codes in ") + name + " (a scale per head)", x);
      }
    }
  }
  if (const auto* a = std::get_if<AttentionInput>(&plain))
    for (Item& item : declared_items(caps, *a))
      items.emplace_back(std::move(item.name), std::move(item.input));
  return items;
}

class DeclaredVariants final : public Property {
 public:
  DeclaredVariants()
      : Property({"declared_variants",
                  "A subject accepts every variant it declares: one small case per page size, (QK, V) head "
                  "pair, softcap, window, sinks and FP8 KV cache format, and for a merge or a quantiser each "
                  "declared FP8 output format, each within budget; a refusal of one fails, naming it.",
                  "\"The attention the engines run\"",
                  AC_OP_ATTENTION | AC_OP_SPLITKV | AC_OP_MERGE | AC_OP_QUANTIZE, true,
                  /*relative_cost=*/1, kMaxCases, /*in_long=*/false}) {}

  // A merge or a quantiser declares its FP8 outputs in kv_dtypes.
  bool applies_to(const Subject& s, uint32_t op) const override {
    return op == AC_OP_MERGE || op == AC_OP_QUANTIZE ? s.caps().kv_dtypes != 0
                                                     : s.caps().variants != 0 || s.caps().kv_dtypes != 0;
  }
  void draw_input(Case& c, const gen::Domain& dom, uint32_t op) const override {
    const ac_dtype dtype = *rc::gen::elementOf(dom.dtypes);
    // A subject may declare its head sizes through its pairs alone: the first pair's QK size then.
    const int32_t d =
        dom.head_sizes.empty() ? dom.head_pairs.front().qk : *rc::gen::elementOf(dom.head_sizes);
    if (op == AC_OP_MERGE) {
      c.input = plain_merge(dtype, d);
    } else if (op == AC_OP_QUANTIZE) {
      for (const auto& [f, name] : kv_dtype_spellings())
        if (dom.kv_dtypes & AC_DTYPE_BIT(f)) {  // the first declared format
          c.input = plain_quantize(dtype, d, f);
          break;
        }
    } else {
      c.input = plain_case(dtype, d, 0, (dom.features & AC_FEAT_GQA) != 0);
    }
  }
  bool shrinks() const override { return false; }

  Outcome check(Ctx& ctx, const Case& c) const override {
    Outcome o;
    rule_accuracy(o, run_once(ctx, c, o), false);  // a refusal here is an ordinary one
    if (!o.ok) return o;
    for (auto& [item, input] : declared_items_of(ctx.subject.caps(), c.input)) {
      Case one = c;
      one.input = std::move(input);
      try {
        rule_accuracy(o, run_once(ctx, one, o), false);
      } catch (const SubjectError& e) {
        // A crash on the item's launch keeps its kind and says which item it was: the case the
        // report describes (and the file replays) is the plain one the item is made from.
        if (e.kind == SubjectError::Kind::interrupted) throw;
        if (e.kind != SubjectError::Kind::unsupported)
          throw SubjectError(e.kind, "with its declared " + item + ": " + e.what());
        fail(o, "refused_declared",
             "the subject refused its declared " + item + ", which it must accept: " + e.what());
        o.judged = std::make_shared<const Case>(std::move(one));
        return o;
      }
      if (!o.ok) {
        o.message = "with its declared " + item + ": " + o.message;
        o.judged = std::make_shared<const Case>(std::move(one));
        return o;
      }
    }
    return o;
  }
};

}  // namespace
AC_REGISTER_PROPERTY(15, DeclaredVariants);
}  // namespace attncheck::detail
