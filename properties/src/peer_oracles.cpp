// Peer oracles (peer_oracles.hpp): the acceptance rules of vLLM's, FlashAttention's and PyTorch's
// kernel tests, each with its input style, run against a Subject. Inputs are drawn from a seeded
// std::mt19937_64 (peers use torch.randn, not property-based generators: there is nothing to
// shrink), rounded once to the dtype (reference round_to_format). References are computed here,
// independently of kernels/: ref64 in double without intermediate rounding, ref_lowp in float with
// the roundings the peers' torch references make (see the header). Conventions of the subject
// under test are honoured: the merge reference reads LSEs in the subject's declared base, and
// attention is bottom-right causal (the plugin ABI's convention).
#include "attncheck/peer_oracles.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>

#include "attncheck/reference/format.hpp"
#include "attncheck/seed.hpp"
#include "split_options.hpp"

namespace attncheck {

namespace {

using Rng = std::mt19937_64;
constexpr double kInf = std::numeric_limits<double>::infinity();

ref::Format fmt(ac_dtype d) {
  return d == AC_DTYPE_F16 ? ref::Format::fp16 : d == AC_DTYPE_BF16 ? ref::Format::bf16 : ref::Format::fp32;
}
uint32_t to_bits(ac_dtype d, double x) { return ref::round_to_format(fmt(d), x); }
double from_bits(ac_dtype d, uint32_t b) { return ref::decode(fmt(d), b); }
// x rounded once to the dtype (what a torch op returning that dtype does to an fp32 result).
double rd(ac_dtype d, double x) { return from_bits(d, to_bits(d, x)); }

double normal(Rng& r) { return std::normal_distribution<double>(0.0, 1.0)(r); }
int uniform(Rng& r, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(r); }
bool chance(Rng& r, double p) { return std::uniform_real_distribution<double>(0.0, 1.0)(r) < p; }

Bits randn_bits(Rng& r, ac_dtype d, size_t n) {
  Bits b(n);
  for (auto& x : b) x = to_bits(d, normal(r));
  return b;
}

struct Style {
  std::vector<ac_dtype> dtypes;
  bool inf_lse = false;      // vLLM's merge test: 10% +inf on one side
  bool tq_above_tk = false;  // FlashAttention: causal with T_q > T_k (empty rows)
  std::vector<int> splits = {1, 2, 3};
  bool compare_lse = false;  // vLLM's merge test compares the output LSE too
};
Style style_of(PeerOracle o) {
  Style s;
  switch (o) {
    case PeerOracle::vllm:
      s.dtypes = {AC_DTYPE_F32, AC_DTYPE_F16, AC_DTYPE_BF16};
      s.inf_lse = true;
      s.compare_lse = true;
      break;
    case PeerOracle::flashattn:
      s.dtypes = {AC_DTYPE_F16, AC_DTYPE_BF16};
      s.tq_above_tk = true;
      s.splits = {1, 3};
      break;
    case PeerOracle::pytorch:
      s.dtypes = {AC_DTYPE_F32, AC_DTYPE_F16, AC_DTYPE_BF16};
      break;
  }
  return s;
}

// One case's outputs and references, flattened (O or Y), plus LSEs where compared.
struct Compared {
  ac_dtype dtype = AC_DTYPE_F32;
  bool attention = false;  // vLLM's attention tests are looser than its merge test
  std::vector<double> out, ref64, lowp;
  std::vector<double> out_lse, lse64, lse_lowp;
};

// ---- acceptance rules --------------------------------------------------------------------
bool close(double a, double b, double atol, double rtol) {
  if (std::isnan(a) || std::isnan(b)) return false;  // equal_nan=False
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::fabs(a - b) <= atol + rtol * std::fabs(b);
}

// First index where the rule fails, -1 if none; `why` describes it.
bool accept_vllm(const Compared& c, std::string& why) {
  // Merge (test_merge_attn_states): 1e-3 (bf16 rtol 1e-2). Attention (test_flash_attn.py and the
  // flashinfer tests): atol 2e-2, rtol 1e-2 against a reference that materialises S in the dtype.
  const double atol = c.attention ? 2e-2 : 1e-3, rtol = c.attention || c.dtype == AC_DTYPE_BF16 ? 1e-2 : 1e-3;
  auto check = [&](const std::vector<double>& out, const std::vector<double>& ref, const char* what) {
    for (size_t i = 0; i < out.size(); ++i)
      if (!close(out[i], ref[i], atol, rtol)) {
        char buf[200];
        std::snprintf(buf, sizeof buf, "%s[%zu] = %.9g, same-precision reference %.9g (atol %g, rtol %g)",
                      what, i, out[i], ref[i], atol, rtol);
        why = buf;
        return false;
      }
    return true;
  };
  return check(c.out, c.lowp, "O") && check(c.out_lse, c.lse_lowp, "LSE");
}

// max |a - b| with NaN propagating (torch max) and inf - inf = NaN.
double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(a[i] - b[i]);
    if (std::isnan(d)) return NAN;
    m = std::max(m, d);
  }
  return m;
}

