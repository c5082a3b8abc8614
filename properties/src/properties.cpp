// The property registry and its runner.
//
// A property = a case generator (generators.hpp) + a check over the subject's output judged
// against the exact reference (measure.cpp). run_property drives it with rc::detail::checkProperty
// so that the seed, the counterexample and RapidCheck's reproduce string stay in our hands:
//   - the first failure is re-run on the same case; differing output bits are reported as
//     "nondeterministic" (RapidCheck's shrinking needs a deterministic property);
//   - RapidCheck then shrinks; the last failing evaluation is the minimal case (its shrinker accepts
//     each failing candidate and stops when none fails), which is written to the corpus atomically;
//   - after a crash (device fault) the remaining evaluations pass without launching, so the crash
//     case itself is kept rather than shrunk on a dead device;
//   - cases are counted only before the first failure, so stats describe the random stream.
// Shards: shard I of N seeds RapidCheck with splitmix64(seed, I, property, subject), a disjoint,
// deterministic stream per shard.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <unordered_map>

#include "attncheck/generators.hpp"
#include "internal.hpp"

// Declared in RapidCheck's sources (not its installed headers); exported by librapidcheck.a.
namespace rc::detail {
std::string reproduceMapToString(const std::unordered_map<std::string, Reproduce>& reproduceMap);
}

