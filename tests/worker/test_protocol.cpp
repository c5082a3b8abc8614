// The handshake's capability words: every built-in subject's ac_caps written as words and read
// back is the same ac_caps (the C structs of kernels/ are the independent source), and unknown
// words are refused with a message naming the field.
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "attncheck/abi_subject.hpp"
#include "process.hpp"
#include "protocol.hpp"

namespace ac = attncheck;
namespace w = attncheck::worker;

TEST_CASE("caps round-trip through the handshake words for every built-in subject", "[worker]") {
  const auto subjects = ac::load_builtin_subjects(ac::Backend::host, nullptr);
  REQUIRE(!subjects.empty());
  for (const auto& s : subjects) {
    INFO(s->name());
    const ac_caps& c = s->caps();
    const w::DeclaredSubject d = w::caps_from_json(w::caps_to_json(s->name(), s->description(), c));
    CHECK(d.name == s->name());
    CHECK(d.caps.ops == c.ops);
    CHECK(d.caps.dtypes == c.dtypes);
    CHECK(d.caps.memory == c.memory);
    CHECK(d.caps.lse_base == c.lse_base);
    CHECK(d.caps.lse_layout == c.lse_layout);
    CHECK(d.caps.empty_lse_sign == c.empty_lse_sign);
    CHECK(d.caps.flags == c.flags);
    CHECK(d.caps.features == c.features);
    CHECK(d.caps.max_splits == c.max_splits);
    CHECK(d.caps.fold_orders == c.fold_orders);
    CHECK(d.caps.num_tilings == c.num_tilings);
    for (int32_t i = 0; i < c.num_tilings; ++i) {
      CHECK(d.caps.tilings[i].br == c.tilings[i].br);
      CHECK(d.caps.tilings[i].bc == c.tilings[i].bc);
    }
    if (c.head_sizes) {
      REQUIRE(d.caps.num_head_sizes == c.num_head_sizes);
      for (int32_t i = 0; i < c.num_head_sizes; ++i) CHECK(d.caps.head_sizes[i] == c.head_sizes[i]);
    } else {
      CHECK(d.caps.head_sizes == nullptr);
      CHECK(d.caps.head_size_min == c.head_size_min);
      CHECK(d.caps.head_size_max == c.head_size_max);
    }
  }
}

TEST_CASE("unknown handshake words are refused, naming the field", "[worker]") {
  auto j = w::caps_to_json("x", "",
                           ac_caps{AC_OP_MERGE,
                                   AC_DTYPE_BIT(AC_DTYPE_F32),
                                   AC_MEMORY_HOST,
                                   1,
                                   8,
                                   nullptr,
                                   0,
                                   0,
                                   AC_LSE_HEADS_TOKENS,
                                   -1,
                                   0,
                                   nullptr,
                                   0,
                                   0,
                                   0,
                                   0,
                                   0,
                                   nullptr,
                                   0,
                                   nullptr,
                                   0,
                                   0,
                                   0});
  CHECK_NOTHROW(w::caps_from_json(j));
  auto bad = j;
  bad["features"] = {"causal", "sliding_window"};
  CHECK_THROWS_WITH(w::caps_from_json(bad), Catch::Contains("unknown word 'sliding_window' in 'features'"));
  bad = j;
  bad["lse_layout"] = "bhs";
  CHECK_THROWS_WITH(w::caps_from_json(bad), Catch::Contains("'lse_layout' must be"));
  bad = j;
  bad.erase("ops");
  CHECK_THROWS_WITH(w::caps_from_json(bad), Catch::Contains("missing field 'ops'"));
}

