// bench.json and the speed gate: a written run reads back as it was, malformed files are refused
// naming the field, and the gate flags exactly the rows slower than the tolerance (hand-computed
// changes below), refuses runs from different devices, and lists rows no longer measured; and
// the peers' script is found where the binary runs.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "attncheck/bench_report.hpp"

using namespace attncheck;
namespace fs = std::filesystem;

namespace {

BenchRow row(const std::string& kernel, double ms, double value = 100) {
  BenchRow r;
  r.family = "attention";
  r.kernel = kernel;
  r.shape = "T=8192 h=32/8 d=128";
  r.dtype = "fp16";
  r.causal = true;
  r.tiling = "128x128";
  r.ms = ms;
  r.value = value;
  r.unit = "TFLOP/s";
  r.ceiling = "gemm";
  r.of_ceiling = 0.5;
  return r;
}

BenchRun run_of(std::vector<BenchRow> rows, const std::string& device = "NVIDIA H200") {
  BenchRun r;
  r.device = device;
  r.repeats = 10;
  r.copy_gbps = 4200;
  r.gemm_tflops = 700;
  r.rows = std::move(rows);
  return r;
}

// The files this process wrote, removed when it ends (a test run leaves nothing in the temp dir).
struct TempFiles {
  std::vector<fs::path> paths;
  ~TempFiles() {
    std::error_code ec;
    for (const auto& p : paths) fs::remove(p, ec);
  }
};
TempFiles g_temp;

std::string write_temp(const std::string& name, const std::string& text) {
  const fs::path p = fs::temp_directory_path() / ("ac_bench_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(p) << text;
  g_temp.paths.push_back(p);
  return p.string();
}

}  // namespace

TEST_CASE("bench.json round trip", "[bench]") {
  BenchRun r = run_of({row("fused-hopper", 1.25), row("fused", 2.5)});
  r.rows[0].peers["fa2"] = 350;
  r.rows[0].peers["cudnn"] = 650;
  const BenchRun back = read_bench_file(write_temp("rt.json", bench_to_json_text(r)));
  CHECK(back.device == "NVIDIA H200");
  CHECK(back.gemm_tflops == 700);
  REQUIRE(back.rows.size() == 2);
  CHECK(back.rows[0].id() == "attention/fused-hopper/T=8192 h=32/8 d=128/fp16/causal/128x128");
  CHECK(back.rows[0].ms == 1.25);
  CHECK(back.rows[0].peers.at("cudnn") == 650);
  CHECK(back.rows[1].peers.empty());
}

TEST_CASE("bench.json: malformed files are refused, naming the problem", "[bench]") {
  CHECK_THROWS_WITH(read_bench_file(write_temp("schema.json", R"({"schema": "attncheck-report"})")),
                    Catch::Contains("not an attncheck bench.json"));
  BenchRun r = run_of({row("fused", 1.0)});
  std::string text = bench_to_json_text(r);
  const std::string neg = std::string(text).replace(text.find("\"ms\": 1.0"), 9, "\"ms\": -1.0");
  CHECK_THROWS_WITH(read_bench_file(write_temp("neg.json", neg)),
                    Catch::Contains("ms must be a positive number"));
  BenchRun twice = run_of({row("fused", 1.0), row("fused", 2.0)});
  CHECK_THROWS_WITH(read_bench_file(write_temp("dup.json", bench_to_json_text(twice))),
                    Catch::Contains("appears twice"));
  CHECK_THROWS_WITH(read_bench_file("/nonexistent/bench.json"), Catch::Contains("/nonexistent/bench.json"));
  // A ceiling is a finite rate of 0 or more (0: not measured). "-inf" is a number to the JSON
  // reader, but no ceiling, and it would not survive being written back (the fuzzer's find).
  const size_t at = text.find("\"gemm_tflops\": ");
  REQUIRE(at != std::string::npos);
  const std::string inf = std::string(text).insert(at + 15, "\"-inf\", \"was\": ");
  CHECK_THROWS_WITH(read_bench_file(write_temp("inf.json", inf)),
                    Catch::Contains("gemm_tflops must be a finite number, 0 or more"));
}

TEST_CASE("the speed gate: slower than the tolerance fails, faster or within passes", "[bench]") {
  const BenchRun base = run_of({row("a", 1.00), row("b", 1.00), row("c", 1.00), row("gone", 1.0)});
  // a: 1.06 ms is +6% (over 5%); b: 1.04 ms is +4% (within); c: 0.5 ms is faster.
  const BenchRun now = run_of({row("a", 1.06), row("b", 1.04), row("c", 0.5), row("new", 9.0)});
  const BenchComparison c = compare_bench(base, now, 0.05);
  CHECK(c.compared == 3);
  REQUIRE(c.regressions.size() == 1);
  CHECK_THAT(c.regressions[0], Catch::StartsWith("attention/a/") && Catch::Contains("+6.0%"));
  REQUIRE(c.missing.size() == 1);
  CHECK_THAT(c.missing[0], Catch::StartsWith("attention/gone/"));
  CHECK(compare_bench(base, now, 0.10).regressions.empty());  // +6% is within 10%
  CHECK_THROWS_WITH(compare_bench(base, run_of({row("a", 1.0)}, "NVIDIA H100"), 0.05),
                    Catch::Contains("different devices"));
  CHECK_THROWS_WITH(compare_bench(base, now, -0.1), Catch::Contains("--tolerance"));
}

TEST_CASE("the peers' script: the build tree's, else the working directory's, else a reason", "[bench]") {
  const fs::path dir = fs::temp_directory_path() / ("ac-peers-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "kernels/bench");
  const fs::path was = fs::current_path();
  fs::current_path(dir);
  std::string why;
  // Neither: no path, and one line naming both places.
  CHECK(find_peers_script("/nonexistent/kernels/bench/peers.py", why).empty());
  CHECK_THAT(why, Catch::Contains("/nonexistent/kernels/bench/peers.py") &&
                      Catch::Contains("no ./kernels/bench/peers.py"));
  // A binary away from its tree, run in a checkout: the checkout's script, as an absolute path.
  std::ofstream(dir / "kernels/bench/peers.py") << "# peers\n";
  why.clear();
  CHECK(find_peers_script("/nonexistent/kernels/bench/peers.py", why) ==
        (dir / "kernels/bench/peers.py").string());
  CHECK(why.empty());
  // The build tree's script comes first where it exists.
  std::ofstream(dir / "built.py") << "# built\n";
  CHECK(find_peers_script((dir / "built.py").string(), why) == (dir / "built.py").string());
  fs::current_path(was);
  fs::remove_all(dir);
}
