// GPU tests of the engines' variants (plugin_abi.h AC_VAR_*) in the CUDA fused, split-KV and
// splitkv-packed kernels (kernels/fused/fused_kernel.cuh's and kernels/hopper/packed.cu's VAR
// instantiations, kernels/splitkv/splitkv.cu's combine), label
// `gpu`: the cases of variant_case.h (paged K / V at page sizes 1, 5, 16, 64 and 256 from shuffled
// pools, last pages partly filled, spare slots poisoned with NaN; softcap 1 and 30; windows left
// -1 / 0 / 3 / 63 / 64 by right -1 / 0 / 2, causal or not, Tq != Tk; sinks ordinary and above every
// score; combinations) run on the GPU and on the host twins, each against the fp64 attention with
// the variants, with no NaN from a poisoned slot and the GPU within 2 ulps of its twin; the variant
// mutants 19 to 22 (fused) and 23 (split-KV) on the GPU leave the bound where their twins do.
// splitkv-packed's MLA kernel (kernels/hopper/packed_mla.cu) on variant_case.h's mla_cases and on
// FP8 caches of that shape; FP8 caches in pages (GQA and MLA); fused-hopper's softcap, window,
// sinks and pages (at its page sizes) on the same cases, and its softcaps and windows over many key
// tiles, each against fp64 and the twin, and its paged runs bit for bit its contiguous ones; small
// variant shapes for compute-sanitizer ("[.sanitize-var]", hidden from a plain run).
// Skips (exit 77) without a GPU. Run: ctest --test-dir build -L gpu -R kernels_attention
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "device_case.h"
#include "fp8_case.h"
#include "fused/fused.h"
#include "hopper/hopper.h"
#include "mutants/mutants.h"
#include "splitkv/splitkv.h"
#include "variant_case.h"

using namespace attncheck;
using namespace attncheck::test;
using kern::fused::Mutation;

