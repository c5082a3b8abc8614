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

#include <algorithm>
#include <cstdio>

#include "internal.hpp"

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
// Judgements a replay holds at once: split_order_drift one per distinct output, up to 8 split
// counts x 3 fold orders (and its outputs); split_equals_whole its two parts, fast and exact (the
// parts together no larger than the whole); every other property one.
double judgements_held(const Case& c) {
  if (c.property == "split_order_drift") return 25;
  if (c.property == "split_equals_whole") return 4;
  return 1;
}

}  // namespace

double process_base_bytes() { return kBaseBytes; }

double case_read_peak_bytes(uint64_t file_bytes) {
  // The text, the parsed tree's copy of it, and the decoded tensors: each element is at least 4/3
  // characters of base64 (a mask byte) and is decoded to at most 4 B, so at most 3 B per character.
  return kBaseBytes + double(file_bytes) * (1 + 1 + 3);
}

double case_resident_bytes(const Case& c) {
  if (const auto* m = std::get_if<MergeInput>(&c.input))
    return 4.0 *
           double(m->prefix_out.size() + m->suffix_out.size() + m->prefix_lse.size() + m->suffix_lse.size());
  if (const auto* s = std::get_if<SoftmaxInput>(&c.input)) return 4.0 * double(s->x.size());
  const auto& a = std::get<AttentionInput>(c.input);
  return 4.0 * double(a.q.size() + a.k.size() + a.v.size()) + double(a.mask.size());
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
  const double held = judgements_held(c);
  if (const auto* m = std::get_if<MergeInput>(&c.input)) {
    const double rows = double(m->num_tokens) * m->num_heads, out = rows * (double(m->head_size) + 1);
    return out * (kJudgedElementBytes * held + kOutputElementBytes * held + 2 * kInputElementBytes);
  }
  if (const auto* s = std::get_if<SoftmaxInput>(&c.input)) {
    const double out = double(s->rows) * s->cols;
    return out * (kJudgedElementBytes * held + kOutputElementBytes * held + kInputElementBytes) +
           double(s->cols) * kExactKeyBytes;
  }
  const auto& a = std::get<AttentionInput>(c.input);
  const double H = a.num_heads, Hkv = a.num_kv_heads, D = a.head_size;
  double T = 0, Tk = 0, scores = 0, max_tk = 0;
  for (size_t i = 0; i < a.seqlens_q.size(); ++i) {
    T += a.seqlens_q[i];
    Tk += a.seqlens_k[i];
    scores += double(a.seqlens_q[i]) * a.seqlens_k[i] * H;
    max_tk = std::max(max_tk, double(a.seqlens_k[i]));
  }
  // The rows judged (judge_attention.cpp's sampled_rows): all of them up to kJudgeEveryRowUpTo,
  // else the first and last row of every head and kSampledRows more.
  const bool every_row = T * H <= double(detail::kJudgeEveryRowUpTo);
  const double rows = every_row ? T * H : std::min(T * H, 2 * H + double(detail::kSampledRows));
  const double basis_keys = every_row ? scores : rows * max_tk;
  const double in = (T * H + 2 * Tk * Hkv) * D, out = T * H * (D + 1);
  return rows * (D + 1) * kJudgedElementBytes * held + basis_keys * kBasisKeyBytes +
         Tk * Hkv * D * kKvElementBytes + in * kInputElementBytes + out * kOutputElementBytes * held +
         scores * kScoreBytes + max_tk * kExactKeyBytes;
}

std::string memory_refusal(const std::string& what, double estimate_bytes, double limit_gib) {
  char line[160];
  std::snprintf(line, sizeof line,
                " needs an estimated %.2f GiB of memory, past the limit of %.2f GiB (--max-memory)",
                estimate_bytes / kGiB, limit_gib);
  return what + line;
}

}  // namespace attncheck
