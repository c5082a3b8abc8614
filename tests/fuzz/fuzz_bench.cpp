// libFuzzer target: a bench.json (`attncheck bench --baseline` / `--compare`), read the way
// read_bench_file reads one. Any text either gives a BenchRun or throws BenchError; nothing else
// escapes, nothing crashes. A run that parses must give the same document when written and read
// again, and must compare with itself without a regression.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "attncheck/bench_report.hpp"
#include "round_trip.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  attncheck::BenchRun r;
  try {
    r = attncheck::bench_from_json_text(text, "bench");
  } catch (const attncheck::BenchError&) {
    return 0;
  }
  attncheck::fuzz::require_round_trip<attncheck::BenchError>(
      r, [](const std::string& t) { return attncheck::bench_from_json_text(t, "bench"); },
      [](const attncheck::BenchRun& x) { return attncheck::bench_to_json_text(x); }, "bench.json");
  if (!attncheck::compare_bench(r, r, 0).regressions.empty()) {
    std::fprintf(stderr, "a bench run is slower than itself\n");
    std::abort();
  }
  return 0;
}
