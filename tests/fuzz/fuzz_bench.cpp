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

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  attncheck::BenchRun r;
  try {
    r = attncheck::bench_from_json_text(text, "bench");
  } catch (const attncheck::BenchError&) {
    return 0;
  }
  const std::string once = attncheck::bench_to_json_text(r);
  std::string twice;
  try {
    twice = attncheck::bench_to_json_text(attncheck::bench_from_json_text(once, "bench"));
  } catch (const attncheck::BenchError& e) {
    std::fprintf(stderr, "a bench.json that parsed does not parse after writing it: %s\n", e.what());
    std::abort();
  }
  if (once != twice) {
    std::fprintf(stderr, "bench.json write/read round trip changed the run\n");
    std::abort();
  }
  if (!attncheck::compare_bench(r, r, 0).regressions.empty()) {
    std::fprintf(stderr, "a bench run is slower than itself\n");
    std::abort();
  }
  return 0;
}
