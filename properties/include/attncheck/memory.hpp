// The peak-memory model: what a command will hold at its peak, estimated before any work from the
// shapes of its input, so that an input past the limit is refused (exit 2) instead of taking the
// machine's memory. Every figure is an upper bound of the resident set of attncheck's own process
// with the built-in subjects (a plugin's or a worker's own allocations are the plugin's); the
// derivation and the measurements it is checked against are in memory.cpp and
// tests/harness/memory_bounds.py.
#pragma once
#include <cstdint>
#include <string>

#include "attncheck/case.hpp"
#include "attncheck/properties.hpp"
#include "attncheck/subject.hpp"

namespace attncheck {

// The default limit: a CI runner's share of memory (GitHub's hosted runners have 7 to 16 GiB), or
// half of the machine's physical memory where that is more (a GPU host's gate runs many pairs at
// once, some over inputs of hundreds of MiB).
constexpr double kDefaultMaxMemoryGiB = 4;
double default_max_memory_gib();

// Reading a case file of `file_bytes` bytes: its text, the parsed tree and the decoded tensors.
double case_read_peak_bytes(uint64_t file_bytes);
// The decoded case as it stays in memory until its replay.
double case_resident_bytes(const Case&);
// Replaying the case (subject calls and judging), beyond its resident bytes and the process base.
double case_replay_bytes(const Case&);
// The process before any input: code, libraries, MPFR's caches.
double process_base_bytes();

// One attention subject call on a sequence of tq queries over tk keys (built-in subjects: the
// call's copies of q, k, v, the subject's staging and its own buffers, the outputs), beyond the
// caller's tensors.
double attention_call_bytes(int64_t tq, int64_t tk, int64_t heads, int64_t kv_heads, int64_t head_size);

// One (subject, property) pair of `check` in its own process: the largest case the property's
// generator can draw for the subject under the run's limits (gen::largest_attention_shapes and the
// others), checked with its judgements, outputs and shrink candidates, and the statistics'
// sketches, which do not grow with the cases.
double check_pair_peak_bytes(const Subject&, const PropertyInfo&, const RunConfig&);
// `tiling` (and check's tiling rows) over one subject: its cases held at once, one judgement, and
// the sketches of every (tiling, split count, fold order) row.
double tiling_peak_bytes(const Subject&, const RunConfig&);

// The one line of a refusal: "WHAT needs an estimated X GiB of memory, past the limit of Y GiB
// (--max-memory)".
std::string memory_refusal(const std::string& what, double estimate_bytes, double limit_gib);

}  // namespace attncheck
