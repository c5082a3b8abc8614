// libFuzzer target: the case file reader (case_from_json), the parser every corpus file and every
// `attncheck replay` argument goes through. The contract: any text either gives a Case or throws
// CaseError; nothing else escapes (the CLI would call it an internal error), nothing crashes.
// A case that parses must survive a write/read round trip unchanged: the writer and the reader
// agree on every field the reader accepted.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "attncheck/case.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  attncheck::Case c;
  try {
    c = attncheck::case_from_json(text);
  } catch (const attncheck::CaseError&) {
    return 0;
  }
  const std::string once = attncheck::case_to_json(c);
  std::string twice;
  try {
    twice = attncheck::case_to_json(attncheck::case_from_json(once));
  } catch (const attncheck::CaseError& e) {
    std::fprintf(stderr, "a case that parsed does not parse after writing it: %s\n", e.what());
    std::abort();
  }
  if (once != twice) {
    std::fprintf(stderr, "case write/read round trip changed the case\n");
    std::abort();
  }
  return 0;
}
