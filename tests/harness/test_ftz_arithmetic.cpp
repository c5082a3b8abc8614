// FTZ / DAZ arithmetic (AC_CAP_FTZ_ARITHMETIC) on a kernel: fused attention's host twin computing
// as a kernel built with flush-to-zero does (FusedOptions::arithmetic: subnormal inputs read as 0,
// every fp32 result below 2^-126 flushed, fused_twin.h), registered through the plugin ABI as a
// test-only subject (not a built-in: the gate's subjects are unchanged). Declared, it passes every
// property; the same kernel undeclared fails, and its failure names the declaration; a kernel that
// also truncates its fp32 results to 12 significant bits fails though it declares FTZ arithmetic.
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <string>

#include "attncheck/abi_subject.hpp"
#include "attncheck/properties.hpp"
#include "fused/fused.h"

using namespace attncheck;

namespace {

int run_twin(void* self, const ac_attention_args* args, char* err, size_t err_len) {
  return kern::fused_attention_host(*args, *static_cast<const kern::FusedOptions*>(self), err, err_len);
}

// fused's own declaration (natural LSE, empty row -inf), plus `flags`.
std::unique_ptr<Subject> twin_subject(const char* name, kern::FusedOptions& options, uint32_t flags) {
  ac_subject s{name,
               "fused attention host twin in FTZ / DAZ arithmetic",
               kern::fused_caps(false, 0, -1),
               nullptr,
               nullptr,
               run_twin,
               &options,
               nullptr};
  s.caps.flags = flags;
  return std::make_unique<AbiSubject>(s, "test");
}

// bf16 only: an fp16 input is a normal fp32 number and its products with P stay above 2^-126, so
// FTZ changes nothing there; bf16 shares fp32's exponent range and has subnormals of its own.
PropertyResult run(const std::string& property, Subject& s) {
  RunConfig cfg;
  cfg.seed = 12345;
  cfg.num_cases = 150;
  cfg.max_keys = 16;
  cfg.dtypes = {AC_DTYPE_BF16};
  cfg.shrink_seconds = 600;
  return run_property(property, s, cfg);
}

}  // namespace

TEST_CASE("an FTZ kernel passes every property when it declares FTZ arithmetic, and fails without",
          "[properties][ftz]") {
  kern::FusedOptions ftz;
  ftz.arithmetic.ftz = true;
  const auto declared = twin_subject("fused-ftz", ftz, AC_CAP_FTZ_ARITHMETIC);
  int passed = 0;
  for (const auto& p : all_properties()) {
    const PropertyResult r = run(p.name, *declared);
    INFO(p.name << ": " << status_name(r.status) << " " << r.failure_class << " " << r.message);
    CHECK((r.status == PropertyResult::Status::passed || r.status == PropertyResult::Status::not_applicable));
    if (r.status == PropertyResult::Status::passed) ++passed;
  }
  // accuracy, no_spurious_nonfinite, split_equals_whole, run_to_run, batch_invariance and
  // chunked_prefill (undeclared: reported), empty_row_contract, lse_convention, fp16_overflow;
  // merge_sentinels, split_order_drift and streamed_kv do not apply.
  CHECK(passed == 9);

  // The same kernel with the declaration removed: its flushed subnormals are over budget, and the
  // failure names the declaration. Declaring flushed outputs alone does not cover flushed inputs
  // and intermediates.
  for (const uint32_t flags : {0u, uint32_t(AC_CAP_FLUSHES_SUBNORMALS)}) {
    const auto undeclared = twin_subject("fused-ftz-undeclared", ftz, flags);
    const PropertyResult r = run("accuracy", *undeclared);
    INFO("flags " << flags << ": " << status_name(r.status) << " " << r.failure_class << " " << r.message);
    CHECK(r.status == PropertyResult::Status::failed);
    CHECK(r.failure_class == "accuracy");
    CHECK(r.message.find("declare ftz_arithmetic (AC_CAP_FTZ_ARITHMETIC)") != std::string::npos);
  }

  // The IEEE twin under the same declaration still passes: the declaration only widens budgets.
  kern::FusedOptions ieee;
  const auto ieee_declared = twin_subject("fused-ieee-declared", ieee, AC_CAP_FTZ_ARITHMETIC);
  CHECK(run("accuracy", *ieee_declared).status == PropertyResult::Status::passed);
}

TEST_CASE("a kernel that loses precision on normal numbers fails though it declares FTZ arithmetic",
          "[properties][ftz]") {
  kern::FusedOptions lossy;
  lossy.arithmetic.ftz = true;
  lossy.arithmetic.mantissa_bits = 12;
  const auto declared = twin_subject("fused-ftz-truncating", lossy, AC_CAP_FTZ_ARITHMETIC);
  const PropertyResult r = run("accuracy", *declared);
  INFO(status_name(r.status) << " " << r.failure_class << " " << r.message);
  CHECK(r.status == PropertyResult::Status::failed);
  CHECK(r.failure_class == "accuracy");
  // Its worst element is a normal number: no clause suggests a flush declaration.
  CHECK(r.message.find("declare") == std::string::npos);
  REQUIRE(!r.quoted.exact.empty());
  CHECK(std::fabs(std::stod(r.quoted.exact)) >= 0x1p-116);
}
