// libFuzzer target: the case file reader (case_from_json), the parser every corpus file and every
// `attncheck replay` argument goes through. The contract: any text either gives a Case or throws
// CaseError; nothing else escapes (the CLI would call it an internal error), nothing crashes.
// A case that parses must survive a write/read round trip unchanged: the writer and the reader
// agree on every field the reader accepted.
#include <cstddef>
#include <cstdint>
#include <string>

#include "attncheck/case.hpp"
#include "round_trip.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  attncheck::Case c;
  try {
    c = attncheck::case_from_json(text);
  } catch (const attncheck::CaseError&) {
    return 0;
  }
  attncheck::fuzz::require_round_trip<attncheck::CaseError>(
      c, [](const std::string& t) { return attncheck::case_from_json(t); },
      [](const attncheck::Case& x) { return attncheck::case_to_json(x); }, "case");
  return 0;
}
