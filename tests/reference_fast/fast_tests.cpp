// The certified fast path (reference/fast.hpp) against the exact MPFR reference.
//
// What is checked, and where the expected values come from:
//   - round_double_to_format equals round_to_format (the exact reference's MPFR rounding) on
//     random doubles, every fp16 midpoint and its neighbours, and the format edges;
//   - the interval decisions on hand-derived cases (a midpoint inside the interval is undecided;
//     ulps of a known binade; the classes of infinite outputs);
//   - glibc's exp and log meet the error the analysis assumes (<= 4 ulp), sampled against MPFR;
//   - a property over random and adversarial problems (late outliers, cancelling values, fully
//     masked rows, huge and tiny logits, non-finite inputs, GQA / causal / mask / key lengths):
//     every bound contains the MPFR value, the fast path's rounded O and LSE equal
//     round_to_format of exact_attention bit for bit in fp16, bf16 and fp32, and its ulp errors of
//     perturbed outputs equal ulp_error against the exact row (class, and ulps within 1/100);
//   - rows built to land within a hair of (or exactly on) an fp16 rounding boundary: the fast
//     path cannot decide them, escalates, and still equals the exact path;
//   - the variants (softcap saturating on huge logits, windows emptying rows, sinks above every
//     score, dv != d, with GQA and causal): the same checks, and few escalations on ordinary data.
// Inputs are rounded to their storage format by the exact reference's round_to_format.
#include <rapidcheck.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>

#include "../support/rc_check.hpp"
#include "attncheck/reference/fast.hpp"
#include "attncheck/reference/reference.hpp"

using namespace attncheck::ref;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

template <class Testable>
void check_property(const std::string& what, Testable&& t, int max_success) {
  attncheck::test::check_property_under(what, std::forward<Testable>(t), {max_success, 60, 20240707});
}

const Format kFormats[] = {Format::fp16, Format::bf16, Format::fp32};

// Adversarial classes of attention inputs, one generator parameter each.
enum class Kind { random, late_outlier, cancelling, masked_rows, huge_logits, tiny_logits, nonfinite, count };
// Fails inside a RapidCheck property and inside a plain Catch case alike (an exception fails both).
#define FAST_EXPECT(cond, msg)             \
  do {                                     \
    if (!(cond)) {                         \
      std::ostringstream os_;              \
      os_ << #cond << " failed: " << msg;  \
      throw std::runtime_error(os_.str()); \
    }                                      \
  } while (0)

// The stored value `steps` magnitudes away from b (same sign), clamped to the finite range.
uint32_t step_bits(Format f, uint32_t b, int steps) {
  const bool wide = spec(f).storage_bits == 32;
  const uint32_t sign = wide ? 0x80000000u : 0x8000u;
  const int64_t max_finite = wide ? 0x7f7fffff : (f == Format::fp16 ? 0x7bff : 0x7f7f);
  const int64_t mag = std::clamp<int64_t>(int64_t{b & ~sign} + steps, 0, max_finite);
  return (b & sign) | static_cast<uint32_t>(mag);
}

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::random:
      return "random";
    case Kind::late_outlier:
      return "late_outlier";
    case Kind::cancelling:
      return "cancelling";
    case Kind::masked_rows:
      return "masked_rows";
    case Kind::huge_logits:
      return "huge_logits";
    case Kind::tiny_logits:
      return "tiny_logits";
    case Kind::nonfinite:
      return "nonfinite";
    default:
      return "?";
  }
}

// Sinks drawn per query head: none, N(0, 2), above every score (20 + |N(0, 1)|), or so far above
// that every key's weight underflows in double (2000 + |N(0, 1)|).
enum class SinkKind { none, ordinary, large, huge, count };

const char* sink_name(SinkKind k) {
  switch (k) {
    case SinkKind::none:
      return "none";
    case SinkKind::ordinary:
      return "ordinary";
    case SinkKind::large:
      return "large";
    case SinkKind::huge:
      return "huge";
    default:
      return "?";
  }
}

struct Shape {
  Format dtype = Format::fp16;
  int32_t kv_heads = 1, group = 1, d = 4;
  std::vector<int32_t> sq, sk;
  bool causal = false, masked = false;
  Kind kind = Kind::random;
  uint64_t seed = 1;
  // The variants (AttentionProblem): defaults give the plain problem.
  int32_t dv = 0;  // head_size_v
  float softcap = 0.0f;
  int32_t window_left = -1, window_right = -1;
  SinkKind sinks = SinkKind::none;
};

int32_t value_size(const AttentionProblem& pb) { return pb.head_size_v > 0 ? pb.head_size_v : pb.head_size; }

uint32_t store(Format f, double x) { return round_to_format(f, x); }

