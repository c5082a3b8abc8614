// Fake subjects for the property tests: a correct fp64 implementation of each operation and
// deliberately broken variants, one per bug class a property must catch. Everything is computed in
// double and rounded once to the storage format (reference round_to_format), so a correct fake is
// well inside every budget; each broken fake differs from its correct twin in one clearly named way.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "attncheck/reference/format.hpp"
#include "attncheck/subject.hpp"

namespace fakes {

using namespace attncheck;

inline ref::Format fmt(ac_dtype d) {
  return d == AC_DTYPE_F16 ? ref::Format::fp16 : d == AC_DTYPE_BF16 ? ref::Format::bf16 : ref::Format::fp32;
}
inline double dec(ac_dtype d, uint32_t b) { return ref::decode(fmt(d), b); }
inline uint32_t enc(ac_dtype d, double x) { return ref::round_to_format(fmt(d), x); }
constexpr double kInf = std::numeric_limits<double>::infinity();

enum class Bug {
  none,
  merge_no_both_empty_guard,   // NaN from -inf - -inf
  merge_no_inf_map,            // FA2's +inf taken as a huge mass
  merge_base_confused,         // declares base 2, computes with e
  merge_guard_copies_prefix,   // two empty states: O copied from the prefix (the engines' guard)
  merge_guard_averages,        // two empty states: weights e^0 each, O the mean of both sides' O
  merge_guard_copies_skewed,   // the copying guard, and O 1/16 too large where a state is visible
  softmax_naive_declared,      // naive exp, declared (a correct subject with a hazard)
  softmax_naive_undeclared,    // naive exp, not declared: must be caught as overflow
  softmax_empty_nan,           // all -inf row gives NaN
  attention_wrong_sentinel,    // declares -inf, returns +inf for empty rows
  attention_finite_mask,       // masked keys get -1e4 instead of -inf
  attention_lse_base2,         // declares natural LSE, returns base 2
  attention_lse_layout,        // declares [tokens, heads], writes [heads, tokens]
  attention_off_by_one_o,      // O wrong by a few ulps of fp16 when d > 1 (accuracy)
  attention_nondeterministic,  // flips the last bit of O on every other call
  attention_settles_late,      // flips the last bit of O from an input's third launch on
  attention_zero_past_64,      // columns past the last 64-column block left at 0 (d = 80, 96, 112)
  merge_tail_copies_prefix,    // d > 8: the last d % 8 columns copy the prefix (a vector body's tail)
  splitkv_empty_plus_inf,      // split combine returns +inf for an all-empty row
  attention_flushes_outputs,   // O below its format's smallest normal written as +0 (FTZ; counted)
  attention_empty_garbage,     // a row that sees no key writes O = 7 (its LSE sentinel is right)
  attention_mask_leak,         // a row that sees a key also sees the keys its mask hides
  attention_two_defects,       // both of the above: independent defects in one kernel
  // attention_empty_garbage, and O times 1 + 2^-7 in a sequence right after one of no keys: a
  // second defect that shows only where the case holds empty rows (that sequence's queries)
  attention_empty_and_after_empty,
  attention_batch_variant,  // in a call of several sequences, the last bit of O flips (within budget)
  attention_chunk_variant,  // in a sequence of fewer queries than keys, the last bit of O flips
  // The last bit of O flips where one scheduling dimension of the call says so, and only it:
  attention_long_query_variant,  // the call's longest query range is kLongQuery or more
  attention_position_variant,    // the sequence is not the call's first
  attention_mix_variant,         // the call holds a decode row (1 query) and a prefill row (2 or more)
  // The last bit of O flips for the call's second sequence, in a call of 5 sequences or more: no
  // position batch_invariance fixes (the first, the middle, the last) in such a batch.
  attention_second_of_large_batch,
};

// attention_long_query_variant's threshold: above the 2 queries of the prefill neighbour that
// batch_invariance's decode/prefill probe gives a decode victim, so only the neighbour-lengths
// probe crosses it.
constexpr int32_t kLongQuery = 4;

class Fake : public Subject {
 public:
  Fake(std::string name, uint32_t ops, Bug bug = Bug::none, int lse_base = 0, int empty_sign = -1,
       uint32_t features = 0)
      : name_(std::move(name)), desc_("fake " + name_), bug_(bug) {
    caps_ = ac_caps{};
    caps_.ops = ops;
    caps_.dtypes = AC_DTYPE_BIT(AC_DTYPE_F16) | AC_DTYPE_BIT(AC_DTYPE_BF16) | AC_DTYPE_BIT(AC_DTYPE_F32);
    caps_.memory = AC_MEMORY_HOST;
    caps_.head_size_min = 1;
    caps_.head_size_max = 256;
    caps_.lse_base = lse_base;
    caps_.lse_layout = AC_LSE_TOKENS_HEADS;
    caps_.empty_lse_sign = empty_sign;
    caps_.features = features;
    caps_.max_splits = (ops & AC_OP_SPLITKV) ? 4 : 0;
    caps_.fold_orders =
        (ops & AC_OP_SPLITKV)
            ? (AC_FOLD_BIT(AC_FOLD_LEFT) | AC_FOLD_BIT(AC_FOLD_RIGHT) | AC_FOLD_BIT(AC_FOLD_TREE))
            : 0;
  }
  const std::string& name() const override { return name_; }
  const std::string& description() const override { return desc_; }
  const ac_caps& caps() const override { return caps_; }
  std::string backend() const override { return "host"; }
  std::string origin() const override { return "test"; }
  int calls = 0;
  int64_t flushed = 0;  // outputs Bug::attention_flushes_outputs wrote as 0

