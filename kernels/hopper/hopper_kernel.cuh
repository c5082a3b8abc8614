// The Hopper attention forward kernel (sm_90a), launched by hopper.cu.
//
// CTA = 1 producer warpgroup + NC = BR / 64 consumer warpgroups. Shared memory (1024-byte aligned,
// as the 128-byte swizzle needs): Q [BR x D], then S = Layout::kStages stages of K [BC x D] and V
// [BC x D] (tile j in stage j % S; 4, or 3 at (128, 128), d = 128: 32 KB + 3 x 64 KB, under the 227
// KB limit). Every tile is stored as D / 64 column blocks of rows x 128 bytes, 16-byte chunks
// swizzled by chunk ^ (row % 8) (the tensor map's CU_TENSOR_MAP_SWIZZLE_128B, which the wgmma
// descriptors' 128-byte swizzle mode reads back).
// Barriers: q_full; per stage k_full, v_full (the producer's expect_tx, completed by the copy
// engine's bytes) and kv_empty (one arrival per consumer thread once both wgmmas that read the
// stage, S on K and P V on V, have retired).
// Producer: the warpgroup's first warp alone (the other three leave after setmaxnreg: a warp
// waiting on kv_empty retries its try_wait, and four of them took issue slots from the consumers);
// lane 0 issues the bulk tensor copies (lane c a paged tile's chunk c); a V tile that runs past the key range
// (only ever the last) is instead written after the loop by the warp with ordinary loads and stores (rows
// past the range zeroed, as fused's cp.async zero-fill does, so masked keys meet V = 0), then each thread's
// fence.proxy.async makes its stores visible to wgmma, __syncwarp gathers the warp and one thread
// arrives on v_full. Paged K / V (AC_VAR_PAGED_KV, kHopperPageSizes): the same tiles, each copied
// as one box per page it spans (or one where a page holds the tile), from the slots the block table
// names; the partial V tile's rows likewise. Where each key is read changes, not what is computed:
// the rounding is the contiguous kernel's, bit for bit.
// Consumer warpgroup c owns rows [row0 + 64 c, +64): S = Q K^T by D / 16 wgmma (SS, both K-major),
// the online softmax of fused_math.h on the accumulator registers, P packed to the input type as
// the register A operand, O += P V by BC / 16 wgmma (RS, V transposed: MN-major descriptor).
// Overlap inside the warpgroup (FlashAttention-3's intra-warpgroup pipelining): tile j's S wgmma
// and tile j - 1's P V wgmma are issued as two commit groups back to back; wait_group 1 retires
// S_j, and tile j's softmax runs while P_(j-1) V_(j-1) is still on the tensor cores; wait_group 0
// retires it, the stage of tile j - 1 is released, then O *= alpha_j and P_j is packed into the A
// fragment (which P V_(j-1) no longer reads). Prologue: S_0 and its softmax alone; epilogue: the
// last P V alone. So a consumer holds the stages of tiles j - 1 and j, and the producer can load
// tiles j + 1 .. j + S - 2 meanwhile; it loads tile j once tile j - S is released, which the
// consumers do in tile j - S + 1's step (S >= 3), before they wait on tile j: no cycle.
// Rounding is per tile as in the one-tile-at-a-time loop: S in fp32 (wgmma); m = the max of the
// fl(S scale_log2), alpha by fused_math.h; p = 2^fl(S scale_log2 - m), the exponent argument in one
// fma where fused rounds S scale_log2 and then the difference (a scale_log2 <= 0 takes fused's
// form; see scale_and_max), by dev::exp2_ftz, which flushes a p below 2^-126 to 0 (fused's exp2f
// keeps it; see there); then l = l alpha + sum p (the unrounded p), O = O alpha_j (fp32 fmul) and
// then O +=
// round_to_input(P_j) V_j (wgmma, fp32): the overlap only moves the rescale after the previous
// tile's P V has retired, which is where it was already, so O goes through the same operations in
// the same order and the results are bit for bit those of the loop without overlap.
// The tile walk (row tiles of BR, key tiles of BC from key 0, causal end from the tile's last row)
// and the other rounding points are fused's, so fused's twin with (BR, BC) and the exponent form
// fused::ExpForm{fma, flush} is this kernel's twin. One edge differs from fused: where fl(S_max
// scale_log2) overflows to +inf for a finite S (scale_log2 > 1 and |S| near fp32's largest), every
// p of that tile is 2^(-inf) = 0, where fused's are NaN; a later tile's alpha = 2^(inf - inf) is
// NaN, so the row comes out NaN as in fused, or empty (O = 0, the empty LSE) where that tile is the
// row's last. Both are far outside the exact budget, and the gate fails either.
// FP8 (fused-hopper-fp8, hopper_fp8.cu; FlashAttention-3's contract): Q and K tiles are e4m3fn codes,
// one 128-byte column block at d = 128; S by m64n128k32 e4m3 wgmma (a k32 step is the same 32 bytes
// of the row); V arrives transposed ([d x keys], K-major, since 8-bit wgmma has no transpose) with
// its keys in the order the register A words hold P, and zeros past the key range (every V tile is a
// bulk copy); P is held as the e4m3fn code of 256 p (cvt.rn). The e4m3 wgmma's accumulator is not
// fp32 (13 bits, truncating: plugin_abi.h AC_FP8_TRUNCATED_SUMS), so no sum stays in it past 128
// products: S is one chain of four k32 steps, and each tile's P V goes to a fresh accumulator that
// joins O in fp32 registers by one fma an element, O = fl(O alpha_j + P_j V_j) (one rounding a
// tile; fold_pv, issued under the next tile's S wgmma). The epilogue multiplies by 2^-8 (exact),
// 1 / l and V's descale, in that order. The descales of the (sequence, KV head) join the softmax
// scale in the consumer. Softcap, window, sinks and the mutants are not built in FP8.
// Check: ctest --test-dir build -L gpu -R kernels_hopper
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "fused/fused_kernel.cuh"
#include "fused/fused_math.h"
#include "hopper/hopper.h"
#include "hopper/hopper_wgmma.cuh"