AttentionProblem build(const Shape& s) {
  std::mt19937_64 rng(s.seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  AttentionProblem pb;
  pb.dtype = s.dtype;
  pb.num_kv_heads = s.kv_heads;
  pb.num_heads = s.kv_heads * s.group;
  pb.head_size = s.d;
  pb.seqlens_q = s.sq;
  pb.seqlens_k = s.sk;
  pb.causal = s.causal;
  pb.head_size_v = s.dv;
  pb.softcap = s.softcap;
  pb.window_left = s.window_left;
  pb.window_right = s.window_right;
  const int32_t dv = value_size(pb);
  int64_t tq = 0, tk = 0, tmask = 0;
  for (size_t i = 0; i < s.sq.size(); ++i) {
    tq += s.sq[i];
    tk += s.sk[i];
    tmask += int64_t{s.sq[i]} * s.sk[i];
  }
  double q_mag = 1.0;
  pb.softmax_scale = static_cast<float>(1.0 / std::sqrt(double(s.d)));
  if (s.kind == Kind::huge_logits) {
    q_mag = 40.0;
    pb.softmax_scale = 1.0f;
  }
  if (s.kind == Kind::tiny_logits) {
    q_mag = 1e-3;
    pb.softmax_scale = 0.0625f;
  }
  for (int64_t i = 0; i < tq * pb.num_heads * s.d; ++i) pb.q.push_back(store(s.dtype, q_mag * normal(rng)));
  // K and V drawn alternately (the same stream as before V had its own head size).
  const int64_t nk = tk * s.kv_heads * s.d, nv = tk * s.kv_heads * dv;
  for (int64_t i = 0; i < std::max(nk, nv); ++i) {
    if (i < nk) pb.k.push_back(store(s.dtype, normal(rng)));
    if (i < nv) pb.v.push_back(store(s.dtype, normal(rng)));
  }
  const size_t kv_row = static_cast<size_t>(s.kv_heads * s.d), v_row = static_cast<size_t>(s.kv_heads * dv);
  if (s.kind == Kind::late_outlier) {  // the last key of each sequence dominates late
    int64_t k0 = 0;
    for (size_t i = 0; i < s.sk.size(); ++i) {
      k0 += s.sk[i];
      if (s.sk[i] == 0) continue;
      for (size_t e = 0; e < kv_row; ++e) {
        const size_t at = static_cast<size_t>(k0 - 1) * kv_row + e;
        pb.k[at] = store(s.dtype, 12.0 * decode(s.dtype, pb.k[at]));
      }
    }
  }
  if (s.kind == Kind::cancelling) {  // values in +- pairs, equal keys: sums cancel (often exactly)
    for (int64_t j = 1; j < tk; j += 2) {
      for (size_t e = 0; e < v_row; ++e) {
        const size_t a = static_cast<size_t>(j) * v_row + e, b = a - v_row;
        pb.v[a] = store(s.dtype, -decode(s.dtype, pb.v[b]));
      }
      for (size_t e = 0; e < kv_row && j % 4 == 1; ++e) {
        const size_t a = static_cast<size_t>(j) * kv_row + e, b = a - kv_row;
        pb.k[a] = pb.k[b];
      }
    }
  }
  if (s.masked || s.kind == Kind::masked_rows) {
    std::bernoulli_distribution keep(s.kind == Kind::masked_rows ? 0.5 : 0.8);
    for (int64_t i = 0; i < tmask; ++i) pb.mask.push_back(keep(rng) ? 1 : 0);
    if (s.kind == Kind::masked_rows) {  // whole rows masked
      int64_t m0 = 0;
      for (size_t i = 0; i < s.sq.size(); ++i) {
        for (int32_t t = 0; t < s.sq[i]; t += 2)
          for (int32_t j = 0; j < s.sk[i]; ++j)
            pb.mask[static_cast<size_t>(m0 + int64_t{t} * s.sk[i] + j)] = 0;
        m0 += int64_t{s.sq[i]} * s.sk[i];
      }
    }
  }
  if (s.kind == Kind::nonfinite && tk > 0) {
    std::uniform_int_distribution<int64_t> pick(0, tk * static_cast<int64_t>(kv_row) - 1);
    std::uniform_int_distribution<int64_t> pick_v(0, tk * static_cast<int64_t>(v_row) - 1);
    const double specials[] = {kInf, -kInf, std::numeric_limits<double>::quiet_NaN()};
    pb.v[static_cast<size_t>(pick_v(rng))] = store(s.dtype, specials[s.seed % 3]);
    pb.k[static_cast<size_t>(pick(rng))] = store(s.dtype, specials[(s.seed / 3) % 3]);
  }
  if (s.sinks != SinkKind::none)
    for (int32_t i = 0; i < pb.num_heads; ++i) {
      const double z = normal(rng);
      pb.sinks.push_back(static_cast<float>(s.sinks == SinkKind::ordinary ? 2 * z
                                            : s.sinks == SinkKind::large  ? 20 + std::fabs(z)
                                                                          : 2000 + std::fabs(z)));
    }
  return pb;
}

rc::Gen<Shape> gen_shape() {
  return rc::gen::exec([] {
    Shape s;
    s.dtype = kFormats[*rc::gen::inRange(0, 3)];
    s.kv_heads = *rc::gen::inRange(1, 3);
    s.group = *rc::gen::element(1, 2, 4);
    s.d = *rc::gen::element(1, 3, 8, 16);
    const int seqs = *rc::gen::inRange(1, 3);
    for (int i = 0; i < seqs; ++i) {
      s.sq.push_back(*rc::gen::inRange(0, 13));
      s.sk.push_back(*rc::gen::inRange(0, 40));
    }
    s.causal = *rc::gen::arbitrary<bool>();
    s.masked = *rc::gen::inRange(0, 4) == 0;
    s.kind = static_cast<Kind>(*rc::gen::inRange(0, static_cast<int>(Kind::count)));
    s.seed = *rc::gen::inRange<uint64_t>(1, 1u << 30);
    return s;
  });
}

// The plain shapes plus the variants: dv != d, softcap (small caps saturate on huge logits),
// windows (with Tq > Tk and masks they empty rows), sinks of every kind.
rc::Gen<Shape> gen_variant_shape() {
  return rc::gen::exec([] {
    Shape s = *gen_shape();
    s.dv = *rc::gen::element(0, 0, 1, 5, 24);
    s.softcap = *rc::gen::element(0.0f, 0.0f, 0.5f, 5.0f, 30.0f);
    s.window_left = *rc::gen::element(-1, -1, 0, 1, 4);
    s.window_right = *rc::gen::element(-1, -1, 0, 2);
    s.sinks = static_cast<SinkKind>(*rc::gen::inRange(0, static_cast<int>(SinkKind::count)));
    return s;
  });
}

std::string describe(const Shape& s) {
  std::ostringstream os;
  os << spec(s.dtype).name << " kv_heads=" << s.kv_heads << " group=" << s.group << " d=" << s.d
     << " causal=" << s.causal << " masked=" << s.masked << " kind=" << kind_name(s.kind)
     << " seed=" << s.seed << " seqs=";
  for (size_t i = 0; i < s.sq.size(); ++i) os << s.sq[i] << "x" << s.sk[i] << " ";
  os << "dv=" << s.dv << " softcap=" << s.softcap << " window=" << s.window_left << "/" << s.window_right
     << " sinks=" << sink_name(s.sinks);
  return os.str();
}

int64_t total(const std::vector<int32_t>& v) {
  int64_t t = 0;
  for (int32_t x : v) t += x;
  return t;
}

// Totals over every problem checked (rows, and rows escalated for fp16 O), reported by the property.
int64_t g_rows = 0, g_escalated = 0;

// Every check of the fast path against the exact one, on one problem. Returns the escalated rows
// of the fp16 O rounding.
int64_t check_problem(const AttentionProblem& pb, LseBase base, const std::string& what) {
  const std::vector<ExactRow> exact = exact_attention(pb, base);
  const int64_t rows = total(pb.seqlens_q) * pb.num_heads;
  const int d = value_size(pb);  // O's head size
  FastOptions opt;
  opt.threads = 2;
  opt.base = base;
  opt.query_block = 5;  // several blocks even in small problems
  FastAttentionReference fast(pb, opt);

  // 1. Bounds contain the MPFR value.
  std::vector<FastRow> fr(static_cast<size_t>(rows));
  fast.for_each_row(
      [&](int64_t t, int32_t h, const FastRow& r) { fr[static_cast<size_t>(t * pb.num_heads + h)] = r; });
  for (int64_t i = 0; i < rows; ++i) {
    const ExactRow& ex = exact[static_cast<size_t>(i)];
    const FastRow& f = fr[static_cast<size_t>(i)];
    if (!f.certified) continue;  // the fast path claims nothing (a -inf score may even empty the row)
    FAST_EXPECT(f.empty == ex.empty, what << " row " << i);
    if (f.empty) {  // LSE -inf, or the sink (exact in base e, bounded in base two)
      if (pb.sinks.empty())
        FAST_EXPECT(isinf(ex.lse), what << " row " << i);
      else
        FAST_EXPECT(abs(Real(f.lse) - ex.lse) <= Real(f.lse_bound), what << " empty row " << i);
      continue;
    }
    for (int c = 0; c < d; ++c)
      FAST_EXPECT(abs(Real(f.o[c]) - ex.o[c]) <= Real(f.o_bound[c]),
                  what << " row " << i << " c " << c << ": o " << to_hexfloat(f.o[c]) << " bound "
                       << f.o_bound[c] << " exact " << to_decimal(ex.o[c], 25));
    FAST_EXPECT(abs(Real(f.lse) - ex.lse) <= Real(f.lse_bound),
                what << " row " << i << ": lse " << to_hexfloat(f.lse) << " bound " << f.lse_bound
                     << " exact " << to_decimal(ex.lse, 25));
  }

  // 1b. The single-row entry (its slice cache switching between heads and sequences) is bounded too.
  for (int64_t i = 0; i < rows; i += 3) {
    const ExactRow& ex = exact[static_cast<size_t>(i)];
    const FastRow f = fast.row(i / pb.num_heads, static_cast<int32_t>(i % pb.num_heads));
    if (!f.certified) continue;
    FAST_EXPECT(f.empty == ex.empty, what << " row() " << i);
    if (f.empty) continue;
    for (int c = 0; c < d; ++c)
      FAST_EXPECT(abs(Real(f.o[c]) - ex.o[c]) <= Real(f.o_bound[c]), what << " row() " << i << " c " << c);
    FAST_EXPECT(abs(Real(f.lse) - ex.lse) <= Real(f.lse_bound), what << " row() " << i);
  }

  // 1c. A shuffled subset (every other row, one of them twice) through for_rows.
  {
    std::vector<FastAttentionReference::RowId> ids;
    for (int64_t i = rows - 1; i >= 0; i -= 2)
      ids.push_back({i / pb.num_heads, static_cast<int32_t>(i % pb.num_heads)});
    if (!ids.empty()) ids.push_back(ids.front());
    std::mt19937_64 shuffle_rng(static_cast<uint64_t>(rows));
    std::shuffle(ids.begin(), ids.end(), shuffle_rng);
    std::vector<int> visits(static_cast<size_t>(rows), 0);
    std::vector<FastRow> got(static_cast<size_t>(rows));
    std::mutex m;
    fast.for_rows(ids, [&](int64_t t, int32_t h, const FastRow& r) {
      std::lock_guard<std::mutex> lock(m);
      const size_t i = static_cast<size_t>(t * pb.num_heads + h);
      ++visits[i];
      got[i] = r;
    });
    for (int64_t i = 0; i < rows; ++i) {
      const int want = (rows - 1 - i) % 2 == 0 ? 1 + (i == rows - 1 ? 1 : 0) : 0;
      FAST_EXPECT(visits[static_cast<size_t>(i)] == want, what << " for_rows visits of row " << i);
      const FastRow& f = got[static_cast<size_t>(i)];
      const ExactRow& ex = exact[static_cast<size_t>(i)];
      if (!want || !f.certified) continue;
      FAST_EXPECT(f.empty == ex.empty, what << " for_rows " << i);
      if (f.empty) continue;
      for (int c = 0; c < d; ++c)
        FAST_EXPECT(abs(Real(f.o[c]) - ex.o[c]) <= Real(f.o_bound[c]),
                    what << " for_rows " << i << " c " << c);
      FAST_EXPECT(abs(Real(f.lse) - ex.lse) <= Real(f.lse_bound), what << " for_rows " << i);
    }
  }

  // 2. Rounded values bit for bit, every output format.
  int64_t escalated_fp16 = 0;
  for (Format of : kFormats) {
    fast.reset_stats();
    const RoundedAttention r = fast.rounded(of, Format::fp32);
    if (of == Format::fp16) {
      escalated_fp16 = fast.stats().rows_escalated;
      g_rows += rows;
      g_escalated += escalated_fp16;
    }
    FAST_EXPECT(fast.stats().rows == rows, what);
    for (int64_t i = 0; i < rows; ++i) {
      const ExactRow& ex = exact[static_cast<size_t>(i)];
      for (int c = 0; c < d; ++c)
        FAST_EXPECT(r.o[static_cast<size_t>(i * d + c)] == round_to_format(of, ex.o[c]),
                    what << " " << spec(of).name << " row " << i << " c " << c << " fast "
                         << to_hexfloat(of, r.o[static_cast<size_t>(i * d + c)]) << " exact "
                         << to_decimal(ex.o[c], 25));
      FAST_EXPECT(r.lse[static_cast<size_t>(i)] == round_to_format(Format::fp32, ex.lse),
                  what << " LSE row " << i);
    }
  }
  const RoundedAttention lse_bf16 = fast.rounded(Format::fp32, Format::bf16);
  for (int64_t i = 0; i < rows; ++i)
    FAST_EXPECT(lse_bf16.lse[static_cast<size_t>(i)] ==
                    round_to_format(Format::bf16, exact[static_cast<size_t>(i)].lse),
                what << " bf16 LSE row " << i);

  // 3. ulp errors of outputs a few ulps off the correct rounding, plus infinities and NaN.
  std::mt19937_64 rng(static_cast<uint64_t>(rows * 7919 + d));
  const Format of = pb.dtype;
  std::vector<uint32_t> y(static_cast<size_t>(rows * d));
  std::vector<double> ylse(static_cast<size_t>(rows));
  const int offsets[] = {0, 0, 1, -1, 2, -3, 40};
  for (int64_t i = 0; i < rows; ++i) {
    const ExactRow& ex = exact[static_cast<size_t>(i)];
    for (int c = 0; c < d; ++c) {
      uint32_t b = round_to_format(of, ex.o[c]);
      const uint64_t pick = rng() % 16;
      if (pick < 7 && !is_nan_bits(of, b) && !is_inf_bits(of, b))
        b = step_bits(of, b, offsets[pick]);
      else if (pick == 14)
        b = round_to_format(of, kInf);
      else if (pick == 15)
        b = round_to_format(of, std::numeric_limits<double>::quiet_NaN());
      y[static_cast<size_t>(i * d + c)] = b;
    }
    const double l = ex.lse.convert_to<double>();
    const uint64_t pick = rng() % 8;
    ylse[static_cast<size_t>(i)] = pick == 0   ? -kInf
                                   : pick == 1 ? std::nextafter(static_cast<float>(l), 1e30f)
                                               : static_cast<float>(l);
  }
  const AttentionUlpErrors ue = fast.ulp_errors(of, y, Format::fp32, ylse);
  auto same = [](const UlpError& a, const UlpError& b) {
    if (a.cls != b.cls) return false;
    if (std::isinf(b.ulps) || std::isinf(a.ulps)) return a.ulps == b.ulps;
    return std::fabs(a.ulps - b.ulps) <= 0.01;
  };
  for (int64_t i = 0; i < rows; ++i) {
    const ExactRow& ex = exact[static_cast<size_t>(i)];
    for (int c = 0; c < d; ++c) {
      const size_t at = static_cast<size_t>(i * d + c);
      const UlpError want = ulp_error(of, y[at], ex.o[c]);
      FAST_EXPECT(same(ue.o[at], want), what << " O row " << i << " c " << c << " want "
                                             << error_class_name(want.cls) << " " << want.ulps << " got "
                                             << error_class_name(ue.o[at].cls) << " " << ue.o[at].ulps);
    }
    const UlpError want = ulp_error_value(Format::fp32, ylse[static_cast<size_t>(i)], ex.lse);
    FAST_EXPECT(same(ue.lse[static_cast<size_t>(i)], want), what << " LSE row " << i);
  }
  return escalated_fp16;
}

// fp16 problem of one query and two keys whose output lands within |v1 - v2| delta / 4 of the
// midpoint of two adjacent fp16 values (delta the score difference; 0: exactly on the midpoint,
// which rounds to even). The query's last component is the minimum subnormal 2^-24 and the keys
// differ there by `key_step` fp16 ulps of 2^-14 (2^-24 each), so delta = scale 2^-48 key_step.
AttentionProblem near_tie(int key_step, double v1, int d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  AttentionProblem pb;
  pb.dtype = Format::fp16;
  pb.num_heads = pb.num_kv_heads = 1;
  pb.head_size = d;
  pb.seqlens_q = {1};
  pb.seqlens_k = {2};
  pb.causal = false;
  pb.softmax_scale = 1.0f;
  for (int c = 0; c < d - 1; ++c) pb.q.push_back(store(Format::fp16, normal(rng)));
  pb.q.push_back(store(Format::fp16, 0x1p-24));
  std::vector<uint32_t> k1, k2;
  for (int c = 0; c < d - 1; ++c) k1.push_back(store(Format::fp16, normal(rng)));
  k2 = k1;
  k1.push_back(store(Format::fp16, 0x1p-14));
  k2.push_back(store(Format::fp16, 0x1p-14 + key_step * 0x1p-24));
  pb.k = k1;
  pb.k.insert(pb.k.end(), k2.begin(), k2.end());
  // v1 and its fp16 successor in every component (scaled per component so they differ).
  std::vector<uint32_t> va, vb;
  for (int c = 0; c < d; ++c) {
    const uint32_t a = store(Format::fp16, v1 * (1 + c / 8.0));
    va.push_back(a);
    vb.push_back(a + 1);  // the next fp16 magnitude (v1 > 0)
  }
  pb.v = va;
  pb.v.insert(pb.v.end(), vb.begin(), vb.end());
  return pb;
}

}  // namespace

