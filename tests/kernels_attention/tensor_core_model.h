// Hopper's FP8 tensor-core sum as measured on the kernel's wgmma (kernels_hopper_gpu
// "[truncated_sums]"; plugin_abi.h AC_FP8_TRUNCATED_SUMS, without the budget's bit of margin): L
// the largest exponent field among the addends (E_a + E_b for a product of nonzero e4m3fn codes,
// a subnormal at -6; ilogb(c) for the accumulator), each addend truncated toward zero to a
// multiple of 2^(L - 13), the result kept to 13 bits after its leading one, toward zero. An
// emulation for the tests: what a kernel with that accumulator computes, independent of the
// budget's bound on it (budgets.cpp truncated_sum_error).
#pragma once
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <vector>

#include "attncheck/budgets.hpp"

namespace attncheck::test {

constexpr int kE4m3MinExp = -6, kE4m3Frac = 3;  // e4m3fn: smallest normal 2^-6, 3 fraction bits

inline double tc_truncate_to(double x, double grid) { return std::trunc(x / grid) * grid; }
inline int tc_field(double x) { return std::max(std::ilogb(x), kE4m3MinExp); }
// One instruction: c plus the n <= 32 products a[i] b[i] of e4m3fn values.
inline double tc_instruction(double c, const double* a, const double* b, size_t n) {
  int L = c != 0 ? std::ilogb(c) : INT_MIN;
  for (size_t i = 0; i < n; ++i)
    if (a[i] != 0 && b[i] != 0) L = std::max(L, tc_field(a[i]) + tc_field(b[i]));
  if (L == INT_MIN) return 0;
  const double grid = std::ldexp(1.0, L - 13);
  double sum = tc_truncate_to(c, grid);
  for (size_t i = 0; i < n; ++i) sum += tc_truncate_to(a[i] * b[i], grid);
  return sum == 0 ? 0 : tc_truncate_to(sum, std::ldexp(1.0, std::ilogb(sum) - 13));
}
// sum_k a[k] b[k] in chains of `chain` products (a fresh accumulator each, added in fp32; the
// declared 128 by default, a.size() for one accumulator over the whole sum), 32 an instruction.
inline double tc_sum(const std::vector<double>& a, const std::vector<double>& b, size_t chain = 128) {
  float total = 0;
  for (size_t start = 0; start < a.size(); start += chain) {
    double c = 0;
    for (size_t i = start; i < std::min(a.size(), start + chain); i += 32)
      c = tc_instruction(c, a.data() + i, b.data() + i, std::min(a.size(), i + 32) - i);
    total += float(c);
  }
  return total;
}

// O's allowance (budgets.cpp attention_o_allowance) for one row of an FP8 forward with V = 1
// everywhere and descales 1, so O = 1: `keys` keys, d = 128, l = sum e^(s - max), P in e4m3fn with
// the offset 2^8, the sums on the tensor cores (AC_FP8_TRUNCATED_SUMS), O in bf16 (ulp 2^-7 at 1).
inline double v_one_fp8_row_allowance(double keys, double l) {
  AttentionRow r;
  r.dtype = AC_DTYPE_BF16;
  r.keys = keys;
  r.head_size = 128;
  r.sum_exp_scaled = l;
  r.fp8_kv = r.p_e4m3 = r.truncated_sums = true;
  r.v_min = 0x1p-6;  // e4m3fn's smallest normal, V's descale 1
  return attention_o_allowance(Budget{}, r, 0x1p-7, 1, 0, 1);
}

}  // namespace attncheck::test
