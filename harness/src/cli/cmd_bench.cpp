// `attncheck bench`. Measuring needs a CUDA build and a GPU; --compare gates an existing
// bench.json against --baseline anywhere (CI, a laptop). Exit codes as everywhere: 0 ran (and no
// regression), 1 a row slowed down beyond the tolerance, 2 usage or input error before any work,
// 3 a kernel or CUDA call failed while measuring.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "attncheck/atomic_file.hpp"
#include "attncheck/bench_report.hpp"
#include "attncheck/json_fields.hpp"
#include "attncheck/pythons.hpp"
#include "attncheck/report.hpp"
#include "command.hpp"
#include "options.hpp"
#if defined(ATTNCHECK_HAVE_CUDA)
#include "bench/suite.h"
#endif

namespace attncheck::cli {
namespace {

constexpr double kDefaultTolerance = 0.05;

struct Options {
  int repeats = 20;
  std::string out = "bench.json", baseline, compare, peers = "auto";
  std::vector<std::string> only;
  double tolerance = kDefaultTolerance;
};

int usage(const std::string& why) {
  std::fprintf(stderr, "attncheck bench: %s\n", why.c_str());
  return kExitUsage;
}

#if defined(ATTNCHECK_HAVE_CUDA)
// PyTorch's FlashAttention-2 and cuDNN at the attention rows' shapes, through
// `python3 kernels/bench/peers.py --json` (find_peers_script: this build's source tree's, else the
// working directory's) with the first python3 on PATH that has torch; their rates go beside every
// attention row of the same T, dtype and causality. Without the script it measures no peers.
// Returns a note for bench.json.
std::string add_peers(BenchRun& run, int repeats) {
  std::string why;
  const std::string script = find_peers_script(ATTNCHECK_PEERS_SCRIPT, why);
  if (script.empty()) return why;
  for (const std::string& py : pythons_on_path()) {
    if (run_captured({py, "-c", "import torch; assert torch.cuda.is_available()"}).status != 0) continue;
    const CapturedRun r = run_captured({py, script, std::to_string(repeats), "--json"});
    if (r.status != 0)
      return "peers: " + py + " " + script + " failed (exit " + std::to_string(r.status) + ")";
    int added = 0;
    std::istringstream lines(r.output);
    std::string line;
    while (std::getline(lines, line)) {
      std::string error;
      const auto j = json_fields::try_parse_strict(line, error);
      if (j && j->is_object() && j->value("ceiling", "") == "fp8_gemm") {
        // The FP8 GEMM ceiling: the rows judged against it get their fraction now.
        run.fp8_gemm_tflops = j->value("tflops", 0.0);
        for (BenchRow& row : run.rows)
          if (row.ceiling == "fp8_gemm" && run.fp8_gemm_tflops > 0)
            row.of_ceiling = row.value / run.fp8_gemm_tflops;
        continue;
      }
      if (!j || !j->is_object() || !j->contains("tflops")) continue;  // a note, or a peer that did not run
      const std::string shape = "T=" + std::to_string(j->value("T", 0)) + " h=32/8 d=128";
      // flex_attention's lines name the variant ("softcap=30"), which the variants rows' tilings end
      // with; SDPA's go beside the attention rows (paged ones included: the same work, read from
      // pages).
      const std::string variant = j->contains("variant") ? " " + j->value("variant", "") : "";
      for (BenchRow& row : run.rows)
        if (row.family == (variant.empty() ? "attention" : "variants") && row.shape == shape &&
            row.dtype == j->value("dtype", "") && row.causal == j->value("causal", false) &&
            (variant.empty() ||
             (row.tiling.size() > variant.size() &&
              row.tiling.compare(row.tiling.size() - variant.size(), variant.size(), variant) == 0))) {
          row.peers[j->value("peer", "?")] = j->value("tflops", 0.0);
          ++added;
        }
    }
    return "peers: PyTorch SDPA and flex_attention through " + py + " (" + std::to_string(added) +
           " attention rows with peers)";
  }
  return "peers: no python3 on PATH imports torch with CUDA";
}

BenchRun measure(const Options& o) {
  kern::bench::SuiteOptions so;
  so.repeats = o.repeats;
  if (!o.only.empty()) {
    so.attention = so.decode = so.merge = false;
    for (const auto& f : o.only)
      (f == "attention" ? so.attention : f == "decode" ? so.decode : so.merge) = true;
  }
  so.on_row = [](const kern::bench::Measurement& m) {
    std::fprintf(stderr, "  %s %s %s %s%s %s: %.4f ms, %.1f %s\n", m.family.c_str(), m.kernel.c_str(),
                 m.shape.c_str(), m.dtype.c_str(), m.causal ? " causal" : "", m.tiling.c_str(), m.ms, m.value,
                 m.unit.c_str());
  };
  std::vector<kern::bench::Measurement> ms;
  const kern::bench::Ceilings c = kern::bench::run_suite(so, ms);
  BenchRun run;
  run.device = kern::bench::device_name();
  run.repeats = o.repeats;
  run.copy_gbps = c.copy_gbps;
  run.gemm_tflops = c.gemm_tflops;
  if (!c.gemm_note.empty()) std::fprintf(stderr, "note: %s\n", c.gemm_note.c_str());
  for (const auto& m : ms) {
    BenchRow r{m.family, m.kernel, m.shape, m.dtype,   m.causal, m.tiling,
               m.ms,     m.value,  m.unit,  m.ceiling, 0,        {}};
    // The FP8 GEMM ceiling comes with the peers (add_peers), after this.
    const double ceiling = m.ceiling == "gemm" ? c.gemm_tflops : m.ceiling == "copy" ? c.copy_gbps : 0;
    r.of_ceiling = ceiling > 0 ? m.value / ceiling : 0;
    run.rows.push_back(std::move(r));
  }
  return run;
}
#endif

// Two rows of one kernel on one shape and dtype (their tilings, and causality where it matters, the
// caller's to compare).
bool same_kernel_case(const BenchRow& a, const BenchRow& b) {
  return a.family == b.family && a.kernel == b.kernel && a.shape == b.shape && a.dtype == b.dtype;
}

// What batch invariance costs in decode: per shape, each fixed split size's throughput (keys per
// split independent of the batch) over the adaptive split count's (chosen from the batch), against
// the goal of at least 0.9 at batch 8 and more, 0.7 at batch 1; the best fixed size decides.
void print_invariance_price(const BenchRun& r) {
  bool header = false;
  for (const BenchRow& a : r.rows) {
    if (a.family != "decode" || a.kernel != "splitkv-packed" || a.tiling != "auto" || a.value <= 0) continue;
    std::string line;
    double best = 0;
    for (const BenchRow& f : r.rows)
      if (same_kernel_case(f, a) && f.tiling.rfind("fixed=", 0) == 0) {
        char b[96];
        std::snprintf(b, sizeof b, "%s %.2fx  ", f.tiling.c_str(), f.value / a.value);
        line += b;
        best = std::max(best, f.value / a.value);
      }
    if (line.empty()) continue;
    const int batch = std::atoi(a.shape.c_str() + (a.shape.rfind("batch=", 0) == 0 ? 6 : 0));
    const double goal = batch >= 8 ? 0.9 : 0.7;
    if (!header)
      std::printf(
          "price of batch invariance (splitkv-packed decode, a fixed split size against the adaptive "
          "split count; goal: at least 0.9x at batch >= 8, 0.7x at batch 1):\n");
    header = true;
    std::printf("  %-32s %-12s %sbest %.2fx: %s\n", a.shape.c_str(), a.dtype.c_str(), line.c_str(), best,
                best >= goal ? "met" : "SHORT of the goal");
  }
}

// FP8 attention against its goals: per shape, fused-hopper-fp8's rate over the best bf16
// fused-hopper tiling's (goal 1.5x) and its fraction of the e4m3 GEMM ceiling (goal 65%).
void print_fp8_goals(const BenchRun& r) {
  bool header = false;
  for (const BenchRow& f : r.rows) {
    if (f.family != "attention" || f.kernel != "fused-hopper-fp8" || f.value <= 0) continue;
    double bf16 = 0;
    for (const BenchRow& b : r.rows)
      if (b.family == f.family && b.kernel == "fused-hopper" && b.dtype == "bf16" && b.shape == f.shape &&
          b.causal == f.causal)
        bf16 = std::max(bf16, b.value);
    if (!header)
      std::printf(
          "FP8 attention (fused-hopper-fp8; goals: 1.5x the best bf16 fused-hopper tiling, 65%% of the e4m3 "
          "GEMM ceiling):\n");
    header = true;
    std::printf("  %-24s %-6s %7.1f TFLOP/s: %s bf16, %s of the e4m3 GEMM\n", f.shape.c_str(),
                f.causal ? "causal" : "", f.value,
                bf16 > 0 ? (std::to_string(f.value / bf16).substr(0, 4) + "x").c_str() : "-",
                f.of_ceiling > 0 ? (std::to_string(int(100 * f.of_ceiling)) + "%").c_str() : "-");
  }
}

// Paged K / V against contiguous: per paged row ("<tiling> paged=N"), its rate over the row of the
// same kernel, shape, dtype and causality with the tiling alone, against the goal of 0.9x, and for
// decode at batch 64 its fraction of the copy ceiling against the goal of 80%.
void print_paged_goals(const BenchRun& r) {
  bool header = false;
  for (const BenchRow& p : r.rows) {
    const size_t at = p.tiling.find(" paged=");
    if (at == std::string::npos || p.value <= 0) continue;
    const std::string plain = p.tiling.substr(0, at);
    const BenchRow* c = nullptr;
    for (const BenchRow& x : r.rows)
      if (same_kernel_case(x, p) && x.causal == p.causal && x.tiling == plain) c = &x;
    if (!c || c->value <= 0) continue;
    if (!header)
      std::printf(
          "paged K / V (goals: at least 0.9x contiguous; decode at batch 64, 80%% of the copy ceiling):\n");
    header = true;
    const double ratio = p.value / c->value;
    const bool batch64 = p.family == "decode" && p.shape.rfind("batch=64 ", 0) == 0;
    std::printf("  %-9s %-15s %-32s %-12s %-6s %-22s %.2fx contiguous%s%s\n", p.family.c_str(),
                p.kernel.c_str(), p.shape.c_str(), p.dtype.c_str(), p.causal ? "causal" : "",
                p.tiling.c_str(), ratio,
                batch64 ? (", " + std::to_string(int(100 * p.of_ceiling)) + "% of copy").c_str() : "",
                ratio >= 0.9 && (!batch64 || p.of_ceiling >= 0.8) ? ": met" : ": SHORT of the goal");
  }
}

void print_table(const BenchRun& r) {
  std::printf("device %s, median of %d; ceilings: copy %.0f GB/s, fp16 GEMM %s, e4m3 GEMM %s\n",
              r.device.c_str(), r.repeats, r.copy_gbps,
              r.gemm_tflops > 0 ? (std::to_string(int(r.gemm_tflops)) + " TFLOP/s").c_str() : "-",
              r.fp8_gemm_tflops > 0
                  ? (std::to_string(int(r.fp8_gemm_tflops)) + " TFLOP/s (torch._scaled_mm)").c_str()
                  : "-");
  std::printf("%-9s %-15s %-32s %-5s %-6s %-20s %10s %10s %-7s %8s %8s %8s %8s\n", "family", "kernel",
              "shape", "dtype", "causal", "tiling", "ms", "rate", "unit", "of ceil", "vs fa2", "vs cudnn",
              "vs flex");
  for (const BenchRow& x : r.rows) {
    auto vs = [&](const char* peer) {
      const auto it = x.peers.find(peer);
      char b[16] = "-";
      if (it != x.peers.end()) std::snprintf(b, sizeof b, "%.2fx", x.value / it->second);
      return std::string(b);
    };
    std::printf("%-9s %-15s %-32s %-5s %-6s %-20s %10.4f %10.1f %-7s %7.0f%% %8s %8s %8s\n", x.family.c_str(),
                x.kernel.c_str(), x.shape.c_str(), x.dtype.c_str(), x.causal ? "yes" : "no", x.tiling.c_str(),
                x.ms, x.value, x.unit.c_str(), 100 * x.of_ceiling, vs("fa2").c_str(), vs("cudnn").c_str(),
                vs("flex").c_str());
  }
  print_invariance_price(r);
  print_paged_goals(r);
  print_fp8_goals(r);
}

int run_bench(const Options& o) {
  // 1. Everything that can be wrong with the input, before measuring.
  if (!(o.tolerance >= 0 && o.tolerance <= 10))
    return usage("--tolerance must be a fraction in [0, 10] (0.05 = 5%)");
  for (const auto& f : o.only)
    if (f != "attention" && f != "decode" && f != "merge")
      return usage("--only: unknown family '" + f + "' (attention, decode, merge)");
  std::unique_ptr<BenchRun> baseline;
  try {
    if (!o.baseline.empty()) baseline = std::make_unique<BenchRun>(read_bench_file(o.baseline));
  } catch (const BenchError& e) {
    return usage(std::string("--baseline: ") + e.what());
  }
  BenchRun run;
  if (!o.compare.empty()) {
    if (!baseline) return usage("--compare needs --baseline (the run to compare against)");
    try {
      run = read_bench_file(o.compare);
    } catch (const BenchError& e) {
      return usage(std::string("--compare: ") + e.what());
    }
  } else {
#if defined(ATTNCHECK_HAVE_CUDA)
    if (kern::bench::device_name().empty())
      return usage("no CUDA device visible: nothing to measure (--compare gates an existing bench.json)");
    if (baseline && baseline->device != kern::bench::device_name())
      return usage("--baseline was measured on '" + baseline->device + "', this device is '" +
                   kern::bench::device_name() + "': times on different devices are not compared");
    try {
      run = measure(o);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "attncheck bench: a measurement failed: %s\n", e.what());
      return kExitCrashed;
    }
    run.tool_version = kToolVersion;
    run.timestamp = utc_timestamp();
    run.peers_note = o.peers == "off" ? "peers: off" : add_peers(run, o.repeats);
    std::fprintf(stderr, "%s\n", run.peers_note.c_str());
    try {
      write_file_atomic(o.out, bench_to_json_text(run));
    } catch (const AtomicWriteError& e) {
      return usage(e.what());
    }
#else
    return usage(
        "this attncheck was built without CUDA: nothing to measure (--compare gates an existing bench.json)");
#endif
  }
  print_table(run);
  if (o.compare.empty()) std::printf("bench.json: %s\n", o.out.c_str());
  if (!baseline) return kExitOk;
  BenchComparison c;
  try {
    c = compare_bench(*baseline, run, o.tolerance);
  } catch (const BenchError& e) {
    return usage(e.what());
  }
  for (const auto& m : c.missing) std::printf("not measured now (in the baseline): %s\n", m.c_str());
  for (const auto& r : c.regressions) std::printf("SLOWER: %s\n", r.c_str());
  std::printf("attncheck bench: %s: %d rows compared with %s, %zu slower than %.1f%%\n",
              c.regressions.empty() ? "pass" : "fail", c.compared, o.baseline.c_str(), c.regressions.size(),
              100 * o.tolerance);
  return c.regressions.empty() ? kExitOk : kExitFailed;
}

}  // namespace