TEST_CASE("round_double_to_format equals the exact reference's rounding", "[fast][rounding]") {
  std::mt19937_64 rng(42);
  for (Format f : kFormats) {
    // Random bit patterns of doubles in and around every format's range.
    std::uniform_int_distribution<int> ex(-160, 140);
    std::uniform_int_distribution<uint64_t> mant(0, (uint64_t{1} << 52) - 1);
    for (int i = 0; i < 200000; ++i) {
      const double x =
          std::ldexp(1.0 + std::ldexp(static_cast<double>(mant(rng)), -52), ex(rng)) * (i % 2 ? -1 : 1);
      REQUIRE(round_double_to_format(f, x) == round_to_format(f, x));
    }
    for (double x : {0.0,
                     -0.0,
                     kInf,
                     -kInf,
                     65504.0,
                     65520.0,
                     65519.99999999999,
                     0x1p-24,
                     0x1p-25,
                     0x1.000001p-25,
                     1 + 0x1p-11 + 0x1p-40,
                     0x1p-149,
                     0x1p-150,
                     0x1.0000000000001p-150,
                     0x1p-133,
                     0x1p-134,
                     0x1.fep127,
                     0x1.ffp127,
                     0x1.fffffep127,
                     0x1.ffffffp127,
                     0x1p-1074,
                     1e308})
      REQUIRE(round_double_to_format(f, x) == round_to_format(f, x));
  }
  // Every fp16 midpoint (ties to even) and one double ulp either side of it.
  for (uint32_t b = 0; b < 0x7bff; ++b) {
    const double mid = (decode(Format::fp16, b) + decode(Format::fp16, b + 1)) / 2;  // exact in double
    for (double x : {mid, std::nextafter(mid, 0.0), std::nextafter(mid, kInf)}) {
      REQUIRE(round_double_to_format(Format::fp16, x) == round_to_format(Format::fp16, x));
      REQUIRE(round_double_to_format(Format::fp16, -x) == round_to_format(Format::fp16, -x));
    }
  }
  REQUIRE(std::isnan(decode(Format::fp16, round_double_to_format(Format::fp16, std::nan("")))));
}

