// RapidCheck generators, one small named generator per failure class of the Background chapter, composed
// into whole inputs for each operation. RapidCheck's own float generators never give NaN, Inf,
// subnormals or tiny magnitudes, so every value here is built from weighted special values and bit
// patterns, and rounded once to its storage format (reference round_to_format). Sizes never exceed
// RapidCheck's size (<= 100) except where a Domain asks for long rows (max_keys), which are scaled
// explicitly. Attention logits are steered through q and k: a "structured" input gives query row t
// a one-hot q on coordinate c(t) and carries the target logit in k_j[c(t)] with scale 1, so the
// subject's own q.k reproduces the target exactly (rounded to the dtype).
#pragma once
#include <rapidcheck.h>

#include <cstdint>
#include <vector>

#include "attncheck/subject.hpp"

namespace attncheck::gen {

// What the generated inputs must respect: the subject's capabilities and the run's limits.
struct Domain {
  std::vector<ac_dtype> dtypes;     // non-empty
  std::vector<int32_t> head_sizes;  // candidate head sizes the subject accepts (small, odd ones too)
  uint32_t features = 0;            // AC_FEAT_* (causal, mask, varlen, gqa)
  int max_keys = 64;                // longest key row
  int max_tokens = 8;               // query rows per sequence
  int max_heads = 4;                // query heads (GQA ratios 1, 2, 4, 8 within it)
  int tile_keys = 0;                // the subject's largest key tile (Bc); 0: none
  bool zero_keys = true;            // sequences of 0 keys allowed (AC_CAP_REFUSES_ZERO_KEYS: not)
  int layer_tokens = 0;             // > 0: attention_input draws the Llama-3-8B layer shape (RunConfig)
  int64_t streamed_kv_bytes = 0;    // attention_streamed_input: K and V together hold at least this
  int max_batch = 0;                // attention_batch_input: sequences in a batch (0: kMaxBatchHost/Device)
  // Merge inputs give each empty state O = +0 (AC_CAP_EMPTY_STATES_ZERO_O).
  bool empty_states_zero_o = false;
  // The engines' variants the subject declares (AC_VAR_*) and its page sizes: attention inputs
  // draw them (with_variants), each in some cases, never where the subject does not declare it.
  uint32_t variants = 0;
  std::vector<int32_t> page_sizes;
  // An FP8 KV cache the subject declares (ac_caps kv_dtypes, fp8): with_variants quantises K and V
  // into one of those formats in some cases (with_fp8_kv), descales per KV head where fp8 allows.
  uint32_t kv_dtypes = 0, fp8 = 0;
  std::vector<ac_head_pair> head_pairs;  // AC_VAR_HEAD_SIZE_V: drawn by attention_with
  // The subject's declared call limits (ac_caps max_call_*; 0: none): rows stay within them, and
  // attention_batch_input's batches too (at most max_call_seqs sequences, neighbours dropped until
  // the query tokens and keys fit). Other cases past them are skipped by the subject wrapper.
  int max_call_seqs = 0, max_call_tokens = 0;
  int64_t max_call_keys = 0;
};
// The sequences a batch of attention_batch_input holds at most: on the host twins a few (each is
// launched alone too), on a device past an H100's and H200's 132 SMs, so that batch sizes cross the
// SM count schedulers compare with.
constexpr int kMaxBatchHost = 8, kMaxBatchDevice = 140;
// The key tile a subject that declares no tilings is tested as if it had, when the run's max_keys
// reaches it: rows of up to 2 * 64 + 8 keys then cross the boundaries of 64- and 128-key tiles.
constexpr int kNominalTileKeys = 64;
// Whether attention inputs with empty rows can be drawn for the domain: a mask, a zero-key range,
// or causal alignment with more queries than keys.
bool can_draw_empty_attention_rows(const Domain&);
Domain domain_for(const Subject&, int max_keys, const std::vector<ac_dtype>& only_dtypes = {});

// Draws the declared variants into an attention input (only where dom.variants has them; nothing
// is drawn otherwise, so a plain subject's cases are unchanged): a softcap near the scores' range
// (tanh saturating, or barely bending), a window (left and right sides, edges on and off the key
// tiles, rows left with no key when Tq > Tk), sinks (ordinary, above every score, far below), and
// paged K / V (a declared page size; pages shuffled; a prefix shared between sequences as prefix
// caching does; the last page part-filled; slots past a sequence's keys, unreferenced pages and
// table entries past a sequence's last page poisoned with NaN and huge values). `sinks` false
// leaves the sinks out (a property whose pieces must not count them twice draws them itself).
void with_variants(const Domain& dom, AttentionInput& a, bool sinks = true);
// A contiguous input's K / V in pages of page_size, in key order (sequence after sequence), the
// last page of each part-filled, and one poisoned page past them that every table entry past a
// sequence's last page names (one entry more than the longest sequence needs): the plainest paged
// layout of the same attention (the shrinker's). A non-zero `shuffle` permutes the pages (the
// poisoned one stays last), a fixed function of it; `shared` whole pages of sequence 1 are sequence
// 0's first ones (prefix caching): sequence 1 reads sequence 0's keys there, and its own first
// `shared` pages of keys are not copied.
AttentionInput paged_copy(const AttentionInput& contiguous, int32_t page_size, uint64_t shuffle = 0,
                          int32_t shared = 0);
// `a` (K and V in its dtype) with K and V quantised to an FP8 cache of `format` (AC_DTYPE_E4M3 or
// AC_DTYPE_E5M2): code = encode(x / descale), rounded once, saturating; one descale per tensor or
// one per KV head (the vectors' sizes). The descales are the case's, the codes what the kernel reads.
// A non-empty q_descale (as many values as k_descale) quantises Q the same way (AC_FP8_Q), each query
// head with its KV head's descale.
AttentionInput fp8_copy(const AttentionInput& a, ac_dtype format, std::vector<float> k_descale,
                        std::vector<float> v_descale, std::vector<float> q_descale = {});
// The poison a paged pool's unused slots hold: NaN in the first element of a row, the format's
// largest finite value in the others, so a read of such a slot shows in the output.
void poison_row(ac_dtype d, uint32_t* row, int64_t n);

// Logit rows (exact doubles, not yet rounded), length n, one generator per class.
rc::Gen<std::vector<double>> normal_logits(int n);        // sigma from {0.5, 1, 3, 10}
rc::Gen<std::vector<double>> late_outlier_logits(int n);  // +40 at ~49% of the row, sigma 3
rc::Gen<std::vector<double>> fp16_overflow_band_logits(
    int n);  // max in [11.0, 11.2], straddling 11.0859375/11.09375
rc::Gen<std::vector<double>> overflow_band_logits(ac_dtype,
                                                  int n);   // the band of the dtype (fp32/bf16: 88.72)
rc::Gen<std::vector<double>> underflow_band_logits(int n);  // spread below max - 17.33
rc::Gen<std::vector<double>> huge_magnitude_logits(int n);  // +-100, 1e4, 6e4
rc::Gen<std::vector<double>> all_equal_logits(int n);
rc::Gen<std::vector<double>> any_logits(ac_dtype, int n);  // weighted mix of all of the above

// Special scalar values of a format, with weights: zeros, +-inf, subnormals, max finite, +-1.
rc::Gen<uint32_t> special_bits(ac_dtype);
rc::Gen<uint32_t> finite_bits(ac_dtype);  // any finite bit pattern, small exponents favoured

// Values (head_size columns per key), returned as bits of dtype.
rc::Gen<Bits> random_values(ac_dtype, int64_t n);
rc::Gen<Bits> constant_values(ac_dtype, int64_t n);
rc::Gen<Bits> sign_cancelling_values(ac_dtype, int rows, int head_size);  // pairs v, -v
rc::Gen<Bits> any_values(ac_dtype, int rows, int head_size);
rc::Gen<Bits> near_max_values(ac_dtype,
                              int64_t n);  // magnitudes in [max/2, max): merge overflow of an unscaled sum

// Masks for one sequence [tq, tk], row-major, 1 = visible.
rc::Gen<std::vector<uint8_t>> fully_masked_rows_mask(int tq, int tk);
rc::Gen<std::vector<uint8_t>> all_but_one_masked(int tq, int tk);
rc::Gen<std::vector<uint8_t>> random_mask(int tq, int tk);
rc::Gen<std::vector<uint8_t>> any_mask(int tq, int tk);

// LSE pairs for merges (in the subject's base): FA2 +inf sentinel on either/both sides, -inf
// either/both, equal, gaps past fp32's exp range (> 104), above 88.7, ordinary.
rc::Gen<std::pair<float, float>> merge_lse_pair();

// An empty merge state's LSE: -inf, or FlashAttention-2's +inf (a merge reads both as empty).
bool empty_state_lse(float lse);
// What AC_CAP_EMPTY_STATES_ZERO_O declares the producers write: every empty state's O set to +0.
void zero_empty_states(MergeInput&);
// The first row (token * heads + head) holding an empty state whose O is not all zeros, or -1: under
// AC_CAP_EMPTY_STATES_ZERO_O such a case lies outside the subject's contract.
int64_t first_empty_state_with_o(const MergeInput&);

// Whole inputs. The merge inputs' empty states hold arbitrary finite O unless the domain says
// empty_states_zero_o.
// The KV-cache quantiser's inputs (AC_OP_QUANTIZE): a declared input dtype and FP8 format, scales per
// tensor or per head (where declared) of 1, 2^k or any fp32 value, and elements aimed at the
// contract's hazards: ties between neighbouring codes (the overflow threshold among them) and
// values next to them, values around the largest code and the smallest subnormal, infinities,
// NaN and zeros.
rc::Gen<QuantizeInput> quantize_input(const Domain&);
std::pair<int64_t, int64_t> largest_quantize_shape(const Domain&);  // (tokens x heads, head size)

rc::Gen<MergeInput> merge_input(const Domain&);
rc::Gen<MergeInput> merge_sentinel_input(const Domain&);  // at least one empty side per row
rc::Gen<SoftmaxInput> softmax_input(const Domain&);
rc::Gen<SoftmaxInput> softmax_overflow_band_input(const Domain&);
rc::Gen<AttentionInput> attention_input(const Domain&);             // everything: shapes, masks, logits
rc::Gen<AttentionInput> attention_empty_rows_input(const Domain&);  // some rows see no key
rc::Gen<AttentionInput> attention_overflow_band_input(const Domain&);
// An FP8 KV cache in a declared format, contiguous, with descales of at least 4 amax / largest (every
// code at most a quarter of the format's largest: doubling one twice stays exact); V = 1 (descale 1)
// in a quarter of the cases, three in four of which are one long row: one query and one head over
// kFp8LongRowKeys keys at the smallest head size the subject takes (where its call limits allow it).
// For fp8_descales; the subject must declare kv_dtypes.
constexpr int32_t kFp8LongRowKeys = 16384;
rc::Gen<AttentionInput> attention_fp8_kv_input(const Domain&);
// An FP8 call with O asked for in FP8 (AC_FP8_OUT): K, V (and Q where declared) quantised as for
// any FP8 case, contiguous, out_dtype a declared format, output_scale drawn around max|V| / largest.
// For fp8_output; the subject must declare kv_dtypes and AC_FP8_OUT.
rc::Gen<AttentionInput> attention_fp8_output_input(const Domain&);
// The output_scale drawn for a unit max|V| / largest and a factor (0: the power of two above the
// unit): unit times factor, rounded to fp32 and never below fp32's smallest normal 2^-126.
float fp8_output_scale(double unit, double factor);
// An FP8 call asking for the maxima of P and O (AC_FP8_AMAX), quantised as for fp8_output, with O
// in FP8 in half the cases of a subject declaring AC_FP8_OUT. For fp8_amax.
rc::Gen<AttentionInput> attention_fp8_amax_input(const Domain&);
rc::Gen<AttentionInput> attention_split_input(const Domain&);  // non-causal, one sequence
// K and V of at least dom.streamed_kv_bytes together: kStreamedHeads query and KV heads, d = 128
// (else the largest size the subject takes), one non-causal sequence of kStreamedQueries queries
// over as many keys as the bytes need plus kStreamedPartialKeys, so that the last key tile of 64 or
// 128 is partial. streamed_kv judges a slice of it (two KV heads, 32 query tokens). Values from one
// drawn seed (the layer's splitmix64 fill), scores of variance 1.
constexpr int32_t kStreamedHeads = 64, kStreamedQueries = 130, kStreamedPartialKeys = 61;
rc::Gen<AttentionInput> attention_streamed_input(const Domain&);
// A batch for batch_invariance (varlen subjects): up to max_batch sequences, one of which the
// property calls the victim in turn; neighbours of every kind a scheduler looks at: decode rows
// (one query), prefill rows, empty key ranges, a query range whose length times the GQA group sits
// at 64 or 128 (tile-shape switches), long rows, many sequences (past the SM count on a device).
// Values uniform of variance 1 from one drawn seed (high entropy: constant or impulse values hide
// a changed fold order), causal or masked as a whole.
rc::Gen<AttentionInput> attention_batch_input(const Domain&);
// One causal sequence of T queries over its T keys (a prompt) for chunked_prefill, 2 <= T <= the
// longest key row, GQA as the subject allows, values uniform of variance 1 from one drawn seed, and
// the subject's declared variants in some cases (with_variants: paged K / V, softcap, window,
// sinks, an FP8 cache).
rc::Gen<AttentionInput> attention_prefill_input(const Domain&);

// The largest inputs the generators above draw under a domain, as shapes (nothing allocated): what
// the memory model (memory.hpp) bounds a run with. Each follows its generator's bounds, beside it in
// generators.cpp, and changes with it.
struct AttentionShape {
  int64_t heads = 1, kv_heads = 1, head_size = 1;
  std::vector<int64_t> seqlens_q, seqlens_k;
  bool every_row = false;  // judged whole at any size (a case asking for the maxima, AC_FP8_AMAX)
};
// attention_with (every attention generator but the streamed one), then the layer where drawn.
std::vector<AttentionShape> largest_attention_shapes(const Domain&);
AttentionShape largest_streamed_shape(const Domain&);
AttentionShape largest_batch_shape(const Domain&);
AttentionShape largest_prefill_shape(const Domain&);
// attention_fp8_kv_input's long row.
AttentionShape fp8_long_row_shape(const Domain&);
// Rows x columns: softmax_input's (and the overflow band's), merge_input's rows (tokens x heads)
// and head size.
std::pair<int64_t, int64_t> largest_softmax_shape(const Domain&);
std::pair<int64_t, int64_t> largest_merge_shape(const Domain&);

}  // namespace attncheck::gen
