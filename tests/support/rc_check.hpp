// Runs one RapidCheck property inside a Catch test case under an explicit budget (number of
// successful cases, maximum size, seed), whatever RC_PARAMS says, so that CI time and the cases
// drawn are fixed. A failing property fails the enclosing Catch case, with RapidCheck's message
// (including the shrunk counterexample) attached. No numerics here.
#pragma once
#include <rapidcheck.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <sstream>
#include <string>
#include <utility>

namespace attncheck::test {

struct PropertyBudget {
  int max_success;
  int max_size;
  uint64_t seed;
};

template <class Testable>
void check_property_under(const std::string& what, Testable&& t, const PropertyBudget& budget) {
  rc::detail::TestParams params;
  params.maxSuccess = budget.max_success;
  params.maxSize = budget.max_size;
  params.seed = budget.seed;
  const auto result =
      rc::detail::checkTestable(std::forward<Testable>(t), rc::detail::TestMetadata{}, params);
  std::ostringstream os;
  rc::detail::printResultMessage(result, os);
  INFO(what << ": " << os.str());
  CHECK(result.template is<rc::detail::SuccessResult>());
}

}  // namespace attncheck::test