namespace {

struct Run {
  int rc;
  std::string err;
  std::vector<uint16_t> out;
  std::vector<float> lse;
};

// Which kernel a run calls: the fused kernel, split-KV (or splitkv-packed, whose twin is split-KV's),
// or a mutant of either.
struct Kernel {
  bool split = false;
  Mutation mutation = Mutation::none;
  bool packed = false;
  bool hopper = false;  // fused-hopper (sm_90a), its twin fused's walk with the Hopper tiles
};

// An FP8 cache laid out in the pools of pk (page_case's table): each key's codes at its slot, every
// other slot the NaN code 0x7f (a NaN in e4m3fn and e5m2), so a read of one shows in O.
Fp8Cache paged_codes(const AttnCase& c, const PagedKV& pk, const Fp8Cache& fc) {
  Fp8Cache out = fc;
  const size_t slots = size_t(pk.num_pages) * size_t(pk.page_size);
  const size_t row = size_t(c.kv_heads) * size_t(c.head_size), vrow = size_t(c.kv_heads) * size_t(c.dv());
  out.k.assign(slots * row, 0x7f);
  out.v.assign(slots * vrow, 0x7f);
  for (size_t s = 0; s < c.seqlens_k.size(); ++s)
    for (int32_t j = 0; j < c.seqlens_k[s]; ++j) {
      const size_t slot =
          size_t(pk.table[s * size_t(pk.max_blocks) + size_t(j / pk.page_size)]) * size_t(pk.page_size) +
          size_t(j % pk.page_size);
      const size_t key = size_t(c.cu_k[s]) + size_t(j);
      std::copy_n(fc.k.begin() + ptrdiff_t(key * row), row, out.k.begin() + ptrdiff_t(slot * row));
      std::copy_n(fc.v.begin() + ptrdiff_t(key * vrow), vrow, out.v.begin() + ptrdiff_t(slot * vrow));
    }
  return out;
}

// The CUDA kernel on a case with its variants: the pools, table and sinks copied to the device;
// with fc, K and V from that FP8 cache (in pages when the case is paged).
Run run_gpu(const VariantCase& vc, Kernel kernel, const Fp8Cache* fc = nullptr) {
  const AttnCase& c = vc.c;
  DeviceCase dc(c);
  PagedKV pk;
  if (vc.var.page_size > 0) pk = page_case(c, vc.var.page_size, 77);
  DeviceArray<uint16_t> pool_k(pk.k), pool_v(pk.v);
  DeviceArray<int32_t> table(pk.table);
  DeviceArray<float> sinks(vc.var.sinks);
  const Fp8Cache cache = fc && vc.var.page_size > 0 ? paged_codes(c, pk, *fc) : fc ? *fc : Fp8Cache{};
  DeviceArray<uint8_t> codes_k(cache.k), codes_v(cache.v);
  DeviceArray<float> kd(cache.kd), vd(cache.vd);
  ac_attention_args a =
      variant_args(dc.args(c, kernel.split ? vc.split_tiling : vc.tiling), vc.var,
                   vc.var.page_size > 0 ? &pk : nullptr, pool_k.ptr, pool_v.ptr, table.ptr, sinks.ptr);
  if (fc) point_at_fp8(a, cache, codes_k.ptr, codes_v.ptr, kd.ptr, vd.ptr);
  char err[256] = {0};
  Run r;
  if (kernel.hopper) {
#if defined(ATTNCHECK_HAVE_SM90A)
    r.rc = kern::hopper_attention_cuda(a, {}, err, sizeof err);
#else
    r.rc = AC_ERR_UNSUPPORTED;
#endif
  } else if (kernel.packed) {
    a.num_splits = vc.splits;
    a.fold_order = vc.fold;
    r.rc = kern::packed_attention_cuda(a, err, sizeof err);
  } else if (kernel.split) {
    a.num_splits = vc.splits;
    a.fold_order = vc.fold;
    kern::SplitKVOptions o;
    o.mutation = kernel.mutation;
    r.rc = kern::splitkv_attention_cuda(a, o, err, sizeof err);
  } else if (kernel.mutation != Mutation::none) {
    r.rc = kern::fused_mutant_cuda(int(kernel.mutation), a, err, sizeof err);
  } else {
    r.rc = kern::fused_attention_cuda(a, {}, err, sizeof err);
  }
  r.err = err;
  r.out = dc.out.to_host();
  r.lse = dc.lse.to_host();
  return r;
}

// The host twin of the same call.
Run run_twin(const VariantCase& vc, Kernel kernel, const Fp8Cache* fc = nullptr) {
  const AttnCase& c = vc.c;
  Run r;
  r.out.assign(size_t(c.total_q() * c.heads * c.dv()), 0x7f7f);
  r.lse.assign(size_t(c.total_q() * c.heads), 12345.0f);
  PagedKV pk;
  if (vc.var.page_size > 0) pk = page_case(c, vc.var.page_size, 77);
  ac_attention_args a = variant_args(
      host_args(c, r.out.data(), r.lse.data(), kernel.split ? vc.split_tiling : vc.tiling), vc.var,
      vc.var.page_size > 0 ? &pk : nullptr, pk.k.data(), pk.v.data(), pk.table.data(), vc.var.sinks.data());
  const Fp8Cache cache = fc && vc.var.page_size > 0 ? paged_codes(c, pk, *fc) : fc ? *fc : Fp8Cache{};
  if (fc) point_at_fp8(a, cache, cache.k.data(), cache.v.data(), cache.kd.data(), cache.vd.data());
  char err[256] = {0};
  if (kernel.hopper) {
    r.rc = kern::hopper_attention_host(a, {}, err, sizeof err);
  } else if (kernel.split) {
    a.num_splits = vc.splits;
    a.fold_order = vc.fold;
    kern::SplitKVOptions o;
    o.mutation = kernel.mutation;
    r.rc = kern::splitkv_attention_host(a, o, err, sizeof err);
  } else {
    kern::FusedOptions o;
    o.mutation = kernel.mutation;
    r.rc = kern::fused_attention_host(a, o, err, sizeof err);
  }
  r.err = err;
  return r;
}

// Elements of two outputs more than 2 ulps of the input type apart (sign-magnitude distance).
int64_t far_apart(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  int64_t far = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const int x = (a[i] & 0x8000) ? -int(a[i] & 0x7fff) : int(a[i] & 0x7fff);
    const int y = (b[i] & 0x8000) ? -int(b[i] & 0x7fff) : int(b[i] & 0x7fff);
    far += std::abs(x - y) > 2 ? 1 : 0;
  }
  return far;
}