TEST_CASE("interval decisions on hand-derived cases", "[fast][certify]") {
  // fp16 around 1: ulp 2^-10, the midpoint between 1 and 1 + 2^-10 is 1 + 2^-11.
  const double mid = 1 + 0x1p-11;
  CHECK_FALSE(certain_rounding(Format::fp16, mid, 0x1p-40).has_value());  // contains the tie
  CHECK_FALSE(certain_rounding(Format::fp16, mid - 0x1p-30, 0x1p-29).has_value());
  CHECK(certain_rounding(Format::fp16, mid - 0x1p-30, 0x1p-31) ==
        std::optional<uint32_t>(0x3c00));  // below: 1
  CHECK(certain_rounding(Format::fp16, mid + 0x1p-30, 0x1p-31) == std::optional<uint32_t>(0x3c01));  // above
  CHECK(certain_rounding(Format::fp16, mid, 0.0) ==
        std::optional<uint32_t>(0x3c00));                                 // a point: ties to even
  CHECK_FALSE(certain_rounding(Format::fp16, 0.0, 0x1p-60).has_value());  // -0 or +0
  CHECK(certain_rounding(Format::fp16, 0.0, 0.0) == std::optional<uint32_t>(0));
  CHECK_FALSE(certain_rounding(Format::fp16, 65520.0, 1e-9).has_value());  // the overflow threshold
  CHECK(certain_rounding(Format::fp16, 65530.0, 1.0) == std::optional<uint32_t>(0x7c00));

  // ulps of output 1 + 2^-10 against x in 1 + 2^-11 +- 2^-40: 0.5 ulp to within 2^-30 ulp.
  auto u = certain_ulp_error(Format::fp16, 1 + 0x1p-10, mid, 0x1p-40, 0.01);
  REQUIRE(u.has_value());
  CHECK(u->cls == ErrorClass::finite);
  CHECK(u->ulps == 0.5);
  // Too wide for the resolution: 2^-10 ulp of 2^-10 is 1/1024 ulp... 2^-16 wide is 1/64 ulp > 0.005.
  CHECK_FALSE(certain_ulp_error(Format::fp16, 1.0, mid, 0x1p-16, 0.01).has_value());
  CHECK(certain_ulp_error(Format::fp16, 1.0, mid, 0x1p-20, 0.01).has_value());
  // Straddling the binade at 2: below it the fp16 ulp is 2^-10, above 2^-9.
  CHECK_FALSE(certain_ulp_error(Format::fp16, 2.0, 2.0, 0x1p-30, 0.01).has_value());
  // Infinite outputs: the correct rounding beyond 65520 (0 ulps), nonfinite below it, undecided at it.
  CHECK(certain_ulp_error(Format::fp16, kInf, 70000.0, 1.0, 0.01)->cls == ErrorClass::finite);
  CHECK(certain_ulp_error(Format::fp16, kInf, 60000.0, 1.0, 0.01)->cls == ErrorClass::nonfinite_output);
  CHECK(certain_ulp_error(Format::fp16, -kInf, 70000.0, 1.0, 0.01)->cls == ErrorClass::nonfinite_output);
  CHECK_FALSE(certain_ulp_error(Format::fp16, kInf, 65520.0, 1.0, 0.01).has_value());
  CHECK(certain_ulp_error(Format::fp16, std::nan(""), 1.0, 0.0, 0.01)->cls == ErrorClass::nonfinite_output);
  // Near zero: the ulp is the minimum subnormal on both sides.
  auto z = certain_ulp_error(Format::fp16, 0x1p-23, 0.0, 0x1p-40, 0.01);
  REQUIRE(z.has_value());
  CHECK(z->ulps == 2.0);
}

