// The names table (core names.hpp) against the spellings harness/WORKER_PROTOCOL.md and
// corpus/README.md document, and the bit values of plugin_abi.h.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "attncheck/names.hpp"

using namespace attncheck;

TEST_CASE("names: features by bit, in the ABI's order", "[properties][names]") {
  CHECK(std::string(feature_name(1u)) == "causal");
  CHECK(std::string(feature_name(16u)) == "lse");
  CHECK(std::string(feature_name(32u)) == "naive_exp");
  CHECK(std::string(feature_name(64u)) == "scores_in_input_type");
  CHECK(std::string(feature_name(128u)) == "flushed_exp");
  CHECK(std::string(feature_name(3u)) == "unknown");  // two bits are no one feature
  CHECK(feature_from("gqa") == 8u);
  CHECK(feature_from("varlen") == 4u);
  CHECK_FALSE(feature_from("sliding_window"));
  CHECK_FALSE(feature_from("Causal"));
  CHECK(feature_names() == "causal, mask, varlen, gqa, lse, naive_exp, scores_in_input_type, flushed_exp");
  std::vector<uint32_t> bits;
  for (const auto& s : feature_spellings()) bits.push_back(s.value);
  CHECK(bits == std::vector<uint32_t>{1, 2, 4, 8, 16, 32, 64, 128});
}

TEST_CASE("names: the contract bits the worker protocol spells as boolean fields", "[properties][names]") {
  CHECK(std::string(flag_name(1u)) == "refuses_zero_keys");
  CHECK(std::string(flag_name(2u)) == "flushes_subnormals");
  CHECK(std::string(flag_name(4u)) == "unknown");  // empty_lse "undefined", not a boolean field
  CHECK(std::string(flag_name(8u)) == "nondeterministic");
  CHECK(std::string(flag_name(16u)) == "ftz_arithmetic");
  CHECK(std::string(flag_name(32u)) == "batch_invariant");
  CHECK(std::string(flag_name(64u)) == "empty_states_zero_o");
  std::vector<uint32_t> bits;
  for (const auto& s : flag_field_spellings()) bits.push_back(s.value);
  CHECK(bits == std::vector<uint32_t>{1, 2, 8, 16, 32, 64});
}

TEST_CASE("names: variants by bit, as worker protocol 4 spells them", "[properties][names]") {
  CHECK(std::string(variant_name(AC_VAR_PAGED_KV)) == "paged_kv");
  CHECK(std::string(variant_name(AC_VAR_HEAD_SIZE_V)) == "head_size_v");
  CHECK(std::string(variant_name(AC_VAR_SOFTCAP)) == "softcap");
  CHECK(std::string(variant_name(AC_VAR_WINDOW)) == "window");
  CHECK(std::string(variant_name(AC_VAR_SINKS)) == "sinks");
  CHECK(std::string(variant_name(3u)) == "unknown");  // two bits are no one variant
  CHECK(variant_from("sinks") == uint32_t(AC_VAR_SINKS));
  CHECK_FALSE(variant_from("sliding_window"));
  CHECK(variant_names() == "paged_kv, head_size_v, softcap, window, sinks, v_in_k");
  uint32_t all = 0;
  for (const auto& s : variant_spellings()) {
    CHECK(variant_from(variant_name(s.value)) == s.value);
    all |= s.value;
  }
  CHECK(all == uint32_t(AC_VAR_KNOWN_V3));
}

TEST_CASE("names: fold orders and the members of a fold_orders mask", "[properties][names]") {
  CHECK(fold_names() == "left, right, tree");
  CHECK(fold_from("tree") == AC_FOLD_TREE);
  CHECK_FALSE(fold_from("fold"));
  CHECK(folds_in(0).empty());
  CHECK(folds_in(1u << 2) == std::vector<ac_fold>{AC_FOLD_TREE});
  CHECK(folds_in((1u << 0) | (1u << 2)) == std::vector<ac_fold>{AC_FOLD_LEFT, AC_FOLD_TREE});
  CHECK(folds_in(7u) == std::vector<ac_fold>{AC_FOLD_LEFT, AC_FOLD_RIGHT, AC_FOLD_TREE});
  CHECK(folds_in(8u).empty());  // no fold order has that bit
}

TEST_CASE("names: every table reads back what it writes", "[properties][names]") {
  for (const auto& s : op_spellings()) CHECK(op_from(op_name(s.value)) == s.value);
  for (const auto& s : dtype_spellings()) CHECK(dtype_from(dtype_name(s.value)) == s.value);
  for (const auto& s : fold_spellings()) CHECK(fold_from(fold_name(s.value)) == s.value);
  for (const auto& s : feature_spellings()) CHECK(feature_from(feature_name(s.value)) == s.value);
  CHECK(op_names() == "merge, softmax, attention, splitkv, quantize");
  CHECK(dtype_names() == "fp32, fp16, bf16");
}