namespace attncheck {

using namespace detail;

const std::vector<double>& ulp_histogram_edges() {
  static const std::vector<double> edges = [] {
    std::vector<double> e{0, 0.5};
    for (int i = 0; i <= 20; ++i) e.push_back(std::ldexp(1.0, i));
    e.push_back(std::numeric_limits<double>::infinity());
    return e;
  }();
  return edges;
}

const char* status_name(PropertyResult::Status s) {
  switch (s) {
    case PropertyResult::Status::passed: return "passed";
    case PropertyResult::Status::failed: return "failed";
    case PropertyResult::Status::crashed: return "crashed";
    case PropertyResult::Status::not_applicable: return "not_applicable";
  }
  return "?";
}

const std::vector<PropertyInfo>& all_properties() {
  static const std::vector<PropertyInfo> props = {
      {"accuracy", "Every output is within the subject's ulp budget of the exact reference (cancellation-aware bound; plain ulp reported).",
       "Verify it on numbers; What has to be fp32", AC_OP_MERGE | AC_OP_SOFTMAX | AC_OP_ATTENTION | AC_OP_SPLITKV, true},
      {"no_spurious_nonfinite", "No NaN or Inf where the exact result is finite (declared naive-exp hazard rows excepted).",
       "(2) Safe softmax; The base case is a NaN factory", AC_OP_MERGE | AC_OP_SOFTMAX | AC_OP_ATTENTION | AC_OP_SPLITKV, true},
      {"empty_row_contract", "A row with no visible key gives O = 0 exactly and the declared LSE sentinel (softmax: Y = 0).",
       "The base case is a NaN factory", AC_OP_SOFTMAX | AC_OP_ATTENTION | AC_OP_SPLITKV, true},
      {"merge_sentinels", "Merging with an empty state returns the other state; +inf is empty; two empty states give O = 0 and -inf, never NaN.",
       "The base case is a NaN factory", AC_OP_MERGE, true},
      {"split_equals_whole", "Attention over K[0:a] merged with attention over K[a:] matches attention over K, for every cut a.",
       "The state that gets passed around is the log-sum-exp", AC_OP_ATTENTION | AC_OP_SPLITKV, true},
      {"split_order_drift", "Every num_splits and fold order stays within budget of the exact answer; drift is measured; num_splits = 1 is bitwise reproducible.",
       "Bitwise reproducibility is a casualty", AC_OP_SPLITKV, true},
      {"fp16_overflow", "A declared naive exp overflows exactly where the exact exp rounds to inf in the storage type; safe and online variants never do.",
       "(1) Naive softmax, and why it is unusable", AC_OP_SOFTMAX | AC_OP_ATTENTION | AC_OP_SPLITKV, true},
      {"lse_convention", "The LSE matches the declared base (e or 2) and layout.",
       "The state that gets passed around is the log-sum-exp", AC_OP_MERGE | AC_OP_ATTENTION | AC_OP_SPLITKV, true},
  };
  return props;
}

const PropertyInfo* find_property(const std::string& name) {
  for (const auto& p : all_properties())
    if (p.name == name) return &p;
  return nullptr;
}

namespace {

bool writes_lse(const Subject& s) { return (s.caps().features & AC_FEAT_LSE) != 0; }

// The op a property exercises on this subject (first match in a fixed order).
uint32_t op_for(const PropertyInfo& p, const Subject& s) {
  for (uint32_t op : {AC_OP_MERGE, AC_OP_SOFTMAX, AC_OP_SPLITKV, AC_OP_ATTENTION})
    if ((p.ops & op) && s.has_op(op)) return op;
  return 0;
}

}  // namespace

bool property_applies(const PropertyInfo& p, const Subject& s) {
  const uint32_t op = op_for(p, s);
  if (!op) return false;
  if ((p.name == "split_equals_whole" || p.name == "lse_convention") && op != AC_OP_MERGE && !writes_lse(s))
    return false;
  return true;
}

namespace detail {

// The failure class of a crash: "device_fault", "transport_failed" (a worker died or hung) or "internal".
const char* crash_kind_name(SubjectError::Kind k) {
  if (k == SubjectError::Kind::device_fault) return "device_fault";
  if (k == SubjectError::Kind::transport_failed) return "transport_failed";
  return "internal";
}

// Outcome of one check of one case.
struct Outcome {
  bool ok = true;
  bool crashed = false;
  std::string failure_class, message;
  std::vector<Elem> worst;  // failing elements, worst first (up to 5)
  std::string digest;       // the output bits, for the determinism re-run
  double drift = 0;
};

struct Ctx {
  Subject& subject;
  const RunConfig& cfg;
  Conventions cv;
  Budget budget;
  std::string write_ahead_path;
  std::string property;
  // stats
  std::vector<OutputStats> stats;
  std::vector<std::vector<double>> ulps, cancels;
  bool counting = true;
};

void before_launch(Ctx& ctx, const Case& c) {
  if (!ctx.write_ahead_path.empty()) write_case_atomic_to(ctx.write_ahead_path, c);
  if (ctx.cfg.before_launch) ctx.cfg.before_launch(c);
}

std::string digest_bits(const Bits& b, const std::vector<float>& lse) {
  std::string d(reinterpret_cast<const char*>(b.data()), b.size() * 4);
  d.append(reinterpret_cast<const char*>(lse.data()), lse.size() * 4);
  return d;
}

void keep_worst(Outcome& o, const Elem& e) {
  o.worst.push_back(e);
  std::sort(o.worst.begin(), o.worst.end(), [](const Elem& a, const Elem& b) { return a.ratio > b.ratio; });
  if (o.worst.size() > 5) o.worst.resize(5);
}

std::string elem_line(const Elem& e) {
  char buf[160];
  std::snprintf(buf, sizeof buf, " (ulp %.3g, cancel-ulp %.3g, %.3gx budget)", e.ulp, e.cancel, e.ratio);
  return e.where + ": exact " + ref::to_decimal(e.exact, 12) + ", got " + hexfloat(e.out_value) + buf;
}

void fail(Outcome& o, const std::string& cls, const std::string& msg) {
  if (o.ok) {
    o.ok = false;
    o.failure_class = cls;
    o.message = msg;
  }
}

// Rules over a judgement, shared by several properties.
void rule_accuracy(Outcome& o, const Judgement& J, bool finite_only) {
  for (const Elem& e : J.elems) {
    if (J.row_skipped(e.row)) continue;
    const RowInfo& r = J.rows[size_t(e.row)];
    if (e.exact_finite && !e.out_finite) {
      keep_worst(o, e);
      fail(o, "nonfinite", "non-finite output where the exact value is finite: " + elem_line(e));
    } else if (!finite_only && !e.within) {
      keep_worst(o, e);
      fail(o, r.empty ? "empty_row" : "accuracy", (r.empty ? "empty-row contract: " : "over budget: ") + elem_line(e));
    }
  }
}

void rule_empty(Outcome& o, const Judgement& J, const Conventions& cv) {
  for (const Elem& e : J.elems) {
    if (!J.rows[size_t(e.row)].empty) continue;
    bool good;
    if (e.out == Out::LSE) {
      const double want = cv.empty_sign > 0 ? INFINITY : -INFINITY;
      good = e.out_value == want;
    } else {
      good = e.out_value == 0;  // +0 or -0: "O = 0 exactly"
    }
    if (!good) {
      keep_worst(o, e);
      fail(o, "empty_row", "empty row: " + e.where + " is " + hexfloat(e.out_value) +
                               (e.out == Out::LSE ? std::string(", declared sentinel ") + (cv.empty_sign > 0 ? "+inf" : "-inf") : ", want 0"));
    }
  }
}

void rule_overflow(Outcome& o, const Judgement& J, const Conventions& cv) {
  std::vector<int> row_nonfinite(size_t(J.num_rows), 0);
  for (const Elem& e : J.elems)
    if (e.out != Out::LSE && !e.out_finite) row_nonfinite[size_t(e.row)] = 1;
  for (int64_t r = 0; r < J.num_rows; ++r) {
    const RowInfo& info = J.rows[size_t(r)];
    if (info.ambiguous || info.underflow || info.empty) continue;
    const bool predicted = cv.naive_exp && info.hazard;
    if (predicted && !row_nonfinite[size_t(r)])
      fail(o, "overflow", "row " + std::to_string(r) + ": the naive exp must overflow here (exact exp rounds to inf) but the output is finite");
    if (!predicted && row_nonfinite[size_t(r)]) {
      for (const Elem& e : J.elems)
        if (e.row == r && !e.out_finite && e.out != Out::LSE) {
          keep_worst(o, e);
          fail(o, "overflow", "overflow where none is predicted: " + elem_line(e));
          break;
        }
    }
  }
}

// LSE: declared base and layout; a failing LSE is classified as base or layout confusion when the
// other reading matches.
void rule_lse(Outcome& o, const Judgement& J, const Conventions& cv, int64_t tokens, int64_t heads) {
  std::vector<const Elem*> lse(size_t(J.num_rows), nullptr);
  for (const Elem& e : J.elems)
    if (e.out == Out::LSE) lse[size_t(e.row)] = &e;
  bool all_within = true, other_base = true, transposed = tokens > 1 && heads > 1;
  for (int64_t r = 0; r < J.num_rows; ++r) {
    const Elem* e = lse[size_t(r)];
    if (!e || J.row_skipped(r)) continue;
    if (!e->within) all_within = false;
    if (e->exact_finite) {
      const double err = abs(Real(e->out_value) - e->exact_other).convert_to<double>();
      if (!(err <= 8 * e->allowed + 1e-6 * std::fabs(e->out_value))) other_base = false;
    } else if (!e->within) {
      other_base = false;
    }
    // The value this row would hold had the subject written the other layout.
    const int64_t t = r / heads, h = r % heads;
    int64_t src;
    if (cv.layout == AC_LSE_HEADS_TOKENS) {
      const int64_t idx = t * heads + h;  // written [tokens, heads]; read [heads, tokens]
      src = (idx % tokens) * heads + idx / tokens;
    } else {
      const int64_t idx = h * tokens + t;
      src = (idx / heads) * heads + idx % heads;
    }
    if (transposed && lse[size_t(src)]) {
      const Elem* s = lse[size_t(src)];
      const double want = e->exact.convert_to<double>();
      const bool match = e->exact_finite ? std::fabs(s->out_value - want) <= e->allowed * 8 : s->out_value == want;
      if (!match) transposed = false;
    }
  }
  if (all_within) return;
  for (const Elem* e : lse)
    if (e && !e->within) keep_worst(o, *e);
  if (other_base)
    fail(o, "lse_base", std::string("LSE is in base ") + (cv.base == ref::LseBase::e ? "2" : "e") + " but the subject declares base " +
                            (cv.base == ref::LseBase::e ? "e" : "2") + ": " + elem_line(o.worst.front()));
  else if (transposed)
    fail(o, "lse_layout", std::string("LSE declared ") + (cv.layout == AC_LSE_HEADS_TOKENS ? "[heads, tokens]" : "[tokens, heads]") +
                              " but written " + (cv.layout == AC_LSE_HEADS_TOKENS ? "[tokens, heads]" : "[heads, tokens]") + ": " +
                              elem_line(o.worst.front()));
  else
    fail(o, "accuracy", "LSE over budget: " + elem_line(o.worst.front()));
}

void record_stats(Ctx& ctx, const Judgement& J) {
  if (ctx.counting) accumulate_stats(ctx.stats, J, ctx.ulps, ctx.cancels);
}

Case make_case(Ctx& ctx, uint32_t op) {
  Case c;
  c.op = op_name(op);
  c.subject = ctx.subject.name();
  c.property = ctx.property;
  c.lse_base = ctx.subject.caps().lse_base;
  c.empty_lse_sign = ctx.cv.empty_sign;
  c.seed = ctx.cfg.seed;
  return c;
}

// Runs the subject on a case and judges it; the rule applied depends on the property.
Outcome check_case(Ctx& ctx, const Case& c) {
  Outcome o;
  const std::string& p = ctx.property;
  Subject& s = ctx.subject;
  if (const auto* m = std::get_if<MergeInput>(&c.input)) {
    before_launch(ctx, c);
    const MergeOutput out = s.merge(*m);
    o.digest = digest_bits(out.out, out.lse);
    const Judgement J = judge_merge(*m, out, ctx.cv, ctx.budget);
    record_stats(ctx, J);
    if (p == "no_spurious_nonfinite") rule_accuracy(o, J, true);
    else if (p == "lse_convention") rule_lse(o, J, ctx.cv, m->num_tokens, m->num_heads);
    else {
      rule_accuracy(o, J, false);
      if (p == "merge_sentinels" && !o.ok && o.failure_class != "nonfinite") o.failure_class = "sentinel";
    }
    return o;
  }
  if (const auto* x = std::get_if<SoftmaxInput>(&c.input)) {
    before_launch(ctx, c);
    const SoftmaxOutput out = s.softmax(*x);
    o.digest = digest_bits(out.y, {});
    const Judgement J = judge_softmax(*x, out, ctx.cv, ctx.budget);
    record_stats(ctx, J);
    if (p == "no_spurious_nonfinite") rule_accuracy(o, J, true);
    else if (p == "empty_row_contract") rule_empty(o, J, ctx.cv);
    else if (p == "fp16_overflow") rule_overflow(o, J, ctx.cv);
    else rule_accuracy(o, J, false);
    return o;
  }
  const auto& a = std::get<AttentionInput>(c.input);
  if (p == "split_equals_whole") {
    // Cuts: every a for short rows, else 0, N, and six spread points.
    const int64_t N = a.seqlens_k.at(0);
    std::vector<int64_t> cuts;
    if (N <= 16) {
      for (int64_t k = 0; k <= N; ++k) cuts.push_back(k);
    } else {
      for (int64_t k : {int64_t(0), N / 7, N / 3, N / 2, N / 2 + 1, 2 * N / 3, N - 1, N}) cuts.push_back(k);
    }
    before_launch(ctx, c);
    const AttentionOutput whole = s.attention(a, c.options);
    o.digest = digest_bits(whole.out, whole.lse);
    const int64_t TQ = total_q(a), H = a.num_heads, D = a.head_size, Hkv = a.num_kv_heads;
    for (int64_t cut : cuts) {
      AttentionInput part[2] = {a, a};
      part[0].seqlens_k = {int32_t(cut)};
      part[1].seqlens_k = {int32_t(N - cut)};
      part[0].k.assign(a.k.begin(), a.k.begin() + cut * Hkv * D);
      part[1].k.assign(a.k.begin() + cut * Hkv * D, a.k.end());
      part[0].v.assign(a.v.begin(), a.v.begin() + cut * Hkv * D);
      part[1].v.assign(a.v.begin() + cut * Hkv * D, a.v.end());
      if (!a.mask.empty()) {
        part[0].mask.clear();
        part[1].mask.clear();
        for (int64_t t = 0; t < TQ; ++t)
          for (int64_t j = 0; j < N; ++j) part[j < cut ? 0 : 1].mask.push_back(a.mask[size_t(t * N + j)]);
      }
      AttentionOutput po[2];
      Judgement pj[2];
      for (int i = 0; i < 2; ++i) {
        Case pc = c;
        pc.input = part[i];
        before_launch(ctx, pc);
        po[i] = s.attention(part[i], c.options);
        pj[i] = judge_attention(part[i], po[i], ctx.cv, ctx.budget);
      }
      // Merge the subject's two states exactly (reading its LSE in the declared base) and compare
      // with the exact attention over all keys.
      const ref::AttentionProblem whole_p = [&] {
        ref::AttentionProblem q;
        q.dtype = fmt(a.dtype);
        q.num_heads = a.num_heads;
        q.num_kv_heads = a.num_kv_heads;
        q.head_size = a.head_size;
        q.seqlens_q = a.seqlens_q;
        q.seqlens_k = a.seqlens_k;
        q.causal = a.causal;
        q.mask = a.mask;
        q.softmax_scale = a.softmax_scale;
        q.q = a.q;
        q.k = a.k;
        q.v = a.v;
        return q;
      }();
      for (int64_t t = 0; t < TQ; ++t)
        for (int64_t h = 0; h < H; ++h) {
          const int64_t row = t * H + h;
          if (pj[0].row_skipped(row) || pj[1].row_skipped(row)) continue;
          ref::ExactState st[2];
          double lse_allowed[2] = {0, 0};
          std::vector<double> o_allowed[2];
          for (int i = 0; i < 2; ++i) {
            st[i].lse = Real(double(po[i].lse[size_t(row)]));
            for (int64_t d = 0; d < D; ++d) st[i].o.push_back(Real(decode(a.dtype, po[i].out[size_t(row * D + d)])));
            for (const Elem& e : pj[i].elems)
              if (e.row == row) {
                if (e.out == Out::LSE) lse_allowed[i] = e.allowed;
                else o_allowed[i].push_back(e.allowed);
              }
          }
          const ref::ExactState merged = ref::exact_merge({st[0], st[1]}, ctx.cv.base, true);
          const ref::ExactRow ex = ref::exact_attention_row(whole_p, t, int32_t(h), ctx.cv.base);
          const double l0 = st[0].lse.convert_to<double>(), l1 = st[1].lse.convert_to<double>();
          const double e0 = l0 == INFINITY ? -INFINITY : l0, e1 = l1 == INFINITY ? -INFINITY : l1;
          const double M = std::max(e0, e1);
          double w0 = 0, w1 = 0;
          if (M > -INFINITY) {
            w0 = ctx.cv.base == ref::LseBase::two ? std::exp2(e0 - M) : std::exp(e0 - M);
            w1 = ctx.cv.base == ref::LseBase::two ? std::exp2(e1 - M) : std::exp(e1 - M);
            const double ws = w0 + w1;
            w0 /= ws;
            w1 /= ws;
          }
          const double lse_to_nat = ctx.cv.base == ref::LseBase::two ? std::log(2.0) : 1.0;
          for (int64_t d = 0; d < D; ++d) {
            const double got = merged.o[size_t(d)].convert_to<double>();
            const double want = ex.o[size_t(d)].convert_to<double>();
            const double oa = st[0].o[size_t(d)].convert_to<double>(), ob = st[1].o[size_t(d)].convert_to<double>();
            const double al0 = o_allowed[0].size() > size_t(d) ? o_allowed[0][size_t(d)] : 0;
            const double al1 = o_allowed[1].size() > size_t(d) ? o_allowed[1][size_t(d)] : 0;
            const double mix = w0 > 0 && w1 > 0 ? 2 * w0 * w1 * std::fabs(oa - ob) * (lse_allowed[0] + lse_allowed[1]) * lse_to_nat : 0.0;
            const double allowed = w0 * al0 + w1 * al1 + mix + 1e-300;
            const double err = std::fabs(got - want);
            if (!(err <= allowed * 1.0001)) {
              Elem e;
              e.out = Out::O;
              e.dtype = a.dtype;
              e.row = row;
              e.where = "O[token=" + std::to_string(t) + ",head=" + std::to_string(h) + ",d=" + std::to_string(d) + "] cut=" + std::to_string(cut);
              e.exact = ex.o[size_t(d)];
              e.out_value = got;
              e.out_bits = round_bits(AC_DTYPE_F32, got);
              e.out_finite = std::isfinite(got);
              e.ratio = err / allowed;
              e.allowed = allowed;
              e.inputs = "lse parts " + hexfloat(l0) + ", " + hexfloat(l1);
              keep_worst(o, e);
              fail(o, "split", "merge(attention(K[0:" + std::to_string(cut) + "]), attention(K[" + std::to_string(cut) + ":])) != attention(K): " + elem_line(e));
            }
          }
        }
    }
    return o;
  }
  if (p == "split_order_drift") {
    const ac_caps& caps = s.caps();
    std::vector<AttentionOptions> configs;
    for (int32_t n = 1; n <= std::max(1, std::min(caps.max_splits, 8)); ++n)
      for (ac_fold f : {AC_FOLD_LEFT, AC_FOLD_RIGHT, AC_FOLD_TREE})
        if ((caps.fold_orders & AC_FOLD_BIT(f)) || (caps.fold_orders == 0 && f == AC_FOLD_LEFT))
          configs.push_back(AttentionOptions{c.options.tiling, n, f});
    std::vector<AttentionOutput> outs;
    for (const AttentionOptions& opt : configs) {
      Case cc = c;
      cc.options = opt;
      before_launch(ctx, cc);
      outs.push_back(s.attention(a, opt));
      const Judgement J = judge_attention(a, outs.back(), ctx.cv, ctx.budget);
      record_stats(ctx, J);
      Outcome sub;
      rule_accuracy(sub, J, false);
      if (!sub.ok && o.ok) {
        o = sub;
        o.message = "num_splits=" + std::to_string(opt.num_splits) + " fold=" + std::to_string(int(opt.fold_order)) + ": " + sub.message;
      }
      if (opt.num_splits == 1 && opt.fold_order == configs.front().fold_order) {
        const AttentionOutput again = s.attention(a, opt);
        if (digest_bits(again.out, again.lse) != digest_bits(outs.back().out, outs.back().lse))
          fail(o, "nondeterministic", "num_splits = 1 is not bitwise reproducible run to run");
      }
    }
    o.digest = outs.empty() ? std::string() : digest_bits(outs.front().out, outs.front().lse);
    // Drift: largest pairwise difference of one element across configs, in ulps of its exact value.
    const Judgement J0 = judge_attention(a, outs.front(), ctx.cv, ctx.budget);
    int64_t prev_row = -1, col = 0;
    for (const Elem& e : J0.elems) {
      if (e.row != prev_row) {
        prev_row = e.row;
        col = 0;
      }
      if (e.out != Out::O) continue;
      const size_t idx = size_t(e.row * a.head_size + col++);
      if (!e.exact_finite || J0.row_skipped(e.row)) continue;
      double lo = INFINITY, hi = -INFINITY;
      for (const auto& out : outs) {
        const double v = decode(a.dtype, out.out[idx]);
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      if (std::isfinite(lo) && std::isfinite(hi))
        o.drift = std::max(o.drift, (hi - lo) / ref::ulp_at(fmt(a.dtype), e.exact).convert_to<double>());
    }
    return o;
  }
  before_launch(ctx, c);
  const AttentionOutput out = s.attention(a, c.options);
  o.digest = digest_bits(out.out, out.lse);
  const Judgement J = judge_attention(a, out, ctx.cv, ctx.budget);
  record_stats(ctx, J);
  if (p == "no_spurious_nonfinite") rule_accuracy(o, J, true);
  else if (p == "empty_row_contract") rule_empty(o, J, ctx.cv);
  else if (p == "fp16_overflow") rule_overflow(o, J, ctx.cv);
  else if (p == "lse_convention") rule_lse(o, J, ctx.cv, total_q(a), a.num_heads);
  else rule_accuracy(o, J, false);
  return o;
}

// The case generator of a property for one subject.
rc::Gen<Case> case_gen(Ctx& ctx, uint32_t op) {
  const gen::Domain dom = gen::domain_for(ctx.subject, ctx.cfg.max_keys, ctx.cfg.dtypes);
  const std::string p = ctx.property;
  const Case base = make_case(ctx, op);
  const ac_caps caps = ctx.subject.caps();
  return rc::gen::exec([dom, p, base, op, caps] {
    Case c = base;
    if (op == AC_OP_MERGE) {
      c.input = p == "merge_sentinels" ? *gen::merge_sentinel_input(dom) : *gen::merge_input(dom);
    } else if (op == AC_OP_SOFTMAX) {
      c.input = p == "fp16_overflow" ? *gen::softmax_overflow_band_input(dom) : *gen::softmax_input(dom);
    } else {
      if (p == "empty_row_contract") c.input = *gen::attention_empty_rows_input(dom);
      else if (p == "fp16_overflow") c.input = *gen::attention_overflow_band_input(dom);
      else if (p == "split_equals_whole") c.input = *gen::attention_split_input(dom);
      else c.input = *gen::attention_input(dom);
      if (caps.num_tilings > 1) c.options.tiling = *rc::gen::inRange(0, caps.num_tilings);
      if (op == AC_OP_SPLITKV && p != "split_order_drift") {
        c.options.num_splits = *rc::gen::inRange(1, std::max(1, caps.max_splits) + 1);
        std::vector<ac_fold> folds;
        for (ac_fold f : {AC_FOLD_LEFT, AC_FOLD_RIGHT, AC_FOLD_TREE})
          if (caps.fold_orders & AC_FOLD_BIT(f)) folds.push_back(f);
        if (!folds.empty()) c.options.fold_order = *rc::gen::elementOf(folds);
      }
    }
    return c;
  });
}

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
uint64_t hash_str(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

std::string safe(const std::string& s) {
  std::string out;
  for (char ch : s) out.push_back(std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' ? ch : '_');
  return out;
}

}  // namespace detail

PropertyResult run_property(const std::string& name, Subject& subject, const RunConfig& cfg) {
  const PropertyInfo* info = find_property(name);
  if (!info) throw std::invalid_argument("unknown property \"" + name + "\"");
  PropertyResult res;
  res.property = name;
  res.subject = subject.name();
  res.seed = cfg.seed;
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  if (!property_applies(*info, subject)) {
    res.status = PropertyResult::Status::not_applicable;
    res.message = "subject has no operation this property checks";
    return res;
  }
  const uint32_t op = op_for(*info, subject);
  Ctx ctx{subject, cfg, conventions_of(subject), default_budget(op, AC_DTYPE_F32), "", name, {}, {}, {}, true};
  if (!cfg.corpus_dir.empty() && (cfg.write_ahead || subject.caps().memory == AC_MEMORY_CUDA))
    ctx.write_ahead_path = (std::filesystem::path(cfg.corpus_dir) /
                            ("inflight-" + safe(subject.name()) + "-" + name + "-" + std::to_string(cfg.shard_index) + ".json"))
                               .string();
  const rc::Gen<Case> gen = case_gen(ctx, op);

  std::optional<Case> last_failing;
  Outcome last_outcome;
  bool crashed = false, cancelled = false;
  int supported = 0;
  std::string crash_kind;

  auto property = [&]() {
    if (crashed || cancelled) return;  // nothing more runs on a faulted device
    if (cfg.cancel && cfg.cancel->load()) {
      cancelled = true;
      return;
    }
    Case c = *gen;
    Outcome o;
    try {
      o = check_case(ctx, c);
    } catch (const SubjectError& e) {
      if (e.kind == SubjectError::Kind::unsupported) RC_DISCARD(std::string("unsupported: ") + e.what());
      crashed = true;
      crash_kind = crash_kind_name(e.kind);
      o.ok = false;
      o.crashed = true;
      o.failure_class = crash_kind;
      o.message = e.what();
    } catch (const ref::ReferenceError& e) {
      RC_DISCARD(std::string("reference refused the case: ") + e.what());
    }
    if (ctx.counting) {
      res.max_drift_ulp = std::max(res.max_drift_ulp, o.drift);
      ++res.cases_run;
      ++supported;
      if (cfg.progress) cfg.progress(res.cases_run, cfg.num_cases);
    }
    if (o.ok) return;
    if (ctx.counting) {
      // The first failure: time it, then check it reproduces bit for bit.
      res.cases_to_first_failure = res.cases_run;
      res.seconds_to_first_failure = elapsed();
      ctx.counting = false;
      if (!o.crashed) {
        try {
          Outcome again = check_case(ctx, c);
          if (again.digest != o.digest) {
            o.failure_class = "nondeterministic";
            o.message = "the subject gave different output bits on the same input; " + o.message;
          }
        } catch (const SubjectError&) {
        }
      }
    }
    last_failing = c;
    last_outcome = o;
    RC_FAIL(o.failure_class + ": " + o.message);
  };

  rc::detail::TestParams params;
  params.seed = splitmix(cfg.seed ^ splitmix(uint64_t(cfg.shard_index) * 0x9e3779b97f4a7c15ull + uint64_t(cfg.shard_count)) ^
                         hash_str(name) ^ splitmix(hash_str(subject.name())));
  params.maxSuccess = std::max(1, cfg.num_cases);
  params.maxSize = std::min(100, std::max(0, cfg.max_size));
  params.maxDiscardRatio = 20;
  params.disableShrinking = !cfg.shrink;
  rc::detail::TestMetadata meta;
  meta.id = name + "/" + subject.name();
  meta.description = meta.id;
  // A silent listener: RapidCheck's default one prints an RC_PARAMS line at exit for every failure;
  // we report the seed and reproduce string ourselves, per property and subject.
  struct Quiet : rc::detail::TestListener {
    void onTestCaseFinished(const rc::detail::CaseDescription&) override {}
    void onShrinkTried(const rc::detail::CaseDescription&, bool) override {}
    void onTestFinished(const rc::detail::TestMetadata&, const rc::detail::TestResult&) override {}
  } quiet;
  const rc::detail::TestResult result =
      rc::detail::checkProperty(rc::detail::toProperty(property), meta, params, quiet);

  res.seconds = elapsed();
  finish_stats(ctx.stats, ctx.ulps, ctx.cancels);
  res.stats = ctx.stats;
  if (!ctx.write_ahead_path.empty()) {
    std::error_code ec;
    std::filesystem::remove(ctx.write_ahead_path, ec);  // a normal return: no crash to keep
  }
  rc::detail::FailureResult failure;
  if (result.match(failure) && last_failing) {
    res.status = last_outcome.crashed ? PropertyResult::Status::crashed : PropertyResult::Status::failed;
    res.failures = 1;
    res.failure_class = last_outcome.failure_class;
    res.message = last_outcome.message;
    res.rc_reproduce = rc::detail::reproduceMapToString({{meta.id, failure.reproduce}});
    Case& c = *last_failing;
    c.rc_reproduce = res.rc_reproduce;
    c.note = res.failure_class + ": " + res.message;
    if (c.note.size() > 400) c.note.resize(400);
    res.counterexample_size = case_size(c);
    res.counterexample_summary = describe_size(res.counterexample_size);
    std::string file;
    if (!cfg.corpus_dir.empty()) {
      try {
        file = write_case_atomic(cfg.corpus_dir, c);
        res.corpus_files.push_back(file);
      } catch (const CaseError& e) {
        res.message += " (could not write the corpus file: " + std::string(e.what()) + ")";
      }
    }
    res.reproduce_command = file.empty()
        ? "attncheck check --subject " + subject.name() + " --property " + name + " --seed " + std::to_string(cfg.seed) +
              " --shard " + std::to_string(cfg.shard_index) + "/" + std::to_string(cfg.shard_count)
        : "attncheck replay " + file + " --subject " + subject.name();
  } else if (rc::detail::GaveUpResult gave; result.match(gave)) {
    res.status = supported ? PropertyResult::Status::passed : PropertyResult::Status::not_applicable;
    res.message = gave.description;
  } else if (rc::detail::Error err; result.match(err)) {
    res.status = PropertyResult::Status::crashed;
    res.failure_class = "internal";
    res.message = err.description;
  } else {
    res.status = PropertyResult::Status::passed;
    if (cancelled) res.message = "cancelled after " + std::to_string(res.cases_run) + " cases";
  }
  return res;
}


ReplayResult replay_case(const Case& c, Subject& subject, const std::string& file_path) {
  ReplayResult r;
  r.reproduce_command = "attncheck replay " + (file_path.empty() ? std::string("FILE") : file_path) + " --subject " + subject.name();
  uint32_t op = op_from_name(c.op);
  if (op == AC_OP_ATTENTION && !subject.has_op(op) && subject.has_op(AC_OP_SPLITKV)) op = AC_OP_SPLITKV;
  if (op == AC_OP_SPLITKV && !subject.has_op(op) && subject.has_op(AC_OP_ATTENTION)) op = AC_OP_ATTENTION;
  auto not_applicable = [&](const std::string& why) {
    r.applicable = false;
    r.passed = true;
    r.verdict = "not applicable: " + why;
    return r;
  };
  if (!subject.has_op(op)) return not_applicable("subject " + subject.name() + " has no " + c.op + " operation");
  ac_dtype dtype;
  int32_t head_size = 0;
  if (const auto* m = std::get_if<MergeInput>(&c.input)) dtype = m->dtype, head_size = m->head_size;
  else if (const auto* x = std::get_if<SoftmaxInput>(&c.input)) dtype = x->dtype;
  else dtype = std::get<AttentionInput>(c.input).dtype, head_size = std::get<AttentionInput>(c.input).head_size;
  if (!subject.has_dtype(dtype)) return not_applicable(std::string("subject lacks dtype ") + dtype_name(dtype));
  if (op != AC_OP_SOFTMAX && head_size > 0 && !subject.supports_head_size(head_size))
    return not_applicable("subject does not support head size " + std::to_string(head_size));
  std::string prop = c.property;
  const PropertyInfo* info = find_property(prop);
  if (!info || !property_applies(*info, subject) || !(info->ops & op)) prop = "accuracy";
  RunConfig cfg;
  Ctx ctx{subject, cfg, conventions_of(subject), default_budget(op, dtype), "", prop, {}, {}, {}, true};
  Case run = c;
  if (op == AC_OP_ATTENTION) run.options.num_splits = 1;
  if (run.options.tiling >= std::max(1, subject.caps().num_tilings)) run.options.tiling = 0;
  try {
    Outcome o = check_case(ctx, run);
    if (o.ok && prop != "no_spurious_nonfinite" && prop != "accuracy" && prop != "split_equals_whole" &&
        prop != "split_order_drift") {
      // Sentinel-style properties check one rule; a replay also holds the case to the accuracy budget.
      ctx.property = "accuracy";
      o = check_case(ctx, run);
      prop += "+accuracy";
    }
    r.passed = o.ok;
    for (const Elem& e : o.worst) r.worst_elements.push_back(to_worst(e));
    r.verdict = o.ok ? "pass (" + prop + ")" : "FAIL " + o.failure_class + ": " + o.message;
  } catch (const SubjectError& e) {
    if (e.kind == SubjectError::Kind::unsupported) return not_applicable(e.what());
    r.passed = false;
    r.verdict = std::string("CRASH ") + crash_kind_name(e.kind) + ": " + e.what();
  } catch (const ref::ReferenceError& e) {
    r.passed = false;
    r.verdict = std::string("invalid case: ") + e.what();
  }
  return r;
}

std::vector<TilingRow> tiling_report(Subject& subject, const RunConfig& cfg) {
  std::vector<TilingRow> rows;
  const ac_caps& caps = subject.caps();
  const bool split = subject.has_op(AC_OP_SPLITKV);
  if (!subject.has_op(AC_OP_ATTENTION) && !split) return rows;
  const gen::Domain dom = gen::domain_for(subject, cfg.max_keys, cfg.dtypes);
  const rc::Gen<AttentionInput> g = gen::attention_input(dom);
  std::vector<AttentionInput> inputs;
  const rc::Random base(cfg.seed ^ (uint64_t(cfg.shard_index) << 32));
  rc::Random random = base;
  for (int i = 0; i < std::max(1, cfg.num_cases); ++i) {
    rc::Random here = random.split();
    inputs.push_back(g(here, std::min(100, i * 100 / std::max(1, cfg.num_cases))).value());
  }
  struct Config {
    int tiling, splits;
    ac_fold fold;
  };
  std::vector<Config> configs;
  for (int t = 0; t < std::max(1, caps.num_tilings); ++t) {
    if (!split) {
      configs.push_back({t, 1, AC_FOLD_LEFT});
      continue;
    }
    for (int n = 1; n <= std::max(1, caps.max_splits); ++n)
      for (ac_fold f : {AC_FOLD_LEFT, AC_FOLD_RIGHT, AC_FOLD_TREE})
        if ((caps.fold_orders & AC_FOLD_BIT(f)) || (caps.fold_orders == 0 && f == AC_FOLD_LEFT)) configs.push_back({t, n, f});
  }
  const Conventions cv = conventions_of(subject);
  for (const Config& cf : configs) {
    if (cfg.cancel && cfg.cancel->load()) break;
    std::vector<OutputStats> stats;
    std::vector<std::vector<double>> ulps, cancels;
    for (const AttentionInput& a : inputs) {
      try {
        const AttentionOutput out = subject.attention(a, AttentionOptions{cf.tiling, cf.splits, cf.fold});
        accumulate_stats(stats, judge_attention(a, out, cv, default_budget(AC_OP_ATTENTION, a.dtype)), ulps, cancels);
      } catch (const SubjectError& e) {
        if (e.kind != SubjectError::Kind::unsupported) throw;
      }
    }
    finish_stats(stats, ulps, cancels);
    for (const OutputStats& s : stats) {
      TilingRow row;
      if (caps.tilings && cf.tiling < caps.num_tilings) {
        row.br = caps.tilings[cf.tiling].br;
        row.bc = caps.tilings[cf.tiling].bc;
      }
      row.num_splits = cf.splits;
      row.fold = split ? (cf.fold == AC_FOLD_LEFT ? "left" : cf.fold == AC_FOLD_RIGHT ? "right" : "tree") : "";
      row.stats = s;
      rows.push_back(row);
    }
  }
  return rows;
}

}  // namespace attncheck