TEST_CASE("glibc exp and log stay within the error the analysis assumes", "[fast][libm]") {
  // The analysis takes 4 ulp (2^-50 relative); glibc documents 1. Sampled against MPFR.
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> arg(-745.0, 0.0), larg(0.0, 40.0);
  Real worst_exp = 0, worst_log = 0;
  for (int i = 0; i < 20000; ++i) {
    const double a = i < 10000
                         ? arg(rng)
                         : -std::ldexp(1.0, -static_cast<int>(rng() % 60)) * (1 + (rng() % 1000) / 1000.0);
    const double e = std::exp(a);
    if (e < 0x1p-1022) continue;  // subnormal results: covered by the absolute term
    const Real exact = exp(Real(a));
    const Real rel = abs(Real(e) - exact) / exact;
    if (rel > worst_exp) worst_exp = rel;
    const double x = std::exp(larg(rng));  // l in [1, e^40)
    const Real lx = log(Real(x));
    if (lx != 0) {
      const Real r2 = abs(Real(std::log(x)) - lx) / abs(lx);
      if (r2 > worst_log) worst_log = r2;
    }
  }
  INFO("worst exp relative error " << worst_exp.convert_to<double>() << ", log "
                                   << worst_log.convert_to<double>());
  CHECK(worst_exp <= Real(0x1p-52));  // within 1 ulp, 4x inside what the bound assumes
  CHECK(worst_log <= Real(0x1p-52));
}

