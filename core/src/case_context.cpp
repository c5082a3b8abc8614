// See case_context.hpp. The phrase reads the case only (shapes, flags, mask, LSE sentinels), never
// its outputs, so a report, a replay and a case file give the same words for the same case.
#include "attncheck/case_context.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "attncheck/names.hpp"

namespace attncheck {
namespace {

std::string list_of(const std::vector<int32_t>& v) {
  constexpr size_t kShown = 4;  // a long varlen batch is named by its first sequences
  std::string s;
  for (size_t i = 0; i < v.size() && i < kShown; ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  if (v.size() > kShown) s += ",...";
  return s;
}

std::string plural(int64_t n, const char* one) { return std::to_string(n) + " " + one + (n == 1 ? "" : "s"); }

// Keys that query row t (0-based in its sequence of tq queries over tk keys) may attend to: the
// reference's rule (bottom-right causal alignment and the window, then the mask).
int64_t visible_keys(const AttentionInput& a, size_t seq, int64_t mask_offset, int32_t t) {
  const int32_t tq = a.seqlens_q[seq], tk = a.seqlens_k[seq];
  const auto [first, last] = a.key_range(t, tq, tk);
  if (a.mask.empty()) return std::max<int64_t>(0, last - first + 1);
  int64_t n = 0;
  const int64_t row_at = mask_offset + int64_t(t) * tk;
  for (int64_t j = std::max<int64_t>(first, 0); j <= last; ++j)
    if (row_at + j < int64_t(a.mask.size()) && a.mask[size_t(row_at + j)]) ++n;
  return n;
}

// The engines' variants the case uses, each as declared_variants names it: ", pages of 16 (12 in
// the pool), softcap 30, window (left 4, right 0), sinks, K and V in e4m3fn (descales per KV head)".
std::string variant_words(const AttentionInput& a) {
  std::string s;
  if (a.page_size > 0)
    s += ", pages of " + std::to_string(a.page_size) + " (" + std::to_string(a.num_pages) + " in the pool)";
  if (a.softcap > 0) {
    char cap[32];
    std::snprintf(cap, sizeof cap, "%g", double(a.softcap));
    s += ", softcap " + std::string(cap);
  }
  auto side = [](int32_t w) { return w < 0 ? std::string("unbounded") : std::to_string(w); };
  if (a.window_left != -1 || a.window_right != -1)
    s += ", window (left " + side(a.window_left) + ", right " + side(a.window_right) + ")";
  if (!a.sinks.empty()) s += ", sinks";
  if (a.fp8_kv()) {
    static const char* const kPer[] = {"per tensor", "per KV head", "per sequence and KV head"};
    s += std::string(a.fp8_q() ? ", Q, K and V in " : ", K and V in ") + kv_dtype_name(a.kv_dtype) +
         " (descales " + kPer[std::clamp(a.descale_granularity(), 0, 2)] + ")";
  }
  if (a.fp8_out()) s += std::string(", O in ") + kv_dtype_name(a.out_dtype);
  return s;
}

std::string attention_context(const Case& c, const AttentionInput& a, const ac_caps* caps, int64_t row) {
  std::string s = dtype_name(a.dtype);
  s += ", ";
  if (a.causal && !a.mask.empty())
    s += "causal (bottom-right) and masked";
  else if (a.causal)
    s += "causal (bottom-right)";
  else if (!a.mask.empty())
    s += "masked";
  else
    s += "no mask";
  const size_t seqs = std::min(a.seqlens_q.size(), a.seqlens_k.size());
  if (seqs == 1)
    s += ", Tq=" + std::to_string(a.seqlens_q[0]) + " Tk=" + std::to_string(a.seqlens_k[0]);
  else
    s += ", varlen " + plural(int64_t(seqs), "sequence") + " Tq=" + list_of(a.seqlens_q) +
         " Tk=" + list_of(a.seqlens_k);
  if (a.num_kv_heads > 0 && a.num_heads != a.num_kv_heads && a.num_heads % a.num_kv_heads == 0)
    s += ", GQA " + std::to_string(a.num_heads / a.num_kv_heads) + ":1 (" + std::to_string(a.num_heads) +
         " over " + std::to_string(a.num_kv_heads) + " heads)";
  else
    s += ", " + plural(a.num_heads, "head");
  s += ", d=" + std::to_string(a.head_size);
  if (a.dv() != a.head_size) s += " (V " + std::to_string(a.dv()) + (a.v_in_k ? ", inside K)" : ")");
  s += variant_words(a);
  if (caps && caps->tilings && c.options.tiling >= 0 && c.options.tiling < caps->num_tilings)
    s += ", tiling " + std::to_string(caps->tilings[c.options.tiling].br) + "x" +
         std::to_string(caps->tilings[c.options.tiling].bc);
  else if (!caps && c.options.tiling > 0)
    s += ", tiling #" + std::to_string(c.options.tiling);
  if (c.op == op_name(AC_OP_SPLITKV))
    s += ", " + plural(c.options.num_splits, "split") + " (fold " + fold_name(c.options.fold_order) + ")";

  // Visible keys: of the failing row, or the range over every row.
  const int64_t heads = std::max<int32_t>(1, a.num_heads);
  int64_t token = 0, mask_offset = 0, lo = INT64_MAX, hi = -1, empty_rows = 0, rows = 0;
  for (size_t q = 0; q < seqs; ++q) {
    for (int32_t t = 0; t < a.seqlens_q[q]; ++t, ++token) {
      const int64_t n = visible_keys(a, q, mask_offset, t);
      if (row >= 0 && token == row / heads)
        return s + ", row " + std::to_string(token) + " sees " + std::to_string(n) + " of " +
               plural(a.seqlens_k[q], "key");
      lo = std::min(lo, n);
      hi = std::max(hi, n);
      empty_rows += n == 0;
      ++rows;
    }
    mask_offset += int64_t(a.seqlens_q[q]) * a.seqlens_k[q];
  }
  if (rows == 0) return s + ", no query rows";
  if (rows == 1) return s + ", row 0 sees " + plural(lo, "key");
  s += ", rows see " + (lo == hi ? std::to_string(lo) : std::to_string(lo) + " to " + std::to_string(hi)) +
       " keys";
  if (empty_rows > 0 && empty_rows < rows) s += " (" + std::to_string(empty_rows) + " see none)";
  return s;
}

const char* side_state(float lse) {
  if (std::isnan(lse)) return "NaN LSE";
  if (std::isinf(lse)) return lse < 0 ? "empty (-inf)" : "empty (+inf, FA2)";
  return "";
}

std::string merge_context(const MergeInput& m, int64_t row) {
  std::string s = std::string(dtype_name(m.dtype)) + ", " + plural(m.num_tokens, "token") + " x " +
                  plural(m.num_heads, "head") + ", d=" + std::to_string(m.head_size);
  const size_t rows = std::min(m.prefix_lse.size(), m.suffix_lse.size());
  auto side = [](const char* name, float lse) {
    const std::string st = side_state(lse);
    char value[48];
    std::snprintf(value, sizeof value, "%s LSE %.9g", name, double(lse));
    return st.empty() ? std::string(value) : std::string(name) + " " + st;
  };
  if (row >= 0 && size_t(row) < rows)
    return s + ", row " + std::to_string(row) + ": " + side("prefix", m.prefix_lse[size_t(row)]) + ", " +
           side("suffix", m.suffix_lse[size_t(row)]);
  // Every row: how many have an empty (or NaN) side, per side and kind.
  std::string sides;
  for (const auto& [name, lse] : {std::pair{"prefix", &m.prefix_lse}, std::pair{"suffix", &m.suffix_lse}})
    for (const char* kind : {"empty (-inf)", "empty (+inf, FA2)", "NaN LSE"}) {
      const auto n = std::count_if(lse->begin(), lse->end(),
                                   [&](float x) { return std::string(side_state(x)) == kind; });
      if (n > 0)
        sides += ", " + std::string(name) + " " + kind + " in " + std::to_string(n) + " of " +
                 plural(int64_t(rows), "row");
    }
  return s + (sides.empty() ? ", both sides finite in every row" : sides);
}

}  // namespace

// Attention row kinds, per row in case_context's order (token-major; every head of a token alike).
std::vector<const char*> attention_row_kinds(const AttentionInput& a) {
  std::vector<const char*> kinds;
  const size_t seqs = std::min(a.seqlens_q.size(), a.seqlens_k.size());
  int64_t mask_offset = 0;
  // One sequence at a time, without the mask: causal alone, then with the window.
  AttentionInput causal, windowed;
  causal.causal = windowed.causal = a.causal;
  windowed.window_left = a.window_left;
  windowed.window_right = a.window_right;
  for (size_t q = 0; q < seqs; ++q) {
    causal.seqlens_q = windowed.seqlens_q = {a.seqlens_q[q]};
    causal.seqlens_k = windowed.seqlens_k = {a.seqlens_k[q]};
    for (int32_t t = 0; t < a.seqlens_q[q]; ++t) {
      const int64_t n = visible_keys(a, q, mask_offset, t);
      kinds.push_back(n == 0                                 ? "empty row"
                      : n == a.seqlens_k[q]                  ? "fully visible row"
                      : n == visible_keys(causal, 0, 0, t)   ? "causal edge row"
                      : n == visible_keys(windowed, 0, 0, t) ? "window edge row"
                                                             : "partly masked row");
    }
    mask_offset += int64_t(a.seqlens_q[q]) * a.seqlens_k[q];
  }
  return kinds;
}

const char* merge_row_kind(const MergeInput& m, size_t row) {
  const bool p = std::isinf(m.prefix_lse[row]), s = std::isinf(m.suffix_lse[row]);
  return p && s ? "both sides empty" : p ? "prefix empty" : s ? "suffix empty" : "both sides finite";
}

std::string row_kind(const Case& c, int64_t row) {
  if (row < 0) return "";
  if (const auto* a = std::get_if<AttentionInput>(&c.input)) {
    const std::vector<const char*> kinds = attention_row_kinds(*a);
    const int64_t token = row / std::max<int32_t>(1, a->num_heads);
    return token < int64_t(kinds.size()) ? kinds[size_t(token)] : "";
  }
  if (const auto* m = std::get_if<MergeInput>(&c.input))
    return size_t(row) < std::min(m->prefix_lse.size(), m->suffix_lse.size())
               ? merge_row_kind(*m, size_t(row))
               : "";
  return "row";
}

bool row_kind_avoidable(const std::string& kind) {
  return kind == "empty row" || kind == "partly masked row" || kind == "causal edge row" ||
         kind == "window edge row" || kind == "both sides empty" || kind == "prefix empty" ||
         kind == "suffix empty";
}

std::string case_context(const Case& c, const ac_caps* caps, int64_t row) {
  if (const auto* a = std::get_if<AttentionInput>(&c.input)) return attention_context(c, *a, caps, row);
  if (const auto* m = std::get_if<MergeInput>(&c.input)) return merge_context(*m, row);
  if (const auto* q = std::get_if<QuantizeInput>(&c.input)) {
    std::string s = std::string(dtype_name(q->dtype)) + " to " + kv_dtype_name(q->out_dtype) + ", " +
                    plural(q->num_tokens, "token") + " x " + plural(q->num_heads, "head") + " x " +
                    std::to_string(q->head_size) + ", " +
                    (q->scales.size() > 1 ? "a scale per head" : "one scale");
    if (caps) s += (caps->fp8 & AC_FP8_SATURATE) ? ", saturating" : ", overflow to NaN / inf";
    if (row >= 0 && q->num_heads > 0 && row < int64_t(q->num_tokens) * q->num_heads)
      s += ", token " + std::to_string(row / q->num_heads) + " head " + std::to_string(row % q->num_heads) +
           " (scale " + std::to_string(q->scale_of_head(row % q->num_heads)) + ")";
    return s;
  }
  const auto& x = std::get<SoftmaxInput>(c.input);
  std::string s =
      std::string(dtype_name(x.dtype)) + ", " + plural(x.rows, "row") + " x " + plural(x.cols, "col");
  if (row >= 0 && row < x.rows) s += ", row " + std::to_string(row);
  return s;
}

}  // namespace attncheck
