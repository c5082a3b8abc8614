// libFuzzer target: a report or baseline document, read the way read_report_file reads one
// (strict JSON, then report_from_json; the file checks around it are exercised by the hostile-user
// test). Any text either gives a Report or throws ReportError; nothing else escapes, nothing
// crashes. A report that parses must give the same document when written and read again.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "attncheck/json_fields.hpp"
#include "attncheck/report.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  attncheck::Report r;
  try {
    r = attncheck::report_from_json(
        attncheck::json_fields::parse_strict<attncheck::ReportError>(text, "report"));
  } catch (const attncheck::ReportError&) {
    return 0;
  }
  const std::string once = attncheck::report_to_json(r).dump();
  std::string twice;
  try {
    twice = attncheck::report_to_json(
                attncheck::report_from_json(
                    attncheck::json_fields::parse_strict<attncheck::ReportError>(once, "report")))
                .dump();
  } catch (const attncheck::ReportError& e) {
    std::fprintf(stderr, "a report that parsed does not parse after writing it: %s\n", e.what());
    std::abort();
  }
  if (once != twice) {
    std::fprintf(stderr, "report write/read round trip changed the report\n");
    std::abort();
  }
  return 0;
}
