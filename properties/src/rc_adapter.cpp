// See rc_adapter.hpp for why this file uses rc::detail.
#include "rc_adapter.hpp"

#include <fcntl.h>
#include <rapidcheck.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <mutex>
#include <sstream>
#include <unordered_map>

// Declared in RapidCheck's sources (not its installed headers); exported by librapidcheck.a.
namespace rc::detail {
std::string reproduceMapToString(const std::unordered_map<std::string, Reproduce>& reproduceMap);
}

namespace attncheck::detail {

namespace {
// RapidCheck loads its global configuration on first use and prints it to stderr ("Using
// configuration: seed=<random>"). The runner passes every parameter explicitly, so that seed is
// never used and the line would only mislead: load the configuration once with stderr muted.
void load_configuration_quietly() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::fflush(stderr);
    std::cerr.flush();
    const int saved = ::dup(STDERR_FILENO);
    const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (saved < 0 || null < 0) {
      if (saved >= 0) ::close(saved);
      if (null >= 0) ::close(null);
      (void)rc::detail::configuration();
      return;
    }
    ::dup2(null, STDERR_FILENO);
    (void)rc::detail::configuration();
    std::cerr.flush();
    ::dup2(saved, STDERR_FILENO);
    ::close(saved);
    ::close(null);
  });
}
// RapidCheck's words for a discard or an error begin with the source line of the macro
// ("FILE:LINE:" then "RC_DISCARD(why)"): attncheck's own source, which no report shows. The
// reason the macro was given is what remains.
std::string without_source_lines(const std::string& description) {
  auto source_line = [](const std::string& line) {  // "FILE:LINE:"
    if (line.size() < 3 || line.back() != ':') return false;
    const size_t colon = line.rfind(':', line.size() - 2);
    return colon != std::string::npos && colon + 2 < line.size() &&
           line.find_first_not_of("0123456789", colon + 1) == line.size() - 1;
  };
  std::string out, line;
  std::istringstream in(description);
  while (std::getline(in, line)) {
    if (line.empty() || source_line(line) || line.rfind("RC_", 0) == 0) continue;
    out += (out.empty() ? "" : "; ") + line;
  }
  return out;
}

}  // namespace

RapidCheckResult check_with_rapidcheck(const std::function<void()>& property, const RapidCheckRun& run) {
  load_configuration_quietly();
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
    r.description = without_source_lines(gave.description);
  } else if (rc::detail::Error err; result.match(err)) {
    r.kind = RapidCheckResult::Kind::error;
    r.description = without_source_lines(err.description);
  }
  return r;
}

}  // namespace attncheck::detail