// The words every set field is written with, in order, as harness/WORKER_PROTOCOL.md lists them and
// the Python SDK declares them (python/attncheck/_caps.py): a subject with every bit set.
TEST_CASE("the handshake's words are the protocol document's, in its order", "[worker]") {
  ac_caps c{};
  c.ops = AC_OP_MERGE | AC_OP_SOFTMAX | AC_OP_ATTENTION | AC_OP_SPLITKV;
  c.dtypes = AC_DTYPE_BIT(AC_DTYPE_F32) | AC_DTYPE_BIT(AC_DTYPE_F16) | AC_DTYPE_BIT(AC_DTYPE_BF16);
  c.head_size_min = 1;
  c.head_size_max = 8;
  c.empty_lse_sign = -1;
  c.features = 0xffu;
  c.max_splits = 4;
  c.fold_orders = AC_FOLD_BIT(AC_FOLD_LEFT) | AC_FOLD_BIT(AC_FOLD_RIGHT) | AC_FOLD_BIT(AC_FOLD_TREE);
  const auto j = w::caps_to_json("x", "", c);
  using L = std::vector<std::string>;
  CHECK(j["ops"].get<L>() == L{"merge", "softmax", "attention", "splitkv"});
  CHECK(j["dtypes"].get<L>() == L{"fp32", "fp16", "bf16"});
  CHECK(j["features"].get<L>() ==
        L{"causal", "mask", "varlen", "gqa", "lse", "naive_exp", "scores_in_input_type", "flushed_exp"});
  CHECK(j["fold_orders"].get<L>() == L{"left", "right", "tree"});
  // One bit alone is its one word.
  c.features = AC_FEAT_FLUSHED_EXP;
  c.fold_orders = AC_FOLD_BIT(AC_FOLD_TREE);
  c.dtypes = AC_DTYPE_BIT(AC_DTYPE_BF16);
  const auto one = w::caps_to_json("x", "", c);
  CHECK(one["features"].get<L>() == L{"flushed_exp"});
  CHECK(one["fold_orders"].get<L>() == L{"tree"});
  CHECK(one["dtypes"].get<L>() == L{"bf16"});
  // A refusal lists the known words of its field.
  auto bad = j;
  bad["fold_orders"] = {"left", "middle"};
  CHECK_THROWS_WITH(w::caps_from_json(bad),
                    Catch::Contains("unknown word 'middle' in 'fold_orders' (known: left, right, tree)"));
  bad = j;
  bad["dtypes"] = {"fp8"};
  CHECK_THROWS_WITH(w::caps_from_json(bad), Catch::Contains("(known: fp32, fp16, bf16)"));
}