bool accept_flashattn(const Compared& c, std::string& why) {
  const double err = max_abs_diff(c.out, c.ref64), ref_err = max_abs_diff(c.lowp, c.ref64);
  // FlashAttention-3's additive term: the rounding noise of (ref + 0.3 - 0.3) on its fp32 reference.
  double noise = 0;
  for (double r : c.ref64) {
    const float f = float(r);
    noise = std::max(noise, std::fabs(double((f + 0.3f) - 0.3f) - double(f)));
  }
  const double allowed = 2 * ref_err + 2 * noise;
  if (err <= allowed) return true;  // false for NaN
  char buf[200];
  std::snprintf(buf, sizeof buf, "max|O - ref_fp64| = %.6g > 2 x max|ref_lowp - ref_fp64| + atol = %.6g", err,
                allowed);
  why = buf;
  return false;
}

bool accept_pytorch(const Compared& c, std::string& why) {
  const double def_atol = c.dtype == AC_DTYPE_F32 ? 1e-5 : 1e-3;
  const double def_rtol = c.dtype == AC_DTYPE_F32 ? 1.3e-6 : c.dtype == AC_DTYPE_F16 ? 1e-3 : 1.6e-2;
  double atol = 0, rtol = 0;
  for (size_t i = 0; i < c.lowp.size(); ++i) {
    const double dev = std::fabs(c.ref64[i] - c.lowp[i]);
    if (std::isnan(dev)) continue;
    atol = std::max(atol, dev);
    double rel = dev / std::fabs(c.ref64[i]);
    if (std::isnan(rel)) rel = def_rtol;  // torch.nan_to_num(0 / 0)
    rtol = std::max(rtol, rel);
  }
  atol = 4 * std::max(atol, def_atol);
  rtol = 4 * std::max(rtol, def_rtol);
  if (rtol > 1e30) rtol = def_rtol;  // test_transformers.py: isclose misbehaves past this
  for (size_t i = 0; i < c.out.size(); ++i)
    if (!close(c.out[i], c.ref64[i], atol, rtol)) {
      char buf[200];
      std::snprintf(buf, sizeof buf, "O[%zu] = %.9g, fp64 reference %.9g (fudge-4 atol %.3g, rtol %.3g)", i,
                    c.out[i], c.ref64[i], atol, rtol);
      why = buf;
      return false;
    }
  return true;
}

bool accept(PeerOracle o, const Compared& c, std::string& why) {
  switch (o) {
    case PeerOracle::vllm:
      return accept_vllm(c, why);
    case PeerOracle::flashattn:
      return accept_flashattn(c, why);
    case PeerOracle::pytorch:
      return accept_pytorch(c, why);
  }
  return false;
}