  MergeOutput merge(const MergeInput& in) override {
    ++calls;
    MergeOutput out;
    const int64_t rows = int64_t(in.num_tokens) * in.num_heads, D = in.head_size;
    out.out.resize(size_t(rows * D));
    out.lse.resize(size_t(rows));
    const bool base2 = caps_.lse_base == 2 && bug_ != Bug::merge_base_confused;
    for (int64_t r = 0; r < rows; ++r) {
      double a = in.prefix_lse[size_t(r)], b = in.suffix_lse[size_t(r)];
      if (bug_ != Bug::merge_no_inf_map) {
        if (a == kInf) a = -kInf;
        if (b == kInf) b = -kInf;
      }
      const double M = std::max(a, b);
      const bool copies = bug_ == Bug::merge_guard_copies_prefix || bug_ == Bug::merge_guard_copies_skewed;
      if (M == -kInf && bug_ != Bug::merge_no_both_empty_guard) {
        for (int64_t c = 0; c < D; ++c) {
          const uint32_t p = in.prefix_out[size_t(r * D + c)], q = in.suffix_out[size_t(r * D + c)];
          out.out[size_t(r * D + c)] = copies ? p
                                       : bug_ == Bug::merge_guard_averages
                                           ? enc(in.dtype, (dec(in.dtype, p) + dec(in.dtype, q)) / 2)
                                           : enc(in.dtype, 0.0);
        }
        out.lse[size_t(r)] = -std::numeric_limits<float>::infinity();
        continue;
      }
      auto ex = [&](double x) { return base2 ? std::exp2(x) : std::exp(x); };
      const double wa = ex(a - M), wb = ex(b - M), s = wa + wb;
      const double skew = bug_ == Bug::merge_guard_copies_skewed ? 1.0625 : 1.0;
      for (int64_t c = 0; c < D; ++c)
        out.out[size_t(r * D + c)] =
            enc(in.dtype, skew * (dec(in.dtype, in.prefix_out[size_t(r * D + c)]) * (wa / s) +
                                  dec(in.dtype, in.suffix_out[size_t(r * D + c)]) * (wb / s)));
      if (bug_ == Bug::merge_tail_copies_prefix && D > 8)
        for (int64_t c = D / 8 * 8; c < D; ++c) out.out[size_t(r * D + c)] = in.prefix_out[size_t(r * D + c)];
      out.lse[size_t(r)] = float((base2 ? std::log2(s) : std::log(s)) + M);
    }
    return out;
  }

