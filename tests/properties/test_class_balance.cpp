// Every failure class of the merge generator appears within a run's first 20 cases. RapidCheck
// gives case i of a 100-case run the size i, so the first 20 cases are generated at sizes 0..19;
// a class chosen by a size-scaled pick would be missing there (the ordinary LSE pair, for example,
// needs size 84 with gen::inRange(0, 12)). The classes are read back from the generated values.
#include <rapidcheck.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <set>
#include <string>

#include "attncheck/generators.hpp"
#include "attncheck/reference/format.hpp"

namespace {

// The class of one (prefix, suffix) LSE pair, from its values alone.
std::string lse_pair_class(float a, float b) {
  auto side = [](float x) { return std::isinf(x) ? (x > 0 ? "+inf" : "-inf") : "finite"; };
  const std::string sa = side(a), sb = side(b);
  if (sa != "finite" || sb != "finite") return sa + "/" + sb;
  if (a == b) return "equal";
  if (std::fabs(double(a) - double(b)) >= 103.0) return "gap past exp range";
  if (std::fmin(a, b) > 88.0f) return "exp(lse) overflows";
  return "ordinary";
}

// Whether some query row sees no key: a sequence without keys, a fully masked row, or a causal
// row above the bottom-right diagonal.
bool has_empty_row(const attncheck::AttentionInput& a) {
  int64_t m0 = 0;
  for (size_t s = 0; s < a.seqlens_q.size(); ++s) {
    const int64_t tq = a.seqlens_q[s], tk = a.seqlens_k[s];
    for (int64_t t = 0; t < tq; ++t) {
      int64_t visible = 0;
      for (int64_t j = 0; j < tk; ++j)
        if (!(a.causal && j > t + tk - tq) && (a.mask.empty() || a.mask[size_t(m0 + t * tk + j)])) ++visible;
      if (visible == 0) return true;
    }
    m0 += tq * tk;
  }
  return false;
}

}  // namespace

TEST_CASE("merge generator: every LSE pair class within the first 20 cases", "[properties][generators]") {
  attncheck::gen::Domain dom;
  dom.dtypes = {AC_DTYPE_F16, AC_DTYPE_BF16, AC_DTYPE_F32};
  dom.head_sizes = {1, 8};
  const std::set<std::string> want = {"+inf/finite",        "finite/+inf",        "+inf/+inf", "-inf/finite",
                                      "finite/-inf",        "-inf/-inf",          "+inf/-inf", "equal",
                                      "gap past exp range", "exp(lse) overflows", "ordinary"};
  for (uint64_t seed : {1u, 2u, 3u, 4u, 5u}) {
    std::set<std::string> seen;
    rc::Random random(seed);
    for (int size = 0; size < 20; ++size) {
      const attncheck::MergeInput m = attncheck::gen::merge_input(dom)(random.split(), size).value();
      for (size_t r = 0; r < m.prefix_lse.size(); ++r)
        seen.insert(lse_pair_class(m.prefix_lse[r], m.suffix_lse[r]));
    }
    for (const auto& c : want) {
      INFO("seed " << seed << ", class " << c);
      CHECK(seen.count(c) == 1);
    }
  }
}

TEST_CASE("attention generator: empty rows and the overflow band within the first 20 cases",
          "[properties][generators]") {
  attncheck::gen::Domain dom;
  dom.dtypes = {AC_DTYPE_F16};
  dom.head_sizes = {8};
  dom.features = AC_FEAT_CAUSAL | AC_FEAT_MASK | AC_FEAT_VARLEN | AC_FEAT_GQA;
  for (uint64_t seed : {1u, 2u, 3u}) {
    bool empty_row = false, near_threshold = false;
    rc::Random random(seed);
    for (int size = 0; size < 20; ++size) {
      const attncheck::AttentionInput a = attncheck::gen::attention_input(dom)(random.split(), size).value();
      empty_row |= has_empty_row(a);
      // The overflow band puts logits of 11.0859375 +- 8 steps of 2^-7 into K (q is one-hot there).
      for (uint32_t k : a.k) {
        const double v = attncheck::ref::decode(attncheck::ref::Format::fp16, k);
        near_threshold |= std::fabs(v - 11.0859375) <= 8 * 0.0078125;
      }
    }
    INFO("seed " << seed);
    CHECK(empty_row);
    CHECK(near_threshold);
  }
}