TEST_CASE("fast path equals the exact reference on random and adversarial problems", "[fast][property]") {
  g_rows = g_escalated = 0;
  check_property(
      "fast == exact",
      [] {
        const Shape s = *rc::gen::resize(100, gen_shape());  // full ranges from the first case (size <= 100)
        const LseBase base = *rc::gen::inRange(0, 4) == 0 ? LseBase::two : LseBase::e;
        check_problem(build(s), base, describe(s));
      },
      60);
  INFO("rows " << g_rows << ", escalated (fp16 O) " << g_escalated);
  CHECK(g_rows > 1000);  // the generator produces real work, not only empty problems
}

TEST_CASE("each adversarial class once at a fixed seed (all shapes features)", "[fast][classes]") {
  for (int k = 0; k < static_cast<int>(Kind::count); ++k) {
    Shape s;
    s.dtype = kFormats[k % 3];
    s.kv_heads = 2;
    s.group = 2;
    s.d = 8;
    s.sq = {7, 0, 12};
    s.sk = {9, 3, 30};
    s.causal = k % 2 == 0;
    s.masked = k % 3 == 0;
    s.kind = static_cast<Kind>(k);
    s.seed = 1000 + k;
    INFO(describe(s));
    check_problem(build(s), LseBase::e, describe(s));
  }
}

TEST_CASE("near-tie rows escalate and still equal the exact reference", "[fast][escalation]") {
  int64_t escalated = 0, cases = 0;
  // key_step 0: O exactly on fp16 midpoints; 1..3: within 2^-48 scale of them (below any fp64
  // bound); 2^20 steps is delta = 2^-28: decidable, so both branches are exercised.
  for (int key_step : {0, 1, 3, 1 << 20})
    for (double v1 : {1.0, 0.3, 1000.0, 0x1p-14 * 1.5})
      for (int d : {1, 4}) {
        const AttentionProblem pb = near_tie(key_step, v1, d, static_cast<uint64_t>(key_step + d));
        const int64_t e = check_problem(pb, LseBase::e, "near tie step " + std::to_string(key_step));
        if (key_step < 4) {
          CHECK(e == 1);  // the single row cannot be decided in fp16
        }
        escalated += e;
        ++cases;
      }
  INFO("escalated " << escalated << " of " << cases);
  CHECK(escalated >= 24);
}

TEST_CASE("exactly cancelling values escalate: the sign of a zero output is not decidable",
          "[fast][escalation]") {
  // Two keys with equal scores and opposite values: O = (v - v) / 2 = 0 exactly, while the fp64
  // bound (relative to sum p |v|) is positive, so the interval holds -0 and +0.
  for (Format f : kFormats) {
    AttentionProblem pb;
    pb.dtype = f;
    pb.num_heads = pb.num_kv_heads = 1;
    pb.head_size = 2;
    pb.seqlens_q = {1};
    pb.seqlens_k = {2};
    pb.causal = false;
    pb.softmax_scale = 0.5f;
    pb.q = {store(f, 0.75), store(f, -1.5)};
    pb.k = {store(f, 1.25), store(f, 2.0), store(f, 1.25), store(f, 2.0)};
    pb.v = {store(f, 3.0), store(f, 0.125), store(f, -3.0), store(f, 0.25)};
    const int64_t escalated = check_problem(pb, LseBase::e, std::string("cancelling ") + spec(f).name);
    CHECK(escalated == 1);
    // Hand derivation: the second element is (0.125 + 0.25) / 2 = 0.1875, the first exactly 0.
    FastAttentionReference fast(pb);
    const RoundedAttention r = fast.rounded(f, Format::fp32);
    CHECK(decode(f, r.o[0]) == 0.0);
    CHECK(decode(f, r.o[1]) == 0.1875);
    CHECK(r.lse[0] == round_to_format(Format::fp32, Real(0.5) * (0.75 * 1.25 - 1.5 * 2.0) + log(Real(2))));
  }
}

