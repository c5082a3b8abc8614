// The seed of a case stream: `attncheck check --seed S --shard I/N` draws the cases of property P
// against subject X from RapidCheck seeded with case_seed(S, I, N, P, X), and from nothing else.
// Each (shard, property, subject) gets its own deterministic stream (same arguments, same cases),
// disjoint in practice from the others (distinct 64-bit seeds; a collision among N shards has
// probability about N^2 / 2^65). Shard 0 of 1 is the plain run; its seeds differ from every shard
// of N > 1. Reports, corpus files and reproduce commands record S and I/N, never the derived seed.
#pragma once
#include <cstdint>
#include <string_view>

#include "attncheck/hash.hpp"

namespace attncheck {

inline uint64_t case_seed(uint64_t run_seed, int shard_index, int shard_count, std::string_view property,
                          std::string_view subject) {
  using hash::fnv1a64;
  using hash::splitmix64;
  const uint64_t shard = uint64_t(uint32_t(shard_count)) << 32 | uint32_t(shard_index);
  uint64_t h = splitmix64(run_seed);
  h = splitmix64(h ^ shard);
  h = splitmix64(h ^ fnv1a64(subject, fnv1a64(std::string_view("\0", 1), fnv1a64(property))));
  // A second round over shard, property and subject, hashed from hash::kLegacyStart. It adds no
  // independence, but every seed, corpus file and RapidCheck reproduce string recorded so far was
  // drawn through it, start value included: dropping or correcting it would move each of them.
  const uint64_t shard_mix = splitmix64(uint64_t(shard_index) * hash::kGoldenGamma + uint64_t(shard_count));
  return splitmix64(h ^ shard_mix ^ fnv1a64(property, hash::kLegacyStart) ^
                    splitmix64(fnv1a64(subject, hash::kLegacyStart)));
}

}  // namespace attncheck
