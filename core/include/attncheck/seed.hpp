// The seed of a case stream: `attncheck check --seed S` draws the cases of property P against
// subject X from RapidCheck seeded with case_seed(S, P, X), and from nothing else, so the same
// arguments give the same cases. Shards split the plan, not the cases: a pair runs the same stream
// in whichever shard holds it. Reports, corpus files and reproduce commands record S, never the
// derived seed. The peer oracles' inputs come from peer_seed, likewise.
#pragma once
#include <cstdint>
#include <string_view>

#include "attncheck/hash.hpp"

namespace attncheck {

inline uint64_t case_seed(uint64_t run_seed, std::string_view property, std::string_view subject) {
  using hash::fnv1a64;
  using hash::splitmix64;
  // Two words of "shard 0 of 1" enter the hash: they were its shard arguments when shards drew
  // streams of their own, and every seed, corpus file and RapidCheck reproduce string recorded so
  // far was drawn through them, so they stay, as constants.
  constexpr uint64_t kShardWord = uint64_t(1) << 32;  // count 1 in the high half, index 0 in the low
  constexpr uint64_t kShardMix = splitmix64(1);       // splitmix64(index 0 * kGoldenGamma + count 1)
  uint64_t h = splitmix64(run_seed);
  h = splitmix64(h ^ kShardWord);
  h = splitmix64(h ^ fnv1a64(subject, fnv1a64(std::string_view("\0", 1), fnv1a64(property))));
  // A second round over property and subject, hashed from hash::kLegacyStart. It adds no
  // independence, but every recorded seed was drawn through it, start value included: dropping or
  // correcting it would move each of them.
  return splitmix64(h ^ kShardMix ^ fnv1a64(property, hash::kLegacyStart) ^
                    splitmix64(fnv1a64(subject, hash::kLegacyStart)));
}

// The seed of a peer oracle's std::mt19937_64 (peer_oracles.cpp): `attncheck mutants --seed S` draws
// the inputs of oracle O (its PeerOracle value) against a subject whose first operation is `op`
// from peer_seed(S, O, op). It leaves the subject's name out, so a mutant and its correct twin get
// the same inputs and their verdicts compare like for like.
inline uint64_t peer_seed(uint64_t run_seed, uint64_t oracle, uint32_t op) {
  return run_seed * hash::kGoldenGamma + oracle * 1000003u + op;
}

}  // namespace attncheck
