// Working precision: one process-wide setting, applied to Boost's default on each thread that
// enters the reference (Boost 1.74 stores it process-wide, later Boost per thread).
#include "attncheck/reference/precision.hpp"

#include <mpfr.h>

#include <atomic>
#include <string>

#include "precision_internal.hpp"

namespace attncheck::ref {
namespace {

std::atomic<unsigned> g_bits{200};

// Boost counts in decimal digits and converts with digits10_2_2(d) = floor(1000 d / 301) + 1 or 2
// bits; choose the fewest digits that give at least `bits` bits.
unsigned digits10_for_bits(unsigned bits) {
  unsigned d = 1;
  while (boost::multiprecision::detail::digits10_2_2(d) < bits) ++d;
  return d;
}

// g_bits in Boost's digits and the bits those give, recomputed on a thread only when g_bits
// changes: the reference asks for them at every exact row, and the search above is 60 steps.
struct Digits {
  unsigned bits = 0, digits10 = 0, effective = 0;
};
const Digits& digits_now() {
  thread_local Digits c;
  if (const unsigned b = g_bits.load(); c.bits != b) {
    const unsigned d = digits10_for_bits(b);
    c = {b, d, static_cast<unsigned>(boost::multiprecision::detail::digits10_2_2(d))};
  }
  return c;
}

// Before main, so Reals built by hand (tests, tools) already carry the default.
const bool g_initialised = [] {
  Real::default_precision(digits10_for_bits(200));
  return true;
}();

// MPFR keeps per-thread caches (the constants log 2 and pi, mpfr_exp_2's table) that only
// mpfr_free_cache2 in the same thread frees. A thread that enters the reference frees its own as it
// ends, so the reference's worker threads leave nothing allocated behind them.
struct FreeMpfrCachesAtThreadExit {
  ~FreeMpfrCachesAtThreadExit() { mpfr_free_cache2(MPFR_FREE_LOCAL_CACHE); }
};

}  // namespace

void set_precision_bits(unsigned bits) {
  if (bits < 64)
    throw ReferenceError("too little precision: " + std::to_string(bits) +
                         " bits requested, the reference needs at least 64 (default 200)");
  g_bits.store(bits);
  apply_precision_on_this_thread();
}

unsigned precision_bits() { return g_bits.load(); }

unsigned precision_bits_effective() { return digits_now().effective; }

void apply_precision_on_this_thread() {
  (void)g_initialised;
  thread_local FreeMpfrCachesAtThreadExit free_caches;
  (void)free_caches;
  const unsigned d = digits_now().digits10;
  if (Real::default_precision() != d) Real::default_precision(d);
}

namespace detail {
mpfr_prec_t working_prec() {
  apply_precision_on_this_thread();
  return static_cast<mpfr_prec_t>(precision_bits_effective());
}
}  // namespace detail

}  // namespace attncheck::ref
