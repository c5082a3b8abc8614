// The built-in kernels' benchmark, the measuring half of `attncheck bench` (the harness writes
// bench.json and gates on a baseline; hopper_bench prints the same rows as text).
//
// Shapes are the Llama-3-8B layer's:
//   attention  T in {2048, 8192}, 32 query heads over 8 KV heads, d = 128, fp16 and bf16, causal
//              and not; fused (every tiling) and fused-hopper (every tiling, sm_90a builds).
//              TFLOP/s of 4 T^2 h d flops (half when causal), against the GEMM ceiling. Beside the
//              bf16 rows, fused-hopper-fp8 (dtype "e4m3": Q, K and V e4m3fn codes, one descale
//              each, O in bf16; the call includes its copy of V transposed), against the FP8 GEMM
//              ceiling ("fp8_gemm": torch._scaled_mm, which kernels/bench/peers.py measures).
//   decode     1 query, T_k in {8192, 32768, 131072}, batch 1, 8 and 64, the same heads, fp16;
//              splitkv-packed (its own split count) and splitkv (splits filling the machine);
//              splitkv-packed on an e4m3fn cache (dtype "fp16 e4m3-kv", one byte per K / V element);
//              splitkv-packed paged (pages of 16, 64, 256; the e4m3 cache at 16, scattered and
//              in the pool's order), tiling "auto paged=P" ("auto paged=16 in-order").
//              GB/s of compulsory traffic (K and V once, Q and O once), against the copy ceiling.
//              MLA's absorbed decode (16 query heads over 1 KV head, QK 576 / V 512) at the same
//              batches and the shortest T_k: splitkv-packed contiguous, paged (64) and on an e4m3 cache.
//   merge      4096 and 32768 tokens x 32 heads x 128, fp16 and bf16, LSE [heads, tokens]. GB/s of
//              two states and two LSEs read, one of each written, against the copy ceiling.
// Every time is the median of `repeats` launches, each timed alone with CUDA events after an L2
// flush (a 512 MiB memset), after two warm-up launches, on random non-zero inputs.
// Ceilings, measured in the same run: a 1 GiB device-to-device copy (bytes read + written per
// second), and an 8192^3 fp16 GEMM with fp32 accumulation through cuBLAS, which is loaded at run
// time (libcublas is not a build dependency): without it the GEMM ceiling is 0 and says why.
// Order: ceilings, attention, merge, decode; decode's large allocations last, since what the
// process allocates after them moves less (suite.cu says by how much).
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace attncheck::kern::bench {

struct Measurement {
  std::string family, kernel, shape, dtype;
  bool causal = false;
  std::string tiling;  // "BRxBC", "auto" or ""
  double ms = 0, value = 0;
  std::string unit, ceiling;  // "TFLOP/s" with "gemm" or "fp8_gemm", "GB/s" with "copy"
};

struct Ceilings {
  double copy_gbps = 0, gemm_tflops = 0;
  std::string gemm_note;  // why the GEMM ceiling is 0
};

struct SuiteOptions {
  int repeats = 20;
  bool attention = true, decode = true, merge = true;
  std::vector<int> attention_tokens{2048, 8192};
  std::vector<int> decode_batches{1, 8, 64}, decode_tokens{8192, 32768, 131072};
  bool gqa_decode = true, mla_decode = true;  // the decode family's two groups of rows
  bool with_fused = true;                     // the mma.sync kernel beside fused-hopper
  // The FP8 forward with FlashAttention-3's P V (hopper.h HopperMutation::fp8_row_accumulator, not
  // a subject) beside fused-hopper-fp8: hopper_bench hopper8192 only, never `attncheck bench`.
  bool fp8_row_probe = false;
  // Called after each measurement (for progress), in the order measured.
  std::function<void(const Measurement&)> on_row;
};

// The device's name; "" when no CUDA device is visible (then run_suite must not be called).
std::string device_name();
// Measures; throws std::runtime_error naming the CUDA call or the kernel that failed.
Ceilings run_suite(const SuiteOptions&, std::vector<Measurement>& out);

}  // namespace attncheck::kern::bench
