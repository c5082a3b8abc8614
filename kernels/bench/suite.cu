// The measurements of suite.h. Timing: cudaEvents around one launch on the default stream, the
// launchers asked not to synchronise (their host wait is not the kernel's time).
#include <cublas_api.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <list>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "attncheck/attention_args.hpp"
#include "bench/suite.h"
#include "common/bench_util.cuh"
#include "fused/fused.h"
#include "hopper/hopper.h"
#include "merge/merge.h"
#include "splitkv/splitkv.h"

namespace attncheck::kern::bench {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
void check_kernel(int rc, const char* kernel, const char* err) {
  if (rc != AC_OK) throw std::runtime_error(std::string(kernel) + ": " + err);
}

// A device allocation freed on every path out (a benchmark that throws must not leak 30 GB).
struct Device {
  void* p = nullptr;
  explicit Device(size_t bytes, const char* what) { check(cudaMalloc(&p, std::max<size_t>(bytes, 1)), what); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  ~Device() { cudaFree(p); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

constexpr size_t kFlushBytes = size_t(512) << 20;

class Timer {
 public:
  explicit Timer(int repeats) : repeats_(std::max(1, repeats)), flush_(kFlushBytes, "cudaMalloc (L2 flush)") {
    check(cudaEventCreate(&a_), "cudaEventCreate");
    check(cudaEventCreate(&b_), "cudaEventCreate");
  }
  ~Timer() {
    cudaEventDestroy(a_);
    cudaEventDestroy(b_);
  }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;
  // Median over the repeats of one call of f, each after an L2 flush; two warm-up calls first.
  template <typename F>
  double median_ms(F f) {
    for (int w = 0; w < 2; ++w) f();
    check(cudaDeviceSynchronize(), "warm-up");
    std::vector<float> t;
    for (int r = 0; r < repeats_; ++r) {
      check(cudaMemsetAsync(flush_.p, r & 0xff, kFlushBytes), "cudaMemsetAsync (L2 flush)");
      check(cudaEventRecord(a_), "cudaEventRecord");
      f();
      check(cudaEventRecord(b_), "cudaEventRecord");
      check(cudaEventSynchronize(b_), "the timed launch");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, a_, b_), "cudaEventElapsedTime");
      t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    return double(t[t.size() / 2]);
  }

 private:
  int repeats_;
  Device flush_;
  cudaEvent_t a_{}, b_{};
};

// The GPU left idle after a heavy load (`after`), so that the rows measured next do not run at the
// clocks that load left behind.
void rest(int seconds, const char* after) {
  check(cudaDeviceSynchronize(), after);
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
}

void fill(void* p, int64_t n, uint32_t seed, bool bf16) {
  ::attncheck::bench::fill_random<<<1024, 256>>>(static_cast<uint16_t*>(p), n, seed, bf16);
  check(cudaGetLastError(), "fill_random");
}

// n e4m3fn codes of uniform values in [-1, 1] (bench_util.cuh fill_random_e4m3).
void fill_codes(void* p, int64_t n, uint32_t seed) {
  ::attncheck::bench::fill_random_e4m3<<<1024, 256>>>(static_cast<uint8_t*>(p), n, seed);
  check(cudaGetLastError(), "fill_random_e4m3");
}

// Batch sequences of tq queries and tk keys, 32 query heads over 8 KV heads, d = 128.
struct Problem {
  Problem(int batch, int tq, int tk, bool bf16, bool causal)
      : nq(int64_t(batch) * tq * kHeads * kD),
        nk(int64_t(batch) * tk * kKvHeads * kD),
        q(size_t(nq) * 2, "cudaMalloc q"),
        k(size_t(nk) * 2, "cudaMalloc k"),
        v(size_t(nk) * 2, "cudaMalloc v"),
        o(size_t(nq) * 2, "cudaMalloc o"),
        lse(size_t(batch) * tq * kHeads * 4, "cudaMalloc lse"),
        cu_q(size_t(batch + 1) * 4, "cudaMalloc cu_seqlens_q"),
        cu_k(size_t(batch + 1) * 4, "cudaMalloc cu_seqlens_k") {
    fill(q.p, nq, 11, bf16);
    fill(k.p, nk, 12, bf16);
    fill(v.p, nk, 13, bf16);
    for (int s = 0; s <= batch; ++s) {
      cu_q_host.push_back(s * tq);
      cu_k_host.push_back(s * tk);
    }
    check(cudaMemcpy(cu_q.p, cu_q_host.data(), cu_q_host.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
    check(cudaMemcpy(cu_k.p, cu_k_host.data(), cu_k_host.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
    a = AttentionArgs(bf16 ? AC_DTYPE_BF16 : AC_DTYPE_F16, kHeads, kKvHeads, kD)
            .sequences(batch, cu_q.as<int32_t>(), cu_k.as<int32_t>(), cu_q_host.data(), cu_k_host.data())
            .tensors(q.p, k.p, v.p, o.p, lse.as<float>())
            .scale(float(1.0 / std::sqrt(double(kD))))
            .causal(causal)
            .splits(1, AC_FOLD_LEFT);
    check(cudaDeviceSynchronize(), "preparing inputs");
  }
  static constexpr int kHeads = 32, kKvHeads = 8, kD = 128;
  int64_t nq, nk;
  Device q, k, v, o, lse, cu_q, cu_k;
  std::vector<int32_t> cu_q_host, cu_k_host;
  ac_attention_args a{};
};

std::string tiling_name(const ac_tiling& t) { return std::to_string(t.br) + "x" + std::to_string(t.bc); }

void emit(const SuiteOptions& o, std::vector<Measurement>& out, Measurement m) {
  out.push_back(std::move(m));
  if (o.on_row) o.on_row(out.back());
}

// Paged K / V (AC_VAR_PAGED_KV) over a call's contiguous buffers: `batch` sequences of tk keys in
// pages of `page`, page b of sequence s being page s n + (b 7919 mod n) of the pool (n = tk / page
// each), so that consecutive pages lie far apart; or page s n + b (`in_order`: the contiguous
// buffers' own order, so that a row's cost over the contiguous row is the addressing's alone). The table's
// host and device copies live in `tables` (the call reads both); the call includes the launcher's host check
// of every entry (fused_check_variants), and picks its own split count.
struct BlockTable {
  std::vector<int32_t> host;
  std::unique_ptr<Device> device;
};
ac_attention_args paged(ac_attention_args a, int batch, int tk, int page, std::list<BlockTable>& tables,
                        bool in_order = false) {
  const int per_seq = tk / page;
  BlockTable& t = tables.emplace_back();
  t.host.resize(size_t(batch) * size_t(per_seq));
  for (int s = 0; s < batch; ++s)
    for (int b = 0; b < per_seq; ++b)
      t.host[size_t(s) * size_t(per_seq) + size_t(b)] =
          s * per_seq + (in_order ? b : int(int64_t(b) * 7919 % per_seq));
  t.device = std::make_unique<Device>(t.host.size() * 4, "cudaMalloc block table");
  check(cudaMemcpy(t.device->p, t.host.data(), t.host.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  a.page_size = page;
  a.num_pages = batch * per_seq;
  a.max_blocks = per_seq;
  a.block_table = t.device->as<int32_t>();
  a.block_table_host = t.host.data();
  a.num_splits = 0;
  return a;
}

void attention(const SuiteOptions& o, Timer& timer, std::vector<Measurement>& out, int t, bool bf16,
               bool causal) {
  Problem p(1, t, t, bf16, causal);
  const double flops = 4.0 * double(t) * double(t) * Problem::kHeads * Problem::kD * (causal ? 0.5 : 1.0);
  const std::string shape = "T=" + std::to_string(t) + " h=32/8 d=128";
  char err[256] = {0};
  FusedOptions fo;
  fo.synchronize = false;
  auto row = [&](const char* kernel, const ac_tiling& tile, double ms) {
    emit(o, out,
         {"attention", kernel, shape, bf16 ? "bf16" : "fp16", causal, tiling_name(tile), ms,
          flops / ms * 1e-9, "TFLOP/s", "gemm"});
  };
  for (int i = 0; o.with_fused && i < kNumFusedTilings; ++i) {
    p.a.tiling = i;
    row("fused", kFusedTilings[i],
        timer.median_ms([&] { check_kernel(fused_attention_cuda(p.a, fo, err, sizeof err), "fused", err); }));
  }
#if defined(ATTNCHECK_HAVE_SM90A)
  for (int i = 0; i < kNumHopperTilings; ++i) {
    p.a.tiling = i;
    row("fused-hopper", kHopperTilings[i], timer.median_ms([&] {
      check_kernel(hopper_attention_cuda(p.a, fo, err, sizeof err), "fused-hopper", err);
    }));
  }
  // Paged K / V over the same buffers (paged() above: consecutive pages far apart in the pool) at
  // the first tiling, each page size: a tile in chunks of one page against the contiguous row.
  std::list<BlockTable> tables;
  for (int page : kHopperPageSizes) {
    ac_attention_args pa = paged(p.a, 1, t, page, tables);
    pa.tiling = 0;
    pa.num_splits = 1;
    const double ms = timer.median_ms(
        [&] { check_kernel(hopper_attention_cuda(pa, fo, err, sizeof err), "fused-hopper (paged)", err); });
    emit(o, out,
         {"attention", "fused-hopper", shape, bf16 ? "bf16" : "fp16", causal,
          tiling_name(kHopperTilings[0]) + " paged=" + std::to_string(page), ms, flops / ms * 1e-9, "TFLOP/s",
          "gemm"});
  }
  if (bf16) {
    // FlashAttention-3's FP8 forward on the same shape: e4m3fn codes of uniform values in [-1, 1],
    // one descale of 1 each.
    Device q8(size_t(p.nq), "cudaMalloc q e4m3"), k8(size_t(p.nk), "cudaMalloc k e4m3"),
        v8(size_t(p.nk), "cudaMalloc v e4m3"), ds(3 * sizeof(float), "cudaMalloc descales");
    fill_codes(q8.p, p.nq, 21);
    fill_codes(k8.p, p.nk, 22);
    fill_codes(v8.p, p.nk, 23);
    const float ones[3] = {1.0f, 1.0f, 1.0f};
    check(cudaMemcpy(ds.p, ones, sizeof ones, cudaMemcpyHostToDevice), "cudaMemcpy descales");
    ac_attention_args a8 = p.a;
    a8.tiling = 0;
    a8.q = q8.p;
    a8.k = k8.p;
    a8.v = v8.p;
    a8.kv_dtype = AC_DTYPE_E4M3;
    a8.q_descale = ds.as<float>();
    a8.k_descale = ds.as<float>() + 1;
    a8.v_descale = ds.as<float>() + 2;
    a8.descale_granularity = 0;
    const double ms = timer.median_ms(
        [&] { check_kernel(hopper_fp8_attention_cuda(a8, fo, err, sizeof err), "fused-hopper-fp8", err); });
    emit(o, out,
         {"attention", "fused-hopper-fp8", shape, "e4m3", causal, tiling_name(kHopperTilings[0]), ms,
          flops / ms * 1e-9, "TFLOP/s", "fp8_gemm"});
    if (o.fp8_row_probe) {
      const double row_ms = timer.median_ms([&] {
        check_kernel(hopper_fp8_row_accumulator_cuda(a8, fo, err, sizeof err), "fp8 row accumulator", err);
      });
      emit(o, out,
           {"attention", "fp8-row-accumulator", shape, "e4m3", causal, tiling_name(kHopperTilings[0]), row_ms,
            flops / row_ms * 1e-9, "TFLOP/s", "fp8_gemm"});
    }
  }
  // A second's rest after fused-hopper, the run's heaviest kernel after the GEMM: at T = 8192
  // (about 80% of the GEMM ceiling) the first fused row after its rows measured 3.5-10% slower
  // than in the baseline run on the H200, with fused's code unchanged, and failed the speed gate.
  rest(1, "fused-hopper");
#endif
}

// The engines' score variants on fused-hopper (its VAR instantiation), bf16, the first tiling:
// Gemma's softcap of 30, non-causal and causal, and a sliding window of 1024 keys (each query sees
// itself and the 1023 keys before it; causal). TFLOP/s counts 4 d flops per head for each visible
// (query, key) pair, so a window's rate is comparable with a full row's; PyTorch's flex_attention
// (peers.py) beside them where it runs. Row labels: "<tiling> softcap=30", "<tiling> window=1024".
#if defined(ATTNCHECK_HAVE_SM90A)
void variants(const SuiteOptions& o, Timer& timer, std::vector<Measurement>& out, int t, bool causal,
              bool window) {
  Problem p(1, t, t, true, causal);
  constexpr int kWindow = 1024;
  double pairs = causal ? 0.5 * double(t) * double(t + 1) : double(t) * double(t);
  if (window) {
    const double w = std::min(t, kWindow);
    pairs = 0.5 * w * (w + 1) + (double(t) - w) * w;  // rows past the first w see w keys
    p.a.window_left = kWindow - 1;
  } else {
    p.a.softcap = 30.0f;
  }
  const double flops = 4.0 * pairs * Problem::kHeads * Problem::kD;
  char err[256] = {0};
  FusedOptions fo;
  fo.synchronize = false;
  p.a.tiling = 0;
  const double ms = timer.median_ms(
      [&] { check_kernel(hopper_attention_cuda(p.a, fo, err, sizeof err), "fused-hopper (variant)", err); });
  emit(o, out,
       {"variants", "fused-hopper", "T=" + std::to_string(t) + " h=32/8 d=128", "bf16", causal,
        tiling_name(kHopperTilings[0]) + (window ? " window=" + std::to_string(kWindow) : " softcap=30"), ms,
        flops / ms * 1e-9, "TFLOP/s", "gemm"});
}
#endif

void decode(const SuiteOptions& o, Timer& timer, std::vector<Measurement>& out, int batch, int tk) {
  Problem p(batch, 1, tk, false, false);
  const double bytes = 2.0 * batch * tk * Problem::kKvHeads * Problem::kD * 2 +
                       2.0 * batch * Problem::kHeads * Problem::kD * 2;
  const std::string shape = "batch=" + std::to_string(batch) + " Tk=" + std::to_string(tk) + " h=32/8 d=128";
  char err[256] = {0};
  auto row = [&](const char* kernel, const std::string& tiling, double ms) {
    emit(o, out, {"decode", kernel, shape, "fp16", false, tiling, ms, bytes / ms * 1e-6, "GB/s", "copy"});
  };
  p.a.tiling = 1;  // the decode tiling of both kernels: (16, 64)
  // The price of batch invariance: the adaptive split count (from the batch, the heads and the SMs,
  // batch variant), one split, and fixed split sizes (keys per split independent of the batch;
  // splitkv::split_keys raises a size that would need more than 64 parts, so the label names the
  // parts launched).
  auto packed = [&](const std::string& label, int num_splits, int keys_per_split) {
    p.a.num_splits = num_splits;
    row("splitkv-packed", label, timer.median_ms([&] {
      check_kernel(packed_attention_cuda(p.a, err, sizeof err, false, keys_per_split), "splitkv-packed", err);
    }));
  };
  packed("auto", 0, 0);
  packed("splits=1", 1, 0);
  for (int keys : {256, 1024, 4096})
    packed("fixed=" + std::to_string(keys) + " splits=" + std::to_string(fixed_split_count(p.a, keys)), 0,
           keys);
  // splitkv runs one CTA per (sequence, query head, split): splits enough for about four CTAs
  // per SM, within its range.
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "cudaDeviceGetAttribute");
  p.a.num_splits = std::clamp(4 * sms / (batch * Problem::kHeads), 1, kSplitKVMaxSplits);
  Device work(splitkv_workspace_bytes(p.a), "cudaMalloc split-KV workspace");
  SplitKVOptions so;
  so.synchronize = false;
  so.workspace = work.p;
  so.workspace_bytes = splitkv_workspace_bytes(p.a);
  row("splitkv", "16x64 splits=" + std::to_string(p.a.num_splits), timer.median_ms([&] {
    check_kernel(splitkv_attention_cuda(p.a, so, err, sizeof err), "splitkv", err);
  }));
  // Paged K / V over the same buffers, pages of 16, 64 and 256 keys.
  std::list<BlockTable> tables;
  for (int page : {16, 64, 256}) {
    const ac_attention_args pa = paged(p.a, batch, tk, page, tables);
    row("splitkv-packed", "auto paged=" + std::to_string(page), timer.median_ms([&] {
      check_kernel(packed_attention_cuda(pa, err, sizeof err, false, 0), "splitkv-packed (paged)", err);
    }));
  }
  // splitkv-packed on an FP8 cache (e4m3fn codes, descales per KV head) at its own split count, the
  // codes in the first half of K's and V's buffers (the rows above are done with them): its GB/s
  // counts the bytes it reads, one per K and V element.
  fill_codes(p.k.p, p.nk, 14);
  fill_codes(p.v.p, p.nk, 15);
  const std::vector<float> descales = {0.5f, 1.0f, 2.0f, 0.25f, 1.5f, 0.75f, 3.0f, 1.25f};
  static_assert(Problem::kKvHeads == 8, "one descale per KV head");
  Device ds(descales.size() * 4, "cudaMalloc descales");
  check(cudaMemcpy(ds.p, descales.data(), descales.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  ac_attention_args a8 = p.a;
  a8.kv_dtype = AC_DTYPE_E4M3;
  a8.k_descale = a8.v_descale = ds.as<float>();
  a8.descale_granularity = 1;
  a8.num_splits = 0;
  const double bytes8 =
      2.0 * batch * tk * Problem::kKvHeads * Problem::kD + 2.0 * batch * Problem::kHeads * Problem::kD * 2;
  // Its rows: contiguous; paged in pages of 16 keys; and in pages of 16 in the pool's order, the
  // paged walk without the scatter.
  auto row8 = [&](const std::string& tiling, const ac_attention_args& args, const char* what) {
    const double ms = timer.median_ms(
        [&] { check_kernel(packed_attention_cuda(args, err, sizeof err, false, 0), what, err); });
    emit(o, out,
         {"decode", "splitkv-packed", shape, "fp16 e4m3-kv", false, tiling, ms, bytes8 / ms * 1e-6, "GB/s",
          "copy"});
  };
  row8("auto", a8, "splitkv-packed (e4m3 cache)");
  row8("auto paged=16", paged(a8, batch, tk, 16, tables), "splitkv-packed (e4m3 cache, paged)");
  row8("auto paged=16 in-order", paged(a8, batch, tk, 16, tables, true),
       "splitkv-packed (e4m3 cache, paged)");
}

// MLA's absorbed decode (splitkv-packed's packed_mla.cu): batch sequences of one query and tk keys,
// 16 query heads (DeepSeek-V3's 128 over 8 GPUs) over one KV head, QK 576 / V 512, fp16; K and V
// separate tensors (the ABI has no V inside K), so a key costs 2176 bytes read (1088 from an e4m3
// cache). Rows: contiguous, pages of 64 (FlashMLA's), and an e4m3fn cache with one descale.
void mla_decode(const SuiteOptions& o, Timer& timer, std::vector<Measurement>& out, int batch, int tk) {
  constexpr int heads = 16, dqk = 576, dv = 512;
  const int64_t nq = int64_t(batch) * heads * dqk, nk = int64_t(batch) * tk * dqk,
                nv = int64_t(batch) * tk * dv;
  Device q(size_t(nq) * 2, "cudaMalloc q"), k(size_t(nk) * 2, "cudaMalloc k"),
      v(size_t(nv) * 2, "cudaMalloc v");
  Device ob(size_t(batch) * heads * dv * 2, "cudaMalloc o"), lse(size_t(batch) * heads * 4, "cudaMalloc lse");
  Device cu_q(size_t(batch + 1) * 4, "cudaMalloc cu_seqlens_q"),
      cu_k(size_t(batch + 1) * 4, "cudaMalloc cu_seqlens_k");
  fill(q.p, nq, 31, false);
  fill(k.p, nk, 32, false);
  fill(v.p, nv, 33, false);
  std::vector<int32_t> cq, ck;
  for (int s = 0; s <= batch; ++s) {
    cq.push_back(s);
    ck.push_back(s * tk);
  }
  check(cudaMemcpy(cu_q.p, cq.data(), cq.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  check(cudaMemcpy(cu_k.p, ck.data(), ck.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  const ac_attention_args a =
      AttentionArgs(AC_DTYPE_F16, heads, 1, dqk)
          .sequences(batch, cu_q.as<int32_t>(), cu_k.as<int32_t>(), cq.data(), ck.data())
          .tensors(q.p, k.p, v.p, ob.p, lse.as<float>())
          .scale(float(1.0 / std::sqrt(double(dqk))))
          .variants(dv, 0.0f, -1, -1, nullptr)
          .tiling(1)
          .splits(0, AC_FOLD_LEFT);
  check(cudaDeviceSynchronize(), "preparing inputs");
  const std::string shape =
      "batch=" + std::to_string(batch) + " Tk=" + std::to_string(tk) + " h=16/1 d=576/512";
  const double q_o = double(batch) * heads * (dqk + dv) * 2, kv = double(batch) * tk * (dqk + dv);
  char err[256] = {0};
  auto row = [&](const char* dtype, const std::string& tiling, const ac_attention_args& call, double bytes) {
    const double ms = timer.median_ms([&] {
      check_kernel(packed_attention_cuda(call, err, sizeof err, false, 0), "splitkv-packed (MLA)", err);
    });
    emit(o, out,
         {"decode", "splitkv-packed", shape, dtype, false, tiling, ms, bytes / ms * 1e-6, "GB/s", "copy"});
  };
  row("fp16", "auto", a, 2 * kv + q_o);
  // Pages of 64 (FlashMLA's).
  std::list<BlockTable> tables;
  const ac_attention_args pa = paged(a, batch, tk, 64, tables);
  row("fp16", "auto paged=64", pa, 2 * kv + q_o);
  // e4m3fn codes in the first halves of K's and V's buffers, one descale per tensor.
  fill_codes(k.p, nk, 16);
  fill_codes(v.p, nv, 17);
  const float descale = 0.5f;
  Device ds(4, "cudaMalloc descale");
  check(cudaMemcpy(ds.p, &descale, 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  ac_attention_args a8 = a;
  a8.kv_dtype = AC_DTYPE_E4M3;
  a8.k_descale = a8.v_descale = ds.as<float>();
  a8.descale_granularity = 0;
  row("fp16 e4m3-kv", "auto", a8, kv + q_o);
}

void merge(const SuiteOptions& o, Timer& timer, std::vector<Measurement>& out, int tokens, bool bf16) {
  constexpr int heads = 32, d = 128;
  const size_t n = size_t(tokens) * heads * d, rows = size_t(tokens) * heads;
  Device p(n * 2, "cudaMalloc"), s(n * 2, "cudaMalloc"), y(n * 2, "cudaMalloc");
  Device pl(rows * 4, "cudaMalloc"), sl(rows * 4, "cudaMalloc"), yl(rows * 4, "cudaMalloc");
  fill(p.p, int64_t(n), 21, bf16);
  fill(s.p, int64_t(n), 22, bf16);
  check(cudaMemset(pl.p, 0, rows * 4), "cudaMemset");  // LSE 0 on both sides: finite states
  check(cudaMemset(sl.p, 0, rows * 4), "cudaMemset");
  ac_merge_args a{};
  a.dtype = bf16 ? AC_DTYPE_BF16 : AC_DTYPE_F16;
  a.num_tokens = tokens;
  a.num_heads = heads;
  a.head_size = d;
  a.out = y.p;
  a.prefix_out = p.p;
  a.suffix_out = s.p;
  a.out_stride_token = a.prefix_stride_token = a.suffix_stride_token = int64_t(heads) * d;
  a.out_stride_head = a.prefix_stride_head = a.suffix_stride_head = d;
  a.out_lse = yl.as<float>();
  a.prefix_lse = pl.as<float>();
  a.suffix_lse = sl.as<float>();
  a.lse_stride_token = 1;  // [heads, tokens]
  a.lse_stride_head = tokens;
  MergeOptions mo;
  mo.synchronize = false;
  char err[256] = {0};
  const double ms = timer.median_ms([&] { check_kernel(merge_cuda(a, mo, err, sizeof err), "merge", err); });
  const double bytes = double(3 * n * 2 + 3 * rows * 4);
  emit(o, out,
       {"merge", "merge", "tokens=" + std::to_string(tokens) + " h=32 d=128", bf16 ? "bf16" : "fp16", false,
        "", ms, bytes / ms * 1e-6, "GB/s", "copy"});
}

double copy_ceiling(Timer& timer) {
  const size_t n = size_t(1) << 30;
  Device a(n, "cudaMalloc (copy ceiling)"), b(n, "cudaMalloc (copy ceiling)");
  check(cudaMemset(a.p, 1, n), "cudaMemset");
  const double ms = timer.median_ms(
      [&] { check(cudaMemcpyAsync(b.p, a.p, n, cudaMemcpyDeviceToDevice), "cudaMemcpyAsync"); });
  return 2.0 * double(n) / ms * 1e-6;
}

// cuBLAS through dlopen: the few entry points the GEMM ceiling needs, typed from its own header.
double gemm_ceiling(Timer& timer, std::string& note) {
  void* lib = nullptr;
  for (const char* name : {"libcublas.so", "libcublas.so.13", "libcublas.so.12"})
    if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
  if (!lib) {
    note = "libcublas could not be loaded (" + std::string(dlerror()) + "): no GEMM ceiling";
    return 0;
  }
  using Create = decltype(&cublasCreate_v2);
  using Destroy = decltype(&cublasDestroy_v2);
  // Spelled out: the header declares a C++ overload beside the C entry point dlsym returns.
  using Gemm =
      cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                         const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                         cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  const auto create = reinterpret_cast<Create>(dlsym(lib, "cublasCreate_v2"));
  const auto destroy = reinterpret_cast<Destroy>(dlsym(lib, "cublasDestroy_v2"));
  const auto gemm = reinterpret_cast<Gemm>(dlsym(lib, "cublasGemmEx"));
  cublasHandle_t h = nullptr;
  if (!create || !destroy || !gemm || create(&h) != CUBLAS_STATUS_SUCCESS) {
    note = "libcublas loaded but cublasCreate / cublasGemmEx unavailable: no GEMM ceiling";
    return 0;
  }
  constexpr int n = 8192;
  Device A(size_t(n) * n * 2, "cudaMalloc (GEMM)"), B(size_t(n) * n * 2, "cudaMalloc (GEMM)"),
      C(size_t(n) * n * 2, "cudaMalloc (GEMM)");
  fill(A.p, int64_t(n) * n, 31, false);
  fill(B.p, int64_t(n) * n, 32, false);
  const float alpha = 1.0f, beta = 0.0f;
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  const double ms = timer.median_ms([&] {
    const cublasStatus_t s =
        gemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, A.p, CUDA_R_16F, n, B.p, CUDA_R_16F, n, &beta, C.p,
             CUDA_R_16F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) status = s;
  });
  destroy(h);
  if (status != CUBLAS_STATUS_SUCCESS) {
    note = "cublasGemmEx failed (status " + std::to_string(int(status)) + "): no GEMM ceiling";
    return 0;
  }
  return 2.0 * double(n) * n * n / ms * 1e-9;
}

}  // namespace

std::string device_name() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return "";
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return "";
  return prop.name;
}

Ceilings run_suite(const SuiteOptions& o, std::vector<Measurement>& out) {
  Timer timer(o.repeats);
  Ceilings c;
  c.copy_gbps = copy_ceiling(timer);
  c.gemm_tflops = gemm_ceiling(timer, c.gemm_note);
  // Two idle seconds after the GEMM, the heaviest load of the run: in a run started right after
  // another on the H200, the first attention rows measured straight after it were 9% slower than
  // in the first run, recovering over about ten rows, and the speed gate failed on them.
  rest(2, "the GEMM ceiling");
  if (o.attention)
    for (int t : o.attention_tokens)
      for (bool bf16 : {false, true})
        for (bool causal : {false, true}) attention(o, timer, out, t, bf16, causal);
#if defined(ATTNCHECK_HAVE_SM90A)
  if (o.attention)
    for (int t : o.attention_tokens) {
      variants(o, timer, out, t, false, false);
      variants(o, timer, out, t, true, false);
      variants(o, timer, out, t, true, true);
    }
#endif
  // Merges before decode: decode at batch 64 allocates and frees up to 68 GB, and what is allocated
  // after that moved less on the H200 (the merge at 32768 tokens 3806 GB/s against 4209 before it,
  // and a 1 GiB copy 3807 against 4253), so a row measured there would be judged against a ceiling
  // measured on a fresh heap.
  if (o.merge)
    for (int tokens : {4096, 32768})
      for (bool bf16 : {false, true}) merge(o, timer, out, tokens, bf16);
  if (o.decode && o.gqa_decode)
    for (int batch : o.decode_batches)
      for (int tk : o.decode_tokens) decode(o, timer, out, batch, tk);
  // MLA's decode at the shortest of the decode lengths.
  if (o.decode && o.mla_decode && !o.decode_tokens.empty())
    for (int batch : o.decode_batches) mla_decode(o, timer, out, batch, o.decode_tokens.front());
  return c;
}

}  // namespace attncheck::kern::bench
