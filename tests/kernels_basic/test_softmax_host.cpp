// Host twin of the row softmax (kernels/softmax) against the fp64 softmax of kb_support.hpp:
// naive / safe / online in fp32, fp16, bf16; the naive fp16 overflow band exactly at
// 11.0859375 / 11.09375; all -inf rows (zeros, LSE -inf); a late outlier (online rescale).
#include <catch2/catch.hpp>
#include <cstring>

#include "softmax_cases.hpp"

using namespace attncheck::kern;
using kb::DType;

namespace {
void run_host(const ac_softmax_args& a, SoftmaxVariant v, kb::Tensor&) {
  char err[256] = {0};
  REQUIRE(softmax_host(a, v, err, sizeof err) == AC_OK);
}
}  // namespace

TEST_CASE("softmax twin: every variant and dtype against fp64") { kb::check_softmax_suite(run_host, 7); }

TEST_CASE("softmax twin: naive overflows in fp16 at 11.09375 and not at 11.0859375") {
  kb::check_naive_overflow_band(run_host);
}

TEST_CASE("softmax twin: naive fp32 overflows past ln(FLT_MAX) = 88.72; safe does not") {
  for (float top : {88.5f, 89.0f}) {
    kb::Tensor x(DType::f32, 2), y(DType::f32, 2);
    x.set(0, top);
    x.set(1, 0.0f);
    char err[64];
    REQUIRE(softmax_host(kb::softmax_args(x, y, 1, 2, 2), SoftmaxVariant::naive, err, sizeof err) == AC_OK);
    REQUIRE(std::isnan(y.get(0)) == (top == 89.0f));
    REQUIRE(softmax_host(kb::softmax_args(x, y, 1, 2, 2), SoftmaxVariant::safe, err, sizeof err) == AC_OK);
    REQUIRE(y.get(0) == 1.0);
  }
}

TEST_CASE("softmax twin: LSE of a row, and -inf for an all -inf row") {
  const float x[3] = {1.0f, 2.0f, -INFINITY};
  float y[3];
  for (SoftmaxVariant v : {SoftmaxVariant::naive, SoftmaxVariant::safe, SoftmaxVariant::online}) {
    const double want = std::log(std::exp(1.0) + std::exp(2.0));
    REQUIRE(softmax_row_host(v, DType::f32, x, DType::f32, y, 3) == Approx(want).epsilon(1e-6));
    REQUIRE(y[2] == 0.0f);
    const float empty[2] = {-INFINITY, -INFINITY};
    REQUIRE(softmax_row_host(v, DType::f32, empty, DType::f32, y, 2) == -INFINITY);
    REQUIRE(y[0] == 0.0f);
    REQUIRE(y[1] == 0.0f);
  }
}

TEST_CASE("softmax twin: refusals and subjects") {
  kb::Tensor x(DType::f16, 8), y(DType::f16, 8);
  char err[256] = {0};
  ac_softmax_args a = kb::softmax_args(x, y, 2, 4, 3);
  REQUIRE(softmax_host(a, SoftmaxVariant::safe, err, sizeof err) == AC_ERR_UNSUPPORTED);
  REQUIRE(std::strstr(err, "row_stride") != nullptr);
  a = kb::softmax_args(x, y, 2, 4, 4);
  a.dtype = ac_dtype(9);
  REQUIRE(softmax_host(a, SoftmaxVariant::safe, err, sizeof err) == AC_ERR_UNSUPPORTED);
  REQUIRE(std::strstr(err, "dtype") != nullptr);
  std::vector<ac_subject> s;
  append_softmax_subjects(s, false);
  REQUIRE(s.size() == 3);
  REQUIRE(std::string(s[0].name) == "softmax-naive");
  REQUIRE((s[0].caps.features & AC_FEAT_NAIVE_EXP) != 0);
  REQUIRE(std::string(s[1].name) == "softmax-safe");
  REQUIRE((s[1].caps.features & AC_FEAT_NAIVE_EXP) == 0);
  REQUIRE(std::string(s[2].name) == "softmax-online");
}