TEST_CASE("long rows: chunked sums, several query blocks, two threads, inexact dot products",
          "[fast][long]") {
  // 700 keys: three PV chunks of 256; fp32 and bf16 inputs make the score GEMM round (their
  // quanta are too fine for the exact case), fp16 exercises the exact-score case at length.
  for (Format f : kFormats)
    for (bool causal : {false, true}) {
      Shape s;
      s.dtype = f;
      s.kv_heads = 1;
      s.group = 2;
      s.d = 64;
      s.sq = {24};  // 24 x 2 rows x 700 keys x 64: enough work to run on two threads
      s.sk = {700};
      s.causal = causal;
      s.kind = causal ? Kind::late_outlier : Kind::random;
      s.seed = 77 + static_cast<uint64_t>(f);
      check_problem(build(s), LseBase::e, describe(s));
    }
}

TEST_CASE("dot products that cancel: the score GEMM's rounding is covered by the bound", "[fast][scores]") {
  // fp32 q = (B, t, -B, t, B, t, -B, t) with B = 2^20 and t ~ 2^-20: every partial sum mixes
  // 2^20 with 2^-44-sized bits, so the GEMM rounds (about 2^-33 per step), while the scores end
  // up O(1): only the gamma(d) sum |q_c k_c| term covers that error (u |s| is 2^-53).
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<int> small(-8, 8);
  AttentionProblem pb;
  pb.dtype = Format::fp32;
  pb.num_heads = pb.num_kv_heads = 1;
  pb.head_size = 8;
  pb.seqlens_q = {3};
  pb.seqlens_k = {40};
  pb.causal = false;
  pb.softmax_scale = 1.0f;
  for (int t = 0; t < 3; ++t)
    for (int c = 0; c < 8; ++c)
      pb.q.push_back(store(Format::fp32, c % 2 ? 0x1.3p-20 * (1 + t) : (c % 4 == 0 ? 0x1p20 : -0x1p20)));
  for (int j = 0; j < 40; ++j)
    for (int c = 0; c < 8; ++c) {
      pb.k.push_back(store(Format::fp32, c % 2 ? 0x1.7p0 + small(rng) * 0x1p-20 : 1 + small(rng) * 0x1p-21));
      pb.v.push_back(store(Format::fp32, small(rng) / 4.0));
    }
  check_problem(pb, LseBase::e, "cancelling dot products");
}

TEST_CASE("glibc tanh stays within the error the analysis assumes", "[fast][libm]") {
  // The softcap bound takes tanh as 4 ulp (2^-50 relative); glibc documents 2. Sampled against MPFR
  // over the unsaturated range, near zero, and where it saturates.
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> arg(-20.0, 20.0);
  Real worst = 0;
  for (int i = 0; i < 30000; ++i) {
    const double x = i % 3 == 0   ? arg(rng)
                     : i % 3 == 1 ? std::ldexp(1.0 + (rng() % 1000) / 1000.0, -static_cast<int>(rng() % 60)) *
                                        (i % 2 ? -1 : 1)
                                  : (0.25 + (rng() % 4000) / 1000.0) * (i % 2 ? -1 : 1);
    const Real exact = tanh(Real(x));
    const Real rel = abs(Real(std::tanh(x)) - exact) / abs(exact);
    if (rel > worst) worst = rel;
  }
  INFO("worst tanh relative error " << worst.convert_to<double>());
  CHECK(worst <= Real(0x1p-51));  // within 2 ulp, 2x inside what the bound assumes
}

TEST_CASE("fast path equals the exact reference with softcap, windows, sinks and dv != d",
          "[fast][property][variants]") {
  g_rows = g_escalated = 0;
  check_property(
      "fast == exact (variants)",
      [] {
        const Shape s = *rc::gen::resize(100, gen_variant_shape());
        const LseBase base = *rc::gen::inRange(0, 4) == 0 ? LseBase::two : LseBase::e;
        check_problem(build(s), base, describe(s));
      },
      60);
  INFO("rows " << g_rows << ", escalated (fp16 O) " << g_escalated);
  CHECK(g_rows > 1000);
}

