// Shards: `attncheck check --shard I/N` runs shard I (0-based) of N. Each (shard, property,
// subject) draws its cases from its own seed, derived from the run's seed by a 64-bit mix, so
// shards are deterministic (same seed and shard, same cases) and disjoint in practice (distinct
// 64-bit RapidCheck seeds; a collision among N shards has probability about N^2 / 2^65).
// Shard 0 of 1 is the plain run; its seeds differ from every shard of N > 1.
#pragma once
#include <cstdint>
#include <string>

namespace attncheck {

// splitmix64's finaliser: a bijection on 64 bits with full avalanche.
inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline uint64_t fnv1a64(const std::string& s, uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

inline uint64_t case_stream_seed(uint64_t seed, int shard_index, int shard_count, const std::string& property,
                                 const std::string& subject) {
  uint64_t h = mix64(seed);
  h = mix64(h ^ (uint64_t(uint32_t(shard_count)) << 32 | uint32_t(shard_index)));
  h = mix64(h ^ fnv1a64(property + '\0' + subject));
  return h;
}

}  // namespace attncheck
