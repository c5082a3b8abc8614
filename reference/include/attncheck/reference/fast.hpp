// A certified fast path for the attention reference: fp64 with a rigorous error bound on every
// output element, escalating to the exact (MPFR) path wherever the bound cannot decide.
//
// What it computes: the same O and LSE as exact_attention_row (exact.hpp), for every (token, query
// head), with the same conventions (GQA, bottom-right causal, key lengths, mask, softmax scale as
// given, empty row O = +0 and LSE = -inf, LSE base e or 2) and variants (head_size_v, softcap, the
// window, sinks).
//
// Where rounding happens (the analysis, each bound and its source: reference/FAST.md):
//   - scores: products of stored fp16/bf16/fp32 values are exact in double; the dot products are
//     summed by an Eigen GEMM (any order, with or without FMA: error <= gamma_d sum|q_c k_c|), then
//     multiplied by the scale (one rounding);
//   - weights p_j = exp(s_j - m) with glibc exp (its error taken as <= 4 ulp, 8x the manual's
//     figure) and the argument's error propagated;
//   - l and the weighted sums: one GEMM  P [V | 1 | |V|]; l is a sum of positive terms, and the
//     bound of each O element is relative to sum p |v| (so cancellation is accounted for);
//   - O = acc / l and LSE = m + log l (log: <= 4 ulp as for exp).
// Every approximation carries a bound B with |exact - approx| <= B, where "exact" is both the true
// value and the MPFR reference's working-precision value (a margin of 2^-(p-64) relative covers the
// latter). Whether the correctly rounded fp16/bf16/fp32 value is certain, and whether an output's
// ulp error is known to the verdict's resolution, is decided from the interval [approx - B,
// approx + B]; rows where it is not are recomputed by exact_attention_row ("escalated"). Rounded
// values are therefore bit-identical to the MPFR path's, ulp errors equal within the resolution.
//
// Memory: K, V of one (sequence, KV head) in double (O(T d)) shared by the workers, plus a block
// of `query_block` score rows per worker (O(block T)); nothing T x T is held.
// Threads: rows are split over `threads` std::threads (0: all cores). Escalations run in the worker
// that needs them; MPFR precision is applied on each worker (precision.hpp).
//
// Layouts: O [total_q, num_heads, head_size_v] (head_size_v: value_head_size); LSE [total_q,
// num_heads] (token-major).
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "attncheck/reference/exact.hpp"
#include "attncheck/reference/format.hpp"
#include "attncheck/reference/ulp.hpp"