namespace attncheck::kern::hopper {

// E: bytes per element, 2 (fp16, bf16) or 1 (the FP8 kernel's e4m3 codes). A row of D elements is
// D E / 128 column blocks of 128 bytes.
template <int BR, int BC, int D, int E = 2>
struct Layout {
  static constexpr int kConsumers = BR / 64;
  static constexpr int kThreads = (kConsumers + 1) * 128;
  static constexpr int kQBytes = BR * D * E, kTileBytes = BC * D * E;
  static constexpr int kColBlocks = D * E / 128;
  // Ring stages: as many K and V tiles as fit beside Q in the 227 KB an SM gives one CTA, at most
  // kMaxStages (3 at (128, 128), d = 128). A consumer holds two stages (tiles j - 1 and j), so
  // with 3 only one copy is in flight.
  static constexpr int kMaxStages = 4;
  static constexpr int kFit = (227 * 1024 - 1024 - 8 * 32 - kQBytes) / (2 * kTileBytes);
  static constexpr int kStages = kFit < kMaxStages ? kFit : kMaxStages;
  static_assert(kStages >= 3, "the overlap holds two stages and loads into a third");
  static constexpr int kQ = 0, kK = kQBytes, kV = kK + kStages * kTileBytes;
  static constexpr int kBar = kV + kStages * kTileBytes;  // q_full, k_full[S], v_full[S], kv_empty[S]
  static constexpr int kBytes = kBar + 8 * (1 + 3 * kStages) + 1024;  // + slack for the alignment
  // Registers per thread after setmaxnreg: 128 x producer + 128 NC x consumer <= 64 K. The FP8
  // consumer holds O and a tile's P V (two 64-float accumulators) beside S and P: 240 (ptxas: 28
  // bytes of spills, 68 at 232), its producer the 24 left.
  static constexpr int kProducerRegs = kConsumers == 2 ? (E == 1 ? 24 : 40) : 32;
  static constexpr int kConsumerRegs = kConsumers == 2 ? (E == 1 ? 240 : 232) : 160;
  static_assert(BR % 64 == 0 && (BC == 64 || BC == 128) && (D == 64 || D == 128), "tile shape");
  // FP8: V's transposed tile is D rows of BC one-byte keys, one 128-byte swizzle row each.
  static_assert(E == 2 || (E == 1 && BC == 128 && D == 128), "the FP8 kernel's tile shape");
  static_assert(128 * kProducerRegs + 128 * kConsumers * kConsumerRegs <= 65536, "register file");
  static_assert(kBytes <= 227 * 1024, "shared memory");
};

namespace dev {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Blocks until the phase with the given parity has completed. With GUARD (the mutants' builds), a
// wait that lasts more than kHangNs (a broken pipeline protocol: a phase that never completes)
// traps, so the launch fails with a device error instead of hanging the test process. The correct
// kernel spins without the check: the timer read in its waits cost about 10% (measured on the
// H200: 392 -> 350 TFLOP/s at the Llama-3-8B layer shape, tiling (192, 64)).
constexpr uint64_t kHangNs = 10ull * 1000 * 1000 * 1000;
__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}
template <bool GUARD>
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint64_t t0 = 0;
  for (uint32_t it = 1;; ++it) {
    uint32_t done;
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
    if (done) return;
    if (GUARD && (it & 1023u) == 0) {
      const uint64_t now = global_ns();
      if (t0 == 0)
        t0 = now;
      else if (now - t0 > kHangNs)
        __trap();
    }
  }
}
// Bulk tensor copy of one box (3-D map: d, head, token) into shared memory, completing on bar.
__device__ __forceinline__ void tma_load3(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2,
                                          uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, "
      "%4}], "
      "[%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}
// p = 2^x by the same hardware approximation as exp2f, without exp2f's path for results below
// 2^-126 (a compare and two multiplies per score around the one MUFU): such a p is 0 here, as in
// kernels built with fast math. In fp16 P is the same bit for bit: P is rounded to fp16, whose
// smallest subnormal is 2^-24, so such a p was stored as 0 anyway. In bf16 such a p is a
// representable P (down to 2^-133), so a weight below 2^-126 is dropped: O moves by at most
// N 2^-126 max|v| / l, which the subject declares (AC_FEAT_FLUSHED_EXP; the budget's allowance
// for it is in properties/src/budgets.cpp). The unrounded p also enters a
// thread's share of the row sum l; 64 of them add up to under 2^-120, which the row's l, at least
// about 1 (the max key's p is 2 to the rounding error of its own scaled score), absorbs unless a
// sum lands exactly on a rounding tie. (H200, T = 8192, bf16: about 10% faster
// than exp2f; a per-thread test that took exp2f only where a score could flush gained 0-2%.)
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most N of this warpgroup's committed wgmma groups are pending (groups retire in
// commit order).
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Pins registers at this point of the program (CUTLASS's warpgroup_fence_operand): the compiler
// may not move a read or write of them across it, so the ordinary code on a wgmma's accumulator or
// A fragment stays after the wait that retires it and before the wgmma.fence that precedes it.
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
// wgmma shared-memory descriptor, 128-byte swizzle: start address, leading and stride byte
// offsets (all >> 4), layout type 1 (SWIZZLE_128B) in bits 62-63; base offset 0 (tiles are
// 1024-byte aligned; the k-step advance inside a swizzle row only moves the start address).
// Built from its low word (start address and leading offset) and its high word (stride offset
// and layout, a constant of the operand): a k step then costs one 32-bit add to the low word of
// the tile's descriptor. Shared addresses stay below 2^18, so the start address field (14 bits of
// address >> 4) never carries into the leading offset.
__device__ __forceinline__ uint32_t desc_lo(uint32_t addr, uint32_t lbo) {
  return (addr >> 4) | ((lbo >> 4) << 16);
}
__device__ __forceinline__ uint64_t desc_sw128(uint32_t lo, uint32_t sbo) {
  return (uint64_t((sbo >> 4) | (1u << 30)) << 32) | lo;
}
// Four weights as one register A word of the FP8 P V (hopper_wgmma.cuh): each fl(p scale) rounded
// once to e4m3fn, to nearest even (fused_math.h p_e4m3; scale is 256 or the call's p_scale <= 448,
// so a p <= 1 gives at most 448 and the satfinite mode never bites, and a NaN stays NaN), the first
// in the low byte.
__device__ __forceinline__ uint32_t pack4_e4m3_scaled(float a, float b, float c, float d, float scale) {
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(__fmul_rn(a, scale), __fmul_rn(b, scale)),
                                               __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(__fmul_rn(c, scale), __fmul_rn(d, scale)),
                                               __NV_SATFINITE, __NV_E4M3);
  return lo | (hi << 16);
}

}  // namespace dev

// VAR: the instantiation that reads the softcap and the window (fused_kernel.cuh's rules: the window
// cuts the row tile's key range, its walk starting at the first key the tile's first row sees, and
// every score takes the window test; the cap replaces the logit's product, fused_math.h
// scaled_logit, and then p = 2^fl(x - m), fused's form, since a capped logit has no fma form). A
// sink is joined in the epilogue of either instantiation (fused_math.h join_sink), before the
// normalisation.
// FP8 (fused-hopper-fp8; no VAR, no mutants): Q and K are e4m3fn codes, tm_v maps V's transposed
// copy (hopper_fp8.cu), BF16 is the output's type; see the FP8 notes at the top of this file. FP8
// with HM = fp8_row_accumulator is FlashAttention-3's P V instead (hopper.h): each tile's P V wgmma
// adds into O itself, which the consumer rescales by alpha in place, as the 16-bit path does.
template <bool BF16, int D, int BR, int BC, HopperMutation HM = HopperMutation::none, bool VAR = false,
          bool FP8 = false>
__global__ void __launch_bounds__(Layout<BR, BC, D, FP8 ? 1 : 2>::kThreads, 1)
    hopper_attention_kernel(const __grid_constant__ CUtensorMap tm_q,
                            const __grid_constant__ CUtensorMap tm_k,
                            const __grid_constant__ CUtensorMap tm_v, const fused::KernelParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr bool kRowAcc = HM == HopperMutation::fp8_row_accumulator;
  static_assert(!FP8 || (!VAR && (HM == HopperMutation::none || kRowAcc)),
                "the FP8 kernel has no variants and no mutants but the row accumulator");
  static_assert(FP8 || !kRowAcc, "the row accumulator is an FP8 instantiation");
  // ot: tile j's P V in a fresh accumulator (the header: the e4m3 accumulator's 13 bits).
  constexpr bool kFreshPv = FP8 && !kRowAcc;
  constexpr int E = FP8 ? 1 : 2;
  using L = Layout<BR, BC, D, E>;
  constexpr bool kGuard = HM != HopperMutation::none && !kRowAcc;  // the probe's waits as the kernel's
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = dev::smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* const smem = smem_raw + (base - raw);
  const uint32_t sQ = base + L::kQ, sK = base + L::kK, sV = base + L::kV;
  const uint32_t bar_q = base + L::kBar;
  auto bar_k = [&](int s) { return bar_q + 8u * uint32_t(1 + s); };
  auto bar_v = [&](int s) { return bar_q + 8u * uint32_t(1 + L::kStages + s); };
  auto bar_e = [&](int s) { return bar_q + 8u * uint32_t(1 + 2 * L::kStages + s); };

  // The warpgroup index through a shuffle, so that the compiler knows it is the same in the whole
  // warp and keeps what derives from it (the Q descriptors) in uniform registers.
  const int wg = __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0), wtid = int(threadIdx.x) % 128;
  const int head = blockIdx.y, seq = blockIdx.z;
  const int64_t q0 = p.cu_q[seq], k0 = p.cu_k[seq];
  const int tq = p.cu_q[seq + 1] - int(q0), tk = p.cu_k[seq + 1] - int(k0);
  const int tile = p.reverse_tiles ? int(gridDim.x) - 1 - int(blockIdx.x) : int(blockIdx.x);
  const int row0 = tile * BR;
  if (row0 >= tq) return;  // the whole CTA leaves before any barrier exists
  const int kvh = fused::kv_head_of(head, p.group, p.num_kv_heads);
  int k_lo = 0, k_end = tk;
  const int last_row = (row0 + BR < tq ? row0 + BR : tq) - 1;
  if (p.causal) {
    const int lim = last_row + tk - tq + 1;
    k_end = lim < k_end ? lim : k_end;
  }
  if constexpr (VAR)
    fused::window_walk(row0, last_row, tq, tk, p.window_left, p.window_right, BC, k_lo, k_end);
  const int n_tiles = k_end > k_lo ? (k_end - k_lo + BC - 1) / BC : 0;

