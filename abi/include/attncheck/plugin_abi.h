/*
 * attncheck plugin ABI, version 3: the one public header a user's kernel needs.
 *
 * A plugin is a shared library that exports two C symbols:
 *
 *   uint32_t            attncheck_plugin_abi_version(void);  // must return AC_ABI_VERSION
 *   const ac_plugin*    attncheck_plugin(void);              // subjects and their capabilities
 *
 * attncheck loads it with `attncheck check --plugin PATH`, checks the version first (a version
 * outside AC_ABI_VERSION_MIN..AC_ABI_VERSION_MAX is refused before anything else in the library
 * is read), then runs properties against every subject the plugin declares. The built-in kernels
 * of kernels/ are registered through exactly this ABI, so a plugin is tested by the same code path
 * as attncheck's own subjects.
 *
 * Conventions (every pointer below lives in the memory space the subject declares in
 * ac_caps.memory: host memory for AC_MEMORY_HOST, CUDA device memory for AC_MEMORY_CUDA;
 * the *_host fields are always host memory):
 *   - Element types: AC_DTYPE_F32 (IEEE binary32), AC_DTYPE_F16 (binary16), AC_DTYPE_BF16.
 *   - Strides are in elements, never bytes. The innermost (head_size) stride is always 1.
 *   - LSE tensors are always fp32. Base and layout are declared by the subject (ac_caps).
 *   - Q is [total_q, num_heads, head_size], K and V [total_k, num_kv_heads, head_size], O like Q;
 *     sequences are packed back to back and delimited by cumulative offsets cu_seqlens_{q,k}.
 *   - Query head i reads KV head i / (num_heads / num_kv_heads).
 *   - Causal masking is bottom-right aligned: query t of a sequence with Tq queries and Tk keys
 *     sees keys 0 .. t + Tk - Tq (chunked prefill's convention).
 *   - Version 3 adds the engines' variants, each declared in ac_caps.variants (AC_VAR_*) and
 *     passed in trailing fields of ac_attention_args: paged K / V, V's own head size, a logit
 *     softcap, a sliding window and attention sinks (their meaning is stated at the AC_VAR_* bits).
 *   - A row that sees no key is "empty": O = 0 and LSE = the subject's declared sentinel (or
 *     anything, for a subject that declares AC_CAP_EMPTY_LSE_UNDEFINED).
 *   - Return 0 on success, AC_ERR_* otherwise, with a one-line reason written to err.
 */
#ifndef ATTNCHECK_PLUGIN_ABI_H
#define ATTNCHECK_PLUGIN_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Versions. A plugin is built against one version and says which (attncheck_plugin_abi_version()
 * and ac_plugin.abi_version, the same number). attncheck accepts versions 1 and 2:
 *
 *   1  ac_caps ends at fold_orders (the frozen layout ac_caps_v1 / ac_subject_v1 below).
 *   2  ac_caps gains one trailing word, `flags` (AC_CAP_* bits), and attention / split-KV subjects
 *      may declare no tilings (num_tilings = 0).
 *   3  ac_caps gains trailing fields after `flags` (variants, page sizes, head-size pairs, and the
 *      FP8 KV cache's kv_dtypes and fp8, and the call limits
 *      max_call_seqs, max_call_tokens and max_call_keys), ac_attention_args
 *      trailing fields for the variants. A version-2 subject's array is read as ac_subject_v2
 *      (frozen below) and its new fields are 0; it is never called with a variant, and its calls'
 *      trailing argument fields are zero (it never reads them).
 *
 * ac_caps is embedded by value in ac_subject, and a plugin hands attncheck an array of
 * ac_subject. Where `flags` lands depends on the target: on LP64 it fills what was tail padding
 * of ac_caps_v1 (sizes unchanged), elsewhere it may grow ac_caps and with it the array's stride.
 * Neither may be read from a version-1 plugin: its padding bytes are indeterminate (a subject
 * built on the stack and copied out carries whatever was there), and its stride is its own. The
 * loader therefore reads a version-1 plugin's array as ac_subject_v1, copies each entry into the
 * current layout with flags = 0, and reads `flags` only from a plugin that says 2. The fields the
 * two layouts share sit at the same offsets (the loader asserts it).
 *
 * Which version a plugin targets is chosen when it is compiled: by default the newest;
 * `#define AC_TARGET_ABI_VERSION 1` before including this header gives the version-1 layout, with
 * ac_caps and ac_subject naming ac_caps_v1 and ac_subject_v1 and AC_ABI_VERSION equal to 1, so a
 * version-1 plugin's source builds unchanged into a version-1 binary.
 */
#ifndef AC_TARGET_ABI_VERSION
#define AC_TARGET_ABI_VERSION 3
#endif
#if AC_TARGET_ABI_VERSION == 1
#define AC_ABI_VERSION 1u
#elif AC_TARGET_ABI_VERSION == 2
#define AC_ABI_VERSION 2u
#elif AC_TARGET_ABI_VERSION == 3
#define AC_ABI_VERSION 3u
#else
#error "AC_TARGET_ABI_VERSION must be 1, 2 or 3"
#endif
#define AC_ABI_VERSION_MIN 1u /* the oldest version attncheck loads */
#define AC_ABI_VERSION_MAX 3u /* the newest */