  SoftmaxOutput softmax(const SoftmaxInput& in) override {
    ++calls;
    SoftmaxOutput out;
    out.y.resize(in.x.size());
    const bool naive = bug_ == Bug::softmax_naive_declared || bug_ == Bug::softmax_naive_undeclared;
    for (int r = 0; r < in.rows; ++r) {
      std::vector<double> e(size_t(in.cols));
      double m = -kInf, sum = 0;
      for (int c = 0; c < in.cols; ++c) m = std::max(m, dec(in.dtype, in.x[size_t(r * in.cols + c)]));
      for (int c = 0; c < in.cols; ++c) {
        const double x = dec(in.dtype, in.x[size_t(r * in.cols + c)]);
        // The naive exp is rounded to the storage type: the hazard the ABI declares.
        e[size_t(c)] =
            naive ? dec(in.dtype, enc(in.dtype, std::exp(x))) : (m == -kInf ? 0.0 : std::exp(x - m));
        sum += e[size_t(c)];
      }
      for (int c = 0; c < in.cols; ++c) {
        double y = sum == 0 ? 0.0 : e[size_t(c)] / sum;
        if (sum == 0 && bug_ == Bug::softmax_empty_nan) y = std::nan("");
        if (naive && std::isinf(sum)) y = e[size_t(c)] / sum;  // inf/inf = NaN, finite/inf = 0
        out.y[size_t(r * in.cols + c)] = enc(in.dtype, y);
      }
    }
    return out;
  }

