// case_seed gives the seeds that `attncheck check` drew every recorded case stream from. The
// expected values were computed outside this code base, by a Python transcription of the two
// derivation steps the CLI and the runner used to apply one after the other (the first agrees with
// those two steps compiled from the earlier sources).
#include <catch2/catch.hpp>
#include <set>

#include "attncheck/seed.hpp"

TEST_CASE("case_seed: the seeds recorded runs were drawn from", "[properties][seed]") {
  CHECK(attncheck::case_seed(1, 0, 1, "accuracy", "merge") == 0x0118933c0aab266aull);
  CHECK(attncheck::case_seed(3, 2, 4, "split_equals_whole", "fused-log2") == 0xc5e28b9fa3bd9f36ull);
  CHECK(attncheck::case_seed(18446744073709551615ull, 7, 8, "lse_convention", "splitkv") ==
        0xe9ebf1915b187052ull);
}

TEST_CASE("case_seed: every argument moves the stream", "[properties][seed]") {
  const uint64_t base = attncheck::case_seed(1, 0, 2, "accuracy", "merge");
  CHECK(attncheck::case_seed(2, 0, 2, "accuracy", "merge") != base);
  CHECK(attncheck::case_seed(1, 1, 2, "accuracy", "merge") != base);
  CHECK(attncheck::case_seed(1, 0, 3, "accuracy", "merge") != base);
  CHECK(attncheck::case_seed(1, 0, 2, "lse_convention", "merge") != base);
  CHECK(attncheck::case_seed(1, 0, 2, "accuracy", "fused") != base);
  // The property / subject boundary is part of the hash.
  CHECK(attncheck::case_seed(1, 0, 1, "ab", "c") != attncheck::case_seed(1, 0, 1, "a", "bc"));
}

TEST_CASE("case_seed: the streams of a campaign are distinct", "[properties][seed]") {
  // Every (shard, property, subject) stream of shard counts 1..16 gets its own seed.
  const char* props[] = {"accuracy", "no_spurious_nonfinite", "empty_row", "merge_sentinels",
                         "split_equals_whole"};
  const char* subjects[] = {"merge", "merge-th", "fused", "splitkv", "textbook"};
  for (uint64_t seed : {uint64_t(1), uint64_t(42), uint64_t(0xffffffffffffffffull)}) {
    std::set<uint64_t> seen;
    size_t made = 0;
    for (int n = 1; n <= 16; ++n)
      for (int i = 0; i < n; ++i)
        for (const char* p : props)
          for (const char* s : subjects) {
            seen.insert(attncheck::case_seed(seed, i, n, p, s));
            ++made;
          }
    CHECK(seen.size() == made);
  }
}