/* Version 3 names the FP8 formats (e4m3fn: no infinity, NaN 0x7F / 0xFF, max 448; e5m2: IEEE-like
 * with infinity, max 57344), for an FP8 KV cache (ac_caps.kv_dtypes, AC_FP8_*, the descale fields of
 * ac_attention_args). They are K / V dtypes only: caps.dtypes (Q's and O's) never holds them.
 * e4m3fnuz (added within version 3): exponent bias 8, no infinity and no negative zero, 0x80 its
 * only NaN, max 240 (0x7F / 0xFF are +-240, finite): each code of e4m3fn's finite range other than
 * 0x80 decodes to half its e4m3fn value. */
typedef enum {
  AC_DTYPE_F32 = 0,
  AC_DTYPE_F16 = 1,
  AC_DTYPE_BF16 = 2,
  AC_DTYPE_E4M3 = 3,
  AC_DTYPE_E5M2 = 4,
  AC_DTYPE_E4M3FNUZ = 5
} ac_dtype;
#define AC_DTYPE_BIT(d) (1u << (unsigned)(d))

typedef enum {
  AC_OP_MERGE = 1u,     /* merge two attention states (O, LSE) */
  AC_OP_SOFTMAX = 2u,   /* row softmax */
  AC_OP_ATTENTION = 4u, /* attention forward, O and LSE */
  AC_OP_SPLITKV = 8u,   /* attention forward with num_splits partials and a combine */
  AC_OP_QUANTIZE = 16u  /* a KV-cache quantiser: fp32 / fp16 / bf16 to FP8 codes with a scale
                         * (ac_quantize_args; added within version 3) */
} ac_op;

typedef enum { AC_MEMORY_HOST = 0, AC_MEMORY_CUDA = 1 } ac_memory;

/* [heads, tokens] (vLLM) or [tokens, heads] (SGLang). */
typedef enum { AC_LSE_HEADS_TOKENS = 0, AC_LSE_TOKENS_HEADS = 1 } ac_lse_layout;

/* Fold order of a split-KV combine. */
typedef enum { AC_FOLD_LEFT = 0, AC_FOLD_RIGHT = 1, AC_FOLD_TREE = 2 } ac_fold;
#define AC_FOLD_BIT(f) (1u << (unsigned)(f))

/* Optional features of an attention subject. */
#define AC_FEAT_CAUSAL 1u
#define AC_FEAT_MASK 2u   /* explicit boolean mask */
#define AC_FEAT_VARLEN 4u /* more than one sequence, cu_seqlens */
#define AC_FEAT_GQA 8u    /* num_kv_heads < num_heads */
#define AC_FEAT_LSE 16u   /* writes LSE */
/* Declared hazard: exp(x) is taken without subtracting the row max and rounded to the storage
 * type (a naive softmax). Such a subject is expected to overflow exactly where the exact
 * exp(x) rounds to infinity in the storage format; properties check that it does. */
#define AC_FEAT_NAIVE_EXP 32u
/* Declared rounding point: the scores S = scale * Q K^T are stored in the input type before the
 * softmax (a textbook kernel that materialises S in fp16 / bf16). Budgets then allow the score
 * rounding, u_F |s_j| per key, instead of fp32 score error. */
#define AC_FEAT_SCORES_IN_INPUT_TYPE 64u
/* Declared rounding point: p = 2^(x - m) is computed by an exp2 that flushes results below 2^-126
 * to 0 (ex2.approx.ftz, the exp2 of kernels built with fast math), so an attention weight below
 * 2^-126 is dropped. Budgets then allow N 2^-126 max|v| / l in O and N 2^-126 / l in the LSE
 * (properties/src/budgets.cpp); the subject's outputs are judged as before. */
#define AC_FEAT_FLUSHED_EXP 128u

/* Return codes. */
#define AC_OK 0
#define AC_ERR_UNSUPPORTED 1 /* refused before launch: dtype, head size, tiling, shape, alignment */
#define AC_ERR_DEVICE 2      /* a CUDA call or launch failed, or the device faulted */
#define AC_ERR_INTERNAL 3

/*
 * The range of every declared number. attncheck checks them where it reads a declaration (a plugin
 * when it is loaded, a worker at its handshake) and refuses a subject with a number outside its
 * range, with one line naming the field, before any work (exit 2). They bound what a declaration
 * can make attncheck allocate or loop over: every head size and tile is drawn into cases, and
 * every num_splits from 1 to max_splits is offered.
 *
 *   name                        1 .. AC_MAX_NAME_CHARS characters (letters, digits, '-', '_', '.')
 *   head_sizes, num_head_sizes  1 .. AC_MAX_HEAD_SIZES entries, each 1 .. AC_MAX_HEAD_SIZE
 *   head_size_min               1 .. AC_MAX_HEAD_SIZE
 *   head_size_max               head_size_min .. INT32_MAX (open-ended: only sizes up to
 *                               AC_MAX_HEAD_SIZE are ever drawn)
 *   num_tilings                 0 .. AC_MAX_TILINGS (version 1: at least 1 for attention / split-KV)
 *   tilings[i].br, .bc          1 .. AC_MAX_TILE
 *   max_splits                  0 .. AC_MAX_SPLITS (split-KV: at least 1)
 *   max_call_seqs               0 (no limit) or 1 .. INT32_MAX (version 3)
 *   max_call_tokens             0 (no limit) or 1 .. INT32_MAX (version 3)
 *   max_call_keys               0 (no limit) or 1 .. INT64_MAX (version 3)
 */
