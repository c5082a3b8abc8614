// libFuzzer target: the chunked-prefill scenario reader (validate_prefill_scenario, the parse that
// run_prefill_text does before touching a subject). Any text is either accepted or refused with
// PrefillScenarioError; nothing else escapes, nothing crashes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "attncheck/properties.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    attncheck::validate_prefill_scenario(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const attncheck::PrefillScenarioError&) {
  }
  return 0;
}