// A kernel and its twin (split-KV's for splitkv-packed) on one variant case: both within the fp64
// bound, no NaN from a poisoned slot on the GPU. Same function, not the same sums: the tensor cores
// add in another order and exp2 differs by an ulp, so an output that cancels to near zero may land
// more than 2 ulps of its own magnitude from the twin's (seen on the H200: 1 to 26 of thousands of
// elements, every one within the fp64 bound on both sides). At most 1% of the elements may.
void check_with_twin(const VariantCase& vc, Kernel kernel) {
  const Run g = run_gpu(vc, kernel);
  INFO("gpu: " << g.err);
  REQUIRE(g.rc == AC_OK);
  const Run t = run_twin(vc, {kernel.split, Mutation::none, kernel.packed, kernel.hopper});
  INFO("twin: " << t.err);
  REQUIRE(t.rc == AC_OK);
  CHECK(nan_count(vc.c, g.out) == 0);
  CHECK(compare_variants(vc.c, vc.var, g.out, g.lse) == "");
  CHECK(compare_variants(vc.c, vc.var, t.out, t.lse) == "");
  CHECK(far_apart(g.out, t.out) * 100 <= int64_t(g.out.size()));
}

// A kernel on an FP8 cache twice: with power-of-two descales (pow2) against fp64 (the codes times
// their descales are values of the input type, which dequantised holds), with others (heads)
// against its twin; no NaN from a spare slot's NaN code either time.
void check_fp8(const VariantCase& vc, Kernel kernel, const Fp8Cache& pow2, const Fp8Cache& heads) {
  const Run g = run_gpu(vc, kernel, &pow2);
  INFO(g.err);
  REQUIRE(g.rc == AC_OK);
  CHECK(nan_count(vc.c, g.out) == 0);
  CHECK(compare_variants(dequantised(vc.c, pow2), vc.var, g.out, g.lse) == "");
  const Run gh = run_gpu(vc, kernel, &heads);
  const Run th = run_twin(vc, kernel, &heads);
  INFO(gh.err << " / " << th.err);
  REQUIRE(gh.rc == AC_OK);
  REQUIRE(th.rc == AC_OK);
  CHECK(nan_count(vc.c, gh.out) == 0);
  CHECK(far_apart(gh.out, th.out) * 100 <= int64_t(gh.out.size()));
}

// A paged case run again contiguous: where the keys are read from does not change the sums, so O
// and the LSE are the same bits (a chunk landing in the wrong rows, or a stale row that a visible
// key meets, would not be). Returns the paged run.
Run paged_equals_contiguous(VariantCase vc, Kernel kernel) {
  const Run paged = run_gpu(vc, kernel);
  INFO(paged.err);
  REQUIRE(paged.rc == AC_OK);
  vc.var.page_size = 0;
  const Run flat = run_gpu(vc, kernel);
  REQUIRE(flat.rc == AC_OK);
  CHECK(paged.out == flat.out);
  CHECK(std::memcmp(paged.lse.data(), flat.lse.data(), paged.lse.size() * 4) == 0);
  return paged;
}

}  // namespace

TEST_CASE("fused gpu: the variants agree with the host twin", "[fused][splitkv][packed][gpu][variants]") {
  for (const VariantCase& vc : variant_cases()) {
    INFO(vc.describe());
    for (const Kernel kernel : {Kernel{false}, Kernel{true}, Kernel{true, Mutation::none, true}}) {
      INFO((kernel.packed ? "splitkv-packed" : kernel.split ? "split-KV" : "fused"));
      check_with_twin(vc, kernel);
    }
  }
}

