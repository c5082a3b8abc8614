// The peak-memory model (memory.hpp). Each term is a count the input's shapes give times bytes per
// item, the bytes read from the data structures that hold the item and then checked against the
// peak resident set measured on replays and prefill scenarios of several shapes
// (tests/harness/memory_bounds.py measures it again on every test run and fails when a figure here
// is exceeded). Measured on the host Release build (fp16, one sequence, fused unless named):
//   replay 1024 x 1024 keys, 1 head, d 64 ........... 86 MB  (judged elements dominate)
//   replay 2048 x 2048, 1 head, d 64 ................ 206 MB
//   replay 256 x 256, 16 heads, d 64 ................ 232 MB (4096 rows, every one judged)
//   replay 4096 x 64, 1 head, d 256, textbook ....... 754 MB (1.05 M judged elements: 720 B each)
//   replay 128 x 4096, 8 heads, d 128 ............... 407 MB (K/V decoded three ways, row bases)
//   prefill, 65536 cached keys, 1 KV head, d 128 .... 235 MB (28 B per cached K element)
#include "attncheck/memory.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "internal.hpp"
#include "split_options.hpp"

namespace attncheck {

namespace {

constexpr double kMiB = 1024.0 * 1024.0, kGiB = 1024.0 * kMiB;

// The process with its libraries mapped: a one-element replay peaks at 9 MB.
constexpr double kBaseBytes = 32 * kMiB;
// A judged output element: the Elem (two MPFR values of 200 bits with their limbs, two strings,
// the measured fields; 720 B measured per element at 1.05 M elements), the fast path's row
// (approximation, bound, four sums per column) and the exact row of an escalated row.
constexpr double kJudgedElementBytes = 1024;
// A visible key of a judged row: its score, conditioning and index in the row's basis (3 x 8 B),
// kept for every judged row until the judgement ends.
constexpr double kBasisKeyBytes = 24;
// A K element (and its V element): the judge's decoded K (4 B), |V| and its running maximum
// (2 x 8 B), the exact reference's slice (K, V, their integer forms: 4 x 8 B) and the fast
// reference's decoded copies (2 x 8 B), with the allocator's slack.
constexpr double kKvElementBytes = 96;
// An element of q, k or v held by the case (4 B), the subject call's copy and staging (4 + 8 B).
constexpr double kInputElementBytes = 16;
// An output element of one subject call (4 B) and its digest or staged copy.
constexpr double kOutputElementBytes = 8;
// A score of a call: the textbook subjects materialise S (fp32) and P per sequence.
constexpr double kScoreBytes = 8;
// A key of the row the exact reference computes: its score and weight as MPFR values.
constexpr double kExactKeyBytes = 160;
// Judgements a replay holds at once: split_order_drift kHeldJudgements (its outputs are up to 8
// split counts x 3 fold orders); split_equals_whole its two parts, fast and exact (the parts
// together no larger than the whole); batch_invariance the batch's and the victims' alone; every
// other property one.
double judgements_held(const std::string& property) {
  if (property == "split_order_drift") return detail::kHeldJudgements;
  if (property == "split_equals_whole") return 4;
  if (property == "batch_invariance") return 2;
  if (property == "chunked_prefill") return 2;  // the whole's reference, judging the chunks' rows
  return 1;
}
// Subject outputs a case of the property keeps at once: split_order_drift's configurations and
// its repeat, streamed_kv's launches, batch_invariance's batch and its victims alone.
double configurations_per_case(const std::string& property) {
  if (property == "split_order_drift") return 25;
  if (property == "streamed_kv") return 3;
  if (property == "chunked_prefill") return 3;  // the whole, the chunks' rows assembled, one chunk
  return 2;  // batch_invariance: the batch and the batch with its victims' rows alone
}

}  // namespace

double process_base_bytes() { return kBaseBytes; }

double default_max_memory_gib() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  const double half = pages > 0 && page > 0 ? double(pages) * double(page) / 2 / kGiB : 0;
  return std::max(kDefaultMaxMemoryGiB, half);
}