#define AC_MAX_NAME_CHARS 64
#define AC_MAX_PAGE_SIZE 4096   /* version 3: page_sizes[i] in 1 .. AC_MAX_PAGE_SIZE */
#define AC_MAX_PAGE_SIZES 16    /* num_page_sizes in 1 .. AC_MAX_PAGE_SIZES with AC_VAR_PAGED_KV */
#define AC_MAX_HEAD_PAIRS 16    /* num_head_pairs in 1 .. AC_MAX_HEAD_PAIRS with AC_VAR_HEAD_SIZE_V */
#define AC_MAX_SOFTCAP 65504.0f /* a call's softcap: 0 (none) or in (0, AC_MAX_SOFTCAP] */
#define AC_MAX_WINDOW (1 << 24) /* a call's window sides: -1 (unbounded) or 0 .. AC_MAX_WINDOW */
/* A call's sinks: each finite with |sink| <= AC_MAX_SINK, fp16's largest value as for the cap. A
 * kernel working in base 2 multiplies a sink by log2(e) in fp32, which overflows past about 2.36e38:
 * the bound keeps every finite sink a call gives within what such a kernel can hold. */
#define AC_MAX_SINK 65504.0f
#define AC_MAX_HEAD_SIZE 1024
#define AC_MAX_HEAD_SIZES 64
#define AC_MAX_TILINGS 64
#define AC_MAX_TILE 1024
#define AC_MAX_SPLITS 1024

typedef struct {
  int32_t br; /* query rows per tile */
  int32_t bc; /* keys per tile */
} ac_tiling;

/* The version-1 layout of ac_caps, frozen: what a version-1 plugin's subjects hold. */
typedef struct {
  uint32_t ops;
  uint32_t dtypes;
  ac_memory memory;
  int32_t head_size_min;
  int32_t head_size_max;
  const int32_t* head_sizes;
  int32_t num_head_sizes;
  int32_t lse_base;
  ac_lse_layout lse_layout;
  int32_t empty_lse_sign;
  uint32_t features;
  const ac_tiling* tilings;
  int32_t num_tilings;
  int32_t max_splits;
  uint32_t fold_orders;
} ac_caps_v1;

/* Version 2: ac_caps.flags, contract bits of a subject (version-1 plugins have none: 0). */
/* The subject cannot be called with a sequence of 0 keys (it refuses or crashes on one). attncheck
 * then never calls it with one: generators draw at least one key per sequence, split_equals_whole
 * skips the cuts that would leave a piece without keys, and empty rows come only from masks or
 * causal alignment. */
#define AC_CAP_REFUSES_ZERO_KEYS 1u
/* The subject flushes subnormal outputs to zero. An output whose exact value lies in the subnormal
 * range of its format may then be 0 (+0, or 0 of the exact value's sign); nothing else is relaxed
 * (budgets.cpp derives the rule; a flushed exp2 inside attention is declared by
 * AC_FEAT_FLUSHED_EXP, flushed inputs and intermediates by AC_CAP_FTZ_ARITHMETIC). */
#define AC_CAP_FLUSHES_SUBNORMALS 2u
/* An empty row's LSE is undefined: it is not judged (O = 0 still is). empty_lse_sign must be 0. */
#define AC_CAP_EMPTY_LSE_UNDEFINED 4u
/* The subject is nondeterministic by design (a combine ordered by atomics or by timing): two
 * launches on the same input may differ in their bits. run_to_run then reports the run-to-run
 * spread (how many outputs differ, by how many ulps) instead of failing, split_order_drift no longer
 * asks num_splits = 1 to repeat bit for bit, and a failure is not reclassified as nondeterministic
 * when its re-run differs. Every accuracy budget still holds on every launch. */
#define AC_CAP_NONDETERMINISTIC 8u
/* The subject computes in flush-to-zero / denormals-are-zero fp32 arithmetic (a fast-math build):
 * an input below 2^-126 is read as 0 (fp16's subnormals are normal fp32 numbers and stay), and
 * every fp32 intermediate below 2^-126 (a score, a weight, a P V product, a partial sum) is flushed
 * to 0. Attention and split-KV budgets then allow what those flushes can move a result by, each
 * flushed term at most 2^-126 times its stated factor (properties/src/budgets.cpp), and a zero may
 * stand for a subnormal output as under AC_CAP_FLUSHES_SUBNORMALS. Nothing else is relaxed: an
 * error on normal numbers still fails. Added within version 2: a plugin built before it never sets
 * it. */
#define AC_CAP_FTZ_ARITHMETIC 16u
/* The subject's output for one sequence does not depend on the other sequences of its call: their
 * number, lengths, kinds (decode or prefill) or its position among them. A kernel that picks its
 * split count, tile shape or specialisation from the whole batch usually is not. batch_invariance
 * then compares each sequence alone and in the batch bit for bit and fails on any difference;
 * undeclared, it passes and reports what changed. Added within version 2: a plugin built before it
 * never sets it. */
