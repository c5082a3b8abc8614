// Peer oracles: the acceptance rules other projects' test suites use for these kernels, run
// against any Subject so the mutation self-test can show what each style of test misses. Each oracle is a
// pair (input style, acceptance rule):
//
//   vllm       inputs: standard normal outputs / logits / q, k, v; merge LSEs standard normal with
//              10% +inf on one side (never both, no -inf); T_q <= T_k. Rule: element-wise
//              |out - ref| <= atol + rtol |ref| against a same-precision reference (fp32 math,
//              rounded to the dtype), atol = rtol = 1e-3 (bf16: atol 1e-3, rtol 1e-2), LSEs too, for
//              merge and softmax; attention and split-KV: atol 2e-2, rtol 1e-2, O only (vLLM's
//              flash-attention tests; at 1e-3 a correct kernel fails against a reference that
//              rounds S to the dtype).
//   flashattn  inputs: standard normal; fp16 and bf16 only; attention also with T_q > T_k under
//              causal masking (rows with no visible key, expected O = 0); split-KV with
//              num_splits 1 and 3. Rule: max|out - ref64| <= 2 max|ref_lowp - ref64| + atol,
//              atol = FlashAttention-3's rounding-noise term 2 max|(ref + 0.3 - 0.3) - ref| in the
//              dtype. O only.
//   pytorch    inputs: standard normal; fp32, fp16, bf16; T_q <= T_k. Rule (test_transformers.py
//              get_tolerances, fudge 4): atol = 4 max(max|ref_lowp - ref64|, default_atol),
//              rtol = 4 max(max|ref_lowp - ref64| / |ref64|, default_rtol), then element-wise
//              |out - ref64| <= atol + rtol |ref64|; default atol 1e-5 / 1e-3 / 1e-3 and rtol
//              1.3e-6 / 1e-3 / 1.6e-2 for fp32 / fp16 / bf16. O only.
// The same-precision reference ref_lowp is what the peers' torch references compute: inputs in the
// dtype, matrix products accumulated in fp32 and rounded to the dtype (S for attention), softmax
// in fp32 rounded to the dtype, P V accumulated in fp32 and rounded; merge and softmax in fp32
// rounded once. ref64 is the same computation in double without intermediate rounding.
// A NaN in an output fails every rule (torch.testing.assert_close with equal_nan=False, and
// max() propagating NaN); infinities compare equal to themselves.
// Peers have no test of some operations (FlashAttention and PyTorch have no merge test): their
// rule is then applied to their input style anyway, and the README table says so.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attncheck/subject.hpp"

namespace attncheck {

enum class PeerOracle { vllm, flashattn, pytorch };
const char* peer_oracle_name(PeerOracle);                         // "vllm" | "flashattn" | "pytorch"
std::optional<PeerOracle> parse_peer_oracle(const std::string&);  // nullopt if unknown
const std::vector<PeerOracle>& all_peer_oracles();

struct PeerResult {
  std::string oracle, subject;
  bool applicable = true;  // false: the subject has no operation this oracle generates
  bool killed = false;     // some case failed the rule, or the subject failed while running
  int cases_run = 0;
  int cases_to_first_failure = -1;
  double seconds = 0, seconds_to_first_failure = -1;
  std::string message;  // the first failure, one line
};

// Runs `num_cases` random cases of the oracle's input style against the subject's operation
// (merge, softmax, attention or split-KV, the first the subject has), deterministic in `seed`,
// stopping at the first failure. Never throws for subject failures (a refusal skips the case; a
// device fault or internal error is a kill).
PeerResult run_peer_oracle(PeerOracle, Subject&, uint64_t seed, int num_cases);

}  // namespace attncheck