ac_dtype pick_dtype(Rng& r, const Style& st, const Subject& s, bool* ok) {
  std::vector<ac_dtype> have;
  for (ac_dtype d : st.dtypes)
    if (s.has_dtype(d)) have.push_back(d);
  *ok = !have.empty();
  return have.empty() ? AC_DTYPE_F16 : have[size_t(uniform(r, 0, int(have.size()) - 1))];
}
int pick_head_size(Rng& r, const Subject& s) {
  std::vector<int> have;
  for (int d : {64, 128, 32, 16, 8})
    if (s.supports_head_size(d)) have.push_back(d);
  return have.empty() ? 0 : have[size_t(uniform(r, 0, std::min(1, int(have.size()) - 1)))];
}

// ---- merge -------------------------------------------------------------------------------
bool merge_case(Rng& r, PeerOracle o, const Style& st, Subject& s, Compared& c) {
  bool ok;
  MergeInput in;
  in.dtype = pick_dtype(r, st, s, &ok);
  in.head_size = pick_head_size(r, s);
  if (!ok || !in.head_size) return false;
  in.num_tokens = uniform(r, 1, 8);
  in.num_heads = uniform(r, 1, 4);
  const size_t rows = size_t(in.num_tokens) * size_t(in.num_heads), n = rows * size_t(in.head_size);
  in.prefix_out = randn_bits(r, in.dtype, n);
  in.suffix_out = randn_bits(r, in.dtype, n);
  for (size_t i = 0; i < rows; ++i) {
    float p = float(normal(r)), q = float(normal(r));
    if (st.inf_lse) {  // vLLM: 10% +inf on each side, never both
      const bool pin = chance(r, 0.1), sin = !pin && chance(r, 0.1);
      if (pin) p = INFINITY;
      if (sin) q = INFINITY;
    }
    in.prefix_lse.push_back(p);
    in.suffix_lse.push_back(q);
  }
  const MergeOutput out = s.merge(in);
  const bool base2 = s.caps().lse_base == 2;
  c.dtype = in.dtype;
  for (size_t row = 0; row < rows; ++row) {
    // vLLM's torch reference: +inf read as -inf, scales in fp32, output rounded to the dtype.
    auto fix = [](double x) { return x == kInf ? -kInf : x; };
    const double pl = fix(in.prefix_lse[row]), sl = fix(in.suffix_lse[row]);
    const double m = std::max(pl, sl);
    auto ex = [&](double x) { return base2 ? std::exp2(x) : std::exp(x); };
    auto lg = [&](double x) { return base2 ? std::log2(x) : std::log(x); };
    const double pe = ex(pl - m), se = ex(sl - m), sum = pe + se;
    const float pef = float(base2 ? std::exp2(float(pl - m)) : std::exp(float(float(pl) - float(m))));
    const float sef = float(base2 ? std::exp2(float(sl - m)) : std::exp(float(float(sl) - float(m))));
    const float sumf = pef + sef;
    for (int e = 0; e < in.head_size; ++e) {
      const size_t i = row * size_t(in.head_size) + size_t(e);
      const double p = from_bits(in.dtype, in.prefix_out[i]), q = from_bits(in.dtype, in.suffix_out[i]);
      c.out.push_back(from_bits(in.dtype, out.out[i]));
      c.ref64.push_back(p * (pe / sum) + q * (se / sum));
      c.lowp.push_back(rd(in.dtype, double(float(p) * (pef / sumf) + float(q) * (sef / sumf))));
    }
    if (st.compare_lse) {
      c.out_lse.push_back(out.lse[row]);
      c.lse64.push_back(lg(sum) + m);
      c.lse_lowp.push_back(double(float(lg(double(sumf))) + float(m)));
    }
  }
  (void)o;
  return true;
}