#define AC_CAP_BATCH_INVARIANT 32u
/* Merge: the subject relies on its producers writing O = 0 for an empty state (LSE -inf, or
 * FlashAttention-2's +inf), as the engines' guarded merges do when both states are empty and the
 * guard copies the prefix output. The generators then give every empty state an O of +0; undeclared,
 * an empty state's O holds arbitrary finite values and none of them may reach the output. A case
 * whose empty state holds a non-zero O is outside the declared contract: replayed on such a subject
 * it is not applicable. Added within version 2: a plugin built before it never sets it. */
#define AC_CAP_EMPTY_STATES_ZERO_O 64u
#define AC_CAP_KNOWN_V2                                                                \
  (AC_CAP_REFUSES_ZERO_KEYS | AC_CAP_FLUSHES_SUBNORMALS | AC_CAP_EMPTY_LSE_UNDEFINED | \
   AC_CAP_NONDETERMINISTIC | AC_CAP_FTZ_ARITHMETIC | AC_CAP_BATCH_INVARIANT | AC_CAP_EMPTY_STATES_ZERO_O)

/* Version 3: ac_caps.variants, the engines' variants an attention / split-KV subject accepts. A
 * subject that declares one must accept every call that uses it within its other declarations;
 * attncheck draws them into cases. Each is passed in ac_attention_args' version-3 fields. */
/* K and V are page pools [num_pages, page_size, num_kv_heads, head_size(_v)] read through a block
 * table: key j of sequence s is slot j % page_size of page block_table[s * max_blocks + j /
 * page_size]. Every size in caps.page_sizes is drawn. Slots past a sequence's last key, pages no
 * sequence names, and table entries past a sequence's last page are outside the contract: attncheck
 * fills them with NaN and huge values, and an output that reads them fails. */
#define AC_VAR_PAGED_KV 1u
/* V (and O) have their own head size, head_size_v, from caps.head_pairs (qk, v) (MLA: 192 / 128,
 * 576 / 512). Equal sizes stay declared by head_sizes / head_size_min..max. */
#define AC_VAR_HEAD_SIZE_V 2u
/* A logit softcap: s = softcap * tanh(softmax_scale * q.k / softcap), the scale applied first,
 * then the cap; softcap 0 means none. */
#define AC_VAR_SOFTCAP 4u
/* A sliding window around the bottom-right aligned diagonal: query t (Tq queries, Tk keys) sees key
 * j only when t + Tk - Tq - window_left <= j <= t + Tk - Tq + window_right; -1 leaves a side
 * unbounded. AND-ed with causal and the mask; a row the window leaves without keys is empty. */
#define AC_VAR_WINDOW 8u
/* Attention sinks: one logit per query head (sinks[num_heads], fp32, in the scaled and capped
 * scores' units) joins the softmax denominator only: O = sum e^s_j v_j / (e^sink + sum e^s_j), LSE =
 * log(e^sink + sum e^s_j). A row with no visible key has O = 0 and LSE = sink. A split-KV subject
 * counts the sink once in its combine; a merge combines states of which at most one counted it
 * (attention over a prefix with the sinks, over the rest without, merges to the whole). */
#define AC_VAR_SINKS 16u
/* V inside K (with AC_VAR_HEAD_SIZE_V; MLA's absorbed decode as FlashMLA stores its cache): a call
 * with v_in_k = 1 has no V tensor of its own; v equals k, and V's value at (key j, KV head h, column
 * c) is K's at (j, h, c), c < head_size_v <= head_size, so V's rows have K's stride (num_kv_heads x
 * head_size elements; paged, the same pages). An FP8 cache's V codes are then K's codes, read times
 * v_descale. Offered only to a subject declaring it; any other is given V as its own tensor.
 * Added within version 3. */
#define AC_VAR_V_IN_K 32u
#define AC_VAR_KNOWN_V3 \
  (AC_VAR_PAGED_KV | AC_VAR_HEAD_SIZE_V | AC_VAR_SOFTCAP | AC_VAR_WINDOW | AC_VAR_SINKS | AC_VAR_V_IN_K)

/* Version 3: an FP8 KV cache. A subject declaring kv_dtypes (AC_DTYPE_BIT of AC_DTYPE_E4M3,
 * AC_DTYPE_E5M2 and / or AC_DTYPE_E4M3FNUZ) takes calls whose k and v hold FP8 codes (one byte per element,
 * the layouts unchanged), ac_attention_args.kv_dtype naming the format, with k_descale and v_descale (fp32,
 * in the subject's memory): the values of the cache are decode(code) * descale, each format decoded exactly.
 * descale_granularity 0 gives one descale per tensor; 1 one per KV head (k_descale[h], v_descale[h]), offered
 * only to a subject declaring AC_FP8_DESCALE_PER_KV_HEAD; 2 one per (sequence, KV head),
 * AC_FP8_DESCALE_PER_SEQUENCE below. out stays in dtype, and so does q unless AC_FP8_Q (q_descale NULL
 * otherwise). attncheck judges O against the exact attention of the values the kernel was given (decoded and
 * descaled), so quantisation is never the kernel's error; a kernel may form k * descale and v * descale in
 * fp32 or fold the descales into the softmax scale and the output (one fp32 rounding each, budgets.cpp). Each
 * descale is positive and at most AC_MAX_DESCALE. */
/* The largest descale: a code times its descale (at most 57344 2^32) and a head's sum of two such
 * products (at most 57344^2 2^64 AC_MAX_HEAD_SIZE, below 2^106) stay finite in fp32 whichever way
 * a kernel forms them. Added within version 3. */
