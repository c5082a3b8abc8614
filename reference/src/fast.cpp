// The fast path: attention rows in fp64 with a rigorous bound on every output element, and the
// escalation to the exact path where the bound cannot decide (fast.hpp; analysis in FAST.md).
//
// Where rounding happens, and the bound that covers it (u = 2^-53, gamma(n) = n u / (1 - n u)):
//   score GEMM  S = Q K^T         products exact, sums: |err| <= gamma(d) sum_c |q_c| kmax_c
//   s = scale * S                 one rounding: u |s|
//   c = cap tanh(s / cap)         softcap only: the score error carries through (|tanh'| <= 1), plus
//                                 u |s| (the quotient), 4 ulp of tanh and u |c| (the product)
//   a = c - m (m = max c, sink)   one rounding: u |a|; the exact row is shift-invariant, so m is a
//                                 free constant and only a's error matters: eps = max over the row
//   p = exp(a)                    glibc exp, taken as <= 4 ulp (2^-50 relative) + 2^-1072 absolute
//                                 (subnormal results); with the argument error: |p - p*| <= eta p* + tau
//   [acc | l | absacc] = P [V | 1 | |V|]   products and sums: gamma(n) sum p |v| (l: gamma(n) sum p)
//   l += exp(sink - m)            sinks only: a weight like the others, one more addition to l
//   o = acc / l, lse = m + log l  one rounding each (log: <= 4 ulp)
// The bound expressions are themselves evaluated in double on nonnegative quantities (fewer than a
// few hundred roundings each), then inflated by 1 + 2^-40, which covers them. This file is compiled
// with -ffp-contract=off so that every line rounds as written (see reference/CMakeLists.txt).
// Absolute terms of 2^-900 cover every underflow (the smallest output ulp is 2^-149).
#include "attncheck/reference/fast.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <bit>
#include <cmath>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <utility>

#include "attncheck/reference/offsets.hpp"
#include "precision_internal.hpp"