  if (threadIdx.x == 0) {
    dev::mbar_init(bar_q, 1);
    for (int s = 0; s < L::kStages; ++s) {
      dev::mbar_init(bar_k(s), 1);
      dev::mbar_init(bar_v(s), 1);
      dev::mbar_init(bar_e(s), 128 * L::kConsumers);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) {
    // Producer warpgroup.
    dev::setmaxnreg_dec<L::kProducerRegs>();
    if (n_tiles == 0 || wtid >= 32) return;
    if (wtid == 0) {
      dev::mbar_expect_tx(bar_q, L::kQBytes);
#pragma unroll
      for (int cb = 0; cb < L::kColBlocks; ++cb)
        dev::tma_load3(sQ + uint32_t(cb * BR * 128), &tm_q, cb * (128 / E), head, int(q0) + row0, bar_q);
    }
    // Tiles 0 .. n_full - 1 lie inside the key range; a last tile n_full (when k_end % BC != 0) runs
    // past it, and its V is written after the loop (so the loop's state is dead there: the producer
    // has 32 or 40 registers).
    // FP8: V's transposed copy holds each sequence's keys in whole tiles, zeros past the range, so
    // every tile is a copy.
    const int n_full = FP8 ? n_tiles : (k_end - k_lo) / BC;
    // Paged K / V (AC_VAR_PAGED_KV; not in FP8): the maps' box is `chunk` rows, a whole tile where
    // pages are at least BC keys (each tile then lies in one page: kHopperPageSizes are multiples of
    // BC or divide it, and tiles start at multiples of BC), else one page, which lands 1024-byte
    // aligned in the tile (a multiple of 8 rows of 128 bytes), where the swizzle pattern repeats,
    // so a tile in chunks is laid out as one copy of BC rows would be. Only chunks that start before
    // k_end are copied: later table entries may lie outside the pool (plugin_abi.h), and a K row
    // not copied keeps a stage's old bytes, which only keys no row of the tile sees meet (their
    // scores are replaced by -inf or the masked logit in scale_and_max, never added to). Contiguous:
    // one chunk of BC rows from the sequence's first key.
    const bool paged = !FP8 && p.page_size > 0;
    const int32_t* table = paged ? p.block_table + int64_t(seq) * p.max_blocks : nullptr;
    const int chunk = paged && p.page_size < BC ? p.page_size : BC;
    const int shift = paged ? __ffs(p.page_size) - 1 : 0;  // a power of two (hopper.h)
    auto row_of = [&](int key) {
      return paged ? (table[key >> shift] << shift) | (key & (p.page_size - 1)) : int(k0) + key;
    };
    static_assert(BC / kHopperMinPageSize <= 32, "a lane of the producer warp per chunk");
    for (int j = 0; j < n_tiles; ++j) {
      const int s = j % L::kStages;
      const uint32_t phase = uint32_t(j / L::kStages) & 1u;
      const int n0 = k_lo + j * BC, left = k_end - n0 < BC ? k_end - n0 : BC;
      const int chunks = paged ? (left + chunk - 1) / chunk : 1;
      // Lane c copies chunk c (a tile has at most BC / kHopperMinPageSize), its slot read before the
      // wait for the stage so that the block table's latency passes under the wait: one thread
      // reading each slot and issuing every chunk's copies in turn ran pages of 16 at 0.42x of
      // contiguous on the H100, with the reads hoisted 0.51-0.68x.
      const bool mine = wtid < chunks;
      const int row = mine ? row_of(n0 + wtid * chunk) : 0;
      const bool v_copied = FP8 || j < n_full;
      dev::mbar_wait<kGuard>(bar_e(s), phase ^ 1u);  // the consumers released this stage's previous tile
      if (wtid == 0) {
        dev::mbar_expect_tx(bar_k(s), uint32_t(chunks * chunk * D * E));
        if (v_copied) dev::mbar_expect_tx(bar_v(s), L::kTileBytes);
      }
      __syncwarp();  // each barrier expects its bytes before any chunk's copy is issued
      const uint32_t dk = sK + uint32_t(s * L::kTileBytes), dv = sV + uint32_t(s * L::kTileBytes);
      if (mine) {
#pragma unroll
        for (int cb = 0; cb < L::kColBlocks; ++cb)
          dev::tma_load3(dk + uint32_t((cb * BC + wtid * chunk) * 128), &tm_k, cb * (128 / E), kvh, row,
                         bar_k(s));
        if constexpr (FP8) {
          // The transposed tile: D rows (d) of BC keys, box (keys, d, KV head).
          dev::tma_load3(dv, &tm_v, p.vt_col[seq] + j * BC, 0, kvh, bar_v(s));
        } else if (v_copied) {
#pragma unroll
          for (int cb = 0; cb < D / 64; ++cb)
            dev::tma_load3(dv + uint32_t((cb * BC + wtid * chunk) * 128), &tm_v, cb * 64, kvh, row, bar_v(s));
        }
      }
    }
    if (!FP8 && n_full < n_tiles) {
      // The last tile runs past the key range: rows past it must be zero (P = 0 there, and
      // 0 x V must stay 0), which the copy engine cannot do inside the tensor, so the
      // warp writes the tile itself, swizzled as the copy engine would. Every thread of the warp
      // waited on the stage's kv_empty in the loop's last pass.
      const int s = n_full % L::kStages, n0 = k_lo + n_full * BC, valid = k_end - n0;
      const int64_t kv_stride = int64_t(p.num_kv_heads) * D;
      const uint16_t* gv = static_cast<const uint16_t*>(p.v) + int64_t(kvh) * D;
      unsigned char* tile_v = smem + (L::kV + s * L::kTileBytes);
      for (int idx = wtid; idx < BC * D / 8; idx += 32) {
        const int r = idx / (D / 8), c = idx % (D / 8);
        uint4 val = make_uint4(0u, 0u, 0u, 0u);
        if (r < valid)
          val = *reinterpret_cast<const uint4*>(gv + int64_t(row_of(n0 + r)) * kv_stride + c * 8);
        *reinterpret_cast<uint4*>(tile_v + (c / 8) * BC * 128 + r * 128 + (((c % 8) ^ (r & 7)) << 4)) = val;
      }
      if constexpr (HM != HopperMutation::no_proxy_fence) dev::fence_proxy_async();
      __syncwarp();
      if (wtid == 0) dev::mbar_arrive(bar_v(s));
    }
    return;
  }

  // Consumer warpgroups.
  dev::setmaxnreg_inc<L::kConsumerRegs>();
  const int c = wg - 1;
  const int warp = wtid >> 5, lane = wtid & 31, g = lane >> 2, t4 = lane & 3;
  const int warp_row0 = row0 + c * 64 + warp * 16;
  const int row_a = warp_row0 + g, row_b = row_a + 8;
  // FP8: the descales of this (sequence, KV head) folded into the softmax scale, as the twin's
  // head_view: fl(fl(fl(scale q_descale) k_descale) log2 e); V's multiplies the output.
  // P's scale: the fixed 2^8 (FlashAttention-3), or the call's p_scale (cuDNN's scale_s).
  float scale_log2 = p.scale_log2, v_descale = 1.0f, p_mul = 256.0f;
  if constexpr (FP8) {
    if (p.p_scale) p_mul = *p.p_scale;
    const int at = p.descale_granularity == 2   ? seq * p.num_kv_heads + kvh
                   : p.descale_granularity == 1 ? kvh
                                                : 0;
    scale_log2 = __fmul_rn(__fmul_rn(__fmul_rn(p.scale, p.q_descale[at]), p.k_descale[at]), fused::kLog2e);
    v_descale = p.v_descale[at];
  }
  // See scale_and_max; a capped logit (VAR) takes the general path.
  const bool raw_s = scale_log2 > 0.0f && (!VAR || p.softcap == 0.0f);
  const uint8_t* mask = p.mask ? p.mask + p.cu_mask[seq] : nullptr;
  const int diag = tk - tq;

  float o[D / 2];
  float ot[kFreshPv ? D / 2 : 1];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < (kFreshPv ? D / 2 : 1); ++i) ot[i] = 0.0f;
  // The registers the P V wgmma writes.
  auto fence_pv_acc = [&]() {
    if constexpr (kFreshPv)
      dev::fence_regs(ot);
    else
      dev::fence_regs(o);
  };
  float m_run[2] = {neg_inf_f(), neg_inf_f()};
  float l_run[2] = {0.0f, 0.0f};
  // One S buffer: S_j is issued into it only after P_(j-1) has been packed out of it into pa, and
  // pa is rewritten only after the P V wgmma that reads it has retired.
  float sacc[BC / 2];
  // P as register A words: four per k step of P V (k16 for fp16 / bf16, k32 for e4m3).
  constexpr int kPSteps = BC * E / 32;
  uint32_t pa[kPSteps][4];
  float alpha[2];