  AttentionOutput attention(const AttentionInput& a, const AttentionOptions& opt) override {
    ++calls;
    // An autotuner that settles after two calls on a shape and input: from the third on, other bits.
    bool settled = false;
    if (bug_ == Bug::attention_settles_late) {
      uint64_t h = 1469598103934665603ull;
      for (const auto* v : {&a.q, &a.k, &a.v})
        for (uint32_t x : *v) h = (h ^ x) * 1099511628211ull;
      settled = ++launches_of_[h] > 2;
    }
    AttentionOutput out;
    const int64_t H = a.num_heads, Hkv = a.num_kv_heads, D = a.head_size;
    int64_t TQ = 0;
    for (int32_t x : a.seqlens_q) TQ += x;
    out.out.assign(size_t(TQ * H * D), 0);
    out.lse.assign(size_t(TQ * H), 0);
    int64_t q0 = 0, k0 = 0, m0 = 0;
    const bool split = (caps_.ops & AC_OP_SPLITKV) != 0;
    int32_t longest_q = 0;
    bool has_decode = false, has_prefill = false;
    for (int32_t x : a.seqlens_q) {
      longest_q = std::max(longest_q, x);
      has_decode = has_decode || x == 1;
      has_prefill = has_prefill || x > 1;
    }
    for (size_t s = 0; s < a.seqlens_q.size(); ++s) {
      const int64_t tq = a.seqlens_q[s], tk = a.seqlens_k[s];
      for (int64_t t = 0; t < tq; ++t)
        for (int64_t h = 0; h < H; ++h) {
          const int64_t kvh = h / (H / Hkv);
          std::vector<double> sc(size_t(tk), -kInf);
          const bool leak = bug_ == Bug::attention_mask_leak || bug_ == Bug::attention_two_defects;
          bool sees_any = false;  // whether the row sees a key under the mask and the causal limit
          for (int64_t j = 0; j < tk; ++j)
            sees_any = sees_any || (!(a.causal && j > t + tk - tq) &&
                                    (a.mask.empty() || a.mask[size_t(m0 + t * tk + j)]));
          for (int64_t j = 0; j < tk; ++j) {
            bool vis = !(a.causal && j > t + tk - tq);
            if (!a.mask.empty() && !a.mask[size_t(m0 + t * tk + j)] && !(leak && sees_any)) vis = false;
            double dot = 0;
            for (int64_t c = 0; c < D; ++c)
              dot += dec(a.dtype, a.q[size_t(((q0 + t) * H + h) * D + c)]) *
                     dec(a.dtype, a.k[size_t(((k0 + j) * Hkv + kvh) * D + c)]);
            if (vis)
              sc[size_t(j)] = double(a.softmax_scale) * dot;
            else if (bug_ == Bug::attention_finite_mask)
              sc[size_t(j)] = -1e4;
          }
          // Split-KV: partial states over num_splits key ranges, combined in double (fold order is
          // irrelevant at this precision); the partials' empty sentinel is -inf. A NaN logit (a NaN
          // K value) makes M NaN, and with it the row: never an empty row.
          const int nsplit = split ? std::max(1, opt.num_splits) : 1;
          double M = -kInf, L = 0;
          std::vector<double> acc(size_t(D), 0);
          for (int p = 0; p < nsplit; ++p) {
            const int64_t j0 = tk * p / nsplit, j1 = tk * (p + 1) / nsplit;
            for (int64_t j = j0; j < j1; ++j) M = std::isnan(M) ? M : std::max(sc[size_t(j)], M);
          }
          for (int64_t j = 0; j < tk && M != -kInf; ++j) {
            const double w = std::exp(sc[size_t(j)] - M);
            L += w;
            for (int64_t c = 0; c < D; ++c)
              acc[size_t(c)] += w * dec(a.dtype, a.v[size_t(((k0 + j) * Hkv + kvh) * D + c)]);
          }
          const int64_t row = (q0 + t) * H + h;
          const bool empty = M == -kInf;
          for (int64_t c = 0; c < D; ++c) {
            double o = empty ? 0.0 : acc[size_t(c)] / L;
            if (bug_ == Bug::attention_off_by_one_o && c == 1) o *= 1 + 0x1p-7;
            if (bug_ == Bug::attention_zero_past_64 && D > 64 && c >= D / 64 * 64) o = 0.0;
            if (empty && (bug_ == Bug::attention_empty_garbage || bug_ == Bug::attention_two_defects ||
                          bug_ == Bug::attention_empty_and_after_empty))
              o = 7.0;
            if (bug_ == Bug::attention_empty_and_after_empty && s > 0 && a.seqlens_k[s - 1] == 0 && !empty)
              o *= 1 + 0x1p-7;
            if (bug_ == Bug::attention_flushes_outputs && o != 0 &&
                std::fabs(o) < (a.dtype == AC_DTYPE_F16 ? 0x1p-14 : 0x1p-126)) {
              o = 0.0;
              ++flushed;
            }
            uint32_t bits = enc(a.dtype, o);
            if (bug_ == Bug::attention_nondeterministic && (calls % 2) && !empty && o != 0) bits ^= 1u;
            if (settled && !empty && o != 0) bits ^= 1u;
            if (bug_ == Bug::attention_batch_variant && a.seqlens_q.size() > 1 && !empty && o != 0)
              bits ^= 1u;
            if (bug_ == Bug::attention_chunk_variant && tq < tk && !empty && o != 0) bits ^= 1u;
            const bool flips =
                (bug_ == Bug::attention_long_query_variant && longest_q >= kLongQuery) ||
                (bug_ == Bug::attention_position_variant && s > 0) ||
                (bug_ == Bug::attention_mix_variant && has_decode && has_prefill) ||
                (bug_ == Bug::attention_second_of_large_batch && s == 1 && a.seqlens_q.size() >= 5);
            if (flips && !empty && o != 0) bits ^= 1u;
            out.out[size_t(row * D + c)] = bits;
          }
          double lse = empty ? (caps_.empty_lse_sign > 0 ? kInf : -kInf) : M + std::log(L);
          if (empty && (bug_ == Bug::attention_wrong_sentinel || bug_ == Bug::splitkv_empty_plus_inf))
            lse = kInf;
          if (caps_.lse_base == 2 || bug_ == Bug::attention_lse_base2) lse /= std::log(2.0);
          out.lse[size_t(row)] = float(lse);
        }
      q0 += tq;
      k0 += tk;
      m0 += tq * tk;
    }
    if (bug_ == Bug::attention_lse_layout) {
      std::vector<float> t(out.lse.size());
      for (int64_t i = 0; i < TQ; ++i)
        for (int64_t h = 0; h < H; ++h) {
          // Written [heads, tokens], read back as [tokens, heads].
          const int64_t idx = h * TQ + i;
          t[size_t(idx)] = out.lse[size_t(i * H + h)];
        }
      out.lse = t;
    }
    return out;
  }
  // Where the subject declares its tensors live (the fakes compute on the host either way).
  void set_memory(ac_memory m) { caps_.memory = m; }
  void set_head_sizes(int32_t lo, int32_t hi) { caps_.head_size_min = lo, caps_.head_size_max = hi; }
  // Version-2 contract bits (AC_CAP_*), declared after construction.
  void set_flags(uint32_t flags) {
    caps_.flags = flags;
    if (flags & AC_CAP_EMPTY_LSE_UNDEFINED) caps_.empty_lse_sign = 0;
  }
  // Version-3 call limits (0: none).
  void set_call_limits(int32_t seqs, int32_t tokens, int64_t keys) {
    caps_.max_call_seqs = seqs;
    caps_.max_call_tokens = tokens;
    caps_.max_call_keys = keys;
  }

