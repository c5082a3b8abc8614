// hopper_bench: the built-in kernels' benchmark (kernels/bench/suite.h: shapes, timing, ceilings)
// printed as text, one line per measurement; `attncheck bench` runs the same suite and writes
// bench.json. Not a test; run on the H200.
// Run: build/tests/kernels_hopper/hopper_bench [repeats] [decode | decode64 | decode8 | mla | hopper8192]
//   decode      decode rows only; decode64 and decode8: those at batch 64 or 8 and T_k = 32768 only
//   (one shape to profile); mla: MLA's decode rows only; hopper8192: fused-hopper at T = 8192 only,
//   with the FP8 row accumulator's probe (suite.h fp8_row_probe) beside fused-hopper-fp8.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string_view>
#include <vector>

#include "bench/suite.h"
#include "common/bench_util.cuh"

using namespace attncheck::kern::bench;

int main(int argc, char** argv) {
  SuiteOptions o;
  if (argc > 1) o.repeats = std::max(1, std::atoi(argv[1]));
  const std::string_view only = argc > 2 ? argv[2] : "";
  if (only == "decode" || only == "decode64" || only == "decode8" || only == "mla") {
    o.attention = o.merge = false;
    if (only == "decode64") o.decode_batches = {64}, o.decode_tokens = {32768};
    if (only == "decode8") o.decode_batches = {8}, o.decode_tokens = {32768};
    if (only == "mla") o.gqa_decode = false;
  } else if (only == "hopper8192") {
    o.attention_tokens = {8192};
    o.with_fused = o.decode = o.merge = false;
    o.fp8_row_probe = true;
  }
  if (!attncheck::bench::have_device("hopper_bench")) return attncheck::bench::kExitNoDevice;
  o.on_row = [](const Measurement& m) {
    std::printf("%-9s %-14s %-32s %s causal=%d tiling=%-10s %9.4f ms %8.1f %s\n", m.family.c_str(),
                m.kernel.c_str(), m.shape.c_str(), m.dtype.c_str(), int(m.causal), m.tiling.c_str(), m.ms,
                m.value, m.unit.c_str());
    std::fflush(stdout);
  };
  std::vector<Measurement> rows;
  try {
    const Ceilings c = run_suite(o, rows);
    std::printf("ceiling copy 1 GiB device-to-device %.1f GB/s (read + write)\n", c.copy_gbps);
    if (c.gemm_tflops > 0)
      std::printf("ceiling fp16 GEMM 8192^3 (cuBLAS, fp32 accumulation) %.1f TFLOP/s\n", c.gemm_tflops);
    else
      std::printf("ceiling fp16 GEMM: %s\n", c.gemm_note.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hopper_bench: %s\n", e.what());
    return 3;
  }
  return 0;
}
