// case_context: the phrase every failure line carries. Expected phrases are written from the
// attention convention (bottom-right causal: query t of Tq over Tk keys sees keys 0 .. t + Tk - Tq;
// a mask entry nonzero = visible) and the merge sentinels (-inf empty, +inf FlashAttention-2's
// empty), not from this code's output.
#include <catch2/catch.hpp>
#include <cmath>

#include "attncheck/case.hpp"
#include "attncheck/case_context.hpp"

using namespace attncheck;

namespace {

Case attention_case(std::vector<int32_t> tq, std::vector<int32_t> tk, int heads, int kv_heads, bool causal,
                    std::vector<uint8_t> mask = {}) {
  AttentionInput a;
  a.dtype = AC_DTYPE_F16;
  a.num_heads = heads;
  a.num_kv_heads = kv_heads;
  a.head_size = 8;
  a.seqlens_q = std::move(tq);
  a.seqlens_k = std::move(tk);
  a.causal = causal;
  a.mask = std::move(mask);
  Case c;
  c.op = "attention";
  c.input = a;
  return c;
}

}  // namespace

TEST_CASE("the context names dtype, causal alignment, shape, GQA, tiling and the row's visible keys",
          "[context]") {
  const ac_tiling tilings[] = {{32, 32}, {64, 64}};
  ac_caps caps{};
  caps.tilings = tilings;
  caps.num_tilings = 2;
  Case c = attention_case({1}, {2}, 4, 1, true);
  c.options.tiling = 1;
  // Tq = 1 over Tk = 2, bottom-right: query 0 sees keys 0 .. 0 + 2 - 1, both.
  CHECK(case_context(c, &caps, 3) ==
        "fp16, causal (bottom-right), Tq=1 Tk=2, GQA 4:1 (4 over 1 heads), d=8, tiling 64x64, row 0 sees 2 "
        "of 2 keys");
  // A mask hiding key 1: one of two keys.
  c = attention_case({1}, {2}, 2, 2, false, {1, 0});
  CHECK(case_context(c, &caps, 0) ==
        "fp16, masked, Tq=1 Tk=2, 2 heads, d=8, tiling 32x32, row 0 sees 1 of 2 keys");
  // Top-left alignment would give query 0 of Tq = 2 over Tk = 3 one key; bottom-right gives two.
  c = attention_case({2}, {3}, 1, 1, true);
  CHECK(case_context(c, nullptr, 0).ends_with("row 0 sees 2 of 3 keys"));
  CHECK(case_context(c, nullptr, 1).ends_with("row 1 sees 3 of 3 keys"));
  // No failing row: the range over every row; varlen sequences named by their lengths.
  c = attention_case({1, 2}, {3, 0}, 1, 1, false);
  CHECK(case_context(c) ==
        "fp16, no mask, varlen 2 sequences Tq=1,2 Tk=3,0, 1 head, d=8, rows see 0 to 3 keys (2 see none)");
  // V with a head size of its own (MLA's pairs) is named: a replay of "d=8" alone would not say
  // which pair the subject declared; describe_size writes the pair as d=QK/V.
  c = attention_case({1}, {2}, 1, 1, false);
  std::get<AttentionInput>(c.input).head_size_v = 4;
  CHECK(case_context(c, nullptr, 0) == "fp16, no mask, Tq=1 Tk=2, 1 head, d=8 (V 4), row 0 sees 2 of 2 keys");
  CHECK(describe_size(case_size(c)) == "tokens=1 keys=2 heads=1 d=8/4");
  std::get<AttentionInput>(c.input).head_size_v = 8;  // equal: the plain contract, no V size named
  CHECK(describe_size(case_size(c)) == "tokens=1 keys=2 heads=1 d=8");
}

TEST_CASE("a merge's context says which side of the failing row is empty or +inf", "[context]") {
  MergeInput m;
  m.dtype = AC_DTYPE_F32;
  m.num_tokens = 2;
  m.num_heads = 1;
  m.head_size = 4;
  m.prefix_lse = {-INFINITY, 0.5f};
  m.suffix_lse = {INFINITY, INFINITY};
  Case c;
  c.op = "merge";
  c.input = m;
  CHECK(case_context(c, nullptr, 0) ==
        "fp32, 2 tokens x 1 head, d=4, row 0: prefix empty (-inf), suffix empty (+inf, FA2)");
  CHECK(case_context(c, nullptr, 1) ==
        "fp32, 2 tokens x 1 head, d=4, row 1: prefix LSE 0.5, suffix empty (+inf, FA2)");
  CHECK(case_context(c) ==
        "fp32, 2 tokens x 1 head, d=4, prefix empty (-inf) in 1 of 2 rows, suffix empty (+inf, FA2) in 2 of "
        "2 rows");
}

TEST_CASE("the context counts a sliding window's keys and names the engines' variants", "[context]") {
  // Tq = 4 over Tk = 8, bottom-right: query t's diagonal is key t + 4; a left window of 2 lets it
  // see keys t + 2 .. t + 4 (causal), three of eight; with right 1 and no causal limit, t + 2 .. t + 5
  // except where that passes key 7 (query 3: keys 5 .. 7).
  Case c = attention_case({4}, {8}, 1, 1, true);
  auto& a = std::get<AttentionInput>(c.input);
  a.window_left = 2;
  CHECK(case_context(c, nullptr, 0) ==
        "fp16, causal (bottom-right), Tq=4 Tk=8, 1 head, d=8, window (left 2, right unbounded), row 0 sees 3 "
        "of 8 keys");
  CHECK(row_kind(c, 0) == "window edge row");
  CHECK(row_kind_avoidable("window edge row"));
  a.causal = false;
  a.window_right = 1;
  CHECK(case_context(c, nullptr, 0).ends_with("window (left 2, right 1), row 0 sees 4 of 8 keys"));
  CHECK(case_context(c, nullptr, 3).ends_with("row 3 sees 3 of 8 keys"));
  // A window wider than the keys cuts nothing: query 3 of a causal Tq = Tk = 4 sees all four.
  c = attention_case({4}, {4}, 1, 1, true);
  std::get<AttentionInput>(c.input).window_left = 100;
  CHECK(row_kind(c, 3) == "fully visible row");
  CHECK(row_kind(c, 0) == "causal edge row");
  // A mask inside the window: key 6 of query 0's 5 .. 7 hidden leaves two, a partly masked row.
  c = attention_case({1}, {8}, 1, 1, false, {1, 1, 1, 1, 1, 1, 0, 1});
  std::get<AttentionInput>(c.input).window_left = 2;
  std::get<AttentionInput>(c.input).window_right = 0;
  CHECK(case_context(c, nullptr, 0).ends_with("row 0 sees 2 of 8 keys"));
  CHECK(row_kind(c, 0) == "partly masked row");
  // Pages, a softcap, sinks and an FP8 cache are named; the descales' granularity read off their count.
  c = attention_case({1}, {2}, 2, 2, false);
  auto& v = std::get<AttentionInput>(c.input);
  v.page_size = 16;
  v.num_pages = 3;
  v.softcap = 30;
  v.sinks = {0.5f, 0.5f};
  v.kv_dtype = AC_DTYPE_E4M3;
  v.k_descale = v.v_descale = {0.5f, 0.25f};
  CHECK(case_context(c, nullptr, 0) ==
        "fp16, no mask, Tq=1 Tk=2, 2 heads, d=8, pages of 16 (3 in the pool), softcap 30, sinks, K and V in "
        "e4m3fn (descales per KV head), row 0 sees 2 of 2 keys");
}
