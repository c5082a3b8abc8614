// Working precision of the exact reference.
//
// Every exact value here is a Boost.Multiprecision mpfr_float: MPFR with round-to-nearest, so each
// elementary operation (add, mul, fma, exp, log) is correctly rounded at the working precision.
// The precision is selectable (default 200 bits, at least 64); reference/README.md gives the error
// analysis that justifies 200 bits for rows of up to 2^20 keys.
//
// Threads: Boost 1.74 keeps mpfr_float's default precision (in decimal digits) in one process-wide
// atomic; newer Boost keeps it per thread. Every entry point of the reference re-applies the
// precision chosen here on the calling thread before it creates a number, so the setting holds on
// every thread whichever Boost is in use. Call set_precision_bits before starting worker threads.
#pragma once
#include <boost/multiprecision/mpfr.hpp>
#include <stdexcept>

namespace attncheck::ref {

using Real = boost::multiprecision::mpfr_float;  // variable precision, MPFR round-to-nearest

// One-line messages naming the problem; the CLI prints them and exits 2.
struct ReferenceError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Default 200. Throws ReferenceError ("too little precision ...") below 64 bits.
// Boost counts precision in decimal digits, so the numbers actually carry
// precision_bits_effective() >= precision_bits() bits (201 for 200).
void set_precision_bits(unsigned bits);
unsigned precision_bits();
unsigned precision_bits_effective();

// Applies the chosen precision to Real's default on the calling thread (cheap when already set).
// The reference's own entry points call it; call it yourself before building Reals by hand on a
// new thread.
void apply_precision_on_this_thread();

}  // namespace attncheck::ref