  auto stage_of = [](int j) { return j % L::kStages; };
  auto phase_of = [](int j) {
    if constexpr (HM == HopperMutation::stale_phase) return 0u;
    return uint32_t(j / L::kStages) & 1u;
  };
  // S_j = Q K_j^T into sacc, one commit group: A = this warpgroup's 64 Q rows, B = the BC keys,
  // both K-major; a k16 step moves 32 bytes along a swizzled 128-byte row, a column block is
  // rows x 128 bytes further.
  const uint32_t q_lo = dev::desc_lo(sQ + uint32_t(c * 64 * 128), 16);
  auto issue_s = [&](int j) {
    const int s = stage_of(j);
    if constexpr (HM != HopperMutation::no_full_wait) dev::mbar_wait<kGuard>(bar_k(s), phase_of(j));
    const uint32_t k_lo = dev::desc_lo(sK + uint32_t(s * L::kTileBytes), 16);
    dev::fence_regs(sacc);
    dev::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < D * E / 32; ++ks) {  // a k step is 32 bytes of the row, k16 or (FP8) k32
      const uint32_t qa = q_lo + uint32_t(((ks / 4) * BR * 128 + (ks % 4) * 32) >> 4);
      const uint32_t kb = k_lo + uint32_t(((ks / 4) * BC * 128 + (ks % 4) * 32) >> 4);
      if constexpr (FP8)
        dev::wgmma_ss_n128_e4m3(sacc, dev::desc_sw128(qa, 1024), dev::desc_sw128(kb, 1024), ks > 0);
      else
        dev::wgmma_ss<BC, BF16>(sacc, dev::desc_sw128(qa, 1024), dev::desc_sw128(kb, 1024), ks > 0);
    }
    dev::wgmma_commit();
  };
  // O += P_j V_j, one commit group: B = V [keys x d] with d contiguous (MN-major); a k16 step is
  // 16 rows = 2048 bytes; leading offset = the next 64-column block, stride offset = the next 8 keys.
  // FP8: B = V^T [d x keys], K-major, as K's tile in issue_s.
  auto issue_pv = [&](int j) {
    const int s = stage_of(j);
    if constexpr (HM != HopperMutation::no_full_wait) dev::mbar_wait<kGuard>(bar_v(s), phase_of(j));
    fence_pv_acc();
#pragma unroll
    for (int kk = 0; kk < kPSteps; ++kk) dev::fence_regs(pa[kk]);
    dev::wgmma_fence();
    if constexpr (FP8) {
      // B = V^T [d x keys], K-major like K in issue_s: a k32 step moves 32 bytes along the row.
      // The first step overwrites ot (scale-d 0): a chain of four steps, 128 keys. The row
      // accumulator adds every step to O (scale-d 1; O is 0 before the first tile).
      const uint32_t v_lo = dev::desc_lo(sV + uint32_t(s * L::kTileBytes), 16);
#pragma unroll
      for (int kk = 0; kk < kPSteps; ++kk) {
        const uint64_t vb = dev::desc_sw128(v_lo + uint32_t((kk * 32) >> 4), 1024);
        if constexpr (kRowAcc)
          dev::wgmma_rs_n128_e4m3(o, pa[kk], vb, 1);
        else
          dev::wgmma_rs_n128_e4m3(ot, pa[kk], vb, kk > 0);
      }
    } else {
      const uint32_t v_lo = dev::desc_lo(sV + uint32_t(s * L::kTileBytes), uint32_t(BC * 128));
#pragma unroll
      for (int kk = 0; kk < kPSteps; ++kk)
        dev::wgmma_rs<D, BF16>(o, pa[kk], dev::desc_sw128(v_lo + uint32_t(kk * 2048 / 16), 1024));
    }
    dev::wgmma_commit();
  };
  // The online softmax of tile j on sacc (S_j retired): scale, mask, row max, alpha, P (fp32, in
  // sacc), l. O is not touched here: it may be the accumulator of the P V wgmma in flight.
  // Accumulator element 4 i + e is row (e < 2 ? g : g + 8) of the warp's 16, column
  // 8 i + 2 t4 + (e & 1) of the tile (the mma.sync C layout per warp).
  // Three paths by what the tile needs, each without branches inside (written as one loop, the
  // compiler kept a branch around each score's tests, three instructions a score with the tests
  // skipped): kAll, every score visible to the warp (most tiles); kBounds, no mask array, so a
  // row's visible keys are those below its end (the causal end, and the key range; 0 for a row
  // past tq), two compares and selects a score; kMask, the mask array's loads besides.
  // The row ends are computed in the tile that needs them (held across the loop, their four
  // registers slowed the tiles without masks).
  // Raw (raw_s: scale_log2 > 0, every launch the gate makes): sacc keeps the fp32 S of visible keys and
  // -inf for the others, the max is taken over S and scaled once per row, and the exponent
  // argument is one fma, fl(S scale_log2 - m): one multiply a score less. fl(S_max scale_log2) is
  // the max of the fl(S scale_log2), since rounding is monotonic and the scale positive, so m is
  // the same as scaling first. Not raw (scale_log2 <= 0, where the max of S is not the max of the
  // scaled S, or VAR's softcap): x = fl(S scale_log2) (the capped logit under VAR) is stored and the
  // argument is fl(x - m). The plain kernel takes the general path (kMask, whose mask test is skipped
  // without a mask) for every such tile; VAR with two consumers picks a tile's path as for raw
  // scores, since kAll gives each score kMask's value where its tests hold (a softcap of 30 at
  // T = 8192 on kMask alone: 82-96 TFLOP/s on the H100). Three consumers keep kMask: at 160
  // registers the second path spilled 28 bytes (ptxas, (192, 64)).
  enum Visibility { kAll, kBounds, kMask };
  auto scale_and_max = [&](auto vis_kind, auto raw_kind, int n0, float(&mx)[2]) {
    constexpr Visibility kVis = decltype(vis_kind)::value;
    constexpr bool kRaw = decltype(raw_kind)::value;
    [[maybe_unused]] int end_vis[2], end_range[2];  // keys [0, end_vis) visible, [0, end_range) in range
    if constexpr (kVis == kBounds) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = r == 0 ? row_a : row_b;
        end_range[r] = row < tq ? tk : 0;
        const int causal_end = row + diag + 1;  // fused::causal_visible: key <= row + tk - tq
        end_vis[r] = p.causal && causal_end < end_range[r] ? (causal_end > 0 ? causal_end : 0) : end_range[r];
      }
    }
    // The row max as eight chains (element e, i odd or even) joined at the end, not one chain of
    // BC / 4 dependent fmaxf a row: the max is the same in any order.
    float part[2][4];