TEST_CASE("fused gpu: the variant mutants 19-23 leave the bound where their twins do",
          "[mutants][gpu][variants]") {
  for (const MutantCase& mc : variant_mutant_cases()) {
    const bool split = mc.mutation == Mutation::sink_every_split;
    INFO("mutant " << int(mc.mutation) << " " << mc.vc.describe());
    const Run good = run_gpu(mc.vc, {split, Mutation::none});
    REQUIRE(good.rc == AC_OK);
    CHECK(compare_variants(mc.vc.c, mc.vc.var, good.out, good.lse) == "");
    const Run bad = run_gpu(mc.vc, {split, mc.mutation});
    INFO("gpu mutant: " << bad.err);
    REQUIRE(bad.rc == AC_OK);
    CHECK(compare_variants(mc.vc.c, mc.vc.var, bad.out, bad.lse) != "");
    const Run twin = run_twin(mc.vc, {split, mc.mutation});
    REQUIRE(twin.rc == AC_OK);
    CHECK(compare_variants(mc.vc.c, mc.vc.var, twin.out, twin.lse) != "");
    // A read past the end lands on a poisoned slot: NaN on both sides. (Mutant 19 reads the page
    // before the last one: real keys, the wrong ones, outside the bound but finite.)
    if (mc.mutation == Mutation::read_past_end) {
      CHECK(nan_count(mc.vc.c, bad.out) > 0);
      CHECK(nan_count(mc.vc.c, twin.out) > 0);
    }
  }
}

TEST_CASE("splitkv-packed gpu: MLA's decode head sizes (576 / 512) against fp64 and the twin",
          "[packed][gpu][variants][mla]") {
  const Kernel packed{true, Mutation::none, true};
  for (const VariantCase& vc : mla_cases()) {
    INFO(vc.describe());
    check_with_twin(vc, packed);
  }
  // An FP8 cache: descales that are powers of two against fp64 (the codes times their descales are
  // values of the input type, dequantised holds them), per tensor with one KV head and per KV head
  // with two; then descales per KV head that are not, against the twin.
  uint64_t seed = 9750;
  for (ac_dtype f : {AC_DTYPE_E4M3, AC_DTYPE_E5M2})
    for (DType dt : {DType::f16, DType::bf16}) {
      const int kv = dt == DType::f16 ? 1 : 2;
      VariantCase vc;
      vc.c = with_head_size_v(make_case(seed, dt, 16 * kv, kv, 576, {1, 1, 2}, {700, 64, 90}, true, false),
                              512, seed + 1);
      ++seed;
      vc.split_tiling = 1;
      vc.splits = 5;
      vc.fold = AC_FOLD_TREE;
      const Fp8Cache pow2 = kv == 1 ? fp8_cache(vc.c, f, {0x1p-6f}, {0x1p2f})
                                    : fp8_cache(vc.c, f, {0x1p-6f, 0x1p-4f}, {0x1p2f, 0x1p-1f});
      INFO(vc.describe() << " kv " << int(f));
      check_fp8(vc, packed, pow2,
                kv == 1 ? fp8_cache(vc.c, f, {0.011f}, {0.03f})
                        : fp8_cache(vc.c, f, {0.011f, 0.0057f}, {0.03f, 0.047f}));
    }
}

TEST_CASE("splitkv-packed gpu: MLA's V inside K equals V as its own tensor, bit for bit",
          "[packed][gpu][variants][mla]") {
  // V := K's first 512 columns; then the same call with v pointing at k (AC_VAR_V_IN_K, packed_mla.cu
  // reading V's rows at K's stride), contiguous and paged: the same bits.
  const Kernel packed{true, Mutation::none, true};
  for (VariantCase vc : mla_cases()) {
    AttnCase& c = vc.c;
    const size_t d = size_t(c.head_size), dv = size_t(c.dv()), rows = c.k.size() / d;
    for (size_t r = 0; r < rows; ++r)
      for (size_t col = 0; col < dv; ++col) c.v[r * dv + col] = c.k[r * d + col];
    INFO(vc.describe());
    const Run own = run_gpu(vc, packed);
    REQUIRE(own.rc == AC_OK);
    DeviceCase dc(c);
    PagedKV pk;
    if (vc.var.page_size > 0) pk = page_case(c, vc.var.page_size, 77);
    DeviceArray<uint16_t> pool_k(pk.k);
    DeviceArray<int32_t> table(pk.table);
    DeviceArray<float> sinks(vc.var.sinks);
    ac_attention_args a =
        variant_args(dc.args(c, vc.split_tiling), vc.var, vc.var.page_size > 0 ? &pk : nullptr, pool_k.ptr,
                     pool_k.ptr, table.ptr, sinks.ptr);
    a.v = a.k;
    a.v_in_k = 1;
    a.num_splits = vc.splits;
    a.fold_order = vc.fold;
    char err[256] = {0};
    REQUIRE(kern::packed_attention_cuda(a, err, sizeof err) == AC_OK);
    CHECK(dc.out.to_host() == own.out);
    const std::vector<float> lse = dc.lse.to_host();
    CHECK(std::memcmp(lse.data(), own.lse.data(), lse.size() * 4) == 0);
  }
}