#define AC_MAX_DESCALE 0x1p32f
#define AC_FP8_DESCALE_PER_KV_HEAD 1u
/* Q in FP8 too (FlashAttention-3's FP8 forward): q holds codes of kv_dtype, read times q_descale (as
 * many values as k_descale; query head i reads the one of its KV head), which a kernel applies in
 * fp32 or folds into the softmax scale like k_descale (one fp32 rounding more, budgets.cpp). Offered
 * only to a subject declaring it; a call then has q_descale non-NULL, or NULL with q in dtype.
 * Added within version 3: a plugin built before it never sets it. */
#define AC_FP8_Q 2u
/* Declared rounding point, calls with an FP8 cache: P is held in e4m3fn before P V, with the offset
 * 2^8 (FlashAttention-3): each weight p_j = e^(s_j - m) <= 1 (m the running max) is stored as the
 * e4m3fn code of 256 p_j, rounded to nearest even, and P V reads those values over 256; the row sum l
 * adds the weights before that rounding. A weight moves by up to 2^-4 p_j (three stored bits), or
 * 2^-18 absolutely where 256 p_j is subnormal (below 2^-6): budgets.cpp. Added within version 3. */
#define AC_FP8_P_E4M3 4u
/* Descales per (sequence, KV head), FlashAttention-3's descale shape: descale_granularity 2, each of
 * k_descale, v_descale (and q_descale) [num_seqs, num_kv_heads] row-major, sequence s's KV head h
 * at [s * num_kv_heads + h]. Offered only to a subject declaring it (with or without
 * AC_FP8_DESCALE_PER_KV_HEAD). A page that two sequences share is read with each one's descales.
 * Added within version 3. */
#define AC_FP8_DESCALE_PER_SEQUENCE 8u
/* A quantiser's casts saturate (AC_OP_QUANTIZE): a value past the format's largest finite one, and an
 * infinity, give that largest value with its sign (vLLM's cache writer clamps, then casts). Without
 * it they give the format's overflow code: NaN for e4m3fn and e4m3fnuz, the signed infinity for e5m2.
 * A merge's FP8 outputs (AC_OP_MERGE with caps.kv_dtypes) saturate, and declare it; an attention's
 * (AC_FP8_OUT) saturate where it is declared. Declared only with AC_OP_QUANTIZE, AC_OP_MERGE or
 * AC_FP8_OUT. Added within version 3. */
#define AC_FP8_SATURATE 16u
/* With AC_FP8_Q: every FP8 call carries Q in FP8 too (q_descale non-NULL), never Q in dtype beside an
 * FP8 cache. FlashAttention-3's FP8 path multiplies e4m3 by e4m3 on the tensor cores and has no mixed
 * call; a subject declaring this is never offered one (the case is skipped with the reason). Added
 * within version 3. */
#define AC_FP8_Q_REQUIRED 32u
/* Declared arithmetic, calls with Q in FP8: the products of FP8 codes (Q K^T, and P V with P in e4m3)
 * are summed by Hopper's FP8 tensor cores (wgmma), whose accumulator is not fp32: each instruction
 * adds 32 products to its accumulator after aligning the addends at the largest exponent field among
 * them (a product's E_a + E_b, a subnormal code at the format's smallest normal exponent, a zero
 * code's product left out; the accumulator's own exponent) and cutting each toward zero to a multiple
 * of 2^-13 of it, and keeps 13 bits of its result. The partial sums move to fp32 registers at least
 * every 128 products: a score's head dimension up to 128 in one accumulator, P V a fresh accumulator
 * per 128 keys. The budget allows one bit more than measured (budgets.cpp truncated_sum_error);
 * kernels_hopper_gpu "[truncated_sums]" asks the device. Added within version 3. */
#define AC_FP8_TRUNCATED_SUMS 64u
/* With AC_FP8_P_E4M3: P's scale is the call's (cuDNN's scale_s), not the fixed 2^8. A call's
 * ac_attention_args.p_scale points at one positive value of at most 448 (subject memory), or is NULL
 * for the fixed 2^8: each weight p_j <= 1 is stored as the e4m3fn code of p_j * p_scale (the product
 * in fp32 or exact, then rounded to nearest even; at most 448, so it never saturates) and P V reads
 * those values over p_scale (a division, or a product with the fp32 reciprocal, in fp32), or reads
 * the codes themselves and multiplies O once by the fp32 reciprocal before the normalisation (tensor
 * cores that take P's codes: fused-hopper-fp8-scaled; no more error than one rounding a weight). l adds the
 * weights before the rounding. A weight moves by up to 2^-4 p_j, or 2^-10 / p_scale absolutely where
 * p_j p_scale is subnormal (below 2^-6): budgets.cpp. Added within version 3. */
#define AC_FP8_P_SCALE 128u
/* O in FP8 (cuDNN's FP8 output with scale_o), attention and split-KV: a call may set
 * ac_attention_args.out_dtype to one of caps.kv_dtypes' formats, with output_scale (one positive
 * finite value, subject memory): out then holds one byte per element (its strides still in
 * elements), the code of O / output_scale rounded to nearest even, saturating where the subject
 * declares AC_FP8_SATURATE, else overflowing to the format's NaN (e4m3fn, e4m3fnuz) or infinity
 * (e5m2). O before the cast is judged as an fp32 output (its budget), the division as one fp32
 * rounding, the cast exactly: every code between the roundings of that interval's ends passes.
 * The LSE stays fp32. Offered only to a subject declaring it, in FP8 calls. Added within version 3. */