// ---- softmax -----------------------------------------------------------------------------
bool softmax_case(Rng& r, const Style& st, Subject& s, Compared& c) {
  bool ok;
  SoftmaxInput in;
  in.dtype = pick_dtype(r, st, s, &ok);
  if (!ok) return false;
  in.rows = uniform(r, 1, 4);
  in.cols = uniform(r, 1, 300);
  in.x = randn_bits(r, in.dtype, size_t(in.rows) * size_t(in.cols));
  const SoftmaxOutput out = s.softmax(in);
  c.dtype = in.dtype;
  for (int row = 0; row < in.rows; ++row) {
    std::vector<double> x(size_t(in.cols));
    double m = -kInf;
    for (int j = 0; j < in.cols; ++j)
      m = std::max(m, x[size_t(j)] = from_bits(in.dtype, in.x[size_t(row * in.cols + j)]));
    double sum = 0;
    float sumf = 0;
    for (double v : x) {
      sum += std::exp(v - m);
      sumf += std::exp(float(v) - float(m));
    }
    for (int j = 0; j < in.cols; ++j) {
      c.out.push_back(from_bits(in.dtype, out.y[size_t(row * in.cols + j)]));
      c.ref64.push_back(std::exp(x[size_t(j)] - m) / sum);
      c.lowp.push_back(rd(in.dtype, double(std::exp(float(x[size_t(j)]) - float(m)) / sumf)));
    }
  }
  return true;
}

// ---- attention and split-KV --------------------------------------------------------------
bool attention_case(Rng& r, const Style& st, Subject& s, bool splitkv, Compared& c) {
  bool ok;
  AttentionInput in;
  in.dtype = pick_dtype(r, st, s, &ok);
  in.head_size = pick_head_size(r, s);
  if (!ok || !in.head_size) return false;
  const ac_caps& caps = s.caps();
  const int d = in.head_size;
  in.num_heads = 1 << uniform(r, 0, 2);
  in.num_kv_heads = (caps.features & AC_FEAT_GQA) ? in.num_heads >> uniform(r, 0, 2) : in.num_heads;
  in.num_kv_heads = std::max(1, in.num_kv_heads);
  in.causal = (caps.features & AC_FEAT_CAUSAL) && chance(r, 0.5);
  int tq, tk;
  if (st.tq_above_tk && in.causal && chance(r, 0.3)) {  // FlashAttention's (512, 256)-style shapes
    tk = uniform(r, 1, 24);
    tq = tk + uniform(r, 1, 8);
  } else {
    tk = uniform(r, 1, 200);
    tq = uniform(r, 1, std::min(tk, 16));
  }
  in.seqlens_q = {tq};
  in.seqlens_k = {tk};
  in.softmax_scale = float(1.0 / std::sqrt(double(d)));
  const int h = in.num_heads, hkv = in.num_kv_heads, group = h / hkv;
  in.q = randn_bits(r, in.dtype, size_t(tq) * size_t(h) * size_t(d));
  in.k = randn_bits(r, in.dtype, size_t(tk) * size_t(hkv) * size_t(d));
  in.v = randn_bits(r, in.dtype, size_t(tk) * size_t(hkv) * size_t(d));
  AttentionOptions opt;
  if (splitkv)
    opt.num_splits = detail::draw_num_splits(caps, st.splits, [&](int n) { return uniform(r, 0, n - 1); });
  const AttentionOutput out = s.attention(in, opt);
  c.dtype = in.dtype;
  c.attention = true;
  const double scale = double(in.softmax_scale);
  auto at = [&](const Bits& b, int row, int heads, int head, int e) {
    return from_bits(in.dtype, b[(size_t(row) * size_t(heads) + size_t(head)) * size_t(d) + size_t(e)]);
  };
  for (int t = 0; t < tq; ++t)
    for (int head = 0; head < h; ++head) {
      const int kvh = head / group;
      std::vector<double> s64(size_t(tk), -kInf), slow(size_t(tk), -kInf);
      double m64 = -kInf, mlow = -kInf;
      for (int j = 0; j < tk; ++j) {
        if (in.causal && j > t + tk - tq) continue;
        double dot = 0;
        float dotf = 0;
        for (int e = 0; e < d; ++e) {
          const double qv = at(in.q, t, h, head, e), kv = at(in.k, j, hkv, kvh, e);
          dot += qv * kv;
          dotf += float(rd(in.dtype, qv * scale)) * float(kv);  // FA's ref scales q first, in the dtype
        }
        s64[size_t(j)] = dot * scale;
        slow[size_t(j)] = rd(in.dtype, double(dotf));  // S materialised in the dtype
        m64 = std::max(m64, s64[size_t(j)]);
        mlow = std::max(mlow, slow[size_t(j)]);
      }
      double l64 = 0;
      float llow = 0;
      for (int j = 0; j < tk; ++j) {
        if (m64 != -kInf) l64 += std::exp(s64[size_t(j)] - m64);
        if (mlow != -kInf) llow += std::exp(float(slow[size_t(j)]) - float(mlow));
      }
      for (int e = 0; e < d; ++e) {
        double o64 = 0;
        float olow = 0;
        for (int j = 0; j < tk; ++j) {
          if (s64[size_t(j)] == -kInf) continue;  // masked: weight 0 (an empty row stays 0)
          const double v = at(in.v, j, hkv, kvh, e);
          o64 += std::exp(s64[size_t(j)] - m64) / l64 * v;
          const double p = rd(in.dtype, double(std::exp(float(slow[size_t(j)]) - float(mlow)) / llow));
          olow += float(p) * float(v);
        }
        c.out.push_back(
            from_bits(in.dtype, out.out[(size_t(t) * size_t(h) + size_t(head)) * size_t(d) + size_t(e)]));
        c.ref64.push_back(o64);
        c.lowp.push_back(rd(in.dtype, double(olow)));
      }
    }
  return true;
}

}  // namespace