TEST_CASE("splitkv-packed gpu: an FP8 cache read through pages (GQA and MLA) against fp64 and the twin",
          "[packed][gpu][variants][fp8]") {
  // Pages of 16 (GQA, d = 128 and 64) and of 64 (MLA's 576 / 512); a case with sinks and one with a
  // window (the two paged instantiations, packed_kernel.cuh Walk). Powers of two as descales against
  // fp64, descales per KV head that are not against the twin; spare slots hold NaN codes. Three
  // splits of 700, 37 and 130 keys start at keys 0 and at 234, 467, 13, 25, 44 and 87, so the
  // GQA shapes' copies (packed.cu load_code_rows) take both paths: a warp's 16 keys in one page
  // (one shuffle for their slots) and a slot shuffled for each row.
  const Kernel packed{true, Mutation::none, true};
  uint64_t seed = 9780;
  struct Shape {
    int heads, kv, d, dv, page;
    bool window;
  };
  for (const Shape sh : {Shape{32, 2, 128, 128, 16, false}, Shape{8, 2, 64, 64, 16, true},
                         Shape{32, 2, 576, 512, 64, false}, Shape{16, 2, 576, 512, 64, true}})
    for (ac_dtype f : {AC_DTYPE_E4M3, AC_DTYPE_E5M2}) {
      const DType dt = f == AC_DTYPE_E4M3 ? DType::f16 : DType::bf16;
      VariantCase vc;
      vc.c = make_case(seed, dt, sh.heads, sh.kv, sh.d, {1, 1, 2}, {700, 37, 130}, sh.window, false);
      if (sh.dv != sh.d) vc.c = with_head_size_v(vc.c, sh.dv, seed + 1);
      ++seed;
      vc.var.page_size = sh.page;
      if (sh.window)
        vc.var.left = 100;
      else
        vc.var.sinks.assign(size_t(sh.heads), 0.25f);
      vc.split_tiling = 1;
      vc.splits = 3;
      vc.fold = AC_FOLD_RIGHT;
      const Fp8Cache pow2 = fp8_cache(vc.c, f, {0x1p-6f, 0x1p-4f}, {0x1p2f, 0x1p-1f});
      INFO(vc.describe() << " kv " << int(f));
      check_fp8(vc, packed, pow2, fp8_cache(vc.c, f, {0.011f, 0.0057f}, {0.03f, 0.047f}));
    }
}

TEST_CASE("fused-hopper gpu: paged K / V, softcap, window and sinks against fp64 and the twin",
          "[hopper][gpu][variants]") {
#if !defined(ATTNCHECK_HAVE_SM90A)
  SKIP("built without sm_90a");
#endif
  // variant_case.h's cases, each on the Hopper tiling of its fused tiling's index and at the page
  // size hopper_page_size gives (the kernel's declared sizes); the twin rounds where the kernel
  // rounds (its sums in another order), so at most 1% of the elements may be more than 2 ulps from
  // it. A paged case also runs contiguous, the same bits (paged_equals_contiguous).
  Kernel hopper;
  hopper.hopper = true;
  for (VariantCase vc : variant_cases()) {
    vc.var.page_size = hopper_page_size(vc.var.page_size);
    vc.tiling %= kern::kNumHopperTilings;
    INFO(vc.describe());
    check_with_twin(vc, hopper);
    if (vc.var.page_size > 0) paged_equals_contiguous(vc, hopper);
  }
}