namespace attncheck::ref {
namespace {

constexpr double kU = 0x1p-53;
constexpr double kExpRel = 0x1p-50;   // glibc exp: the manual lists 1 ulp; we allow 4 (= 2^-50 relative)
constexpr double kLogRel = 0x1p-50;   // glibc log: likewise
constexpr double kTanhRel = 0x1p-50;  // glibc tanh: the manual lists 2 ulp; we allow 4 (softcap)
// exp results in double's subnormal range err by up to 4 subnormal ulps (2^-1072 each): kTiny covers them.
constexpr double kTiny = 0x1p-900;              // covers all underflow terms (n 2^-1072 |v|max < 2^-900)
constexpr double kMaxLogit = 0x1p32;            // beyond: the MPFR margin below is not justified, escalate
constexpr double kEval = 1 + 0x1p-40;           // inflation covering the rounding of the bound expressions
constexpr double kInvLn2 = 1.4426950408889634;  // double(1/ln 2), relative error <= u
constexpr double kInvLn2Upper = 1.4426950408889636;  // above 1/ln 2
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kChunk = 256;  // keys per PV GEMM (see the chunked sum below)

double gamma_n(double n) { return n * kU / (1 - n * kU); }

using detail::kNoQuantum;
using detail::quantum_exponent;

using RowMat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Decoding of stored elements: a table for the 16-bit formats (decode() per element costs more than
// the GEMM flops it feeds when a single row is computed), decode() itself for fp32.
class Decoder {
 public:
  explicit Decoder(Format f) : f_(f), table_(f == Format::fp32 ? nullptr : table(f).data()) {}
  double operator()(uint32_t bits) const { return table_ ? table_[bits & 0xffffu] : decode(f_, bits); }

 private:
  static const std::vector<double>& table(Format f) {
    static const std::vector<double> fp16 = build(Format::fp16), bf16 = build(Format::bf16);
    return f == Format::fp16 ? fp16 : bf16;
  }
  static std::vector<double> build(Format f) {
    std::vector<double> t(65536);
    for (uint32_t b = 0; b < 65536; ++b) t[b] = decode(f, b);
    return t;
  }
  Format f_;
  const double* table_;
};

// One (sequence, KV head): keys and values decoded once, shared read-only by every worker.
struct Slice {
  int64_t q_begin = 0, mask_begin = 0;
  int32_t tq = 0, tk = 0, kv_head = 0;
  int dv = 0;                 // V's head size
  double k_scale = 1;         // the KV head's k_scale (scores) ...
  double q_scale = 1;         // ... and q_scale (scores)
  RowMat k;                   // [tk, d]; non-finite entries replaced by 0 (rows that see them are escalated)
  RowMat vaug;                // [tk, 2 dv + 1] = [v | 1 | |v|], non-finite v replaced by 0; v times
                              // the KV head's v_scale (exact: AttentionProblem)
  std::vector<double> kmax;   // max_j |k_jc| over the slice's finite keys
  double knorm_max = 0;       // >= max_j ||k_j||_2 over the finite keys
  std::vector<int> kquantum;  // min_j quantum_exponent(k_jc) over the finite keys
  std::vector<int32_t> nonfinite_prefix;  // number of keys < j with a non-finite k or v
};

void load_slice(const AttentionProblem& pb, const SequenceOffsets& off, size_t seq, int32_t kv_head,
                Slice& sl) {
  const int d = pb.head_size, dv = value_head_size(pb);
  sl.q_begin = off.q[seq];
  sl.mask_begin = off.mask[seq];
  sl.tq = pb.seqlens_q[seq];
  sl.tk = pb.seqlens_k[seq];
  sl.kv_head = kv_head;
  sl.dv = dv;
  sl.k_scale = k_scale_of(pb, seq, kv_head);
  sl.q_scale = q_scale_of(pb, seq, kv_head);
  const double v_scale = v_scale_of(pb, seq, kv_head);
  sl.k.resize(sl.tk, d);
  sl.vaug.resize(sl.tk, 2 * dv + 1);
  sl.kmax.assign(static_cast<size_t>(d), 0.0);
  sl.nonfinite_prefix.assign(static_cast<size_t>(sl.tk) + 1, 0);
  sl.knorm_max = 0;
  sl.kquantum.assign(static_cast<size_t>(d), kNoQuantum);
  const Decoder dec(pb.dtype);
  for (int32_t j = 0; j < sl.tk; ++j) {
    const size_t key = static_cast<size_t>(off.k[seq] + j) * pb.num_kv_heads + kv_head;
    bool finite = true;
    for (int c = 0; c < d; ++c) {
      const double kc = dec(pb.k[key * d + c]);
      finite = finite && std::isfinite(kc);
      sl.k(j, c) = std::isfinite(kc) ? kc : 0.0;
    }
    for (int c = 0; c < dv; ++c) {
      const double vc = dec(pb.v[key * dv + c]) * v_scale;
      finite = finite && std::isfinite(vc);
      sl.vaug(j, c) = std::isfinite(vc) ? vc : 0.0;
      sl.vaug(j, dv + 1 + c) = std::fabs(sl.vaug(j, c));
    }
    sl.vaug(j, dv) = 1.0;
    if (finite) {
      double sq = 0;
      for (int c = 0; c < d; ++c) {
        sl.kmax[c] = std::max(sl.kmax[c], std::fabs(sl.k(j, c)));
        sl.kquantum[c] = std::min(sl.kquantum[c], quantum_exponent(sl.k(j, c)));
        sq += sl.k(j, c) * sl.k(j, c);
      }
      sl.knorm_max = std::max(sl.knorm_max, sq);
    }
    sl.nonfinite_prefix[j + 1] = sl.nonfinite_prefix[j] + (finite ? 0 : 1);
  }
  // A sum of d squares rounds with relative error <= gamma(d + 1); sqrt adds u.
  sl.knorm_max = std::sqrt(sl.knorm_max * (1 + gamma_n(d + 1))) * (1 + 2 * kU);
}

// Per-worker buffers: a block of queries, their score/weight rows and the PV results.
struct Workspace {
  RowMat q, s, r, part;
  std::vector<uint8_t> q_finite;
  std::vector<double> eps;     // per row: bound on the exp arguments' error
  std::vector<double> sink_p;  // per row: the sink's weight exp(sink - m) (0 without sinks)
  std::vector<int32_t> ts;     // the block's query positions
  std::vector<FastRow> rows;
};

struct Params {
  LseBase base;
  double mp_rel;  // margin for the MPFR reference's own error, relative to the row's scales
};

// Rows ts[0..count) (positions within the slice's sequence) of query head `head`. Fills ws.rows.
void compute_block(const AttentionProblem& pb, const Slice& sl, int32_t head, const int32_t* ts,
                   int32_t count, const Params& par, Workspace& ws) {
  const int d = pb.head_size, dv = sl.dv;
  const int64_t tk = sl.tk;
  // The softmax scale times the KV head's k_scale: a product of two floats, exact in double, so the
  // one rounding of s = scale * S below is still the only one. A q_scale rounds that product once
  // more (relative u: scale_rounds, counted in the logits' bound).
  const double scale = static_cast<double>(pb.softmax_scale) * sl.k_scale * sl.q_scale;
  const double scale_rounds = sl.q_scale != 1 ? 1.0 : 0.0;
  const double cap = static_cast<double>(pb.softcap);  // 0: no cap
  const bool has_sink = !pb.sinks.empty();
  const double sink = has_sink ? static_cast<double>(pb.sinks[static_cast<size_t>(head)]) : 0.0;  // exact
  auto key_range = [&](int32_t t) { return pb.key_range(t, sl.tq, tk); };
  // Keys the block needs: [lo, n), the union of its rows' ranges (a sliding window skips the rest).
  int64_t lo = tk, n = 0;
  for (int32_t r = 0; r < count; ++r) {
    const auto [first, last] = key_range(ts[r]);
    if (first > last) continue;
    lo = std::min(lo, first);
    n = std::max(n, last + 1);
  }
  lo = std::min(lo, n);
  const int64_t width = n - lo;  // S's column i is key lo + i

  ws.q.resize(count, d);
  ws.q_finite.assign(static_cast<size_t>(count), 1);
  ws.eps.assign(static_cast<size_t>(count), 0.0);
  ws.sink_p.assign(static_cast<size_t>(count), 0.0);
  ws.rows.resize(static_cast<size_t>(count));
  const Decoder dec(pb.dtype);
  for (int32_t r = 0; r < count; ++r) {
    const size_t base = (static_cast<size_t>(sl.q_begin + ts[r]) * pb.num_heads + head) * d;
    for (int c = 0; c < d; ++c) {
      const double x = dec(pb.q[base + c]);
      if (!std::isfinite(x)) ws.q_finite[r] = 0;
      ws.q(r, c) = std::isfinite(x) ? x : 0.0;
    }
  }
  if (ws.s.rows() < count || ws.s.cols() < width)
    ws.s.resize(std::max<Eigen::Index>(ws.s.rows(), count), std::max<Eigen::Index>(ws.s.cols(), width));
  auto S = ws.s.topLeftCorner(count, width);
  if (width > 0) S.noalias() = ws.q * sl.k.middleRows(lo, width).transpose();

  for (int32_t r = 0; r < count; ++r) {
    const int32_t t = ts[r];
    FastRow& fr = ws.rows[r];
    fr.o.assign(static_cast<size_t>(dv), 0.0);
    fr.o_bound.assign(static_cast<size_t>(dv), 0.0);
    fr.lse = -kInf;
    fr.lse_bound = 0;
    fr.empty = false;
    fr.certified = true;
    // Named copies, not a structured binding: C++20 lets a lambda capture bindings, Clang 14 does not.
    const auto range = key_range(t);
    const int64_t first = range.first, last = range.second;
    const uint8_t* mask_row = pb.mask.empty() ? nullptr : pb.mask.data() + sl.mask_begin + int64_t{t} * tk;
    auto visible = [&](int64_t j) { return j >= first && j <= last && (!mask_row || mask_row[j]); };
    // Scores (capped), their maximum, and whether the row sees a non-finite input. smax_abs is over
    // the scaled scores before the cap, cmax_abs over the capped ones.
    int64_t count_visible = 0;
    bool sees_nonfinite = !ws.q_finite[r];
    double m = -kInf, smax_abs = 0, cmax_abs = 0;
    for (int64_t j = lo; j < n; ++j) {
      if (!visible(j)) continue;
      ++count_visible;
      if (sl.nonfinite_prefix[j + 1] != sl.nonfinite_prefix[j]) sees_nonfinite = true;
      const double s = scale * S(r, j - lo);
      smax_abs = std::max(smax_abs, std::fabs(s));
      double c = s;
      if (cap > 0) {
        c = cap * std::tanh(s / cap);
        cmax_abs = std::max(cmax_abs, std::fabs(c));
      }
      S(r, j - lo) = c;
      m = std::max(m, c);
    }
    if (count_visible == 0) {  // the empty row, exact by definition (whatever the query holds)
      fr.empty = true;
      for (int64_t j = 0; j < width; ++j) S(r, j) = 0;
      if (has_sink) {  // O = 0 and LSE = sink, exact in base e
        if (par.base == LseBase::two) {
          const double lse2 = sink * kInvLn2;
          fr.lse = lse2;
          fr.lse_bound = (kU * std::fabs(lse2) * (1 + 2 * kU) + std::fabs(sink) * kU * kInvLn2Upper +
                          par.mp_rel * (std::fabs(sink) + 1) * kInvLn2Upper + kTiny) *
                         kEval;
        } else {
          fr.lse = sink;
        }
      }
      continue;
    }
    if (sees_nonfinite || !(smax_abs <= kMaxLogit) || (has_sink && !(std::fabs(sink) <= kMaxLogit))) {
      fr.certified = false;
      for (int64_t j = 0; j < width; ++j) S(r, j) = 0;
      continue;
    }
    if (has_sink) m = std::max(m, sink);
    double amax = 0;
    for (int64_t j = lo; j < n; ++j) {
      if (!visible(j)) {
        S(r, j - lo) = 0;
        continue;
      }
      const double a = S(r, j - lo) - m;
      amax = std::max(amax, -a);
      S(r, j - lo) = std::exp(a);
    }
    if (has_sink) {  // the sink's argument: exact sink, one rounded subtraction as for a key
      const double a = sink - m;
      amax = std::max(amax, -a);
      ws.sink_p[r] = std::exp(a);
    }
    // Argument error: |a_j - (s*_j - m)| <= E_dot (1 + u) + u (1 + 2u) |s_j| + u |a_j|.
    // sum_c |q_c k_jc| <= min(sum_c |q_c| kmax_c, ||q|| max_j ||k_j||) (Cauchy-Schwarz).
    double bq = 0, qsq = 0;
    for (int c = 0; c < d; ++c) {
      bq += std::fabs(ws.q(r, c)) * sl.kmax[c];
      qsq += ws.q(r, c) * ws.q(r, c);
    }
    const double cauchy = std::sqrt(qsq * (1 + gamma_n(d + 1))) * (1 + 2 * kU) * sl.knorm_max;
    bq = std::min(bq, cauchy) * (1 + gamma_n(d + 2));
    // Exact dot products: every product q_c k_jc (exact in double) is a multiple of 2^qmin, and so
    // is every partial sum, whatever the order; all of them are at most bq in magnitude. When
    // bq <= 2^(53 + qmin) they are integers times 2^qmin below 2^53: representable, so the GEMM
    // rounds nothing (typical of fp16 data: the score error then vanishes).
    int qmin = kNoQuantum;
    for (int c = 0; c < d; ++c) {
      const int qe = quantum_exponent(ws.q(r, c));
      if (qe != kNoQuantum && sl.kquantum[c] != kNoQuantum) qmin = std::min(qmin, qe + sl.kquantum[c]);
    }
    const bool exact_dot = qmin == kNoQuantum || bq <= std::ldexp(1.0, std::min(qmin + 53, 1023));
    const double e_dot = exact_dot ? 0.0 : std::fabs(scale) * gamma_n(d) * bq;
    double e_logit = e_dot * (1 + kU) + (1 + scale_rounds) * kU * (1 + 2 * kU) * smax_abs;  // |s_j - s*_j|
    if (cap > 0) {
      // c = fl(cap fl(tanh(fl(s / cap)))): |tanh'| <= 1 carries |s - s*| / cap through unamplified
      // (times cap: |s - s*|); the quotient adds u |s| (1 + 4u), tanh r_tanh and the product u,
      // relative to |c| up to (1 + 2^-48) (FAST.md, step 1b).
      e_logit += kU * (1 + 4 * kU) * smax_abs + (kTanhRel + kU) * (1 + 0x1p-48) * cmax_abs;
    }
    ws.eps[r] = (e_logit + kU * amax + kTiny) * kEval;
    fr.lse = m;  // the shift; finished below
  }

  // P [V | 1 | |V|] in chunks of kChunk keys summed here in order: each chunk's GEMM errs by at
  // most gamma(kChunk) of its sum of |terms|, the chunk sums add gamma(chunks), so the total is
  // gamma(kChunk + chunks) instead of gamma(n) (28x tighter at n = 8192), for the same flops.
  ws.r.setZero(count, 2 * dv + 1);
  int64_t chunks = 0;
  for (int64_t k0 = 0; k0 < width; k0 += kChunk, ++chunks) {
    const int64_t len = std::min<int64_t>(kChunk, width - k0);
    ws.part.noalias() = S.middleCols(k0, len) * sl.vaug.middleRows(lo + k0, len);
    ws.r += ws.part;
  }
  const double gn = gamma_n(static_cast<double>(std::min<int64_t>(width, kChunk) + chunks) + 1);
  // The sink's weight joins l by one more rounded addition.
  const double gn_l =
      has_sink ? gamma_n(static_cast<double>(std::min<int64_t>(width, kChunk) + chunks) + 2) : gn;
  for (int32_t r = 0; r < count; ++r) {
    FastRow& fr = ws.rows[r];
    if (fr.empty || !fr.certified) continue;
    const double m = fr.lse;
    const double eps = ws.eps[r];
    if (!(eps <= 0x1p-10)) {
      fr.certified = false;
      continue;
    }
    // |p_hat - p*| <= eta p* + tau with eta = (1 + r_exp) expm1(eps) + r_exp, expm1(eps) <= eps (1 + eps).
    const double eta = ((1 + kExpRel) * eps * (1 + eps) + kExpRel) * kEval;
    const double l_hat = has_sink ? ws.r(r, dv) + ws.sink_p[r] : ws.r(r, dv);
    const double sum_p_hat = l_hat / (1 - gn_l) + kTiny;    // computed sum -> true sum of p_hat
    const double l_star = (sum_p_hat + kTiny) / (1 - eta);  // exact l above
    const double e_l = (gn_l * sum_p_hat + eta * l_star + kTiny) * kEval;
    const double rho = e_l / l_hat;
    if (!(rho <= 0.5)) {
      fr.certified = false;
      continue;
    }
    const double l_low = l_hat - e_l;
    for (int c = 0; c < dv; ++c) {
      const double acc = ws.r(r, c);
      const double a_abs = ws.r(r, dv + 1 + c) / (1 - gn) + kTiny;  // sum p_hat |v| above
      const double e_acc = gn * a_abs + eta * (a_abs + kTiny) / (1 - eta) + kTiny;
      const double o = acc / l_hat;
      double bound =
          kU * std::fabs(o) * (1 + 2 * kU) + e_acc / l_hat + (std::fabs(acc) + e_acc) * e_l / (l_hat * l_low);
      bound += par.mp_rel * (2 * a_abs / l_hat + std::fabs(o)) + kTiny;
      fr.o[c] = o;
      fr.o_bound[c] = bound * kEval;
    }
    // LSE = m + log l*: |log l_hat - log l*| <= rho / (1 - rho).
    const double lam = std::log(l_hat);
    const double lse_e = m + lam;
    double e_lse = kU * std::fabs(lse_e) * (1 + 2 * kU) + kLogRel * std::fabs(lam) + rho / (1 - rho) + kTiny;
    e_lse += par.mp_rel * (std::fabs(m) + std::fabs(lam) + 1);
    e_lse *= kEval;
    if (par.base == LseBase::two) {
      const double lse2 = lse_e * kInvLn2;
      fr.lse = lse2;
      fr.lse_bound = (kU * std::fabs(lse2) * (1 + 2 * kU) + std::fabs(lse_e) * kU * kInvLn2Upper +
                      e_lse * kInvLn2Upper) *
                     kEval;
    } else {
      fr.lse = lse_e;
      fr.lse_bound = e_lse;
    }
  }
}

double mp_margin() {
  // The MPFR reference's own error is below 2^-(p - 40) of the row's scales for rows of up to 2^31
  // keys and logits up to 2^32 (FAST.md); 2^-(p - 64) leaves room.
  return std::ldexp(1.0, 64 - static_cast<int>(precision_bits_effective()));
}

// Runs fn(worker_index) on `threads` threads (the calling thread counts as none), rethrowing the
// first exception.
template <class Fn>
void run_parallel(int threads, Fn&& fn) {
  if (threads <= 1) {
    fn(0);
    return;
  }
  std::exception_ptr error;
  std::mutex error_mutex;
  std::vector<std::thread> pool;
  for (int w = 0; w < threads; ++w)
    pool.emplace_back([&, w] {
      try {
        apply_precision_on_this_thread();
        fn(w);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    });
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace

struct FastAttentionReference::SliceCache {
  std::mutex mutex;
  size_t seq = 0;
  int32_t kv_head = -1;
  std::shared_ptr<const Slice> slice;
};

FastAttentionReference::~FastAttentionReference() = default;

FastAttentionReference::FastAttentionReference(const AttentionProblem& problem, FastOptions options)
    : problem_(problem), options_(options), cache_(std::make_unique<SliceCache>()) {
  validate(problem_);
  if (options_.query_block <= 0) throw ReferenceError("FastOptions::query_block must be > 0");
  if (!(options_.ulp_resolution > 0)) throw ReferenceError("FastOptions::ulp_resolution must be > 0");
  threads_ = options_.threads > 0 ? options_.threads
                                  : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

FastRow FastAttentionReference::row(int64_t token, int32_t head) const {
  const AttentionProblem& pb = problem_;
  const SequenceOffsets off = sequence_offsets(pb.seqlens_q, pb.seqlens_k);
  if (token < 0 || token >= off.q.back())
    throw ReferenceError("token " + std::to_string(token) + " outside [0, " + std::to_string(off.q.back()) +
                         ")");
  if (head < 0 || head >= pb.num_heads)
    throw ReferenceError("head " + std::to_string(head) + " outside [0, " + std::to_string(pb.num_heads) +
                         ")");
  size_t seq = 0;
  while (off.q[seq + 1] <= token) ++seq;
  const int32_t kv_head = head / (pb.num_heads / pb.num_kv_heads);
  std::shared_ptr<const Slice> sl;
  {
    std::lock_guard<std::mutex> lock(cache_->mutex);
    if (!cache_->slice || cache_->seq != seq || cache_->kv_head != kv_head) {
      auto fresh = std::make_shared<Slice>();
      load_slice(pb, off, seq, kv_head, *fresh);
      cache_->slice = std::move(fresh);
      cache_->seq = seq;
      cache_->kv_head = kv_head;
    }
    sl = cache_->slice;
  }
  Workspace ws;
  const auto t = static_cast<int32_t>(token - off.q[seq]);
  compute_block(pb, *sl, head, &t, 1, Params{options_.base, mp_margin()}, ws);
  return ws.rows[0];
}

void FastAttentionReference::for_each_row(
    const std::function<void(int64_t token, int32_t head, const FastRow&)>& visit) const {
  const AttentionProblem& pb = problem_;
  const SequenceOffsets off = sequence_offsets(pb.seqlens_q, pb.seqlens_k);
  const Params par{options_.base, mp_margin()};
  const int32_t group = pb.num_heads / pb.num_kv_heads;
  const int32_t block = options_.query_block;
  std::vector<Workspace> workspaces(static_cast<size_t>(threads_));
  Slice sl;
  for (size_t seq = 0; seq < pb.seqlens_q.size(); ++seq) {
    const int32_t tq = pb.seqlens_q[seq];
    if (tq == 0) continue;
    const int64_t blocks = (tq + block - 1) / block;
    for (int32_t g = 0; g < pb.num_kv_heads; ++g) {
      load_slice(pb, off, seq, g, sl);
      // Tasks: (query head of the group, block of rows); the later (longer, under causal) first.
      const int64_t tasks = blocks * group;
      std::atomic<int64_t> next{0};
      // Small slices run on the calling thread: starting threads would cost more than the work.
      const double flops = double(tq) * group * pb.seqlens_k[seq] * pb.head_size;
      const int workers = flops < 1e6 ? 1 : static_cast<int>(std::min<int64_t>(threads_, tasks));
      run_parallel(workers, [&](int w) {
        Workspace& ws = workspaces[static_cast<size_t>(w)];
        for (int64_t task = next++; task < tasks; task = next++) {
          const int64_t b = blocks - 1 - task / group;
          const int32_t head = g * group + static_cast<int32_t>(task % group);
          const int32_t t0 = static_cast<int32_t>(b * block);
          const int32_t count = std::min<int32_t>(block, tq - t0);
          ws.ts.resize(static_cast<size_t>(count));
          for (int32_t r = 0; r < count; ++r) ws.ts[r] = t0 + r;
          compute_block(pb, sl, head, ws.ts.data(), count, par, ws);
          for (int32_t r = 0; r < count; ++r) visit(sl.q_begin + t0 + r, head, ws.rows[r]);
        }
      });
    }
  }
}

void FastAttentionReference::for_rows(
    const std::vector<RowId>& wanted,
    const std::function<void(int64_t token, int32_t head, const FastRow&)>& visit) const {
  const AttentionProblem& pb = problem_;
  const SequenceOffsets off = sequence_offsets(pb.seqlens_q, pb.seqlens_k);
  const Params par{options_.base, mp_margin()};
  const int32_t group = pb.num_heads / pb.num_kv_heads;
  struct Item {
    size_t seq;
    int32_t kv_head, head, t;
  };
  std::vector<Item> items;
  items.reserve(wanted.size());
  for (const RowId& id : wanted) {
    if (id.token < 0 || id.token >= off.q.back())
      throw ReferenceError("token " + std::to_string(id.token) + " outside [0, " +
                           std::to_string(off.q.back()) + ")");
    if (id.head < 0 || id.head >= pb.num_heads)
      throw ReferenceError("head " + std::to_string(id.head) + " outside [0, " +
                           std::to_string(pb.num_heads) + ")");
    const size_t seq =
        static_cast<size_t>(std::upper_bound(off.q.begin(), off.q.end(), id.token) - off.q.begin() - 1);
    items.push_back({seq, id.head / group, id.head, static_cast<int32_t>(id.token - off.q[seq])});
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return std::tie(a.seq, a.kv_head, a.head, a.t) < std::tie(b.seq, b.kv_head, b.head, b.t);
  });
  std::vector<Workspace> workspaces(static_cast<size_t>(threads_));
  Slice sl;
  for (size_t begin = 0; begin < items.size();) {
    size_t end = begin;
    while (end < items.size() && items[end].seq == items[begin].seq &&
           items[end].kv_head == items[begin].kv_head)
      ++end;
    load_slice(pb, off, items[begin].seq, items[begin].kv_head, sl);
    // Tasks: runs of up to query_block rows of one head.
    std::vector<std::pair<size_t, size_t>> tasks;
    for (size_t i = begin; i < end;) {
      size_t j = i;
      while (j < end && items[j].head == items[i].head && j - i < static_cast<size_t>(options_.query_block))
        ++j;
      tasks.emplace_back(i, j);
      i = j;
    }
    std::atomic<size_t> next{0};
    const double flops = double(end - begin) * sl.tk * pb.head_size;
    const int workers = flops < 1e6 ? 1 : static_cast<int>(std::min<size_t>(threads_, tasks.size()));
    run_parallel(workers, [&](int w) {
      Workspace& ws = workspaces[static_cast<size_t>(w)];
      for (size_t task = next++; task < tasks.size(); task = next++) {
        const auto [i, j] = tasks[task];
        const int32_t count = static_cast<int32_t>(j - i);
        ws.ts.resize(j - i);
        for (size_t r = i; r < j; ++r) ws.ts[r - i] = items[r].t;
        compute_block(pb, sl, items[i].head, ws.ts.data(), count, par, ws);
        for (int32_t r = 0; r < count; ++r) visit(sl.q_begin + ws.ts[r], items[i].head, ws.rows[r]);
      }
    });
    begin = end;
  }
}

RoundedAttention FastAttentionReference::rounded(Format o_format, Format lse_format) {
  const AttentionProblem& pb = problem_;
  const int64_t total_q = sequence_offsets(pb.seqlens_q, pb.seqlens_k).q.back();
  const int d = value_head_size(pb);
  RoundedAttention out;
  out.o.assign(static_cast<size_t>(total_q * pb.num_heads * d), 0);
  out.lse.assign(static_cast<size_t>(total_q * pb.num_heads), 0);
  const LseBase base = options_.base;
  for_each_row([&](int64_t token, int32_t head, const FastRow& fr) {
    const size_t row = static_cast<size_t>(token * pb.num_heads + head);
    uint32_t* o = out.o.data() + row * d;
    int64_t undecided = 0;
    if (fr.empty) {
      for (int c = 0; c < d; ++c) o[c] = round_double_to_format(o_format, 0.0);
      // -inf, or the sink: exact in base e, within lse_bound of it in base two.
      if (fr.lse_bound == 0)
        out.lse[row] = round_double_to_format(lse_format, fr.lse);
      else if (const auto r = certain_rounding(lse_format, fr.lse, fr.lse_bound))
        out.lse[row] = *r;
      else
        ++undecided;
    } else if (fr.certified) {
      for (int c = 0; c < d; ++c) {
        const auto r = certain_rounding(o_format, fr.o[c], fr.o_bound[c]);
        if (r)
          o[c] = *r;
        else
          ++undecided;
      }
      const auto r = certain_rounding(lse_format, fr.lse, fr.lse_bound);
      if (r)
        out.lse[row] = *r;
      else
        ++undecided;
    }
    counters_.rows++;
    counters_.elements += d + 1;
    if (fr.certified && undecided == 0) return;
    counters_.elements_undecided += fr.certified ? undecided : d + 1;
    counters_.rows_escalated++;
    if (!fr.certified) counters_.rows_uncertified++;
    const ExactRow ex = exact_attention_row(pb, token, head, base);
    for (int c = 0; c < d; ++c) o[c] = round_to_format(o_format, ex.o[c]);
    out.lse[row] = round_to_format(lse_format, ex.lse);
  });
  return out;
}

AttentionUlpErrors FastAttentionReference::ulp_errors(Format o_format, const std::vector<uint32_t>& o_bits,
                                                      Format lse_format,
                                                      const std::vector<double>& lse_values) {
  const AttentionProblem& pb = problem_;
  const int64_t total_q = sequence_offsets(pb.seqlens_q, pb.seqlens_k).q.back();
  const int d = value_head_size(pb);
  const size_t rows = static_cast<size_t>(total_q * pb.num_heads);
  if (o_bits.size() != rows * d)
    throw ReferenceError("ulp_errors: O has " + std::to_string(o_bits.size()) +
                         " elements, the problem needs " + std::to_string(rows * d));
  const bool with_lse = !lse_values.empty();
  if (with_lse && lse_values.size() != rows)
    throw ReferenceError("ulp_errors: LSE has " + std::to_string(lse_values.size()) +
                         " elements, the problem needs " + std::to_string(rows));
  AttentionUlpErrors out;
  out.o.assign(rows * d, UlpError{ErrorClass::finite, 0.0});
  if (with_lse) out.lse.assign(rows, UlpError{ErrorClass::finite, 0.0});
  const double res = options_.ulp_resolution;
  const LseBase base = options_.base;
  for_each_row([&](int64_t token, int32_t head, const FastRow& fr) {
    const size_t row = static_cast<size_t>(token * pb.num_heads + head);
    UlpError* e = out.o.data() + row * d;
    const uint32_t* y = o_bits.data() + row * d;
    int64_t undecided = 0;
    if (fr.certified) {
      for (int c = 0; c < d; ++c) {
        const auto r = certain_ulp_error(o_format, decode(o_format, y[c]), fr.o[c], fr.o_bound[c], res);
        if (r)
          e[c] = *r;
        else
          ++undecided;
      }
      if (with_lse) {
        const double yl = lse_values[row];
        if (fr.empty && std::isinf(fr.lse)) {  // exact LSE = -inf (no sink)
          const bool same = std::isinf(yl) && yl < 0;
          out.lse[row] =
              same ? UlpError{ErrorClass::finite, 0.0} : UlpError{ErrorClass::wrong_nonfinite, kInf};
        } else if (const auto r = certain_ulp_error(lse_format, yl, fr.lse, fr.lse_bound, res)) {
          out.lse[row] = *r;
        } else {
          ++undecided;
        }
      }
    }
    const int64_t elements = d + (with_lse ? 1 : 0);
    counters_.rows++;
    counters_.elements += elements;
    if (fr.certified && undecided == 0) return;
    counters_.elements_undecided += fr.certified ? undecided : elements;
    counters_.rows_escalated++;
    if (!fr.certified) counters_.rows_uncertified++;
    const ExactRow ex = exact_attention_row(pb, token, head, base);
    for (int c = 0; c < d; ++c) e[c] = ulp_error(o_format, y[c], ex.o[c]);
    if (with_lse) out.lse[row] = ulp_error_value(lse_format, lse_values[row], ex.lse);
  });
  return out;
}

EscalationStats FastAttentionReference::stats() const {
  EscalationStats s;
  s.rows = counters_.rows.load();
  s.rows_escalated = counters_.rows_escalated.load();
  s.rows_uncertified = counters_.rows_uncertified.load();
  s.elements = counters_.elements.load();
  s.elements_undecided = counters_.elements_undecided.load();
  return s;
}

void FastAttentionReference::reset_stats() {
  counters_.rows = 0;
  counters_.rows_escalated = 0;
  counters_.rows_uncertified = 0;
  counters_.elements = 0;
  counters_.elements_undecided = 0;
}

}  // namespace attncheck::ref
