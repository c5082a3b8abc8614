// What every parser's fuzz target asks of a document that parsed: written, read back and written
// again, it gives the same text, and reading its own output never fails. A violation aborts,
// which libFuzzer reports with the input that caused it.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <string>

namespace attncheck::fuzz {

// `write` gives a document's text, `read` parses a text (throwing Error); `what` names the format.
template <class Error, class Value, class Read, class Write>
void require_round_trip(const Value& parsed, Read read, Write write, const char* what) {
  const std::string once = write(parsed);
  std::string twice;
  try {
    twice = write(read(once));
  } catch (const Error& e) {
    std::fprintf(stderr, "a %s that parsed does not parse after writing it: %s\n", what, e.what());
    std::abort();
  }
  if (once != twice) {
    std::fprintf(stderr, "%s write/read round trip changed it\n", what);
    std::abort();
  }
}

}  // namespace attncheck::fuzz
