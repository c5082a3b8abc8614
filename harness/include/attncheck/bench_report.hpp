// bench.json: what `attncheck bench` measured, and the speed gate against a baseline.
//
// A run holds the ceilings measured in it (a large device-to-device copy, an fp16 GEMM through
// cuBLAS when the library loads) and one row per (kernel, shape, dtype, causal, tiling): the
// median time of its repeats, the rate made of the compulsory work (TFLOP/s or GB/s) and that rate
// as a fraction of its ceiling, with the peers measured at the same shape beside it (PyTorch's
// FlashAttention-2 and cuDNN backends) where they ran. Field list: reports/README.md.
//
// The gate: a row whose median time grew by more than `tolerance` (a fraction; 0.05 = 5%) over
// the baseline's same row is a regression. Runs on different devices are not compared (the
// caller gets BenchError): their times say nothing about each other.
#pragma once
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace attncheck {

struct BenchError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

constexpr int kBenchSchemaVersion = 1;

struct BenchRow {
  std::string family;  // "attention" | "decode" | "merge"
  std::string kernel;  // the subject's name: "fused", "fused-hopper", "splitkv-packed", "merge", ...
  std::string shape;   // "T=8192 h=32/8 d=128", "batch=64 Tk=8192 h=32/8 d=128", "tokens=4096 h=32 d=128"
  std::string dtype;   // "fp16" | "bf16" | "fp32"
  bool causal = false;
  std::string tiling;                   // "64x128", "auto", "" (none)
  double ms = 0;                        // median over the repeats
  double value = 0;                     // the rate of the compulsory work
  std::string unit;                     // "TFLOP/s" | "GB/s"
  std::string ceiling;                  // "gemm" | "fp8_gemm" | "copy"
  double of_ceiling = 0;                // value / the ceiling's rate; 0 when the ceiling is unknown
  std::map<std::string, double> peers;  // peer name ("fa2", "cudnn") -> its rate, same unit
  // The row's identity across runs: family, kernel, shape, dtype, causal and tiling.
  std::string id() const;
};

struct BenchRun {
  int schema_version = kBenchSchemaVersion;
  std::string tool_version, timestamp, device, peers_note;
  int repeats = 0;
  double copy_gbps = 0;        // the copy ceiling: bytes read + written per second
  double gemm_tflops = 0;      // the GEMM ceiling; 0: cuBLAS not loaded
  double fp8_gemm_tflops = 0;  // the e4m3 GEMM ceiling (torch._scaled_mm, peers.py); 0: not measured
  std::vector<BenchRow> rows;
};

std::string bench_to_json_text(const BenchRun&);
// Reads a bench.json; BenchError with one line naming the file and the field otherwise.
BenchRun read_bench_file(const std::string& path);
// The same from its text; `where` names it in messages.
BenchRun bench_from_json_text(const std::string& text, const std::string& where);

struct BenchComparison {
  std::vector<std::string> regressions;  // one line each: id, base ms, now ms, change
  std::vector<std::string> missing;      // baseline rows absent now (ids)
  int compared = 0;
};
// BenchError when the devices differ or the tolerance is not a fraction in [0, 10].
BenchComparison compare_bench(const BenchRun& baseline, const BenchRun& now, double tolerance);

// The peers' script (`kernels/bench/peers.py`): `built` (the build's source tree) where it exists,
// else the working directory's, for a binary copied away from its tree beside a checkout of it (as
// tests/gpu/stage.sh stages it for a GPU machine). Its absolute path; empty with `why` set to one
// line when neither exists.
std::string find_peers_script(const std::string& built, std::string& why);

}  // namespace attncheck