#define AC_FP8_OUT 256u
/* The two maxima cuDNN's FP8 attention writes beside O (its Amax_S and Amax_O), from which an engine
 * derives the next step's scales: in an FP8 call whose ac_attention_args.amax is non-NULL, the
 * subject writes two fp32 values there (subject memory): amax[0] the largest softmax weight
 * e^(s_ij - LSE_i) over every row i and visible key j (normalised by the row's sum, the sink's
 * weight counted in that sum but not one of the weights; before P's scale and any cast; 0 when no
 * row has a key), amax[1] the largest |O| over every element before output_scale and any cast. Where
 * a NaN code makes a row's LSE, or an element of O, not a number, that maximum is not judged.
 * Judged by the property fp8_amax against the exact maxima (budgets.cpp amax_weight_log_allowance).
 * Added within version 3. */
#define AC_FP8_AMAX 512u
#define AC_FP8_KNOWN                                                                                       \
  (AC_FP8_DESCALE_PER_KV_HEAD | AC_FP8_Q | AC_FP8_P_E4M3 | AC_FP8_DESCALE_PER_SEQUENCE | AC_FP8_SATURATE | \
   AC_FP8_Q_REQUIRED | AC_FP8_TRUNCATED_SUMS | AC_FP8_P_SCALE | AC_FP8_OUT | AC_FP8_AMAX)
/* The largest p_scale (AC_FP8_P_SCALE): a weight of 1 lands on e4m3fn's largest finite value. The
 * smallest: its fp32 reciprocal, which a kernel may multiply by, is finite. */
#define AC_MAX_P_SCALE 448.0f
#define AC_MIN_P_SCALE 0x1p-126f

/* A (QK head size, V head size) pair, AC_VAR_HEAD_SIZE_V. */
typedef struct {
  int32_t qk;
  int32_t v;
} ac_head_pair;

/* The version-2 layout of ac_caps, frozen: what a version-2 plugin's subjects hold. */
typedef struct {
  uint32_t ops;
  uint32_t dtypes;
  ac_memory memory;
  int32_t head_size_min;
  int32_t head_size_max;
  const int32_t* head_sizes;
  int32_t num_head_sizes;
  int32_t lse_base;
  ac_lse_layout lse_layout;
  int32_t empty_lse_sign;
  uint32_t features;
  const ac_tiling* tilings;
  int32_t num_tilings;
  int32_t max_splits;
  uint32_t fold_orders;
  uint32_t flags;
} ac_caps_v2;

#if AC_TARGET_ABI_VERSION == 1
typedef ac_caps_v1 ac_caps;
#elif AC_TARGET_ABI_VERSION == 2
typedef ac_caps_v2 ac_caps;
#else
typedef struct {
  uint32_t ops;          /* AC_OP_* bits */
  uint32_t dtypes;       /* AC_DTYPE_BIT bits */
  ac_memory memory;      /* where the tensors passed to this subject live */
  int32_t head_size_min; /* inclusive range of supported head sizes ... */
  int32_t head_size_max;
  const int32_t* head_sizes; /* ... or, when non-NULL, exactly these */
  int32_t num_head_sizes;
  int32_t lse_base; /* 0: natural log; 2: base 2 */
  ac_lse_layout lse_layout;
  int32_t empty_lse_sign;    /* -1: an empty row's LSE is -inf; +1: +inf (FlashAttention-2); 0 with
                              * AC_CAP_EMPTY_LSE_UNDEFINED */
  uint32_t features;         /* AC_FEAT_* bits, attention and split-KV */
  const ac_tiling* tilings;  /* attention: the tilings selectable by ac_attention_args.tiling; */
  int32_t num_tilings;       /* version 2: may be 0 (a black-box kernel), the call's tiling is -1 */
  int32_t max_splits;        /* split-KV: num_splits from 1 to max_splits (ranges: see AC_MAX_*) */
  uint32_t fold_orders;      /* split-KV: AC_FOLD_BIT bits */
  uint32_t flags;            /* version 2: AC_CAP_* bits */
  uint32_t variants;         /* version 3: AC_VAR_* bits */
  const int32_t* page_sizes; /* AC_VAR_PAGED_KV: the page sizes accepted */
  int32_t num_page_sizes;
  const ac_head_pair* head_pairs; /* AC_VAR_HEAD_SIZE_V: the (qk, v) head sizes accepted */
  int32_t num_head_pairs;
  uint32_t kv_dtypes; /* AC_DTYPE_BIT(AC_DTYPE_E4M3 / E5M2 / E4M3FNUZ): FP8 KV caches accepted (a
                       * quantiser, a merge: the formats it writes) */
  uint32_t fp8;       /* AC_FP8_* bits: the FP8 KV cache's contract */
  /* The largest attention / split-KV call the subject takes, each 0 for no limit: sequences,
   * query tokens (all sequences) and keys (all sequences). The generators stay within them (a
   * batch of batch_invariance has at most max_call_seqs sequences, neighbours are dropped until
   * the tokens and keys fit); a case past them is never passed to the subject but skipped, counted
   * with its reason in the property's result. */
  int32_t max_call_seqs;
  int32_t max_call_tokens;
  int64_t max_call_keys;
} ac_caps;
#endif

