// What `attncheck round`, `attncheck exact` and the self-check print. The CLI (harness/) wires
// these to the command line; a ReferenceError becomes a one-line message and exit status 2.
#pragma once
#include <string>

#include "attncheck/reference/exact.hpp"
#include "attncheck/reference/format.hpp"
#include "attncheck/reference/fp8.hpp"

namespace attncheck::ref {

// The correctly rounded value as hexfloat, its bit pattern and its exact decimal value.
std::string ask_round(Format to, const std::string& value);
// The same for a format's name: fp16, bf16, fp32, or an FP8 format (e4m3fn, e5m2, e4m3fnuz), whose
// code is printed for both overflow modes (saturate, nonfinite: reference/fp8.hpp).
std::string ask_round(const std::string& to, const std::string& value);
// what: "lse" or "softmax". Exact values to >= 30 significant digits (36 printed) and their correctly
// rounded fp16, bf16 and fp32 values (hexfloat and bits).
std::string ask_exact(const std::string& what, const std::string& logits_csv, LseBase base);
// Runs independent checks (rounding traps, fp16 exp thresholds, the eight-logit worked example, merge
// laws) and returns a report of what it verified; throws ReferenceError on any mismatch.
std::string self_check();

}  // namespace attncheck::ref