Command add_bench_command(CLI::App& app, Common&) {
  auto o = std::make_shared<Options>();
  Command c;
  c.app = app.add_subcommand(
      "bench",
      "the built-in kernels' speed at the Llama-3-8B layer's shapes, against the device's ceilings and "
      "PyTorch's backends; bench.json and a speed gate");
  c.app
      ->add_option("--repeats", o->repeats, "timed launches per measurement; the median is kept (default 20)")
      ->check(CLI::Range(1, 1000));
  c.app->add_option("--out", o->out, "where bench.json is written (default bench.json)")->check(non_empty());
  c.app->add_option("--baseline", o->baseline,
                    "an earlier bench.json: fail when a row got slower than --tolerance");
  c.app->add_option("--tolerance", o->tolerance, "allowed slowdown per row, a fraction (default 0.05 = 5%)");
  c.app->add_option("--compare", o->compare,
                    "gate this existing bench.json against --baseline instead of measuring");
  c.app->add_option("--peers", o->peers, "auto (PyTorch's SDPA backends where a python3 imports torch) | off")
      ->check(CLI::IsMember({"auto", "off"}));
  c.app
      ->add_option("--only", o->only,
                   "measure only these families: attention (with the variants rows), decode, merge")
      ->check(names_something());
  c.run = [o] {
    Options opts = *o;
    opts.only = split_csv(opts.only);
    return run_bench(opts);
  };
  return c;
}

}  // namespace attncheck::cli