/* out = merge((prefix_out, prefix_lse), (suffix_out, suffix_lse)), per (token, head).
 * LSE element (t, h) lives at lse[t * lse_stride_token + h * lse_stride_head], the same strides
 * for the two inputs and the output; LSEs are read in the subject's declared base. */
typedef struct {
  ac_dtype dtype;
  int32_t num_tokens, num_heads, head_size;
  void* out;
  int64_t out_stride_token, out_stride_head;
  float* out_lse; /* may be NULL */
  const void* prefix_out;
  int64_t prefix_stride_token, prefix_stride_head;
  const float* prefix_lse;
  const void* suffix_out;
  int64_t suffix_stride_token, suffix_stride_head;
  const float* suffix_lse;
  int64_t lse_stride_token, lse_stride_head;
  void* stream; /* cudaStream_t for AC_MEMORY_CUDA subjects */
  /* Added within version 3: the output's dtype. `dtype` (any value other than an FP8 format means
   * out in dtype: a caller that zero-fills the struct gets the plain merge) unless the subject
   * declares FP8 outputs (an FP8 format in caps.kv_dtypes beside AC_OP_MERGE, with
   * AC_FP8_SATURATE): out then holds one byte per element (its strides still in elements), the code
   * of the merged value divided by
   * *output_scale, saturating (vLLM's merge with output_scale). The merged value is judged as the
   * fp32 merge's (its budget), the division as one fp32 rounding, the cast exactly: every code
   * between the roundings of the ends of that interval passes. out_lse stays fp32. */
  ac_dtype out_dtype;
  const float* output_scale; /* FP8 outputs: one positive finite value, subject memory; else NULL */
} ac_merge_args;

/* y[r, :] = softmax(x[r, :]) for each of rows rows; x and y of the same dtype. */
typedef struct {
  ac_dtype dtype;
  int32_t rows, cols;
  const void* x;
  void* y;
  int64_t row_stride; /* elements between rows, for x and y */
  void* stream;
} ac_softmax_args;

/* Attention forward (AC_OP_ATTENTION) or split-KV attention (AC_OP_SPLITKV). */
typedef struct {
  ac_dtype dtype;
  int32_t num_seqs;
  const int32_t* cu_seqlens_q; /* num_seqs + 1 offsets, subject memory */
  const int32_t* cu_seqlens_k;
  const int32_t* cu_seqlens_q_host; /* the same, host memory */
  const int32_t* cu_seqlens_k_host;
  int32_t max_seqlen_q, max_seqlen_k;
  int32_t num_heads, num_kv_heads, head_size;
  const void* q; /* [total_q, num_heads, head_size] */
  const void* k; /* [total_k, num_kv_heads, head_size] */
  const void* v;
  void* out;  /* [total_q, num_heads, head_size] */
  float* lse; /* per the declared layout, [num_heads, total_q] or [total_q, num_heads]; may be NULL */
  float softmax_scale;
  int32_t causal;
  /* NULL, or per sequence a row-major [Tq_i, Tk_i] block of bytes (nonzero = visible), the blocks
   * back to back; block i starts at element cu_mask_host[i] (cu_mask in subject memory). Shared
   * by all heads; combined with causal by logical and. */
  const uint8_t* mask;
  const int64_t* cu_mask;
  const int64_t* cu_mask_host;
  int32_t tiling;     /* index into caps.tilings; -1 when the subject declares none */
  int32_t num_splits; /* split-KV only */
  ac_fold fold_order; /* split-KV only */
  void* stream;
  /* Version 3: the variants (AC_VAR_*), each at its neutral value unless the subject declares it
   * and the call uses it. A version-2 subject is never given a variant. */
  int32_t head_size_v;             /* V's and O's head size (out is [total_q, num_heads, head_size_v]);
                                    * equals head_size unless AC_VAR_HEAD_SIZE_V */
  float softcap;                   /* AC_VAR_SOFTCAP: > 0 caps the scores; 0 none */
  int32_t window_left;             /* AC_VAR_WINDOW: -1 unbounded */
  int32_t window_right;            /* AC_VAR_WINDOW: -1 unbounded */
  const float* sinks;              /* AC_VAR_SINKS: num_heads logits, subject memory; NULL none */
  int32_t page_size;               /* AC_VAR_PAGED_KV: > 0 makes k and v page pools; 0 contiguous */
  int32_t num_pages;               /* pages in the pools */
  int32_t max_blocks;              /* block-table entries per sequence */
  const int32_t* block_table;      /* [num_seqs, max_blocks], subject memory */
  const int32_t* block_table_host; /* the same, host memory */
  /* An FP8 KV cache (caps.kv_dtypes): otherwise kv_dtype equals dtype and the descales are NULL. */
  ac_dtype kv_dtype;           /* the dtype of k and v: dtype, or AC_DTYPE_E4M3 / E5M2 / E4M3FNUZ */
  const float* q_descale;      /* AC_FP8_Q: as k_descale, q then holds codes of kv_dtype; else NULL */
  const float* k_descale;      /* FP8: 1, num_kv_heads or num_seqs x num_kv_heads values, subject memory */
  const float* v_descale;      /* FP8: as k_descale */
  int32_t descale_granularity; /* FP8: 0 one descale per tensor, 1 one per KV head, 2 one per (sequence,
                                * KV head) */
  int32_t v_in_k;              /* AC_VAR_V_IN_K: 1 when v is k's first head_size_v columns; else 0 */
  /* Added within version 3 (a caller that zero-fills the struct gets the fixed 2^8): */
  const float* p_scale; /* AC_FP8_P_SCALE: P's scale, one value in [AC_MIN_P_SCALE, AC_MAX_P_SCALE], subject
                         * memory; NULL: 2^8. Always NULL for a subject not declaring it */
  /* AC_FP8_OUT: an FP8 format makes out its codes of O / *output_scale; any other value (a
   * zero-filled struct's included) means out in dtype. */
  ac_dtype out_dtype;
  const float* output_scale; /* AC_FP8_OUT calls: one positive finite value, subject memory; else NULL */
  float* amax;               /* AC_FP8_AMAX: NULL, or two floats (subject memory) the call writes */
} ac_attention_args;