double case_read_peak_bytes(uint64_t file_bytes) {
  // The text, the parsed tree's copy of it, the copy of the one tensor field being decoded, its bytes
  // (at most 3/4 B a character) and the decoded tensors: each element is at least 4/3 characters of
  // base64 (a mask byte) and is decoded to at most 4 B, so at most 3 B per character.
  return kBaseBytes + double(file_bytes) * (1 + 1 + 1 + 0.75 + 3);
}

namespace {

gen::AttentionShape shape_of(const AttentionInput& a) {
  gen::AttentionShape sh;
  sh.heads = a.num_heads;
  sh.kv_heads = a.num_kv_heads;
  sh.head_size = a.head_size;
  sh.seqlens_q.assign(a.seqlens_q.begin(), a.seqlens_q.end());
  sh.seqlens_k.assign(a.seqlens_k.begin(), a.seqlens_k.end());
  sh.every_row = a.want_amax;
  return sh;
}

// q, k, v (and a mask of every score) as a case holds them.
double attention_resident_bytes(const gen::AttentionShape& a) {
  double T = 0, Tk = 0, scores = 0;
  for (size_t i = 0; i < a.seqlens_q.size(); ++i) {
    T += double(a.seqlens_q[i]);
    Tk += double(a.seqlens_k[i]);
    scores += double(a.seqlens_q[i]) * double(a.seqlens_k[i]);
  }
  return 4.0 * (T * double(a.heads) + 2 * Tk * double(a.kv_heads)) * double(a.head_size) + scores;
}

// Elements a judgement of the shape holds: its judged rows' outputs and LSEs.
double attention_judged_elements(const gen::AttentionShape& a) {
  double T = 0;
  for (const int64_t q : a.seqlens_q) T += double(q);
  const double H = double(a.heads), rows_all = T * H;
  const bool every_row = a.every_row || rows_all <= double(detail::kJudgeEveryRowUpTo);
  const double rows = every_row ? rows_all : std::min(rows_all, 2 * H + double(detail::kSampledRows));
  return rows * (double(a.head_size) + 1);
}

// Replaying (or checking) the shape with `held` judgements held at once. `host_scores`: the subject
// runs on the host, where the textbook twins materialise S and P (a replay does not know its
// subject's kind and counts them).
double attention_replay_bytes(const gen::AttentionShape& a, double held, bool host_scores = true) {
  const double H = double(a.heads), Hkv = double(a.kv_heads), D = double(a.head_size);
  double T = 0, Tk = 0, scores = 0, max_tk = 0;
  for (size_t i = 0; i < a.seqlens_q.size(); ++i) {
    T += double(a.seqlens_q[i]);
    Tk += double(a.seqlens_k[i]);
    scores += double(a.seqlens_q[i]) * double(a.seqlens_k[i]) * H;
    max_tk = std::max(max_tk, double(a.seqlens_k[i]));
  }
  // The rows judged (judge_attention.cpp's sampled_rows): all of them up to kJudgeEveryRowUpTo,
  // else the first and last row of every head and kSampledRows more.
  const bool every_row = a.every_row || T * H <= double(detail::kJudgeEveryRowUpTo);
  const double rows = every_row ? T * H : std::min(T * H, 2 * H + double(detail::kSampledRows));
  const double basis_keys = every_row ? scores : rows * max_tk;
  const double in = (T * H + 2 * Tk * Hkv) * D, out = T * H * (D + 1);
  return attention_judged_elements(a) * kJudgedElementBytes * held + basis_keys * kBasisKeyBytes +
         Tk * Hkv * D * kKvElementBytes + in * kInputElementBytes + out * kOutputElementBytes * held +
         (host_scores ? scores * kScoreBytes : 0) + max_tk * kExactKeyBytes;
}

// A merge or softmax of rows x cols outputs (a merge: cols = head size + 1 with its LSE; its input
// two such states) with `held` judgements at once.
double table_replay_bytes(double rows, double cols, double inputs_per_output, double held) {
  const double out = rows * cols;
  return out *
         (kJudgedElementBytes * held + kOutputElementBytes * held + inputs_per_output * kInputElementBytes);
}

}  // namespace

