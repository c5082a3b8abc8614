// Internal helpers for raw MPFR work in hot loops (no expression templates, no allocation per op).
#pragma once
#include <mpfr.h>

#include <bit>
#include <cstdint>
#include <limits>
#include <vector>

#include "attncheck/reference/precision.hpp"

namespace attncheck::ref::detail {

// x != 0 finite is an odd integer times 2^quantum_exponent(x).
constexpr int kNoQuantum = std::numeric_limits<int>::max();  // for 0: contributes nothing
inline int quantum_exponent(double x) {
  if (x == 0) return kNoQuantum;
  const auto bits = std::bit_cast<uint64_t>(x);
  const auto biased = static_cast<int>((bits >> 52) & 0x7ff);
  const uint64_t mant = bits & ((uint64_t{1} << 52) - 1);
  if (biased == 0) return -1074 + __builtin_ctzll(mant);               // subnormal double: mant 2^-1074
  return biased - 1075 + __builtin_ctzll(mant | (uint64_t{1} << 52));  // (2^52 + mant) 2^(biased - 1075)
}

// Applies the precision on this thread and returns the working precision in bits.
mpfr_prec_t working_prec();

// An mpfr_t owned by RAII (for temporaries reused across a loop).
class Mp {
 public:
  explicit Mp(mpfr_prec_t prec) { mpfr_init2(v_, prec); }
  ~Mp() { mpfr_clear(v_); }
  Mp(const Mp&) = delete;
  Mp& operator=(const Mp&) = delete;
  mpfr_ptr get() { return v_; }
  mpfr_srcptr get() const { return v_; }
  operator mpfr_ptr() { return v_; }
  operator mpfr_srcptr() const { return v_; }

 private:
  mpfr_t v_;
};

// A vector of mpfr_t of one precision whose significands live in one block (MPFR's custom
// allocation interface): no malloc per element, which matters for the K/V slices of long rows.
class MpVec {
 public:
  MpVec() = default;
  MpVec(size_t n, mpfr_prec_t prec) { resize(n, prec); }
  MpVec(const MpVec&) = delete;
  MpVec& operator=(const MpVec&) = delete;
  // Contents are zero after a resize.
  void resize(size_t n, mpfr_prec_t prec) {
    const size_t bytes = mpfr_custom_get_size(prec);
    const size_t limbs = (bytes + sizeof(mp_limb_t) - 1) / sizeof(mp_limb_t);
    limbs_.assign(n * limbs, 0);
    v_.resize(n);
    for (size_t i = 0; i < n; ++i)
      mpfr_custom_init_set(&v_[i], MPFR_ZERO_KIND, 0, prec, limbs_.data() + i * limbs);
  }
  size_t size() const { return v_.size(); }
  mpfr_ptr operator[](size_t i) { return &v_[i]; }
  mpfr_srcptr operator[](size_t i) const { return &v_[i]; }
  mpfr_ptr data() { return v_.data(); }

 private:
  std::vector<mp_limb_t> limbs_;
  std::vector<__mpfr_struct> v_;
};

inline Real from_mp(mpfr_srcptr x) {
  Real r;
  mpfr_set(r.backend().data(), x, MPFR_RNDN);
  return r;
}

}  // namespace attncheck::ref::detail