/* The KV-cache quantiser (AC_OP_QUANTIZE, added within version 3): y = the out_dtype code of
 * x / scale, x and y [num_tokens, num_heads, head_size] contiguous, one byte per code of y. The
 * subject declares x's dtypes in caps.dtypes, the formats it writes in caps.kv_dtypes, one scale per
 * head with AC_FP8_DESCALE_PER_KV_HEAD (else one per tensor), and AC_FP8_SATURATE where its casts
 * saturate. Each element's code must be the quotient x / scale, the real one or its fp32 rounding
 * (a kernel dividing in fp32; the two differ only next to a tie of the format), rounded to nearest
 * with ties to even in the format extended past its largest finite value; then
 *   - a result past the largest finite value, or x infinite: AC_FP8_SATURATE's signed largest value,
 *     else NaN (e4m3fn, e4m3fnuz) or the signed infinity (e5m2);
 *   - x NaN: any NaN code of the format;
 *   - a zero: either sign's zero (e4m3fnuz has one, 0x00).
 * Each scale is positive and finite. This is the step before an FP8 cache is read: the attention
 * subjects are judged on the codes they are given, the quantiser on the codes it writes. */
typedef struct {
  ac_dtype dtype;     /* x's: AC_DTYPE_F32, F16 or BF16 */
  ac_dtype out_dtype; /* y's: AC_DTYPE_E4M3, E5M2 or E4M3FNUZ */
  int32_t num_tokens, num_heads, head_size;
  const void* x;
  uint8_t* y;
  const float* scale; /* num_scales values, subject memory: head h divides by scale[h] (or scale[0]) */
  int32_t num_scales; /* 1, or num_heads (AC_FP8_DESCALE_PER_KV_HEAD) */
  void* stream;
} ac_quantize_args;

typedef int (*ac_merge_fn)(void* self, const ac_merge_args* args, char* err, size_t err_len);
typedef int (*ac_softmax_fn)(void* self, const ac_softmax_args* args, char* err, size_t err_len);
typedef int (*ac_attention_fn)(void* self, const ac_attention_args* args, char* err, size_t err_len);
typedef int (*ac_quantize_fn)(void* self, const ac_quantize_args* args, char* err, size_t err_len);

/* The version-1 layout of ac_subject, frozen (see the versions note at the top). */
typedef struct {
  const char* name;
  const char* description;
  ac_caps_v1 caps;
  ac_merge_fn merge;
  ac_softmax_fn softmax;
  ac_attention_fn attention;
  void* self;
} ac_subject_v1;

/* The version-2 layout of ac_subject, frozen. */
typedef struct {
  const char* name;
  const char* description;
  ac_caps_v2 caps;
  ac_merge_fn merge;
  ac_softmax_fn softmax;
  ac_attention_fn attention;
  void* self;
} ac_subject_v2;

#if AC_TARGET_ABI_VERSION == 1
typedef ac_subject_v1 ac_subject;
#elif AC_TARGET_ABI_VERSION == 2
typedef ac_subject_v2 ac_subject;
#else
typedef struct {
  const char* name;        /* unique among loaded subjects: letters, digits, '-', '_', '.'; at most
                            * AC_MAX_NAME_CHARS */
  const char* description; /* one line */
  ac_caps caps;
  ac_merge_fn merge;         /* NULL unless caps.ops has AC_OP_MERGE */
  ac_softmax_fn softmax;     /* NULL unless caps.ops has AC_OP_SOFTMAX */
  ac_attention_fn attention; /* NULL unless caps.ops has AC_OP_ATTENTION or AC_OP_SPLITKV */
  void* self;                /* passed back as the first argument */
  ac_quantize_fn quantize;   /* NULL unless caps.ops has AC_OP_QUANTIZE. Added within version 3 before
                              * its release, after `self`: the fields before it keep their offsets,
                              * the array's stride grows (a plugin built against an earlier
                              * version-3 header is rebuilt) */
} ac_subject;
#endif

typedef struct {
  uint32_t abi_version; /* AC_ABI_VERSION: says how `subjects` is laid out */
  const char* name;
  int32_t num_subjects;
  const ac_subject* subjects;
} ac_plugin;

typedef uint32_t (*ac_plugin_abi_version_fn)(void);
typedef const ac_plugin* (*ac_plugin_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* ATTNCHECK_PLUGIN_ABI_H */
