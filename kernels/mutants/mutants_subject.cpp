// ac_subject adapters (plugin ABI) of the mutants and the table that describes them. Each mutant
// runs its correct twin's own code (merge_host / merge_cuda, softmax_host / softmax_cuda,
// fused_attention_host, splitkv_attention_host / _cuda, the fused kernel template through
// fused_mutant_cuda, hopper_fp8_attention_host / hopper_fp8_row_accumulator_cuda) with one mutation
// switched on, and declares the capabilities and conventions
// of its correct twin's registered subject (mutant_caps), so the properties judge it by the
// contract the correct kernel meets. Host twins are registered for every mutant but 12 (a
// shared-memory race has no host analogue) and 13 (it needs a tensor past 2^31 elements); a CUDA
// build registers every mutant for the CUDA backend as well, but 24 (bug_variant: the CUDA kernels
// compute one head size).
// Check: ctest --test-dir build -R mutants
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "common/registry.h"
#include "fused/fused.h"
#include "fused/fused_math.h"
#include "hopper/hopper.h"
#include "merge/merge.h"
#include "merge/merge_math.h"
#include "mutants/mutants.h"
#include "quantize/quantize.h"
#include "softmax/softmax.h"
#include "splitkv/splitkv.h"

namespace attncheck::kern {

namespace {

constexpr MutantInfo kMutants[] = {
    {1, "mutant-merge-no-inf-map",
     "merge without the +inf -> -inf mapping: FlashAttention-2's empty sentinel is taken as a huge mass "
     "(NaN)",
     "merge", "merge_sentinels", false},
    {2, "mutant-merge-no-empty-guard",
     "merge without the both-empty guard: (-inf) - (-inf) = NaN (chunked prefill, no prefix hit)", "merge",
     "merge_sentinels", false},
    {3, "mutant-merge-mul-then-div",
     "merge multiplies by e^(LSE-M) and divides afterwards: p + s overflows fp32 when |O| is near FLT_MAX "
     "(fp32, bf16)",
     "merge", "no_spurious_nonfinite", false},
    {4, "mutant-merge-base2-as-e", "merge declares natural-log LSEs but computes in base 2 (exp2/log2)",
     "merge", "accuracy, lse_convention", false},
    {5, "mutant-softmax-l-fp16", "online softmax with the running sum l rounded to fp16 after every update",
     "softmax-online", "accuracy", false},
    {6, "mutant-fused-no-o-rescale", "fused attention rescales l but not O when the running max moves",
     "fused", "accuracy", false},
    {7, "mutant-fused-finite-mask", "fused attention masks with a finite -5e4 instead of -inf", "fused",
     "empty_row_contract", false},
    {8, "mutant-softmax-no-max",
     "softmax without subtracting the max (exp rounded to storage) and without declaring AC_FEAT_NAIVE_EXP",
     "softmax-safe", "no_spurious_nonfinite", false},
    {9, "mutant-fused-gqa-mod",
     "fused attention: query head i reads KV head i mod h_kv instead of i / (h / h_kv)", "fused", "accuracy",
     false},
    {10, "mutant-fused-causal-off-by-one", "fused attention: causal row t sees key t + Tk - Tq + 1 too",
     "fused", "accuracy", false},
    {11, "mutant-splitkv-combine-plus-inf",
     "split-KV combine writes FlashAttention-2's +inf LSE for an all-empty row (declares -inf)", "splitkv",
     "empty_row_contract", false},
    {12, "mutant-fused-missing-barrier",
     "fused attention without the barrier that protects a K/V buffer before the next prefetch (a race)",
     "fused", "gpu test: racecheck + run-to-run nondeterminism", true},
    {13, "mutant-fused-offsets-32bit",
     "fused attention computes K/V tile offsets in 32 bits (wrap past 2^31)", "fused",
     "gpu test [large]: 131080 tokens x 128 KV heads x 128", true},
    // The Hopper pipeline's bug classes; their subjects come from kernels/hopper/ (sm_90a builds only).
    {14, "mutant-hopper-no-full-wait",
     "fused-hopper consumers read K/V stages without waiting on their full mbarriers", "fused-hopper",
     "split_equals_whole, accuracy (nondeterministic); synccheck: missing wait", true},
    {15, "mutant-hopper-stale-phase",
     "fused-hopper consumers wait on a fixed mbarrier parity: on odd passes round the ring they read a "
     "stage before its tile lands, or the pipeline deadlocks",
     "fused-hopper",
     "streamed_kv (K/V past L2: the wait's guard traps, a device fault, or launches differ or leave the "
     "budget); gpu test: kernels_hopper_gpu; memcheck. The gate's small cases miss it: with 4 ring "
     "stages the copy lands in time",
     true},
    {16, "mutant-hopper-no-proxy-fence",
     "fused-hopper's partial V tile, stored by ordinary stores, misses fence.proxy.async before wgmma",
     "fused-hopper",
     "none at run time on the H200 (within the exact bound; sanitizers silent); statically, ptx_proxy_lint "
     "on its PTX",
     true},
    {17, "mutant-fused-batch-tile",
     "fused attention picks its key tile from the batch, as a scheduler switch does: Bc = 32 when the "
     "call's longest query range times the GQA group passes 64, so one sequence's fold order depends on "
     "its neighbours",
     "fused", "batch_invariance", false},
    {18, "mutant-splitkv-adaptive-invariant",
     "splitkv-packed-adaptive (num_splits from the batch, as engines choose it) declaring batch invariance",
     "splitkv-packed-adaptive", "batch_invariance", false},
    // The engines' variants (plugin_abi.h AC_VAR_*), each a switch in fused_math.h.
    {19, "mutant-fused-page-off-by-one",
     "fused attention, paged K / V: a sequence's last page is read from the block-table entry before it",
     "fused", "accuracy", false},
    {20, "mutant-fused-read-past-end",
     "fused attention, paged K / V: the key range runs one slot past the sequence's last key", "fused",
     "accuracy", false},
    {21, "mutant-fused-window-off-by-one", "fused attention: the left window edge admits one key too many",
     "fused", "accuracy", false},
    {22, "mutant-fused-softcap-before-scale",
     "fused attention caps the raw dot product and scales after (cap tanh(q.k / cap) scale)", "fused",
     "accuracy", false},
    {23, "mutant-splitkv-sink-every-split", "split-KV attention counts the sink in every partial, not once",
     "splitkv", "accuracy", false},
    {24, "mutant-splitkv-engine-adaptive-invariant",
     "splitkv-adaptive (split-KV choosing num_splits from the batch, as engines choose it) declaring batch "
     "invariance",
     "splitkv-adaptive", "batch_invariance", false},
    {25, "mutant-fused-v-head-from-qk",
     "fused attention, V's own head size: V's row stride taken from the QK head size (host twin only)",
     "fused", "accuracy", false},
    {26, "mutant-fused-fp8-v-descale-ignored",
     "fused attention from an FP8 KV cache reads V's codes without v_descale (host twin only)", "fused-fp8kv",
     "accuracy", false},
    {27, "mutant-fused-fp8-descale-by-query-head",
     "fused attention from an FP8 KV cache indexes k_descale by the query head, not its KV head (host twin "
     "only)",
     "fused-fp8kv", "accuracy", false},
    {28, "mutant-fused-fp8-v-descale-twice",
     "fused attention from an FP8 KV cache multiplies V's codes by v_descale twice (host twin only)",
     "fused-fp8kv", "fp8_descales", false},
    {29, "mutant-fused-fp8-p-no-offset",
     "fused attention in FlashAttention-3's FP8 contract casts P to e4m3fn without the 2^8 offset: small "
     "weights flush (host twin only)",
     "fused-fp8", "fp8_descales", false},
    {30, "mutant-fused-fp8-q-descale-twice",
     "fused attention in FlashAttention-3's FP8 contract folds q_descale into the softmax scale twice (host "
     "twin only)",
     "fused-fp8", "fp8_descales", false},
    {31, "mutant-quantize-nan-cast",
     "KV-cache quantiser declaring saturating casts (AC_FP8_SATURATE) whose casts overflow to NaN / inf",
     "quantize-fp8", "quantize_exact", false},
    {32, "mutant-merge-fp8-scale-ignored",
     "merge with an FP8 output writes the merged value cast without dividing by output_scale", "merge-fp8",
     "accuracy", false},
    {33, "mutant-fused-v-in-k-own-stride",
     "fused attention, V inside K: V's rows read at V's own head size, not K's row stride (host twin only)",
     "fused", "accuracy", false},
    {34, "mutant-fused-fp8-p-scale-ignored",
     "fused attention in cuDNN's FP8 contract stores P times the call's p_scale but reads it over the fixed "
     "2^8 (host twin only)",
     "fused-fp8-scaled", "split_equals_whole", false},
    {35, "mutant-fused-fp8-out-scale-ignored",
     "fused attention in cuDNN's FP8 contract casts O to FP8 without dividing by output_scale (host twin "
     "only)",
     "fused-fp8-scaled", "fp8_output", false},
    {36, "mutant-fused-fp8-amax-unnormalised",
     "fused attention in cuDNN's FP8 contract writes P's maximum before the row's division by its sum "
     "(always 1) (host twin only)",
     "fused-fp8-scaled", "fp8_amax", false},
    {37, "mutant-hopper-fp8-row-accumulator",
     "fused-hopper-fp8 adds every key tile's P V into O in the e4m3 tensor cores' accumulator "
     "(FlashAttention-3's P V) while declaring fp32 every 128 products (AC_FP8_TRUNCATED_SUMS): a row's "
     "later products are cut toward zero once O holds some 2^13 of them",
     "fused-hopper-fp8", "fp8_descales (its rows of 16384 keys with V = 1)", false},
};

// batch_tile: the correct fused kernel, its tiling chosen from the call's batch (mutant 17).
// adaptive_declared: a correct engine-style adaptive subject (its twin, called as registered), its
// caps claiming AC_CAP_BATCH_INVARIANT (mutants 18 and 24).
// hopper_fp8: fused-hopper-fp8's kernel (HopperMutation::fp8_row_accumulator) or its twin with the
// same fused::Mutation (mutant 37).
enum class Family {
  merge,
  softmax,
  fused,
  splitkv,
  hopper,
  batch_tile,
  adaptive_declared,
  quantize,
  hopper_fp8
};

// The tiling mutant 17 switches to, (64, 32) in kFusedTilings, and where: a longest query range
// times the GQA group past 64 (the switch point of a tile-shape heuristic).
constexpr int kBatchTileTiling = 3, kBatchTileSwitch = 64;

struct MutantSelf {
  Family family;
  int mutation;  // MergeMutation, SoftmaxVariant, fused::Mutation or QuantizeMutation value
  bool cuda;
  // adaptive_declared: the twin's own attention entry and its self.
  ac_attention_fn twin_attention = nullptr;
  void* twin_self = nullptr;
  bool p_e4m3 = false;   // the twin declares AC_FP8_P_E4M3: the fused walk holds P in e4m3fn too
  bool fp8_out = false;  // the twin declares AC_FP8_OUT: the fused walk writes O in FP8 where asked
};

int merge_mutant(void* self, const ac_merge_args* args, char* err, size_t err_len) {
  const auto* s = static_cast<const MutantSelf*>(self);
  MergeOptions o;
  o.mutation = MergeMutation(s->mutation);
#if defined(ATTNCHECK_HAVE_CUDA)
  if (s->cuda) return merge_cuda(*args, o, err, err_len);
#endif
  return merge_host(*args, o, err, err_len);
}

int softmax_mutant(void* self, const ac_softmax_args* args, char* err, size_t err_len) {
  const auto* s = static_cast<const MutantSelf*>(self);
#if defined(ATTNCHECK_HAVE_CUDA)
  if (s->cuda) return softmax_cuda(*args, SoftmaxVariant(s->mutation), err, err_len);
#endif
  return softmax_host(*args, SoftmaxVariant(s->mutation), err, err_len);
}

int quantize_mutant(void* self, const ac_quantize_args* args, char* err, size_t err_len) {
  const auto* s = static_cast<const MutantSelf*>(self);
  QuantizeOptions o;
  o.saturate = true;  // what the twin declares; the mutation breaks it
  o.mutation = QuantizeMutation(s->mutation);
#if defined(ATTNCHECK_HAVE_CUDA)
  if (s->cuda) return quantize_cuda(*args, o, err, err_len);
#endif
  return quantize_host(*args, o, err, err_len);
}

int attention_mutant(void* self, const ac_attention_args* args, char* err, size_t err_len) {
  const auto* s = static_cast<const MutantSelf*>(self);
  if (s->family == Family::batch_tile) {
    ac_attention_args b = *args;
    int64_t longest = 0;
    for (int32_t i = 0; i < b.num_seqs; ++i)
      longest = std::max<int64_t>(longest, b.cu_seqlens_q_host[i + 1] - b.cu_seqlens_q_host[i]);
    if (longest * (b.num_heads / std::max(1, b.num_kv_heads)) > kBatchTileSwitch) b.tiling = kBatchTileTiling;
#if defined(ATTNCHECK_HAVE_CUDA)
    if (s->cuda) return fused_attention_cuda(b, FusedOptions{}, err, err_len);
#endif
    return fused_attention_host(b, FusedOptions{}, err, err_len);
  }
  if (s->family == Family::adaptive_declared) return s->twin_attention(s->twin_self, args, err, err_len);
  if (s->family == Family::hopper_fp8) {
#if defined(ATTNCHECK_HAVE_CUDA) && defined(ATTNCHECK_HAVE_SM90A)
    if (s->cuda) return hopper_fp8_row_accumulator_cuda(*args, FusedOptions{}, err, err_len);
#endif
    FusedOptions o;
    o.mutation = fused::Mutation(s->mutation);
    return hopper_fp8_attention_host(*args, o, err, err_len);
  }
  if (s->family == Family::splitkv) {
    SplitKVOptions o;
    o.mutation = fused::Mutation(s->mutation);
#if defined(ATTNCHECK_HAVE_CUDA)
    if (s->cuda) return splitkv_attention_cuda(*args, o, err, err_len);
#endif
    return splitkv_attention_host(*args, o, err, err_len);
  }
#if defined(ATTNCHECK_HAVE_CUDA)
  if (s->cuda) return fused_mutant_cuda(s->mutation, *args, err, err_len);
#endif
  FusedOptions o;
  o.mutation = fused::Mutation(s->mutation);
  o.p_e4m3 = s->p_e4m3;
  o.fp8_out = s->fp8_out;
  return fused_attention_host(*args, o, err, err_len);
}

constexpr int32_t kHead128[] = {128};

// A mutant declares its correct twin's capabilities (so it is judged by the contract the correct
// kernel meets), narrowed to what the mutants compile: the CUDA fused mutants (mutants.cu) are
// built for one tiling, (64, 64) = the first of kFusedTilings, and the GPU-only ones for fp16 at
// head size 128 only. Everything else is the twin's, declarations included: mutant 8 runs the
// naive softmax under softmax-safe's features, without AC_FEAT_NAIVE_EXP, which is its bug.
ac_caps mutant_caps(const ac_caps& correct, Family family, bool gpu_only, bool cuda) {
  ac_caps c = correct;
  if (family == Family::fused || family == Family::batch_tile) {
    c.num_tilings = 1;
    if (gpu_only) {
      c.dtypes = AC_DTYPE_BIT(AC_DTYPE_F16);
      c.head_size_min = 128;
      c.head_sizes = kHead128;
      c.num_head_sizes = 1;
    }
  }
  if (family == Family::adaptive_declared) c.flags |= AC_CAP_BATCH_INVARIANT;
  // The CUDA row accumulator is built for bf16 output alone (hopper_fp8.cu run_fp8).
  if (family == Family::hopper_fp8 && cuda) c.dtypes = AC_DTYPE_BIT(AC_DTYPE_BF16);
  return c;
}

const ac_subject* find_subject(const std::vector<ac_subject>& subjects, const char* name) {
  for (const ac_subject& s : subjects)
    if (std::string_view(s.name) == name) return &s;
  return nullptr;
}

struct Registration {
  int number;
  Family family;
  int mutation;
};
constexpr Registration kRegistrations[] = {
    {1, Family::merge, int(MergeMutation::no_inf_mapping)},
    {2, Family::merge, int(MergeMutation::no_both_empty_guard)},
    {3, Family::merge, int(MergeMutation::multiply_then_divide)},
    {4, Family::merge, int(MergeMutation::base_swap)},
    {5, Family::softmax, int(SoftmaxVariant::online_l_fp16)},
    {6, Family::fused, int(fused::Mutation::forget_rescale_o)},
    {7, Family::fused, int(fused::Mutation::finite_mask_sentinel)},
    {8, Family::softmax, int(SoftmaxVariant::naive)},
    {9, Family::fused, int(fused::Mutation::gqa_head_mod)},
    {10, Family::fused, int(fused::Mutation::causal_off_by_one)},
    {11, Family::splitkv, int(fused::Mutation::combine_plus_inf)},
    {12, Family::fused, int(fused::Mutation::missing_barrier)},
    {13, Family::fused, int(fused::Mutation::offsets_32bit)},
    {14, Family::hopper, 0},
    {15, Family::hopper, 0},
    {16, Family::hopper, 0},
    {17, Family::batch_tile, 0},
    {18, Family::adaptive_declared, 0},
    {19, Family::fused, int(fused::Mutation::page_off_by_one)},
    {20, Family::fused, int(fused::Mutation::read_past_end)},
    {21, Family::fused, int(fused::Mutation::window_edge_off_by_one)},
    {22, Family::fused, int(fused::Mutation::softcap_before_scale)},
    {23, Family::splitkv, int(fused::Mutation::sink_every_split)},
    {24, Family::adaptive_declared, 0},
    {25, Family::fused, int(fused::Mutation::v_head_from_qk)},
    {26, Family::fused, int(fused::Mutation::fp8_v_descale_ignored)},
    {27, Family::fused, int(fused::Mutation::fp8_descale_by_query_head)},
    {28, Family::fused, int(fused::Mutation::fp8_v_descale_twice)},
    {29, Family::fused, int(fused::Mutation::fp8_p_no_offset)},
    {30, Family::fused, int(fused::Mutation::fp8_q_descale_twice)},
    {31, Family::quantize, int(QuantizeMutation::nan_cast)},
    {32, Family::merge, int(MergeMutation::fp8_scale_ignored)},
    {33, Family::fused, int(fused::Mutation::v_in_k_own_stride)},
    {34, Family::fused, int(fused::Mutation::fp8_p_scale_ignored)},
    {35, Family::fused, int(fused::Mutation::fp8_out_scale_ignored)},
    {36, Family::fused, int(fused::Mutation::fp8_amax_unnormalised)},
    {37, Family::hopper_fp8, int(fused::Mutation::fp8_row_accumulator)},
};
constexpr int kNumMutants = int(sizeof(kMutants) / sizeof(kMutants[0]));
static_assert(sizeof(kRegistrations) / sizeof(kRegistrations[0]) == sizeof(kMutants) / sizeof(kMutants[0]));

// The variant (AC_VAR_*) a mutant's bug lives in where its correct twin may not declare it on every
// backend, else 0. A mutant is registered only where its twin declares that variant: elsewhere no
// case reaches the bug (25 on the GPU, whose kernels compute one head size).
uint32_t bug_variant(const Registration& r) {
  if (r.family != Family::fused) return 0;
  return r.mutation == int(fused::Mutation::v_head_from_qk)      ? AC_VAR_HEAD_SIZE_V
         : r.mutation == int(fused::Mutation::v_in_k_own_stride) ? AC_VAR_V_IN_K
                                                                 : 0;
}

// Static storage: subjects hand out `self` pointers and description strings that must outlive
// the registry.
MutantSelf g_self[2][kNumMutants];
std::string g_description[2][kNumMutants];

}  // namespace

std::span<const MutantInfo> mutant_table() { return {kMutants, size_t(kNumMutants)}; }

const MutantInfo* find_mutant(std::string_view name) {
  for (const MutantInfo& m : kMutants)
    if (name == m.name) return &m;
  return nullptr;
}

void append_mutant_subjects(std::vector<ac_subject>& out, bool cuda) {
#if !defined(ATTNCHECK_HAVE_CUDA)
  if (cuda) return;
#endif
  const int b = cuda ? 1 : 0;
  const std::vector<ac_subject> correct = builtin_subjects(cuda);
  for (int i = 0; i < kNumMutants; ++i) {
    const MutantInfo& m = kMutants[i];
    const Registration& r = kRegistrations[i];
    if (m.gpu_only && !cuda) continue;
    if (r.family == Family::hopper) continue;  // append_hopper_mutant_subjects, below
    const ac_subject* twin = find_subject(correct, m.correct_subject);
    if (!twin) continue;  // cannot happen for the table above; tests/mutants checks every name
    if ((twin->caps.variants & bug_variant(r)) != bug_variant(r)) continue;
    g_self[b][i] = MutantSelf{r.family,
                              r.mutation,
                              cuda,
                              twin->attention,
                              twin->self,
                              (twin->caps.fp8 & AC_FP8_P_E4M3) != 0,
                              (twin->caps.fp8 & AC_FP8_OUT) != 0};
    g_description[b][i] = std::string("MUTANT ") + std::to_string(m.number) + ": " + m.bug +
                          " (killer: " + m.expected_killer + ")" + (cuda ? "" : " (host twin)");
    ac_subject s{};
    s.name = m.name;
    s.description = g_description[b][i].c_str();
    s.self = &g_self[b][i];
    s.caps = mutant_caps(twin->caps, r.family, m.gpu_only, cuda);
    switch (r.family) {
      case Family::merge:
        s.merge = merge_mutant;
        break;
      case Family::softmax:
        s.softmax = softmax_mutant;
        break;
      case Family::quantize:
        s.quantize = quantize_mutant;
        break;
      case Family::fused:
      case Family::splitkv:
      case Family::hopper:
      case Family::hopper_fp8:
      case Family::batch_tile:
      case Family::adaptive_declared:
        s.attention = attention_mutant;
        break;
    }
    out.push_back(s);
  }
  append_hopper_mutant_subjects(out, cuda);  // mutant-hopper-* (kernels/hopper/), CUDA sm_90a only
}

}  // namespace attncheck::kern