 private:
  std::string name_, desc_;
  Bug bug_;
  ac_caps caps_;
  std::map<uint64_t, int> launches_of_;  // attention_settles_late: launches per input
};

// A correct attention that cannot take a sequence without keys: a call with one is a crash
// (SubjectError internal), so a property that makes it fails with "crashed".
class NoZeroKeys final : public Fake {
 public:
  using Fake::Fake;
  int zero_key_calls = 0, calls = 0;
  AttentionOutput attention(const AttentionInput& in, const AttentionOptions& opt) override {
    ++calls;
    for (int32_t k : in.seqlens_k)
      if (k == 0) {
        ++zero_key_calls;
        throw SubjectError(SubjectError::Kind::internal, "called with a zero-key sequence");
      }
    return Fake::attention(in, opt);
  }
};

// A correct attention, except when K and V together hold at least `lag_bytes`: then every second
// call (every call, if `always`) returns O[token 0, head 0, d 0] (a row every judgement samples)
// doubled plus one, as a consumer reading a pipeline stage before its data landed would. Small
// cases never show it.
class LagsPastBytes final : public Fake {
 public:
  // at: the element of O made wrong (default the first).
  LagsPastBytes(std::string name, int64_t lag_bytes, bool always, uint32_t features, size_t at = 0)
      : Fake(std::move(name), AC_OP_ATTENTION, Bug::none, 0, -1, features),
        lag_bytes_(lag_bytes),
        always_(always),
        at_(at) {}
  int large_calls = 0;
  AttentionOutput attention(const AttentionInput& in, const AttentionOptions& opt) override {
    AttentionOutput out = Fake::attention(in, opt);
    const int64_t bytes = int64_t(in.k.size() + in.v.size()) * dtype_bytes(in.dtype);
    if (bytes >= lag_bytes_ && (++large_calls % 2 == 0 || always_))
      out.out[at_] = enc(in.dtype, 2 * dec(in.dtype, out.out[at_]) + 1);
    return out;
  }

 private:
  int64_t lag_bytes_;
  bool always_;
  size_t at_;
};

inline constexpr uint32_t kAttnFeatures =
    AC_FEAT_CAUSAL | AC_FEAT_MASK | AC_FEAT_VARLEN | AC_FEAT_GQA | AC_FEAT_LSE;

// A correct attention Fake (kAttnFeatures) behind capabilities of the test's own (caps_, a copy of
// the fake's to extend): the subject a test builds to declare more than Fake does, computing its
// attention through the fake once it has turned the call into a plain one.
class Wrapping : public Subject {
 public:
  explicit Wrapping(const std::string& name)
      : inner_(name, AC_OP_ATTENTION, Bug::none, 0, -1, kAttnFeatures), caps_(inner_.caps()) {}
  const std::string& name() const override { return inner_.name(); }
  const std::string& description() const override { return inner_.description(); }
  const ac_caps& caps() const override { return caps_; }
  std::string backend() const override { return "host"; }
  std::string origin() const override { return "test"; }
  MergeOutput merge(const MergeInput& in) override { return inner_.merge(in); }
  SoftmaxOutput softmax(const SoftmaxInput& in) override { return inner_.softmax(in); }

 protected:
  Fake inner_;
  ac_caps caps_;
};

}  // namespace fakes