namespace attncheck::ref {

struct FastOptions {
  int threads = 0;               // 0: std::thread::hardware_concurrency()
  LseBase base = LseBase::e;     // base of the LSE, as in exact_attention_row
  int query_block = 64;          // query rows per score GEMM
  double ulp_resolution = 0.01;  // ulp errors must be known to within this many ulps
};

// One row of the fast path before any escalation. |exact - o[c]| <= o_bound[c] and
// |exact - lse| <= lse_bound, for the true value and for the MPFR reference's value alike.
// certified == false: the fast path does not apply to this row (a NaN or infinite input it sees,
// logits or a sink beyond 2^32 in magnitude, or bounds too wide to be meaningful); use the exact path.
struct FastRow {
  std::vector<double> o;
  std::vector<double> o_bound;
  double lse = 0;
  double lse_bound = 0;
  // No visible key: o = +0 and lse = -inf, bounds 0 (exact); with sinks lse = the sink (exact in
  // base e, bounded in base two). Only when certified.
  bool empty = false;
  bool certified = true;
};

// Decisions from an interval [approx - bound, approx + bound] known to contain an exact value x.
// The correct rounding of x to `f` when every point of the interval rounds alike, else nullopt.
std::optional<uint32_t> certain_rounding(Format f, double approx, double bound);
// ulp_error(f, y, x) (ulp.hpp) when the interval settles it: the class and, for the finite class,
// |y - x| / ulp_at(f, x) to within resolution / 2 (so it agrees with the exact measure within the
// resolution). nullopt when the interval straddles a binade (the ulp is unknown), a rounding
// boundary that decides an infinite output's class, or is too wide for the resolution.
std::optional<UlpError> certain_ulp_error(Format f, double output_value, double approx, double bound,
                                          double resolution);
// Correct single rounding of a double to `f`, same result as round_to_format(f, double) but
// without MPFR (exact integer algorithm in double arithmetic); used on every element.
uint32_t round_double_to_format(Format f, double x);

struct EscalationStats {
  int64_t rows = 0;                // rows produced
  int64_t rows_escalated = 0;      // rows recomputed by the exact path (including the uncertified)
  int64_t rows_uncertified = 0;    // of which the fast path did not apply at all
  int64_t elements = 0;            // O and LSE elements decided
  int64_t elements_undecided = 0;  // elements whose interval could not decide (cause of escalation)
  double row_rate() const { return rows ? double(rows_escalated) / double(rows) : 0.0; }
  double element_rate() const { return elements ? double(elements_undecided) / double(elements) : 0.0; }
};

struct RoundedAttention {
  std::vector<uint32_t> o;    // [total_q, num_heads, head_size_v] in o_format
  std::vector<uint32_t> lse;  // [total_q, num_heads] in lse_format
};

struct AttentionUlpErrors {
  std::vector<UlpError> o;    // [total_q, num_heads, head_size_v]
  std::vector<UlpError> lse;  // [total_q, num_heads]; empty when no LSE was given
};

class FastAttentionReference {
 public:
  // Validates the problem (ReferenceError as validate()). Keeps a reference: `problem` must
  // outlive this object and stay unchanged.
  explicit FastAttentionReference(const AttentionProblem& problem, FastOptions options = {});
  ~FastAttentionReference();
  FastAttentionReference(const FastAttentionReference&) = delete;
  FastAttentionReference& operator=(const FastAttentionReference&) = delete;

  // One row, bounds only (no escalation). The row's K/V slice is decoded once and kept (one slice,
  // the last used), so consecutive rows of one (sequence, KV head) cost a GEMV each. Thread-safe.
  FastRow row(int64_t token, int32_t head) const;

  // Every row, in parallel; `visit` is called from worker threads (for distinct rows concurrently)
  // with the row's global token index and query head.
  void for_each_row(const std::function<void(int64_t token, int32_t head, const FastRow&)>& visit) const;

  // The listed rows only (a row listed twice is visited twice), grouped by K/V slice and computed in
  // blocks like for_each_row: for sampled rows of a large problem. Parallel; visit as above.
  struct RowId {
    int64_t token;
    int32_t head;
  };
  void for_rows(const std::vector<RowId>& rows,
                const std::function<void(int64_t token, int32_t head, const FastRow&)>& visit) const;

  // Correctly rounded O and LSE, bit-identical to round_to_format of exact_attention(problem, base).
  // Updates stats().
  RoundedAttention rounded(Format o_format, Format lse_format);

  // ulp_error of each output element against the exact reference, the class identical and ulps
  // within options.ulp_resolution: o_bits in o_format, layout of O; lse_values (kernel LSEs read as
  // double, in options.base) measured in the ulps of lse_format, layout [total_q, num_heads], or
  // empty to skip. Updates stats().
  AttentionUlpErrors ulp_errors(Format o_format, const std::vector<uint32_t>& o_bits, Format lse_format,
                                const std::vector<double>& lse_values);

  EscalationStats stats() const;
  void reset_stats();

 private:
  struct Counters {
    std::atomic<int64_t> rows{0}, rows_escalated{0}, rows_uncertified{0}, elements{0}, elements_undecided{0};
  };
  struct SliceCache;  // the K/V slice row() decoded last
  const AttentionProblem& problem_;
  FastOptions options_;
  int threads_;
  Counters counters_;
  std::unique_ptr<SliceCache> cache_;
};

}  // namespace attncheck::ref
