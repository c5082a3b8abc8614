// AbiSubject staging through device memory (GPU only; exits 77 = skipped elsewhere): the built-in
// CUDA merge, reached through load_builtin_subjects(cuda), and the example plugin's CUDA subject.
// Hand-derived expectation: equal LSEs (0, 0) weigh both states 1/2 exactly (exp(0) = 1), so
// prefix 4 and suffix 8 merge to exactly 6 in every dtype, and the merged LSE is ln 2 (within an
// fp32 ulp). Distinct per-(token, head) LSE offsets check the [heads, tokens] layout round trip.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "attncheck/abi_subject.hpp"
#include "attncheck/plugin.hpp"

namespace {
float f32(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

void check_merge(attncheck::Subject& s) {
  INFO("subject " << s.name() << " backend " << s.backend());
  REQUIRE(s.backend() == "cuda");
  attncheck::MergeInput in;
  in.dtype = AC_DTYPE_F32;
  in.num_tokens = 3;
  in.num_heads = 2;
  in.head_size = 8;
  in.prefix_out.assign(48, bits(4.0f));
  in.suffix_out.assign(48, bits(8.0f));
  for (int t = 0; t < 3; ++t)
    for (int h = 0; h < 2; ++h) {
      const float offset = float(10 * t + h);  // both sides equal: weights stay 1/2
      in.prefix_lse.push_back(offset);
      in.suffix_lse.push_back(offset);
    }
  const attncheck::MergeOutput out = s.merge(in);
  for (uint32_t b : out.out) CHECK(f32(b) == 6.0f);
  REQUIRE(out.lse.size() == 6);
  for (int t = 0; t < 3; ++t)
    for (int h = 0; h < 2; ++h)
      CHECK(out.lse[size_t(t * 2 + h)] == Approx(10.0 * t + h + std::log(2.0)).epsilon(1e-6));
}
}  // namespace

TEST_CASE("built-in CUDA merge through device staging", "[gpu][abi_subject]") {
  auto subjects = attncheck::load_builtin_subjects(attncheck::Backend::cuda);
  bool found = false;
  for (auto& s : subjects)
    if (s->name() == "merge") {
      found = true;
      check_merge(*s);
    }
  CHECK(found);
}

TEST_CASE("example plugin's CUDA subject through device staging", "[gpu][plugin]") {
  // The build tree's plugin, or (binaries carried to another machine) AC_EXAMPLE_PLUGIN_PATH.
  const char* moved = std::getenv("AC_EXAMPLE_PLUGIN_PATH");
  attncheck::LoadedPlugin p = attncheck::load_plugin(moved ? moved : AC_EXAMPLE_PLUGIN);
  bool found = false;
  for (auto& s : p.subjects)
    if (s->name() == "example-merge-cuda") {
      found = true;
      check_merge(*s);
    }
  CHECK(found);
}