const char* peer_oracle_name(PeerOracle o) {
  switch (o) {
    case PeerOracle::vllm:
      return "vllm";
    case PeerOracle::flashattn:
      return "flashattn";
    case PeerOracle::pytorch:
      return "pytorch";
  }
  return "?";
}

std::optional<PeerOracle> parse_peer_oracle(const std::string& s) {
  for (PeerOracle o : all_peer_oracles())
    if (s == peer_oracle_name(o)) return o;
  return std::nullopt;
}

const std::vector<PeerOracle>& all_peer_oracles() {
  static const std::vector<PeerOracle> all = {PeerOracle::vllm, PeerOracle::flashattn, PeerOracle::pytorch};
  return all;
}

PeerResult run_peer_oracle(PeerOracle o, Subject& s, uint64_t seed, int num_cases) {
  PeerResult res;
  res.oracle = peer_oracle_name(o);
  res.subject = s.name();
  const Style st = style_of(o);
  uint32_t op = 0;
  for (uint32_t candidate :
       {uint32_t(AC_OP_MERGE), uint32_t(AC_OP_SOFTMAX), uint32_t(AC_OP_SPLITKV), uint32_t(AC_OP_ATTENTION)})
    if (!op && s.has_op(candidate)) op = candidate;
  if (!op) {
    res.applicable = false;
    return res;
  }
  // One stream per (oracle, operation), the same for a mutant and its correct twin (peer_seed).
  Rng rng(peer_seed(seed, uint64_t(o), op));
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  bool any = false;
  for (int i = 0; i < num_cases; ++i) {
    Compared c;
    std::string why;
    bool ran = false;
    try {
      if (op == AC_OP_MERGE)
        ran = merge_case(rng, o, st, s, c);
      else if (op == AC_OP_SOFTMAX)
        ran = softmax_case(rng, st, s, c);
      else
        ran = attention_case(rng, st, s, op == AC_OP_SPLITKV, c);
    } catch (const SubjectError& e) {
      if (e.kind == SubjectError::Kind::unsupported) continue;
      ran = true;
      why = std::string("subject failed: ") + e.what();
      c.out = {NAN};
    }
    if (!ran) break;  // no dtype / head size of this style: not applicable
    any = true;
    ++res.cases_run;
    if (why.empty() && accept(o, c, why)) continue;
    res.killed = true;
    res.cases_to_first_failure = res.cases_run;
    res.seconds_to_first_failure = elapsed();
    res.message = why;
    break;
  }
  res.applicable = any;
  res.seconds = elapsed();
  return res;
}

}  // namespace attncheck
