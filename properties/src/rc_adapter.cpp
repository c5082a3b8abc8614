// See rc_adapter.hpp for why this file uses rc::detail.
#include "rc_adapter.hpp"

#include <rapidcheck.h>

#include <unordered_map>

// Declared in RapidCheck's sources (not its installed headers); exported by librapidcheck.a.
namespace rc::detail {
std::string reproduceMapToString(const std::unordered_map<std::string, Reproduce>& reproduceMap);
}

namespace attncheck::detail {

RapidCheckResult check_with_rapidcheck(const std::function<void()>& property, const RapidCheckRun& run) {
  rc::detail::TestParams params;
  params.seed = run.seed;
  params.maxSuccess = run.max_success;
  params.maxSize = run.max_size;
  params.maxDiscardRatio = 20;
  params.disableShrinking = !run.shrink;
  rc::detail::TestMetadata meta;
  meta.id = run.id;
  meta.description = run.id;
  // A silent listener: RapidCheck's default one prints an RC_PARAMS line at exit for every failure;
  // the runner reports the seed and reproduce string itself, per property and subject.
  struct Quiet : rc::detail::TestListener {
    void onTestCaseFinished(const rc::detail::CaseDescription&) override {}
    void onShrinkTried(const rc::detail::CaseDescription&, bool) override {}
    void onTestFinished(const rc::detail::TestMetadata&, const rc::detail::TestResult&) override {}
  } quiet;
  const rc::detail::TestResult result =
      rc::detail::checkProperty(rc::detail::toProperty([&property] { property(); }), meta, params, quiet);
  RapidCheckResult r;
  if (rc::detail::FailureResult failure; result.match(failure)) {
    r.kind = RapidCheckResult::Kind::failed;
    r.reproduce = rc::detail::reproduceMapToString({{meta.id, failure.reproduce}});
  } else if (rc::detail::GaveUpResult gave; result.match(gave)) {
    r.kind = RapidCheckResult::Kind::gave_up;
    r.description = gave.description;
  } else if (rc::detail::Error err; result.match(err)) {
    r.kind = RapidCheckResult::Kind::error;
    r.description = err.description;
  }
  return r;
}

}  // namespace attncheck::detail
