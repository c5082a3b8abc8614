// Hopper's FP8 tensor-core sums for the tests, built on the measured instruction
// (fused_twin.h tc_instruction, which mutant 37's twin sums with): what a kernel with that
// accumulator computes, independent of the budget's bound on it (budgets.cpp truncated_sum_error).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "attncheck/budgets.hpp"
#include "fused/fused_twin.h"

namespace attncheck::test {

using kern::fused::kE4m3Frac;
using kern::fused::kE4m3MinExp;
using kern::fused::tc_instruction;

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