TEST_CASE("protocol 2 subject fields: read from version-2 replies, refused in version-1 ones", "[worker]") {
  auto j =
      w::caps_to_json("x", "",
                      ac_caps{AC_OP_ATTENTION,
                              AC_DTYPE_BIT(AC_DTYPE_F16),
                              AC_MEMORY_HOST,
                              1,
                              8,
                              nullptr,
                              0,
                              0,
                              AC_LSE_HEADS_TOKENS,
                              0,
                              AC_FEAT_LSE,
                              nullptr,
                              0,
                              0,
                              0,
                              AC_CAP_REFUSES_ZERO_KEYS | AC_CAP_FLUSHES_SUBNORMALS |
                                  AC_CAP_EMPTY_LSE_UNDEFINED | AC_CAP_NONDETERMINISTIC |
                                  AC_CAP_FTZ_ARITHMETIC | AC_CAP_BATCH_INVARIANT | AC_CAP_EMPTY_STATES_ZERO_O,
                              0,
                              nullptr,
                              0,
                              nullptr,
                              0,
                              0,
                              0});
  CHECK(j["refuses_zero_keys"] == true);
  CHECK(j["flushes_subnormals"] == true);
  CHECK(j["nondeterministic"] == true);
  CHECK(j["ftz_arithmetic"] == true);
  CHECK(j["batch_invariant"] == true);
  CHECK(j["empty_states_zero_o"] == true);
  CHECK(j["empty_lse"] == "undefined");
  CHECK(j["tilings"].empty());
  const w::DeclaredSubject d = w::caps_from_json(j, 2);
  CHECK(d.caps.flags == (AC_CAP_REFUSES_ZERO_KEYS | AC_CAP_FLUSHES_SUBNORMALS | AC_CAP_EMPTY_LSE_UNDEFINED |
                         AC_CAP_NONDETERMINISTIC | AC_CAP_FTZ_ARITHMETIC | AC_CAP_BATCH_INVARIANT |
                         AC_CAP_EMPTY_STATES_ZERO_O));
  CHECK(d.caps.empty_lse_sign == 0);
  CHECK(d.caps.num_tilings == 0);
  // A version-1 reply cannot carry them: refused, naming the field and the version.
  CHECK_THROWS_WITH(w::caps_from_json(j, 1), Catch::Contains("needs protocol 2"));
  auto v1 = j;
  v1.erase("refuses_zero_keys");
  v1.erase("flushes_subnormals");
  v1.erase("nondeterministic");
  v1.erase("ftz_arithmetic");
  v1.erase("batch_invariant");
  v1.erase("empty_states_zero_o");
  CHECK_THROWS_WITH(w::caps_from_json(v1, 1), Catch::Contains("'empty_lse' \"undefined\" needs protocol 2"));
  v1["empty_lse"] = "+inf";
  const w::DeclaredSubject d1 = w::caps_from_json(v1, 1);
  CHECK(d1.caps.flags == 0u);
  CHECK(d1.caps.empty_lse_sign == 1);
  auto bad = j;
  bad["refuses_zero_keys"] = "yes";
  CHECK_THROWS_WITH(w::caps_from_json(bad, 2), Catch::Contains("'refuses_zero_keys' must be true or false"));
  bad = j;
  bad["nondeterministic"] = 1;
  CHECK_THROWS_WITH(w::caps_from_json(bad, 2), Catch::Contains("'nondeterministic' must be true or false"));
  // A reply that predates ftz_arithmetic (protocol 2 without the field) declares no FTZ arithmetic.
  bad = j;
  bad.erase("ftz_arithmetic");
  CHECK(w::caps_from_json(bad, 2).caps.flags == (d.caps.flags & ~uint32_t(AC_CAP_FTZ_ARITHMETIC)));
  bad = j;
  bad["ftz_arithmetic"] = "on";
  CHECK_THROWS_WITH(w::caps_from_json(bad, 2), Catch::Contains("'ftz_arithmetic' must be true or false"));
  // Likewise empty_states_zero_o: left out, a merge relies on no zero O.
  bad = j;
  bad.erase("empty_states_zero_o");
  CHECK(w::caps_from_json(bad, 2).caps.flags == (d.caps.flags & ~uint32_t(AC_CAP_EMPTY_STATES_ZERO_O)));
  bad["empty_states_zero_o"] = "yes";
  CHECK_THROWS_WITH(w::caps_from_json(bad, 2),
                    Catch::Contains("'empty_states_zero_o' must be true or false"));
  // Declared alone, it is read back alone.
  auto merge = w::caps_to_json("m", "",
                               ac_caps{AC_OP_MERGE,
                                       AC_DTYPE_BIT(AC_DTYPE_F16),
                                       AC_MEMORY_HOST,
                                       1,
                                       8,
                                       nullptr,
                                       0,
                                       0,
                                       AC_LSE_HEADS_TOKENS,
                                       -1,
                                       0,
                                       nullptr,
                                       0,
                                       0,
                                       0,
                                       AC_CAP_EMPTY_STATES_ZERO_O,
                                       0,
                                       nullptr,
                                       0,
                                       nullptr,
                                       0,
                                       0,
                                       0});
  CHECK(merge["empty_states_zero_o"] == true);
  CHECK(merge["batch_invariant"] == false);
  CHECK(w::caps_from_json(merge, 3).caps.flags == AC_CAP_EMPTY_STATES_ZERO_O);
}

TEST_CASE("the arena layout aligns and never overlaps", "[worker]") {
  w::Layout L;
  const auto a = L.add("fp16", {3, 5});
  const auto b = L.add("fp32", {2});
  CHECK(a.offset == 0);
  CHECK(a.bytes == 30);
  CHECK(a.strides == std::vector<int64_t>{5, 1});
  CHECK(b.offset == w::kArenaAlign);
  CHECK(L.size() == 2 * w::kArenaAlign);
}

// The arena is shared with the worker: a worker truncating it under the harness's mapping made the
// harness's next read of it SIGBUS. Sealed, no one can shrink it; it still grows.
TEST_CASE("the arena cannot be shrunk by anyone holding its descriptor", "[worker]") {
  attncheck::worker::Arena arena;
  const size_t before = arena.size();
  REQUIRE(before > 0);
  CHECK(::ftruncate(arena.fd(), 0) != 0);
  CHECK(errno == EPERM);
  CHECK(::ftruncate(arena.fd(), off_t(before / 2)) != 0);
  // Nor can a further seal (F_SEAL_GROW) stop it from growing.
  CHECK(::fcntl(arena.fd(), F_ADD_SEALS, F_SEAL_GROW) != 0);
  CHECK(arena.intact());
  // A worker may grow the file past the harness's size; the harness then grows into it.
  REQUIRE(::ftruncate(arena.fd(), off_t(4 * before)) == 0);
  arena.reserve(2 * before);
  CHECK(arena.size() == 2 * before);
  CHECK(arena.intact());
  arena.data()[arena.size() - 1] = 1;
}