TEST_CASE("each variant and their combinations at fixed seeds", "[fast][variants]") {
  struct Case {
    Kind kind;
    int32_t dv;
    float softcap;
    int32_t left, right;
    SinkKind sinks;
    bool causal;
  };
  const Case cases[] = {
      {Kind::huge_logits, 0, 5.0f, -1, -1, SinkKind::none, false},  // tanh saturates: many scores at +-5
      {Kind::huge_logits, 0, 30.0f, -1, -1, SinkKind::none, true},
      {Kind::random, 0, 0.5f, -1, -1, SinkKind::none, false},     // every score near the cap
      {Kind::random, 0, 0.0f, 1, 0, SinkKind::none, true},        // window with causal, Tq > Tk: empty rows
      {Kind::masked_rows, 0, 0.0f, 0, 0, SinkKind::none, false},  // one-key windows, some masked away
      {Kind::random, 0, 0.0f, -1, 2, SinkKind::none, false},
      {Kind::random, 0, 0.0f, -1, -1, SinkKind::ordinary, false},
      {Kind::random, 0, 0.0f, -1, -1, SinkKind::large, true},          // sinks above every score
      {Kind::random, 0, 0.0f, -1, -1, SinkKind::huge, false},          // key weights underflow in double
      {Kind::masked_rows, 0, 0.0f, -1, -1, SinkKind::ordinary, true},  // empty rows with sinks
      {Kind::random, 24, 0.0f, -1, -1, SinkKind::none, true},          // dv > d
      {Kind::cancelling, 3, 0.0f, -1, -1, SinkKind::none, false},      // dv < d
      {Kind::late_outlier, 5, 5.0f, 2, 1, SinkKind::ordinary, true},   // everything at once
      {Kind::huge_logits, 24, 1.0f, 0, 3, SinkKind::large, false},
      {Kind::nonfinite, 5, 5.0f, 3, -1, SinkKind::ordinary, false},  // inf capped, NaN: escalated
      {Kind::tiny_logits, 1, 30.0f, 4, 0, SinkKind::huge, true},
  };
  int k = 0;
  for (const Case& c : cases) {
    Shape s;
    s.dtype = kFormats[k % 3];
    s.kv_heads = 2;
    s.group = 2;
    s.d = 8;
    s.sq = {7, 0, 12, 5};
    s.sk = {9, 3, 30, 2};  // the last sequence has Tq > Tk
    s.causal = c.causal;
    s.masked = k % 4 == 1;
    s.kind = c.kind;
    s.seed = 2000 + static_cast<uint64_t>(k);
    s.dv = c.dv;
    s.softcap = c.softcap;
    s.window_left = c.left;
    s.window_right = c.right;
    s.sinks = c.sinks;
    INFO(describe(s));
    for (LseBase base : {LseBase::e, LseBase::two}) check_problem(build(s), base, describe(s));
    ++k;
  }
}

TEST_CASE("long rows with a sliding window: a block reads only the keys its rows see",
          "[fast][long][variants]") {
  // 700 keys, window 300 to the left: blocks of 5 queries start far from key 0 and span two PV
  // chunks; with softcap and sinks, GQA, two threads.
  for (Format f : kFormats) {
    Shape s;
    s.dtype = f;
    s.kv_heads = 1;
    s.group = 2;
    s.d = 64;
    s.sq = {24};
    s.sk = {700};
    s.causal = f != Format::bf16;
    s.kind = Kind::random;
    s.seed = 91 + static_cast<uint64_t>(f);
    s.dv = 40;
    s.softcap = 2.0f;
    s.window_left = 300;
    s.window_right = f == Format::bf16 ? 10 : -1;
    s.sinks = SinkKind::ordinary;
    check_problem(build(s), LseBase::e, describe(s));
  }
}

TEST_CASE("ordinary data with softcap, window and sinks: rows are certified, few escalate",
          "[fast][escalation][variants]") {
  // fp16, N(0, 1) keys and values, queries N(0, 9) at scale 1/8: scores of a few units, capped at 5.
  Shape s;
  s.dtype = Format::fp16;
  s.kv_heads = 2;
  s.group = 2;
  s.d = 64;
  s.sq = {128};
  s.sk = {256};
  s.causal = true;
  s.seed = 5;
  s.softcap = 5.0f;
  s.window_left = 96;
  s.sinks = SinkKind::ordinary;
  AttentionProblem pb = build(s);
  for (auto& b : pb.q) b = store(Format::fp16, 3 * decode(Format::fp16, b));
  pb.softmax_scale = 0.125f;
  FastOptions opt;
  opt.threads = 2;
  FastAttentionReference fast(pb, opt);
  const RoundedAttention r = fast.rounded(Format::fp16, Format::fp32);
  const EscalationStats st = fast.stats();
  INFO("rows " << st.rows << ", escalated " << st.rows_escalated << ", uncertified " << st.rows_uncertified);
  CHECK(st.rows == 128 * 4);
  CHECK(st.rows_uncertified == 0);
  CHECK(st.rows_escalated * 50 <= st.rows);  // at most 2 %
  // And the result is the exact path's, bit for bit.
  const std::vector<ExactRow> exact = exact_attention(pb);
  for (size_t i = 0; i < exact.size(); ++i) {
    REQUIRE(exact[i].o.size() == 64);
    for (size_t c = 0; c < 64; ++c) CHECK(r.o[i * 64 + c] == round_to_format(Format::fp16, exact[i].o[c]));
    CHECK(r.lse[i] == round_to_format(Format::fp32, exact[i].lse));
  }
}

TEST_CASE("fast path equals the exact reference with per-KV-head K and V scales", "[fast][scales]") {
  // Factors that are powers of two, short and full-width floats, per KV head; the fast path's rows
  // must bracket the exact ones (check_problem) and be certified for most rows.
  g_rows = g_escalated = 0;
  const std::vector<std::pair<float, float>> factors = {
      {0.25f, 4.0f}, {0.75f, 1.25f}, {0.0137f, 97.3f}, {3.1f, 0.00271f}};
  uint64_t seed = 4100;
  for (const Format f : {Format::fp16, Format::bf16, Format::fp32})
    for (size_t i = 0; i < factors.size(); ++i) {
      Shape s;
      s.dtype = f;
      s.kv_heads = 2;
      s.group = 2;
      s.d = 16;
      s.sq = {3, 1};
      s.sk = {17, 40};
      s.causal = i % 2 == 1;
      s.seed = seed++;
      AttentionProblem pb = build(s);
      pb.k_scale = {factors[i].first, factors[(i + 1) % factors.size()].first};
      pb.v_scale = {factors[i].second, factors[(i + 2) % factors.size()].second};
      check_problem(pb, i % 3 == 0 ? LseBase::two : LseBase::e, "scales " + std::to_string(i));
    }
  INFO("rows " << g_rows << ", escalated " << g_escalated);
  CHECK(g_rows > 100);
}
