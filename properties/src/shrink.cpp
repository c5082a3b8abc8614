// Shrinking of attention and split-KV cases by structure (shrink.hpp). RapidCheck shrinks a case
// one recorded pick at a time, and every candidate replays the whole recipe; an attention case
// holds one pick per element of Q, K and V (10^4 to 10^5 of them), so that walk costs minutes even
// when every candidate is rejected at once. Here a candidate is a smaller case built from the
// failing one: a sequence, a KV head group, query heads, query rows or keys fewer, a smaller
// supported head size, no mask, no causal alignment. Each keeps the values it retains bit for bit,
// so a failure that lives in a few rows survives the cuts around it.
#include "shrink.hpp"

#include <algorithm>
#include <numeric>

#include "internal.hpp"

namespace attncheck::detail {
namespace {

// What a candidate keeps of the input: per sequence the query rows and keys (indices within the
// sequence), the KV heads and, within each KV head's group, the query heads, and the first `dims`
// coordinates of every head.
struct Keep {
  std::vector<std::vector<int32_t>> rows, keys;  // per sequence; a dropped sequence keeps neither
  std::vector<bool> sequence;                    // per sequence: kept at all
  std::vector<int32_t> kv_heads, group_heads;    // group_heads: offsets within a group, 0..ratio-1
  int32_t dims = 0, dims_v = 0;                  // Q's and K's head size kept, and V's
  bool mask = true, causal = true;
  bool softcap = true, window = true, sinks = true;  // the variants kept
};

Keep keep_all(const AttentionInput& a) {
  Keep k;
  for (size_t s = 0; s < a.seqlens_q.size(); ++s) {
    std::vector<int32_t> r(size_t(a.seqlens_q[s])), c(size_t(a.seqlens_k[s]));
    std::iota(r.begin(), r.end(), 0);
    std::iota(c.begin(), c.end(), 0);
    k.rows.push_back(std::move(r));
    k.keys.push_back(std::move(c));
    k.sequence.push_back(true);
  }
  k.kv_heads.resize(size_t(a.num_kv_heads));
  std::iota(k.kv_heads.begin(), k.kv_heads.end(), 0);
  k.group_heads.resize(size_t(a.num_heads / std::max(1, a.num_kv_heads)));
  std::iota(k.group_heads.begin(), k.group_heads.end(), 0);
  k.dims = a.head_size;
  k.dims_v = a.dv();
  return k;
}

// `a` is contiguous (a paged case is gathered first, and paged again after: attention_shrinks).
AttentionInput apply(const AttentionInput& a, const Keep& k) {
  const int64_t H = a.num_heads, Hkv = a.num_kv_heads, D = a.head_size, ratio = H / std::max<int64_t>(1, Hkv);
  const int64_t Dv = a.dv(), dims_v = k.dims_v;
  AttentionInput b;
  b.dtype = a.dtype;
  b.num_kv_heads = int32_t(k.kv_heads.size());
  b.num_heads = int32_t(k.kv_heads.size() * k.group_heads.size());
  b.head_size = k.dims;
  // V's own head size stays where the case had one and the cut keeps the sizes apart (a plain size
  // kept for both is the plain contract again).
  b.head_size_v = a.head_size_v > 0 && (k.dims_v != k.dims || k.dims == a.head_size) ? k.dims_v : 0;
  b.v_in_k = a.v_in_k && k.dims_v <= k.dims;  // V's columns stay the first of K's rows
  b.causal = a.causal && k.causal;
  b.softmax_scale = a.softmax_scale;
  b.softcap = k.softcap ? a.softcap : 0.0f;
  b.window_left = k.window ? a.window_left : -1;
  b.window_right = k.window ? a.window_right : -1;
  std::vector<int64_t> heads;  // the kept query heads, in the new order
  for (int32_t kv : k.kv_heads)
    for (int32_t g : k.group_heads) heads.push_back(kv * ratio + g);
  if (!a.sinks.empty() && k.sinks)
    for (int64_t h : heads) b.sinks.push_back(a.sinks[size_t(h)]);
  // An FP8 cache stays one (and an FP8 Q): its codes are kept, with their KV heads' descales.
  b.kv_dtype = a.kv_dtype;
  std::vector<size_t> kept_seqs;
  for (size_t s = 0; s < a.seqlens_q.size(); ++s)
    if (k.sequence[s]) kept_seqs.push_back(s);
  b.k_descale = a.descales_for(a.k_descale, kept_seqs, k.kv_heads);
  b.v_descale = a.descales_for(a.v_descale, kept_seqs, k.kv_heads);
  b.q_descale = a.descales_for(a.q_descale, kept_seqs, k.kv_heads);
  b.p_scale = a.p_scale;
  int64_t q0 = 0, k0 = 0, m0 = 0;
  for (size_t s = 0; s < a.seqlens_q.size(); ++s) {
    const int64_t tq = a.seqlens_q[s], tk = a.seqlens_k[s];
    if (k.sequence[s]) {
      b.seqlens_q.push_back(int32_t(k.rows[s].size()));
      b.seqlens_k.push_back(int32_t(k.keys[s].size()));
      for (int32_t t : k.rows[s])
        for (int64_t h : heads)
          for (int64_t d = 0; d < k.dims; ++d) b.q.push_back(a.q[size_t(((q0 + t) * H + h) * D + d)]);
      for (int32_t j : k.keys[s])
        for (int32_t kv : k.kv_heads) {
          for (int64_t d = 0; d < k.dims; ++d) b.k.push_back(a.k[size_t(((k0 + j) * Hkv + kv) * D + d)]);
          for (int64_t d = 0; d < dims_v; ++d) b.v.push_back(a.v[size_t(((k0 + j) * Hkv + kv) * Dv + d)]);
        }
      if (!a.mask.empty() && k.mask)
        for (int32_t t : k.rows[s])
          for (int32_t j : k.keys[s]) b.mask.push_back(a.mask[size_t(m0 + t * tk + j)]);
    }
    q0 += tq;
    k0 += tk;
    m0 += tq * tk;
  }
  return b;
}

// Index lists with a part removed: each aligned half, quarter, eighth and sixteenth (as delta
// debugging does), then the first or the last element alone. `min_size` elements always remain.
std::vector<std::vector<int32_t>> smaller_lists(const std::vector<int32_t>& v, size_t min_size) {
  std::vector<std::vector<int32_t>> out;
  const size_t n = v.size();
  if (n <= min_size) return out;
  if (min_size == 0) out.push_back({});
  for (size_t parts = 2; parts <= 16 && parts <= n; parts *= 2)
    for (size_t p = 0; p < parts; ++p) {
      const size_t lo = n * p / parts, hi = n * (p + 1) / parts;
      if (n - (hi - lo) < min_size) continue;
      std::vector<int32_t> w(v.begin(), v.begin() + ptrdiff_t(lo));
      w.insert(w.end(), v.begin() + ptrdiff_t(hi), v.end());
      out.push_back(std::move(w));
    }
  if (n - 1 >= min_size && n > 16) {
    out.emplace_back(v.begin() + 1, v.end());
    out.emplace_back(v.begin(), v.end() - 1);
  }
  return out;
}

}  // namespace

std::vector<AttentionInput> attention_shrinks(const AttentionInput& paged_or_not,
                                              const std::vector<int32_t>& head_sizes, bool zero_keys,
                                              const std::vector<int32_t>& page_sizes,
                                              const std::vector<ac_head_pair>& head_pairs) {
  std::vector<AttentionInput> out;
  // A paged case is cut on its gathered keys and paged again in key order with its page size (the
  // plainest pool: fewest pages, no sharing); smaller declared page sizes are candidates too.
  const int32_t P = paged_or_not.page_size;
  AttentionInput gathered;
  const AttentionInput& a = contiguous_kv(paged_or_not, gathered);
  const Keep all = keep_all(a);
  const size_t nseq = a.seqlens_q.size();
  const size_t key_floor = zero_keys ? 0 : 1;
  auto add = [&](const Keep& k) { out.push_back(P > 0 ? gen::paged_copy(apply(a, k), P) : apply(a, k)); };
  if (P > 0) {
    std::vector<int32_t> smaller;
    for (int32_t p : page_sizes)
      if (p < P) smaller.push_back(p);
    std::sort(smaller.begin(), smaller.end());
    for (int32_t p : smaller) out.push_back(gen::paged_copy(a, p));
  }
  // Whole sequences.
  for (size_t s = 0; nseq > 1 && s < nseq; ++s) {
    Keep k = all;
    k.sequence[s] = false;
    add(k);
  }
  // KV head groups, then query heads within every group.
  for (const auto& kv : smaller_lists(all.kv_heads, 1)) {
    Keep k = all;
    k.kv_heads = kv;
    add(k);
  }
  for (const auto& g : smaller_lists(all.group_heads, 1)) {
    Keep k = all;
    k.group_heads = g;
    add(k);
  }
  // Query rows and keys of each sequence.
  for (size_t s = 0; s < nseq; ++s)
    for (const auto& r : smaller_lists(all.rows[s], 1)) {
      Keep k = all;
      k.rows[s] = r;
      add(k);
    }
  for (size_t s = 0; s < nseq; ++s)
    for (const auto& c : smaller_lists(all.keys[s], key_floor)) {
      Keep k = all;
      k.keys[s] = c;
      add(k);
    }
  // Smaller head sizes the subject supports, smallest (QK + V) first: plain sizes within both of the
  // case's (V's own size dropped) and, where V has its own, the declared (QK, V) pairs within the
  // case's, so that a candidate is never a pair the subject did not declare.
  std::vector<std::pair<int32_t, int32_t>> sizes;
  const int32_t qk = a.head_size, v = a.dv();
  for (int32_t d : head_sizes)
    if (d <= std::min(qk, v) && !(d == qk && d == v)) sizes.emplace_back(d, d);
  if (a.head_size_v > 0)
    for (const ac_head_pair& p : head_pairs)
      if (p.qk <= qk && p.v <= v && !(p.qk == qk && p.v == v) && p.qk != p.v) sizes.emplace_back(p.qk, p.v);
  std::sort(sizes.begin(), sizes.end(), [](auto x, auto y) {
    return std::pair{x.first + x.second, x} < std::pair{y.first + y.second, y};
  });
  for (const auto& [d, dv] : sizes) {
    Keep k = all;
    k.dims = d;
    k.dims_v = dv;
    add(k);
  }
  if (!a.mask.empty()) {
    Keep k = all;
    k.mask = false;
    add(k);
  }
  if (a.causal) {
    Keep k = all;
    k.causal = false;
    add(k);
  }
  for (bool Keep::*variant : {&Keep::softcap, &Keep::window, &Keep::sinks}) {
    const bool used = variant == &Keep::softcap  ? a.softcap != 0.0f
                      : variant == &Keep::window ? (a.window_left != -1 || a.window_right != -1)
                                                 : !a.sinks.empty();
    if (!used) continue;
    Keep k = all;
    k.*variant = false;
    add(k);
  }
  return out;
}

ShrinkResult shrink_greedily(const Case& failing, const Outcome& outcome, const ShrinkHooks& hooks) {
  ShrinkResult r{failing, outcome, false, 0};
  for (bool progress = true; progress;) {
    progress = false;
    const auto& a = std::get<AttentionInput>(r.best.input);
    for (AttentionInput& cand : hooks.candidates(a)) {
      if (hooks.stop()) {
        r.cut = true;
        return r;
      }
      Case c = r.best;
      c.input = std::move(cand);
      ++r.tried;
      const std::optional<Outcome> o = hooks.check(c);
      // A crash ends the shrink with the crashing case: nothing more runs on a faulted device, and
      // the crash is the finding (as under RapidCheck's shrinking).
      if (o && o->crashed) {
        r.best = std::move(c);
        r.outcome = *o;
        return r;
      }
      // Otherwise the same kind of failure: a shrink must not turn one bug into another.
      if (!o || o->ok || o->failure_class != r.outcome.failure_class) continue;
      r.best = std::move(c);
      r.outcome = *o;
      progress = true;
      break;
    }
  }
  return r;
}

}  // namespace attncheck::detail