#pragma unroll
    for (int k = 0; k < 8; ++k) part[k & 1][k >> 1] = neg_inf_f();
#pragma unroll
    for (int i = 0; i < BC / 8; ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = kRaw  ? sacc[4 * i + e]
                  : VAR ? fused::scaled_logit(sacc[4 * i + e], p.scale, scale_log2, p.softcap)
                        : __fmul_rn(sacc[4 * i + e], scale_log2);
        [[maybe_unused]] const int col = n0 + i * 8 + 2 * t4 + (e & 1);
        if constexpr (kVis == kBounds) {
          if (col >= end_vis[e >> 1]) x = col < end_range[e >> 1] ? fused::masked_logit() : neg_inf_f();
        } else if constexpr (kVis == kMask) {
          const int row = e < 2 ? row_a : row_b;
          bool vis = row < tq && col < tk;
          if (p.causal) vis = vis && fused::causal_visible(row, col, tq, tk);
          if constexpr (VAR)
            vis = vis && fused::window_visible(row, col, tq, tk, p.window_left, p.window_right);
          if (vis && ((kRaw && !VAR) || mask)) vis = mask[int64_t(row) * tk + col] != 0;
          if (!vis) x = row < tq && col < tk ? fused::masked_logit() : neg_inf_f();
        }
        sacc[4 * i + e] = x;
        float& q = part[i & 1][e];
        q = fmaxf(q, x);
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r)
      mx[r] = fmaxf(fmaxf(part[0][2 * r], part[0][2 * r + 1]), fmaxf(part[1][2 * r], part[1][2 * r + 1]));
  };
  // Whether the window (VAR) leaves every key of the tile at n0 visible to each of the warp's 16
  // rows (fused::window_visible: the last row's left edge and the first row's right edge): such a
  // tile takes kAll, whose scores are kMask's where every test passes, so only the time changes
  // (a 1024-key window at T = 8192 ran at 137 TFLOP/s on the H100 with every tile on kMask).
  auto window_covers = [&](int n0) {
    return (p.window_left < 0 || n0 >= warp_row0 + 15 + diag - p.window_left) &&
           (p.window_right < 0 || n0 + BC - 1 <= warp_row0 + diag + p.window_right);
  };
  auto softmax = [&](int j) {
    const int n0 = k_lo + j * BC;
    float mx[2] = {neg_inf_f(), neg_inf_f()};
    auto by_tile = [&](auto raw) {
      if (mask)
        scale_and_max(std::integral_constant<Visibility, kMask>{}, raw, n0, mx);
      else if (n0 + BC <= tk && (!p.causal || n0 + BC - 1 <= warp_row0 + diag) && (!VAR || window_covers(n0)))
        scale_and_max(std::integral_constant<Visibility, kAll>{}, raw, n0, mx);
      else if (VAR)  // the window's test is kMask's
        scale_and_max(std::integral_constant<Visibility, kMask>{}, raw, n0, mx);
      else
        scale_and_max(std::integral_constant<Visibility, kBounds>{}, raw, n0, mx);
    };
    if (raw_s)
      by_tile(std::true_type{});
    else if constexpr (VAR && L::kConsumers == 2)
      by_tile(std::false_type{});
    else
      scale_and_max(std::integral_constant<Visibility, kMask>{}, std::false_type{}, n0, mx);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fused::dev::quad_max(mx[r]);
      if (raw_s) mx[r] = __fmul_rn(mx[r], scale_log2);
    }
    float off[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) fused::advance_max(m_run[r], mx[r], alpha[r], off[r]);
    float tile_sum[2] = {0.0f, 0.0f};
    const float mul = raw_s ? scale_log2 : 1.0f;  // fl(x * 1 - m) = fl(x - m)
