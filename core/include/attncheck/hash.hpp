// The one hashing header: splitmix64's finaliser and 64-bit FNV-1a. Seeds of case streams
// (seed.hpp), corpus file names and scenario streams are derived with these, so they must never
// change: a change would silently move every recorded seed and reproducer to other cases.
#pragma once
#include <cstdint>
#include <string_view>

namespace attncheck::hash {

// splitmix64's finaliser: a bijection on 64 bits with full avalanche.
// The golden-ratio increment of splitmix64's generator, also used as a multiplier to spread seeds.
constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ull;

constexpr uint64_t splitmix64(uint64_t x) {
  x += kGoldenGamma;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

constexpr uint64_t kFnv1a64Offset = 0xcbf29ce484222325ull;
// 1469598103934665603: FNV's offset basis with its last digit lost. Corpus file names and the
// second round of case_seed were hashed from it; every recorded name, seed and RapidCheck reproduce
// string depends on it, so it stays.
constexpr uint64_t kLegacyStart = 1469598103934665603ull;

// FNV-1a over the bytes of s, continuing from h: fnv1a64(b, fnv1a64(a)) hashes the concatenation.
constexpr uint64_t fnv1a64(std::string_view s, uint64_t h = kFnv1a64Offset) {
  for (char ch : s) {
    h ^= static_cast<unsigned char>(ch);
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace attncheck::hash