double case_resident_bytes(const Case& c) {
  if (const auto* m = std::get_if<MergeInput>(&c.input))
    return 4.0 *
           double(m->prefix_out.size() + m->suffix_out.size() + m->prefix_lse.size() + m->suffix_lse.size());
  if (const auto* s = std::get_if<SoftmaxInput>(&c.input)) return 4.0 * double(s->x.size());
  if (const auto* q = std::get_if<QuantizeInput>(&c.input)) return 4.0 * double(q->x.size());
  return attention_resident_bytes(shape_of(std::get<AttentionInput>(c.input)));
}

double attention_call_bytes(int64_t tq, int64_t tk, int64_t heads, int64_t kv_heads, int64_t head_size) {
  const double in = double(tq * heads + 2 * tk * kv_heads) * double(head_size),
               out = double(tq * heads) * double(head_size + 1);
  // The K/V term: measured 28 B per cached K element of a prefill call (copies, staging, the
  // twin's decoded tiles), bounded here by the input's 16 B and the judge-free remainder.
  return in * (kInputElementBytes + 16) + out * kOutputElementBytes * 2 +
         double(tq) * double(tk) * double(heads) * kScoreBytes;
}

double case_replay_bytes(const Case& c) {
  const double held = judgements_held(c.property);
  if (const auto* m = std::get_if<MergeInput>(&c.input))
    return table_replay_bytes(double(m->num_tokens) * m->num_heads, double(m->head_size) + 1, 2, held);
  if (const auto* s = std::get_if<SoftmaxInput>(&c.input))
    return table_replay_bytes(s->rows, s->cols, 1, held) + double(s->cols) * kExactKeyBytes;
  if (const auto* q = std::get_if<QuantizeInput>(&c.input))
    return table_replay_bytes(double(q->num_tokens) * q->num_heads, q->head_size, 1, held);
  return attention_replay_bytes(shape_of(std::get<AttentionInput>(c.input)), held);
}