#pragma unroll
    for (int i = 0; i < BC / 2; ++i) {
      sacc[i] = dev::exp2_ftz(fmaf(sacc[i], mul, -off[(i & 3) >> 1]));
      tile_sum[(i & 3) >> 1] += sacc[i];
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) l_run[r] = l_run[r] * alpha[r] + tile_sum[r];
  };
  // After the P V wgmma of the previous tile retired: O *= alpha_j, then P_j rounded to the input
  // type: keys 16 kk .. 16 kk + 15 are accumulator groups 2 kk and 2 kk + 1, which is the register
  // A fragment of m64nNk16.
  // A row whose max did not move has alpha = 2^0 = 1 exactly, and O * 1 is O bit for bit: with
  // three consumers the multiplies are skipped where both of the thread's rows kept their max,
  // which on long rows is most tiles (H200, T = 8192, (192, 64): 406 -> 422 TFLOP/s). With two
  // consumers (232 registers, BR = 128) the branch made the kernel slower (386 -> 373), so they
  // always multiply.
  // FP8 leaves O alone here: fold_pv joins each tile's P V later, under the next S wgmma (the row
  // accumulator multiplies O by alpha here, as the 16-bit path does).
  auto rescale_and_pack = [&]() {
    if constexpr (FP8) {
      if constexpr (kRowAcc) {
#pragma unroll
        for (int i = 0; i < D / 2; ++i) o[i] *= alpha[(i & 3) >> 1];
      }
      // Keys 32 kk .. + 31 are accumulator groups 4 kk .. 4 kk + 3; this thread holds columns
      // 8 i + 2 t4 + {0, 1} of each, which word w's bytes take as columns 16 (w >> 1) + 4 t4 .. + 3.
      // V's transposed copy stores its keys in that order (hopper_fp8.cu vt_position), so each
      // weight meets its own key without a shuffle.
#pragma unroll
      for (int kk = 0; kk < kPSteps; ++kk) {
        const float* a = sacc + 16 * kk;
        pa[kk][0] = dev::pack4_e4m3_scaled(a[0], a[1], a[4], a[5], p_mul);
        pa[kk][1] = dev::pack4_e4m3_scaled(a[2], a[3], a[6], a[7], p_mul);
        pa[kk][2] = dev::pack4_e4m3_scaled(a[8], a[9], a[12], a[13], p_mul);
        pa[kk][3] = dev::pack4_e4m3_scaled(a[10], a[11], a[14], a[15], p_mul);
      }
    } else {
      if (L::kConsumers == 2 || alpha[0] != 1.0f || alpha[1] != 1.0f) {
#pragma unroll
        for (int i = 0; i < D / 2; ++i) o[i] *= alpha[(i & 3) >> 1];
      }
#pragma unroll
      for (int kk = 0; kk < kPSteps; ++kk) {
        pa[kk][0] = fused::dev::pack2<BF16>(sacc[8 * kk + 0], sacc[8 * kk + 1]);
        pa[kk][1] = fused::dev::pack2<BF16>(sacc[8 * kk + 2], sacc[8 * kk + 3]);
        pa[kk][2] = fused::dev::pack2<BF16>(sacc[8 * kk + 4], sacc[8 * kk + 5]);
        pa[kk][3] = fused::dev::pack2<BF16>(sacc[8 * kk + 6], sacc[8 * kk + 7]);
      }
    }
  };

  // FP8: O = fl(O alpha + P V) for a retired tile's P V in ot and the alpha of that tile's softmax,
  // one fma an element (O is 0 and ot 0 before the first tile, so the first fold is 0). Issued
  // after the next S wgmma, so the multiply-adds run while the tensor cores compute S; ot is free
  // again once they have read it, before the next P V wgmma overwrites it.
  [[maybe_unused]] float alpha_fold[2] = {0.0f, 0.0f};
  auto fold_pv = [&](const float(&a)[2]) {
    if constexpr (kFreshPv) {
#pragma unroll
      for (int i = 0; i < D / 2; ++i) o[i] = fmaf(o[i], a[(i & 3) >> 1], ot[i]);
    }
  };

  if (n_tiles > 0) {
    dev::mbar_wait<kGuard>(bar_q, 0);
    // Prologue: tile 0's S and softmax alone (O *= alpha_0 multiplies zeros, kept for the order;
    // FP8's first fold likewise).
    issue_s(0);
    dev::wgmma_wait<0>();
    dev::fence_regs(sacc);
    softmax(0);
    rescale_and_pack();
    // Steady state: S_j and P_(j-1) V_(j-1) in flight together; tile j's softmax runs under the
    // P V wgmma. Per tile the operations on O are those of the one-tile-at-a-time loop
    // (O = O alpha_j + P_j V_j), in the same order (FP8: both in one fma, fold_pv, a tile later).
    for (int j = 1; j < n_tiles; ++j) {
      issue_s(j);
      fold_pv(alpha_fold);  // P_(j-2) V_(j-2) with alpha_(j-2)
      issue_pv(j - 1);
      dev::wgmma_wait<1>();  // S_j retired; P_(j-1) V_(j-1) may still run
      dev::fence_regs(sacc);
      alpha_fold[0] = alpha[0], alpha_fold[1] = alpha[1];
      softmax(j);
      dev::wgmma_wait<0>();  // P_(j-1) V_(j-1) retired: O and pa are free, stage j - 1 is read
      fence_pv_acc();
#pragma unroll
      for (int kk = 0; kk < kPSteps; ++kk) dev::fence_regs(pa[kk]);
      dev::mbar_arrive(bar_e(stage_of(j - 1)));
      rescale_and_pack();
    }
    // The last tile's P V.
    fold_pv(alpha_fold);
    issue_pv(n_tiles - 1);
    dev::wgmma_wait<0>();
    fence_pv_acc();
    dev::mbar_arrive(bar_e(stage_of(n_tiles - 1)));
    fold_pv(alpha);
  }

  // Epilogue, fused's: reduce l over the quad, normalise, store O and LSE (accumulator element
  // 4 i + e here is fused's o[i][e]).
  float l_row[2] = {fused::dev::quad_sum(l_run[0]), fused::dev::quad_sum(l_run[1])};
  if (p.sinks) {  // the sink joins the denominator and O~ follows the new max (fused's epilogue)
    const float sink2 = __fmul_rn(p.sinks[head], fused::kLog2e);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float a = fused::join_sink(m_run[r], l_row[r], sink2);
#pragma unroll
      for (int i = 0; i < D / 8; ++i) {
        o[4 * i + 2 * r] *= a;
        o[4 * i + 2 * r + 1] *= a;
      }
    }
  }
  float inv[2] = {fused::inverse_row_sum(l_row[0]), fused::inverse_row_sum(l_row[1])};
  // AC_FP8_AMAX's amax[0]: a row's largest weight is its largest key's, 2^0 = 1 over l (the FP8
  // instantiation has no sinks), so 1 / l; a row without a key has none.
  [[maybe_unused]] float largest_weight = 0.0f;
  if constexpr (FP8) {
#pragma unroll
    for (int r = 0; r < 2; ++r)
      if ((r == 0 ? row_a : row_b) < tq && m_run[r] != neg_inf_f())
        largest_weight = fmaxf(largest_weight, inv[r]);
    // O holds the sums of P's codes times V's codes: times the reciprocal of P's scale (2^-8 exactly,
    // or fl(1 / p_scale), the twin's p_inv), times 1 / l, then times V's descale (store_row's
    // product): the twin's fl(fl(fl(O p_inv) / l) v_descale) (fused_host.cpp, p_scale_on_output).
    const float p_div = p.p_scale ? __frcp_rn(*p.p_scale) : 0x1p-8f;
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = (o[i] * p_div) * inv[(i & 3) >> 1];
    inv[0] = inv[1] = v_descale;
  }
  [[maybe_unused]] float largest_o = 0.0f;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = r == 0 ? row_a : row_b;
    if (row >= tq) continue;
    const float x =
        fused::store_row<BF16, D, FP8>(p, q0 + row, head, t4, inv[r], m_run[r], l_row[r],
                                       [&](int i, int e) -> const float& { return o[4 * i + 2 * r + e]; });
    if constexpr (FP8) largest_o = fmaxf(largest_o, x);
  }
  if constexpr (FP8) {
    // The maxima of the warp's rows, one atomicMax each: non-negative floats order as their bit
    // patterns (the launcher zeroed both before the launch).
    if (p.amax) {
      const uint32_t w = __reduce_max_sync(0xffffffffu, __float_as_uint(largest_weight));
      const uint32_t x = __reduce_max_sync(0xffffffffu, __float_as_uint(largest_o));
      if (lane == 0) {
        atomicMax(reinterpret_cast<unsigned int*>(p.amax), w);
        atomicMax(reinterpret_cast<unsigned int*>(p.amax) + 1, x);
      }
    }
  }
#endif
}

}  // namespace attncheck::kern::hopper
