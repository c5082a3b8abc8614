// Default budgets (the derivation is in budgets.hpp, the one place the numbers are explained).
#include "attncheck/budgets.hpp"

namespace attncheck {

Budget default_budget(uint32_t /*op*/, ac_dtype /*dtype*/) {
  // The same numbers for every op and dtype: the budgets are in ulps of the output format, and the
  // format-dependent parts (u_F, fp32 conditioning) are in the bound's formula, not the constants.
  return Budget{};
}

}  // namespace attncheck
