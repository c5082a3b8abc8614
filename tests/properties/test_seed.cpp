// case_seed gives the seeds that `attncheck check` drew every recorded case stream from. The
// expected values were computed outside this code base, by a Python transcription of the
// derivation with its shard arguments at 0 of 1 (what every run passed once shards split the plan
// instead of the cases); the same transcription gives the values case_seed gave when it still
// took those arguments. peer_seed's values are the same kind of transcription of its formula.
#include <catch2/catch.hpp>
#include <set>

#include "attncheck/seed.hpp"

using attncheck::case_seed;
using attncheck::peer_seed;

TEST_CASE("case_seed: the seeds recorded runs were drawn from", "[properties][seed]") {
  CHECK(case_seed(1, "accuracy", "merge") == 0x0118933c0aab266aull);
  CHECK(case_seed(42, "accuracy", "merge") == 0x2bfea63e6a87b233ull);
  CHECK(case_seed(2, "split_order_drift", "splitkv-packed") == 0x2d6ad4a7f0923d06ull);
  CHECK(case_seed(18446744073709551615ull, "run_to_run", "textbook-naive") == 0x416aff4ddeba56eeull);
  CHECK(case_seed(0, "", "") == 0x7b2d15569c3123d6ull);
  // The tiling report's stream: "tiling" in the property's place.
  CHECK(case_seed(3, "tiling", "fused") == 0xa0390dfd8943b3bcull);
}

TEST_CASE("case_seed: every argument moves the stream", "[properties][seed]") {
  const uint64_t base = case_seed(1, "accuracy", "merge");
  CHECK(case_seed(2, "accuracy", "merge") != base);
  CHECK(case_seed(1, "lse_convention", "merge") != base);
  CHECK(case_seed(1, "accuracy", "fused") != base);
  // The property / subject boundary is part of the hash.
  CHECK(case_seed(1, "ab", "c") != case_seed(1, "a", "bc"));
}

TEST_CASE("case_seed: the streams of a campaign are distinct", "[properties][seed]") {
  // Every (seed, property, subject) stream gets its own seed.
  const char* props[] = {"accuracy", "no_spurious_nonfinite", "empty_row", "merge_sentinels",
                         "split_equals_whole"};
  const char* subjects[] = {"merge", "merge-th", "fused", "splitkv", "textbook"};
  std::set<uint64_t> seen;
  size_t made = 0;
  for (uint64_t seed = 0; seed < 64; ++seed)
    for (const char* p : props)
      for (const char* s : subjects) {
        seen.insert(case_seed(seed, p, s));
        ++made;
      }
  CHECK(seen.size() == made);
}

TEST_CASE("peer_seed: the seeds the peer oracles' inputs were drawn from", "[properties][seed]") {
  CHECK(peer_seed(7, 0, 8) == 0x538454127b09649bull);  // vllm, split-KV
  CHECK(peer_seed(7, 2, 2) == 0x538454127b27e91bull);  // pytorch, softmax
  CHECK(peer_seed(18446744073709551615ull, 1, 4) == 0x61c8864680c4c632ull);
}
