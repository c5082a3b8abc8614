// Shard case streams: deterministic (same inputs, same seed) and disjoint (no two of the
// (shard, property, subject) streams of a campaign share a seed, across shard counts 1..16).
#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "attncheck/shard.hpp"

TEST_CASE("shard seeds are deterministic and disjoint", "[shard]") {
  const char* props[] = {"accuracy", "no_spurious_nonfinite", "empty_row", "merge_sentinels", "split_equals_whole"};
  const char* subjects[] = {"merge", "merge-th", "fused", "splitkv", "textbook"};
  for (uint64_t seed : {uint64_t(1), uint64_t(42), uint64_t(0xffffffffffffffffull)}) {
    std::set<uint64_t> seen;
    size_t made = 0;
    for (int n = 1; n <= 16; ++n)
      for (int i = 0; i < n; ++i)
        for (const char* p : props)
          for (const char* s : subjects) {
            const uint64_t a = attncheck::case_stream_seed(seed, i, n, p, s);
            CHECK(a == attncheck::case_stream_seed(seed, i, n, p, s));
            seen.insert(a);
            ++made;
          }
    CHECK(seen.size() == made);
  }
  // The property/subject split must not alias ("ab" + "c" vs "a" + "bc").
  CHECK(attncheck::case_stream_seed(1, 0, 1, "ab", "c") != attncheck::case_stream_seed(1, 0, 1, "a", "bc"));
}
