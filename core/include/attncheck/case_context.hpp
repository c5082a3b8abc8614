// The context of a case in one short phrase, for every line that reports a failure (report.md,
// report.html, junit.xml, check's stderr, pytest's message, replay):
//   attention  "fp16, causal (bottom-right), Tq=1 Tk=2, GQA 4:1, d=8, tiling 64x64, row 0 sees 1 of 2 keys"
//   merge      "fp32, 2 tokens x 1 head, d=4, row 0: prefix empty (-inf), suffix empty (+inf, FA2)"
//   softmax    "fp16, 1 row x 8 cols, row 0: max logit 11.1"
// A user reading a failure should see at once whether it was causal, masked, GQA or varlen, its
// dtype and tiling, and how many keys the failing row could see: the classes of bug (a causal mask
// aligned top-left, a wrong GQA head map, a fully masked row) show in those words, without opening
// the case file.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "attncheck/case.hpp"

namespace attncheck {

// `caps`: the subject the case ran on, to name its tiling as BrxBc (else by index). `row`: the
// failing row (token * heads + head; softmax: the row), whose visible keys (attention) or sides
// (merge) the phrase names; -1 when unknown, then the phrase sums up every row instead.
std::string case_context(const Case&, const ac_caps* caps = nullptr, int64_t row = -1);

// The kind of one row (as case_context numbers rows), the part of a failure's signature that says
// where in the input a defect lives:
//   attention  "empty row" (sees no key), "fully visible row" (sees every key of its sequence),
//              "causal edge row" (fewer keys only through the causal limit), "window edge row"
//              (fewer only through the causal limit and the sliding window), "partly masked row"
//   merge      "both sides empty", "prefix empty", "suffix empty", "both sides finite" (an empty side
//              is an LSE of -inf or +inf; NaN counts as finite here: it is no sentinel)
//   softmax    "row"
// "" when the row is out of range.
std::string row_kind(const Case&, int64_t row);
// Row kinds in one pass: an attention input's per token (every head of a token alike; a row is
// token * heads + head), a merge's of one row.
std::vector<const char*> attention_row_kinds(const AttentionInput&);
const char* merge_row_kind(const MergeInput&, size_t row);
// Whether a later round of a search may leave rows of a kind unjudged (Case::excused_rows): every
// kind but those every case holds (attention rows that see keys, merge rows with both sides finite,
// softmax rows).
bool row_kind_avoidable(const std::string& kind);

}  // namespace attncheck
