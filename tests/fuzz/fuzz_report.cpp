// libFuzzer target: a report or baseline document, read the way read_report_file reads one
// (strict JSON, then report_from_json; the file checks around it are exercised by the hostile-user
// test). Any text either gives a Report or throws ReportError; nothing else escapes, nothing
// crashes. A report that parses must give the same document when written and read again.
#include <cstddef>
#include <cstdint>
#include <string>

#include "attncheck/json_fields.hpp"
#include "attncheck/report.hpp"
#include "round_trip.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  attncheck::Report r;
  try {
    r = attncheck::report_from_json(
        attncheck::json_fields::parse_strict<attncheck::ReportError>(text, "report"));
  } catch (const attncheck::ReportError&) {
    return 0;
  }
  attncheck::fuzz::require_round_trip<attncheck::ReportError>(
      r,
      [](const std::string& t) {
        return attncheck::report_from_json(
            attncheck::json_fields::parse_strict<attncheck::ReportError>(t, "report"));
      },
      [](const attncheck::Report& x) { return attncheck::report_to_json(x).dump(); }, "report");
  return 0;
}
