// The case streams that seeds select, pinned: a subject that digests every call it receives (the
// input's bits and shape and the options it was asked for) is checked by a property and by each
// peer oracle, and the digests must be the ones the code gave when they were recorded (split-KV's
// num_splits and fold order were then drawn separately by the generators and the peer oracles, and
// the peer oracles derived their own seed). A change to how a case, a split count or a seed is
// drawn moves a digest; a change to anything else does not.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "attncheck/hash.hpp"
#include "attncheck/peer_oracles.hpp"
#include "attncheck/properties.hpp"
#include "fakes.hpp"

using namespace attncheck;
using namespace fakes;

namespace {

// A correct fake that folds each call into one FNV-1a digest.
class Digesting final : public Fake {
 public:
  using Fake::Fake;
  uint64_t digest = hash::kFnv1a64Offset;

  MergeOutput merge(const MergeInput& in) override {
    add(int64_t(in.dtype), in.num_tokens, in.num_heads, in.head_size);
    add(in.prefix_out, in.suffix_out);
    add_floats(in.prefix_lse);
    add_floats(in.suffix_lse);
    return Fake::merge(in);
  }
  SoftmaxOutput softmax(const SoftmaxInput& in) override {
    add(int64_t(in.dtype), in.rows, in.cols);
    add(in.x);
    return Fake::softmax(in);
  }
  AttentionOutput attention(const AttentionInput& in, const AttentionOptions& opt) override {
    add(int64_t(in.dtype), in.num_heads, in.num_kv_heads, in.head_size, in.causal);
    add(opt.tiling, opt.num_splits, int64_t(opt.fold_order));
    for (int32_t n : in.seqlens_q) add(n);
    for (int32_t n : in.seqlens_k) add(n);
    add(in.q, in.k, in.v);
    uint32_t scale;
    std::memcpy(&scale, &in.softmax_scale, 4);
    add(scale);
    for (uint8_t m : in.mask) add(m);
    return Fake::attention(in, opt);
  }

 private:
  template <class... T>
  void add(const T&... values) {
    (add_one(values), ...);
  }
  void add_one(int64_t v) {
    digest = hash::fnv1a64(std::string_view(reinterpret_cast<const char*>(&v), sizeof v), digest);
  }
  void add_one(const Bits& b) {
    add_one(int64_t(b.size()));
    for (uint32_t e : b) add_one(int64_t(e));
  }
  void add_floats(const std::vector<float>& f) {
    add_one(int64_t(f.size()));
    for (float x : f) {
      uint32_t u;
      std::memcpy(&u, &x, 4);
      add_one(int64_t(u));
    }
  }
};

constexpr uint32_t kAttnFeatures = AC_FEAT_CAUSAL | AC_FEAT_MASK | AC_FEAT_VARLEN | AC_FEAT_GQA | AC_FEAT_LSE;

uint64_t property_digest(const std::string& property, uint32_t op) {
  Digesting s("digest", op, Bug::none, 0, -1, op == AC_OP_MERGE || op == AC_OP_SOFTMAX ? 0 : kAttnFeatures);
  RunConfig cfg;
  cfg.seed = 7;
  cfg.num_cases = 30;
  cfg.max_keys = 24;
  const PropertyResult r = run_property(property, s, cfg);
  INFO(property << ": " << status_name(r.status) << " " << r.message);
  CHECK(r.status == PropertyResult::Status::passed);
  return s.digest;
}

uint64_t peer_digest(PeerOracle o, uint32_t op) {
  Digesting s("digest", op, Bug::none, 0, -1, op == AC_OP_MERGE || op == AC_OP_SOFTMAX ? 0 : kAttnFeatures);
  const PeerResult r = run_peer_oracle(o, s, 7, 25);
  INFO(peer_oracle_name(o) << ": " << r.message);
  CHECK(r.applicable);
  CHECK_FALSE(r.killed);
  return s.digest;
}

}  // namespace

TEST_CASE("streams: the cases a property draws for seed 7", "[properties][seed]") {
  CHECK(property_digest("accuracy", AC_OP_SPLITKV) == 0xa7fbe4822926a868ull);
  CHECK(property_digest("accuracy", AC_OP_ATTENTION) == 0xd46ca8b08bbc9127ull);
  CHECK(property_digest("accuracy", AC_OP_MERGE) == 0x742cca3c855838ffull);
}

TEST_CASE("streams: the cases each peer oracle draws for seed 7", "[properties][seed]") {
  CHECK(peer_digest(PeerOracle::vllm, AC_OP_SPLITKV) == 0x4cace03a587d3b7cull);
  CHECK(peer_digest(PeerOracle::flashattn, AC_OP_SPLITKV) == 0xd0e5f5940d1b12d2ull);
  CHECK(peer_digest(PeerOracle::pytorch, AC_OP_SPLITKV) == 0x7e0a82300f4b244full);
  CHECK(peer_digest(PeerOracle::flashattn, AC_OP_ATTENTION) == 0x3f5d9b1236454000ull);
  CHECK(peer_digest(PeerOracle::vllm, AC_OP_MERGE) == 0x1419666c060691a8ull);
  CHECK(peer_digest(PeerOracle::pytorch, AC_OP_SOFTMAX) == 0x4780bd3b928e8043ull);
}
