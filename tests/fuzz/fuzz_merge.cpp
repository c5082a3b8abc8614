// libFuzzer target: `attncheck report merge` over two shard reports. The input is two report
// documents separated by the first NUL byte (JSON text never holds a raw NUL). Both are read as
// read_report_file reads them; when both parse, merge_reports either merges them or refuses with
// ReportError, and nothing else escapes or crashes. A merged report must be readable again.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "attncheck/json_fields.hpp"
#include "attncheck/report.hpp"

namespace {
bool parse(const std::string& text, attncheck::Report& out) {
  try {
    out = attncheck::report_from_json(
        attncheck::json_fields::parse_strict<attncheck::ReportError>(text, "report"));
    return true;
  } catch (const attncheck::ReportError&) {
    return false;
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const size_t cut = text.find('\0');
  if (cut == std::string::npos) return 0;
  std::vector<attncheck::Report> parts(2);
  if (!parse(text.substr(0, cut), parts[0]) || !parse(text.substr(cut + 1), parts[1])) return 0;
  attncheck::Report merged;
  try {
    merged = attncheck::merge_reports(parts);
  } catch (const attncheck::ReportError&) {
    return 0;
  }
  attncheck::Report again;
  if (!parse(attncheck::report_to_json(merged).dump(), again)) {
    std::fprintf(stderr, "a merged report cannot be read back\n");
    std::abort();
  }
  return 0;
}