TEST_CASE("fused-hopper gpu: paged K / V over many tiles, every tiling and page size, bit for bit contiguous",
          "[hopper][gpu][variants][paged]") {
#if !defined(ATTNCHECK_HAVE_SM90A)
  SKIP("built without sm_90a");
#endif
  // Sequences of several key tiles (pages of 16 give 4 or 8 chunks a tile, 64 one chunk or a whole
  // tile, 256 four or two tiles a page), ragged ends, a sequence without keys, causal with Tq < Tk
  // and not, GQA, both dtypes and head sizes: paged equals contiguous bit for bit, and both are
  // within the fp64 bound.
  Kernel hopper;
  hopper.hopper = true;
  uint64_t seed = 9900;
  for (int tiling = 0; tiling < kern::kNumHopperTilings; ++tiling)
    for (int page : kern::kHopperPageSizes)
      for (bool causal : {false, true}) {
        VariantCase vc;
        const bool bf16 = (tiling + page / 16 + int(causal)) % 2 != 0;
        vc.c = make_case(seed++, bf16 ? DType::bf16 : DType::f16, 8, 2, page == 64 ? 64 : 128,
                         {200, 1, 77, 5}, {1000, 300, 77, 0}, causal, false);
        vc.tiling = tiling;
        vc.var.page_size = page;
        INFO(vc.describe());
        const Run paged = paged_equals_contiguous(vc, hopper);
        CHECK(nan_count(vc.c, paged.out) == 0);
        CHECK(compare_variants(vc.c, vc.var, paged.out, paged.lse) == "");
      }
}

TEST_CASE("fused-hopper gpu: windows and softcaps over many key tiles against fp64 and the twin",
          "[hopper][gpu][variants][window][softcap]") {
#if !defined(ATTNCHECK_HAVE_SM90A)
  SKIP("built without sm_90a");
#endif
  // Over sequences of 1000, 300 and 77 keys, every tiling, causal or not: windows of 300 and 511 keys
  // to the left (and 200 to the right, or unbounded), and caps of 1 and 30 on scores of spread 2.5
  // (the cap bites), alone or with a window of 300. Whole key tiles lie inside a warp's window, and
  // take the unmasked path (hopper_kernel.cuh window_covers; capped ones with two consumers, by_tile),
  // beside the tiles at its edges and the causal and ragged ones, which test each score.
  struct Shape {
    int left, right;
    float cap;
  };
  std::vector<Shape> shapes;
  for (int left : {300, 511})
    for (int right : {-1, 200}) shapes.push_back({left, right, 0.0f});
  for (float cap : {1.0f, 30.0f})
    for (int left : {-1, 300}) shapes.push_back({left, -1, cap});
  Kernel hopper;
  hopper.hopper = true;
  uint64_t seed = 9950;
  for (int tiling = 0; tiling < kern::kNumHopperTilings; ++tiling)
    for (size_t i = 0; i < shapes.size(); ++i)
      for (bool causal : {false, true}) {
        VariantCase vc;
        vc.c = make_case(seed++, (int(i) + tiling + int(causal)) % 2 ? DType::bf16 : DType::f16, 4, 2, 128,
                         {1000, 2, 77}, {1000, 300, 77}, causal, false, shapes[i].cap > 0 ? 2.5f : 1.0f);
        vc.tiling = tiling;
        vc.var.left = shapes[i].left;
        vc.var.right = shapes[i].right;
        vc.var.softcap = shapes[i].cap;
        INFO(vc.describe());
        check_with_twin(vc, hopper);
      }
}

// Small shapes for compute-sanitizer (memcheck, racecheck, synccheck; tests/gpu/session.sh): every
// Hopper tiling on its VAR instantiation, with key tiles wholly visible to a warp (300 keys: two
// whole tiles of 128, three of 64) and a ragged last one: a softcap alone (by_tile's unmasked
// capped path with two consumers), a causal window with sinks, and a cap over pages of 16.
TEST_CASE("fused-hopper gpu: variant shapes for the sanitizers", "[.sanitize-var]") {
#if !defined(ATTNCHECK_HAVE_SM90A)
  SKIP("built without sm_90a");
#endif
  Kernel hopper;
  hopper.hopper = true;
  uint64_t seed = 9990;
  for (int tiling = 0; tiling < kern::kNumHopperTilings; ++tiling)
    for (int shape = 0; shape < 3; ++shape) {
      VariantCase vc;
      vc.c = make_case(seed++, shape % 2 ? DType::bf16 : DType::f16, 4, 2, 128, {130, 3}, {300, 77},
                       shape == 1, false, 2.5f);
      vc.tiling = tiling;
      if (shape != 1) vc.var.softcap = 30.0f;
      if (shape == 1) vc.var.left = 100, vc.var.sinks = {0.5f, -1.0f, 2.0f, 0.0f};
      if (shape == 2) vc.var.page_size = 16;
      INFO(vc.describe());
      check_with_twin(vc, hopper);
    }
}
