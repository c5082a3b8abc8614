// The one place that uses RapidCheck's rc::detail (its public API is rc::check, gen::* and
// Gen<T>). rc::check cannot do what the runner needs: it takes its seed from the RC_PARAMS
// environment of the whole process rather than per (shard, property, subject), prints an RC_PARAMS
// line for every failure to stdout, and returns neither the reproduce string nor a way to tell
// "gave up" (every case discarded: the property does not apply) from "passed". checkProperty with
// explicit TestParams and a silent listener does all of that; this file keeps that dependency on
// RapidCheck's internals in one place.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

namespace attncheck::detail {

struct RapidCheckRun {
  uint64_t seed = 0;
  int max_success = 100;  // cases to run
  int max_size = 100;     // RapidCheck's size cap
  bool shrink = true;
  std::string id;  // "<property>/<subject>": names the run in the reproduce string
};

struct RapidCheckResult {
  enum class Kind { passed, failed, gave_up, error };
  Kind kind = Kind::passed;
  std::string description;  // gave_up / error: RapidCheck's words
  std::string reproduce;    // failed: RapidCheck's reproduce string for RC_PARAMS="reproduce=..."
};

// Runs `property` (which uses *gen, RC_FAIL and RC_DISCARD) with RapidCheck: up to max_success
// cases, up to 20 discards per success, then shrinking of the first failure.
RapidCheckResult check_with_rapidcheck(const std::function<void()>& property, const RapidCheckRun&);

}  // namespace attncheck::detail