double check_pair_peak_bytes(const Subject& subject, const PropertyInfo& property, const RunConfig& cfg) {
  const gen::Domain dom = detail::run_domain(subject, cfg);
  if (dom.dtypes.empty() || dom.head_sizes.empty()) return kBaseBytes;
  const double held = judgements_held(property.name), configs = configurations_per_case(property.name);
  // Per op the property runs: the largest case (held, its shrink candidates beside it: the input
  // twice more), the outputs of each configuration, and the statistics' sketches.
  double largest = 0;
  const uint32_t ops = property.ops & subject.caps().ops;
  const bool host = subject.caps().memory != AC_MEMORY_CUDA;
  if (ops & (AC_OP_ATTENTION | AC_OP_SPLITKV)) {
    auto outputs_of = [](const gen::AttentionShape& a) {
      double T = 0;
      for (const int64_t q : a.seqlens_q) T += double(q);
      return T * double(a.heads) * (double(a.head_size) + 1);
    };
    if (property.name == "streamed_kv") {
      // One case, unshrunk: held once, copied for each launch's staging and written to the
      // write-ahead file (kInputElementBytes per element), its outputs; judged on a slice of two
      // heads and 2 kSliceTokens queries over every key, as a case of its own.
      const gen::AttentionShape a = gen::largest_streamed_shape(dom);
      gen::AttentionShape slice = a;
      slice.heads = slice.kv_heads = 2;
      slice.seqlens_q = {std::min<int64_t>(a.seqlens_q.front(), 32)};
      double in = 0;
      for (size_t i = 0; i < a.seqlens_q.size(); ++i)
        in += double(a.seqlens_q[i] * a.heads + 2 * a.seqlens_k[i] * a.kv_heads) * double(a.head_size);
      largest = attention_resident_bytes(a) + in * kInputElementBytes +
                configs * outputs_of(a) * kOutputElementBytes + attention_resident_bytes(slice) +
                attention_replay_bytes(slice, held, host);
    } else if (property.name == "batch_invariance") {
      // The batch held with its shrink candidates, its outputs and the victims' alone; only the
      // victims (at most four sequences) are judged.
      const gen::AttentionShape a = gen::largest_batch_shape(dom);
      gen::AttentionShape victims = a;
      victims.seqlens_q.resize(std::min<size_t>(4, a.seqlens_q.size()));
      victims.seqlens_k.resize(victims.seqlens_q.size());
      largest = 3 * attention_resident_bytes(a) + configs * outputs_of(a) * kOutputElementBytes +
                attention_replay_bytes(victims, held, host);
    } else {
      auto shapes = property.name == "chunked_prefill" ? std::vector{gen::largest_prefill_shape(dom)}
                                                       : gen::largest_attention_shapes(dom);
      if (property.name == "fp8_descales") shapes.push_back(gen::fp8_long_row_shape(dom));
      for (const auto& a : shapes)
        largest = std::max(largest, 3 * attention_resident_bytes(a) + attention_replay_bytes(a, held, host) +
                                        configs * outputs_of(a) * kOutputElementBytes);
    }
  }
  if (ops & AC_OP_MERGE) {
    const auto [rows, d] = gen::largest_merge_shape(dom);
    const double outputs = double(rows) * (double(d) + 1);
    largest =
        std::max(largest, 3 * 2 * 4 * outputs + table_replay_bytes(double(rows), double(d) + 1, 2, held));
  }
  if (ops & AC_OP_SOFTMAX) {
    const auto [rows, cols] = gen::largest_softmax_shape(dom);
    largest = std::max(largest, 3 * 4 * double(rows) * double(cols) +
                                    table_replay_bytes(double(rows), double(cols), 1, held) +
                                    double(cols) * kExactKeyBytes);
  }
  if (ops & AC_OP_QUANTIZE) {
    const auto [rows, d] = gen::largest_quantize_shape(dom);
    largest = std::max(
        largest, 3 * 4 * double(rows) * double(d) + table_replay_bytes(double(rows), double(d), 1, held));
  }
  // Three sketches (ulp, cancellation, ratio) per dtype and output (O and LSE; Y).
  const double sketches = 3.0 * double(dom.dtypes.size()) * 2 * detail::QuantileSketch::peak_bytes();
  return kBaseBytes + largest + sketches;
}

double tiling_peak_bytes(const Subject& subject, const RunConfig& cfg) {
  const gen::Domain dom = detail::run_domain(subject, cfg);
  if (dom.dtypes.empty() || dom.head_sizes.empty()) return kBaseBytes;
  // tiling_report's configurations: every tiling, and of a split-KV subject every split count and
  // fold order.
  const ac_caps& caps = subject.caps();
  const double configurations =
      double(std::max(1, caps.num_tilings)) *
      (subject.has_op(AC_OP_SPLITKV)
           ? double(detail::split_counts(caps).size() * detail::tried_folds(caps).size())
           : 1.0);
  // Every input held at once (tiling_report draws them first), one judgement at a time with its
  // reference side, and each configuration's sketches.
  double largest_case = 0, largest_judged = 0;
  for (const auto& a : gen::largest_attention_shapes(dom)) {
    largest_case = std::max(largest_case, attention_resident_bytes(a));
    largest_judged =
        std::max(largest_judged, attention_replay_bytes(a, 1, subject.caps().memory != AC_MEMORY_CUDA));
  }
  const double sketches =
      configurations * 3.0 * double(dom.dtypes.size()) * 2 * detail::QuantileSketch::peak_bytes();
  return kBaseBytes + double(std::max(1, cfg.num_cases)) * largest_case + largest_judged + sketches;
}

std::string memory_refusal(const std::string& what, double estimate_bytes, double limit_gib) {
  char line[160];
  std::snprintf(line, sizeof line,
                " needs an estimated %.2f GiB of memory, past the limit of %.2f GiB (--max-memory)",
                estimate_bytes / kGiB, limit_gib);
  return what + line;
}

}  // namespace attncheck
