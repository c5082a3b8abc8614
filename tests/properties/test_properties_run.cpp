// Every property against a correct fake subject (it must pass) and against the broken fake it
// exists to catch (it must fail, with the expected failure class): so each property can fail.
// Also: failures are shrunk to small counterexamples and written to the corpus; the reproduce
// string, seed and replay command are reported; non-determinism is its own finding; every failure
// replays with the numbers it quoted.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <thread>

#include "attncheck/budgets.hpp"
#include "attncheck/case_context.hpp"
#include "attncheck/generators.hpp"
#include "attncheck/properties.hpp"
#include "attncheck/reference/precision.hpp"
#include "fakes.hpp"

using namespace attncheck;
using fakes::Bug;
using fakes::Fake;
namespace fs = std::filesystem;

namespace {

// Shrinking's time bound far out of reach: the tests assert shrunk shapes, and a loaded machine
// must not cut a shrink short (at the default 20 s the layer test's case stayed at 256 tokens on a
// 2-core machine under load). The test's own timeout bounds the run.
RunConfig small_config(const std::string& corpus = "") {
  RunConfig cfg;
  cfg.seed = 12345;
  cfg.num_cases = 40;
  cfg.max_keys = 12;
  cfg.corpus_dir = corpus;
  cfg.shrink_seconds = 600;
  return cfg;
}

// Every failure a fake's run produces is replayed from the case it wrote, against the same fake: the
// replay fails with the same class and quotes the same element with the same numbers, and an
// err/budget above 1 beside ulp 0 comes only with a zero allowance that the message names. The CLI's
// failure sources are replayed by harness_replay_failures; these fakes are reachable only here.
void replay_each_failure(const PropertyResult& r, Subject& s) {
  if (r.status != PropertyResult::Status::failed) return;
  struct One {
    std::string file, cls, message;
    WorstElement quoted;
  };
  std::vector<One> all;
  if (!r.corpus_files.empty()) all.push_back({r.corpus_files[0], r.failure_class, r.message, r.quoted});
  for (const DistinctFailure& f : r.other_failures)
    all.push_back({f.corpus_file, f.failure_class, f.message, f.quoted});
  CHECK(all.size() == 1 + r.other_failures.size());
  for (size_t i = 0; i < all.size(); ++i) {
    const One& f = all[i];
    INFO("replay of failure " << i + 1 << " on " << s.name() << ": " << f.cls << " " << f.message);
    if (f.quoted.ratio > 1 && f.quoted.ulp == 0) {
      CHECK(f.quoted.allowed == 0);
      CHECK(f.message.find("the allowance is 0") != std::string::npos);
    }
    // Where a nondeterministic fake's launches differ is its own doing; a subject that refused
    // every case left a sample it refuses again, which judges nothing.
    if (f.cls == "nondeterministic" || f.cls == "refused_every_case") continue;
    REQUIRE(!f.file.empty());
    const ReplayResult rr = replay_case(read_case_file(f.file), s, f.file);
    CHECK_FALSE(rr.passed);
    CHECK(rr.failure_class == f.cls);
    if (i == 0 && !r.shrink_cut) CHECK(rr.message == f.message);
    if (f.quoted.where.empty()) continue;
    REQUIRE(!rr.worst_elements.empty());
    const WorstElement& w = rr.worst_elements.front();
    CHECK(w.where == f.quoted.where);
    CHECK(w.exact == f.quoted.exact);
    CHECK(w.output_bits == f.quoted.output_bits);
    // Bit for bit, NaN included: the same computation on the same case.
    for (auto [x, y] :
         {std::pair{w.ulp, f.quoted.ulp}, {w.cancel_ulp, f.quoted.cancel_ulp}, {w.ratio, f.quoted.ratio}})
      CHECK(std::memcmp(&x, &y, sizeof x) == 0);
  }
}

// Without a corpus of the test's own, the cases go to a scratch corpus, so that each failure can be
// replayed.
PropertyResult run(const std::string& prop, Subject& s, const std::string& corpus = "") {
  const fs::path scratch = fs::temp_directory_path() / ("ac_prop_replay_" + std::to_string(::getpid()));
  const PropertyResult r = run_property(prop, s, small_config(corpus.empty() ? scratch.string() : corpus));
  INFO(prop << " on " << s.name() << ": " << status_name(r.status) << " " << r.failure_class << " "
            << r.message);
  replay_each_failure(r, s);
  if (corpus.empty()) fs::remove_all(scratch);
  return r;
}

void expect_pass(const std::string& prop, Subject& s) {
  const PropertyResult r = run(prop, s);
  INFO(prop << " on " << s.name() << ": " << r.failure_class << " " << r.message << " cex "
            << r.counterexample_summary);
  CHECK(r.status == PropertyResult::Status::passed);
  CHECK(r.cases_run > 0);
}

void expect_fail(const std::string& prop, Subject& s, const std::string& cls) {
  const PropertyResult r = run(prop, s);
  INFO(prop << " on " << s.name() << ": " << status_name(r.status) << " " << r.failure_class << " "
            << r.message);
  CHECK(r.status == PropertyResult::Status::failed);
  CHECK(r.failure_class == cls);
  CHECK(!r.rc_reproduce.empty());
  CHECK(r.cases_to_first_failure >= 1);
}

}  // namespace

TEST_CASE("registry: seventeen named properties with seed sections", "[properties]") {
  CHECK(all_properties().size() == 17);
  for (const auto& p : all_properties()) {
    CHECK(!p.description.empty());
    CHECK(!p.seed_section.empty());
    CHECK(find_property(p.name) == &p);
  }
  CHECK(find_property("nope") == nullptr);
  Fake merge("m", AC_OP_MERGE);
  CHECK_THROWS_AS(run_property("nope", merge, small_config()), std::invalid_argument);
  CHECK(run_property("split_order_drift", merge, small_config()).status ==
        PropertyResult::Status::not_applicable);
}

TEST_CASE("merge properties: correct merge passes, each broken merge is caught", "[properties][merge]") {
  Fake good("merge-good", AC_OP_MERGE);
  for (const char* p : {"accuracy", "no_spurious_nonfinite", "merge_sentinels", "lse_convention"})
    expect_pass(p, good);
  Fake good2("merge-good-base2", AC_OP_MERGE, Bug::none, 2);
  expect_pass("accuracy", good2);
  expect_pass("lse_convention", good2);

  Fake no_guard("merge-no-guard", AC_OP_MERGE, Bug::merge_no_both_empty_guard);
  expect_fail("merge_sentinels", no_guard, "nonfinite");
  expect_fail("no_spurious_nonfinite", no_guard, "nonfinite");
  Fake no_map("merge-no-inf-map", AC_OP_MERGE, Bug::merge_no_inf_map);
  expect_fail("merge_sentinels", no_map, "nonfinite");
  Fake confused("merge-base-confused", AC_OP_MERGE, Bug::merge_base_confused, 2);
  expect_fail("lse_convention", confused, "lse_base");
  CHECK(run("accuracy", confused).status == PropertyResult::Status::failed);
}

// AC_CAP_EMPTY_STATES_ZERO_O. The engines' guard for two empty states copies the prefix O (or, with
// the weights e^0 a guarded max difference gives, averages both sides' O): right only when producers
// write O = 0 for empty states. Declared, the generators give every empty state O = 0 and such a
// merge passes; undeclared, empty states hold arbitrary O, which must not reach the output, and the
// failure names the declaration. Declared, nothing else is relaxed: the copying guard whose O is
// 1/16 too large where a state is visible still fails.
TEST_CASE("empty states with zero O: a guard relying on it passes declared, fails undeclared",
          "[properties][merge][abi2]") {
  for (Bug bug : {Bug::merge_guard_copies_prefix, Bug::merge_guard_averages}) {
    Fake declared("merge-guard-declared", AC_OP_MERGE, bug);
    declared.set_flags(AC_CAP_EMPTY_STATES_ZERO_O);
    for (const char* p : {"accuracy", "no_spurious_nonfinite", "merge_sentinels", "lse_convention"})
      expect_pass(p, declared);
    Fake undeclared("merge-guard", AC_OP_MERGE, bug);
    expect_fail("merge_sentinels", undeclared, "sentinel");
    const PropertyResult r = run("merge_sentinels", undeclared);
    CHECK(r.message.find("lies on a row of two empty states that hold a non-zero O") != std::string::npos);
    CHECK(r.message.find("declare empty_states_zero_o (AC_CAP_EMPTY_STATES_ZERO_O)") != std::string::npos);
    expect_fail("accuracy", undeclared, "empty_row");
  }
  Fake skewed("merge-guard-skewed", AC_OP_MERGE, Bug::merge_guard_copies_skewed);
  skewed.set_flags(AC_CAP_EMPTY_STATES_ZERO_O);
  const PropertyResult r = run("accuracy", skewed);
  CHECK(r.status == PropertyResult::Status::failed);
  CHECK(r.failure_class != "empty_row");
  CHECK(r.message.find("empty_states_zero_o") == std::string::npos);
}

// A case whose empty state holds a non-zero O (written for a subject without the declaration)
// replays on a declaring subject as not applicable, naming where and why; with zero O there it is
// judged as any case.
TEST_CASE("empty states with zero O: a case outside the contract is not applicable on replay",
          "[properties][merge][abi2]") {
  MergeInput m;
  m.dtype = AC_DTYPE_F32;
  m.num_tokens = 2;
  m.num_heads = 1;
  m.head_size = 2;
  m.prefix_lse = {0.5f, -INFINITY};
  m.suffix_lse = {INFINITY, -INFINITY};
  const uint32_t one = 0x3f800000u, two = 0x40000000u;
  m.prefix_out = {one, two, two, one};
  m.suffix_out = {0, 0, 0, one};
  Case c;
  c.op = "merge";
  c.property = "merge_sentinels";
  c.input = m;
  Fake declared("merge-guard-declared", AC_OP_MERGE, Bug::merge_guard_copies_prefix);
  declared.set_flags(AC_CAP_EMPTY_STATES_ZERO_O);
  const ReplayResult outside = replay_case(c, declared);
  CHECK_FALSE(outside.applicable);
  CHECK(outside.verdict.find("token 1, head 0 holds an empty state whose O is not zero") !=
        std::string::npos);
  CHECK(outside.verdict.find("declares empty_states_zero_o") != std::string::npos);
  Fake undeclared("merge-guard", AC_OP_MERGE, Bug::merge_guard_copies_prefix);
  const ReplayResult copied = replay_case(c, undeclared);
  CHECK(copied.applicable);
  CHECK_FALSE(copied.passed);
  CHECK(copied.failure_class == "sentinel");
  Fake good("merge-good", AC_OP_MERGE);
  CHECK(replay_case(c, good).passed);
  // The first row's +inf suffix is empty too: zeroing row 1 alone leaves the case outside.
  std::get<MergeInput>(c.input).prefix_out = {one, two, 0, 0};
  std::get<MergeInput>(c.input).suffix_out = {one, 0, 0, 0};
  CHECK(replay_case(c, declared).verdict.find("token 0, head 0 holds") != std::string::npos);
  std::get<MergeInput>(c.input).suffix_out = {0, 0, 0, 0};
  const ReplayResult inside = replay_case(c, declared);
  INFO(inside.verdict);
  CHECK(inside.applicable);
  CHECK(inside.passed);
}

TEST_CASE("shrinking: the both-empty merge shrinks to one token, one head; the case lands in the corpus",
          "[properties][shrink]") {
  const fs::path dir = fs::temp_directory_path() / ("ac_prop_corpus_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  Fake no_guard("merge-no-guard", AC_OP_MERGE, Bug::merge_no_both_empty_guard);
  const PropertyResult r = run("merge_sentinels", no_guard, dir.string());
  REQUIRE(r.status == PropertyResult::Status::failed);
  CHECK(r.counterexample_size.tokens == 1);
  CHECK(r.counterexample_size.heads == 1);
  // No check of the head size: it is drawn with gen::elementOf, which RapidCheck never shrinks, so
  // it is whatever the failing draw picked.
  REQUIRE(r.corpus_files.size() == 1);
  CHECK(r.reproduce_command == "attncheck replay " + r.corpus_files[0] + " --subject merge-no-guard");
  const Case c = read_case_file(r.corpus_files[0]);
  CHECK(c.rc_reproduce == r.rc_reproduce);
  CHECK(c.seed == 12345);
  const auto& m = std::get<MergeInput>(c.input);
  CHECK(std::isinf(m.prefix_lse[0]));
  CHECK(std::isinf(m.suffix_lse[0]));
  // The shrunk case replays: fails on the broken merge, passes on the guarded one.
  CHECK_FALSE(replay_case(c, no_guard).passed);
  Fake good("merge-good", AC_OP_MERGE);
  const ReplayResult ok = replay_case(c, good, r.corpus_files[0]);
  INFO(ok.verdict);
  CHECK(ok.passed);
  // No write-ahead or temporary files left behind.
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    ++files;
    CHECK(e.path().filename().string().rfind(".tmp", 0) != 0);
    CHECK(e.path().filename().string().rfind("inflight", 0) != 0);
  }
  CHECK(files == 1);
  fs::remove_all(dir);
}

TEST_CASE("softmax properties: safe passes, naive declared passes, naive undeclared is an overflow",
          "[properties][softmax]") {
  Fake safe("softmax-safe", AC_OP_SOFTMAX);
  for (const char* p : {"accuracy", "no_spurious_nonfinite", "empty_row_contract", "fp16_overflow"})
    expect_pass(p, safe);
  Fake naive("softmax-naive", AC_OP_SOFTMAX, Bug::softmax_naive_declared, 0, -1, AC_FEAT_NAIVE_EXP);
  for (const char* p : {"accuracy", "no_spurious_nonfinite", "fp16_overflow"}) expect_pass(p, naive);
  Fake undeclared("softmax-naive-undeclared", AC_OP_SOFTMAX, Bug::softmax_naive_undeclared);
  expect_fail("fp16_overflow", undeclared, "overflow");
  Fake empty_nan("softmax-empty-nan", AC_OP_SOFTMAX, Bug::softmax_empty_nan);
  expect_fail("empty_row_contract", empty_nan, "empty_row");
}

TEST_CASE("attention properties: correct passes every property; each bug is caught by its property",
          "[properties][attention]") {
  Fake good("attn-good", AC_OP_ATTENTION, Bug::none, 0, -1, fakes::kAttnFeatures);
  for (const auto& p : all_properties())
    if (property_applies(p, good)) expect_pass(p.name, good);
  Fake fa2("attn-fa2", AC_OP_ATTENTION, Bug::none, 0, +1, fakes::kAttnFeatures);
  expect_pass("empty_row_contract", fa2);
  expect_pass("split_equals_whole", fa2);
  Fake base2("attn-base2-declared", AC_OP_ATTENTION, Bug::none, 2, -1, fakes::kAttnFeatures);
  expect_pass("lse_convention", base2);
  expect_pass("split_equals_whole", base2);

  Fake sentinel("attn-wrong-sentinel", AC_OP_ATTENTION, Bug::attention_wrong_sentinel, 0, -1,
                fakes::kAttnFeatures);
  expect_fail("empty_row_contract", sentinel, "empty_row");
  Fake finite_mask("attn-finite-mask", AC_OP_ATTENTION, Bug::attention_finite_mask, 0, -1,
                   fakes::kAttnFeatures);
  expect_fail("empty_row_contract", finite_mask, "empty_row");
  Fake lse2("attn-lse-base2", AC_OP_ATTENTION, Bug::attention_lse_base2, 0, -1, fakes::kAttnFeatures);
  expect_fail("lse_convention", lse2, "lse_base");
  expect_fail("split_equals_whole", lse2, "split");
  Fake layout("attn-lse-layout", AC_OP_ATTENTION, Bug::attention_lse_layout, 0, -1, fakes::kAttnFeatures);
  expect_fail("lse_convention", layout, "lse_layout");
  Fake off("attn-off", AC_OP_ATTENTION, Bug::attention_off_by_one_o, 0, -1, fakes::kAttnFeatures);
  expect_fail("accuracy", off, "accuracy");
  Fake nondet("attn-nondet", AC_OP_ATTENTION, Bug::attention_off_by_one_o, 0, -1, fakes::kAttnFeatures);
  (void)nondet;
  Fake flaky("attn-flaky", AC_OP_ATTENTION, Bug::attention_nondeterministic, 0, -1, fakes::kAttnFeatures);
  // Flipping one bit is within budget, so it passes accuracy; run_to_run launches every case twice
  // and names the bits that moved.
  expect_pass("accuracy", flaky);
  expect_fail("run_to_run", flaky, "nondeterministic");
  expect_pass("run_to_run", good);
}

TEST_CASE("zero-key ranges: a declared refusal is never called with one and every property still runs",
          "[properties][abi2]") {
  fakes::NoZeroKeys declared("attn-nozero", AC_OP_ATTENTION, Bug::none, 0, -1, fakes::kAttnFeatures);
  declared.set_flags(AC_CAP_REFUSES_ZERO_KEYS);
  for (const auto& p : all_properties())
    if (property_applies(p, declared)) expect_pass(p.name, declared);
  CHECK(declared.calls > 0);
  CHECK(declared.zero_key_calls == 0);
  // The control: the same kernel undeclared is handed zero-key ranges and crashes.
  fakes::NoZeroKeys undeclared("attn-nozero-undeclared", AC_OP_ATTENTION, Bug::none, 0, -1,
                               fakes::kAttnFeatures);
  const PropertyResult r = run("split_equals_whole", undeclared);
  CHECK(r.status == PropertyResult::Status::crashed);
  CHECK(undeclared.zero_key_calls > 0);
  // Without a mask or causal masking such a subject has no way to an empty row.
  fakes::NoZeroKeys plain("attn-nozero-plain", AC_OP_ATTENTION, Bug::none, 0, -1, AC_FEAT_LSE);
  plain.set_flags(AC_CAP_REFUSES_ZERO_KEYS);
  CHECK_FALSE(property_applies(*find_property("empty_row_contract"), plain));
}

TEST_CASE("undefined empty-row LSE: a wrong sentinel passes, O is still held to 0", "[properties][abi2]") {
  Fake sentinel("attn-undefined-lse", AC_OP_ATTENTION, Bug::attention_wrong_sentinel, 0, -1,
                fakes::kAttnFeatures);
  sentinel.set_flags(AC_CAP_EMPTY_LSE_UNDEFINED);
  expect_pass("empty_row_contract", sentinel);
  expect_pass("lse_convention", sentinel);
  expect_pass("split_equals_whole", sentinel);
  Fake finite_mask("attn-undefined-finite-mask", AC_OP_ATTENTION, Bug::attention_finite_mask, 0, -1,
                   fakes::kAttnFeatures);
  finite_mask.set_flags(AC_CAP_EMPTY_LSE_UNDEFINED);
  expect_fail("empty_row_contract", finite_mask, "empty_row");
}

// Hand-derived: fp16's smallest normal is 2^-14; an fp16 value of 2^-20 is subnormal.
TEST_CASE("flushed subnormals: a zero where the exact value is subnormal, and nowhere else",
          "[properties][abi2]") {
  CHECK(flushed_zero_allowed(AC_DTYPE_F16, 0x1p-20, 0x1p-30, false));
  CHECK_FALSE(flushed_zero_allowed(AC_DTYPE_F16, 0x1p-20, 0x1p-30, true));  // -0 for a positive value
  CHECK(flushed_zero_allowed(AC_DTYPE_F16, -0x1p-20, 0x1p-30, true));
  CHECK(flushed_zero_allowed(AC_DTYPE_F16, -0x1p-20, 0x1p-30, false));       // +0 always may stand
  CHECK_FALSE(flushed_zero_allowed(AC_DTYPE_F16, 0x1p-13, 0x1p-30, false));  // normal, far from min
  // Just above the smallest normal, but a value within budget lies below it: that may be flushed.
  CHECK(flushed_zero_allowed(AC_DTYPE_F16, 0x1p-14 + 0x1p-24, 0x1p-23, false));
  CHECK_FALSE(flushed_zero_allowed(AC_DTYPE_F16, 0x1p-14 + 0x1p-22, 0x1p-23, false));
  CHECK(flushed_zero_allowed(AC_DTYPE_F32, 0x1p-130, 0.0, false));
  CHECK(flushed_zero_allowed(AC_DTYPE_BF16, 0x1p-127, 0.0, false));
  CHECK_FALSE(flushed_zero_allowed(AC_DTYPE_F32, 0x1p-125, 0.0, false));
  CHECK_FALSE(flushed_zero_allowed(AC_DTYPE_F32, INFINITY, 0.0, false));
}

TEST_CASE("split-KV: correct passes drift, +inf combine for empty rows is caught", "[properties][splitkv]") {
  Fake good("splitkv-good", AC_OP_SPLITKV, Bug::none, 0, -1, fakes::kAttnFeatures);
  for (const char* p : {"accuracy", "split_order_drift", "empty_row_contract", "split_equals_whole"})
    expect_pass(p, good);
  Fake inf_combine("splitkv-inf", AC_OP_SPLITKV, Bug::splitkv_empty_plus_inf, 0, -1, fakes::kAttnFeatures);
  expect_fail("empty_row_contract", inf_combine, "empty_row");
  Fake flaky("splitkv-flaky", AC_OP_SPLITKV, Bug::attention_nondeterministic, 0, -1, fakes::kAttnFeatures);
  expect_fail("split_order_drift", flaky, "nondeterministic");
  expect_fail("run_to_run", flaky, "nondeterministic");
  expect_pass("run_to_run", good);
}

namespace {

// The correct split-KV fake with bits flipped by configuration, in outputs that are not zero (a zero
// of an empty row, or of a row whose visible values are all zero, must stay exact): the last bit of
// O columns >= 1 under fold order right at num_splits >= 2, and the last bit of column 0 at
// num_splits = 3 under every fold order.
class FoldFlipper final : public Fake {
 public:
  using Fake::Fake;
  AttentionOutput attention(const AttentionInput& a, const AttentionOptions& opt) override {
    AttentionOutput out = Fake::attention(a, opt);
    const int64_t D = a.head_size;
    for (size_t row = 0; row < out.lse.size(); ++row) {
      if (!std::isfinite(out.lse[row])) continue;
      for (int64_t c = 0; c < D; ++c) {
        const bool flip =
            c == 0 ? opt.num_splits == 3 : opt.fold_order == AC_FOLD_RIGHT && opt.num_splits >= 2;
        uint32_t& bits = out.out[row * size_t(D) + size_t(c)];
        if (flip && fakes::dec(a.dtype, bits) != 0) bits ^= 1u;
      }
    }
    return out;
  }
};

}  // namespace

TEST_CASE("split_order_drift counts the bits that differ between fold orders and split counts",
          "[properties][splitkv]") {
  // Per case, every split count measures the same N outputs of O; F of them (the non-zero ones of
  // columns >= 1) differ under fold right from n >= 2 on, G (those of column 0) at n = 3. So
  //   fold orders at n:      differ 0 at n = 1, F at n = 2, 3, 4 (column 0 flips under every fold);
  //   n against n = 1:       differ F at n = 2 and 4, F + G at n = 3;
  // and one flip is the same difference wherever it is compared: the largest fold difference is one
  // value v at n = 2, 3, 4, the largest split difference v at n = 2 and 4, at least v at n = 3.
  FoldFlipper s("splitkv-flipper", AC_OP_SPLITKV, Bug::none, 0, -1, fakes::kAttnFeatures);
  const PropertyResult r = run("split_order_drift", s);
  INFO(r.failure_class << ": " << r.message);
  REQUIRE(r.status == PropertyResult::Status::passed);
  REQUIRE(r.drift_by_splits.size() == 4);
  const auto& d = r.drift_by_splits;
  const int64_t N = d[0].fold_outputs, F = d[1].fold_differ, G = d[2].splits_differ - F;
  CHECK(N > 0);
  CHECK(F > 0);
  CHECK(G > 0);
  CHECK(F + G <= N);
  for (int n = 1; n <= 4; ++n) {
    INFO("num_splits " << n);
    const DriftCounts& x = d[size_t(n - 1)];
    CHECK(x.num_splits == n);
    CHECK(x.fold_outputs == N);
    CHECK(x.splits_outputs == (n == 1 ? 0 : N));
    CHECK(x.fold_differ == (n == 1 ? 0 : F));
    CHECK(x.splits_differ == (n == 1 ? 0 : n == 3 ? F + G : F));
  }
  const double v = d[1].fold_max_ulp;
  // A last-bit flip is one ulp of the output's binade, at most ulp_F(S) since |O| <= S (twice that
  // where S rounds up to the next binade, twice again in the fast judgement's smaller unit).
  CHECK(v > 0);
  CHECK(v <= 4);
  CHECK(d[0].fold_max_ulp == 0);
  CHECK(d[0].splits_max_ulp == 0);
  CHECK(d[2].fold_max_ulp == v);
  CHECK(d[3].fold_max_ulp == v);
  CHECK(d[1].splits_max_ulp == v);
  CHECK(d[3].splits_max_ulp == v);
  CHECK(d[2].splits_max_ulp >= v);
  // Every split count together.
  const DriftCounts all = drift_total(d);
  CHECK(all.fold_outputs == 4 * N);
  CHECK(all.fold_differ == 3 * F);
  CHECK(all.splits_outputs == 3 * N);
  CHECK(all.splits_differ == 3 * F + G);
  CHECK(all.fold_differ_fraction() == double(3 * F) / double(4 * N));
  CHECK(all.splits_max_ulp == d[2].splits_max_ulp);
  // The correct fake's bits do not depend on the configuration.
  Fake good("splitkv-good", AC_OP_SPLITKV, Bug::none, 0, -1, fakes::kAttnFeatures);
  const DriftCounts none = drift_total(run("split_order_drift", good).drift_by_splits);
  CHECK(none.fold_outputs > 0);
  CHECK(none.fold_differ + none.splits_differ == 0);
  CHECK(none.fold_max_ulp + none.splits_max_ulp == 0);
}

TEST_CASE("seeds draw different streams; the same seed is reproducible", "[properties]") {
  Fake no_guard("merge-no-guard", AC_OP_MERGE, Bug::merge_no_both_empty_guard);
  RunConfig a = small_config(), b = small_config();
  b.seed = a.seed + 1;
  const auto ra1 = run_property("merge_sentinels", no_guard, a),
             ra2 = run_property("merge_sentinels", no_guard, a);
  const auto rb = run_property("merge_sentinels", no_guard, b);
  CHECK(ra1.rc_reproduce == ra2.rc_reproduce);
  CHECK(ra1.rc_reproduce != rb.rc_reproduce);
}

// Attention failures are shrunk by structure (properties/src/shrink.cpp) to their minimal shape:
// the wrong empty-row sentinel needs one empty row of one head; the off-by-one O needs one row, one
// head and a head size above 1 (the bug spares d = 0), so the smallest size the generators offer
// above 1, which is 3. Those are the hand-derived minima. small_config sets the time bound far out
// of reach (a loaded CI machine must not cut the shrink), and time is not asserted: how fast
// shrinking is belongs to the benchmarks and the README's timing table, not to a test.
TEST_CASE("shrinking: attention failures shrink by structure to their minimal shape",
          "[properties][shrink]") {
  RunConfig cfg = small_config();
  cfg.max_keys = 64;
  cfg.num_cases = 100;
  Fake sentinel("attn-wrong-sentinel", AC_OP_ATTENTION, Bug::attention_wrong_sentinel, 0, -1,
                fakes::kAttnFeatures);
  const PropertyResult s = run_property("empty_row_contract", sentinel, cfg);
  REQUIRE(s.status == PropertyResult::Status::failed);
  CHECK(s.failure_class == "empty_row");
  CHECK(s.counterexample_size.tokens == 1);
  CHECK(s.counterexample_size.heads == 1);
  CHECK(s.counterexample_size.head_size == 1);
  CHECK_FALSE(s.shrink_cut);

  Fake off("attn-off", AC_OP_ATTENTION, Bug::attention_off_by_one_o, 0, -1, fakes::kAttnFeatures);
  const PropertyResult o = run_property("accuracy", off, cfg);
  REQUIRE(o.status == PropertyResult::Status::failed);
  CHECK(o.counterexample_size.tokens == 1);
  CHECK(o.counterexample_size.heads == 1);
  CHECK(o.counterexample_size.keys == 1);
  CHECK(o.counterexample_size.head_size == 3);
  CHECK_FALSE(o.shrink_cut);
}

TEST_CASE("nondeterministic by design: run_to_run reports the spread when declared, fails when not",
          "[properties][run_to_run]") {
  Fake undeclared("attn-flip", AC_OP_ATTENTION, Bug::attention_nondeterministic, 0, -1, fakes::kAttnFeatures);
  const PropertyResult u = run("run_to_run", undeclared);
  CHECK(u.status == PropertyResult::Status::failed);
  CHECK(u.failure_class == "nondeterministic");
  Fake declared("attn-flip-declared", AC_OP_ATTENTION, Bug::attention_nondeterministic, 0, -1,
                fakes::kAttnFeatures);
  declared.set_flags(AC_CAP_NONDETERMINISTIC);
  const PropertyResult d = run("run_to_run", declared);
  REQUIRE(d.status == PropertyResult::Status::passed);
  // The fake flips the last bit of every nonzero O on every other call: one ulp apart, and so far
  // below the budget; the LSE never differs.
  CHECK(d.spread.differing > 0);
  CHECK(d.spread.differing < d.spread.compared);
  CHECK(d.spread.max_ulps == 1);
  CHECK(d.spread.max_budget > 0);
  CHECK(d.spread.max_budget < 1);
}

// A subject declaring a range of head sizes is drawn at sizes that reach each path of a kernel:
// 13 (a tail of 5 after a vector body of 8) and 80, 96, 112 (a block past the last 64 columns). Each
// fake below is right at 1, 3, 5, 8, 16, 64 and 128, the only sizes a range was once drawn at.
TEST_CASE("head sizes: a range is drawn past the power-of-two sizes", "[properties][head_sizes]") {
  Fake past64("attn-zero-past-64", AC_OP_ATTENTION, Bug::attention_zero_past_64, 0, -1, fakes::kAttnFeatures);
  const PropertyResult a = run("accuracy", past64);
  REQUIRE(a.status == PropertyResult::Status::failed);
  CHECK(a.failure_class == "accuracy");
  CHECK((a.context.find("d=80") != std::string::npos || a.context.find("d=96") != std::string::npos ||
         a.context.find("d=112") != std::string::npos));
  Fake tail("merge-tail", AC_OP_MERGE, Bug::merge_tail_copies_prefix);
  const PropertyResult m = run("accuracy", tail);
  REQUIRE(m.status == PropertyResult::Status::failed);
  CHECK(m.failure_class == "accuracy");
  // The domain: 1, 3, 8, 16, 5, 64 and 128 first, then 13, 80, 96, 112, 256 and the range's ends,
  // each within the range.
  const gen::Domain d = gen::domain_for(past64, 64);
  const std::vector<int32_t> want = {1, 3, 8, 16, 5, 64, 128, 13, 80, 96, 112, 256};
  CHECK(d.head_sizes == want);
  Fake narrow("attn-33-200", AC_OP_ATTENTION, Bug::none, 0, -1, fakes::kAttnFeatures);
  narrow.set_head_sizes(33, 200);
  const std::vector<int32_t> ends = {64, 128, 80, 96, 112, 33, 200};
  CHECK(gen::domain_for(narrow, 64).head_sizes == ends);
}

// A kernel whose bits move only from an input's third launch on (a tuner that settles after two
// calls): the same on the first two launches, so comparing two launches passes it.
TEST_CASE("run_to_run: bits that move from the third launch of an input on fail",
          "[properties][run_to_run]") {
  Fake late("attn-settles-late", AC_OP_ATTENTION, Bug::attention_settles_late, 0, -1, fakes::kAttnFeatures);
  const PropertyResult r = run("run_to_run", late);
  REQUIRE(r.status == PropertyResult::Status::failed);
  CHECK(r.failure_class == "nondeterministic");
  CHECK(r.message.find("the first and third launches on the same input differ at O[") != std::string::npos);
  CHECK(r.message.find(", third ") != std::string::npos);
  // One ulp on the third launch is within budget: accuracy, which launches each case once, passes.
  Fake late2("attn-settles-late", AC_OP_ATTENTION, Bug::attention_settles_late, 0, -1, fakes::kAttnFeatures);
  CHECK(run("accuracy", late2).status == PropertyResult::Status::passed);
}

// The long suite's layer cases (RunConfig::layer_tokens): 32 heads over 256 tokens is 8192 rows,
// judged on a sample; a bug on every row is still found and shrunk, and fewer rows are judged
// than the layer holds.
TEST_CASE("layer cases: sampled judging finds an everywhere bug", "[properties][long]") {
  RunConfig cfg = small_config();
  cfg.layer_tokens = 256;
  cfg.max_keys = 256;
  cfg.num_cases = 8;
  cfg.head_sizes = {128};
  cfg.dtypes = {AC_DTYPE_F16};
  Fake good("attn-good", AC_OP_ATTENTION, Bug::none, 0, -1, fakes::kAttnFeatures);
  const PropertyResult g = run_property("accuracy", good, cfg);
  CHECK(g.status == PropertyResult::Status::passed);
  CHECK(g.stats.at(0).dtype == "fp16");
  Fake off("attn-off", AC_OP_ATTENTION, Bug::attention_off_by_one_o, 0, -1, fakes::kAttnFeatures);
  const PropertyResult o = run_property("accuracy", off, cfg);
  REQUIRE(o.status == PropertyResult::Status::failed);
  CHECK(o.counterexample_size.head_size == 128);
  CHECK(o.counterexample_size.tokens == 1);
  CHECK_FALSE(o.shrink_cut);
}

// streamed_kv at 1 MiB instead of 256 (the property's shape with fewer keys): fp16, d = 128, 64
// heads over 64, so 2 * 64 * 128 * 2 = 32 KiB per key, 32 keys for the bytes plus 61 for a partial
// tile. One case per subject whatever --cases says, three launches, not shrunk.
TEST_CASE("streamed_kv: K/V past the configured bytes; a lag-only bug is caught, a correct subject passes",
          "[properties][streamed_kv]") {
  RunConfig cfg = small_config();
  cfg.streamed_kv_bytes = int64_t(1) << 20;
  cfg.head_sizes = {128};
  cfg.dtypes = {AC_DTYPE_F16};
  std::vector<Case> seen;
  cfg.before_launch = [&](const Case& c) { seen.push_back(c); };

  Fake host("attn-host", AC_OP_ATTENTION, Bug::none, 0, -1, fakes::kAttnFeatures);
  CHECK(run_property("streamed_kv", host, cfg).status == PropertyResult::Status::not_applicable);
  CHECK(seen.empty());

  Fake good("attn-device", AC_OP_ATTENTION, Bug::none, 0, -1, fakes::kAttnFeatures);
  good.set_memory(AC_MEMORY_CUDA);
  const PropertyResult g = run_property("streamed_kv", good, cfg);
  INFO(g.failure_class << " " << g.message);
  CHECK(g.status == PropertyResult::Status::passed);
  CHECK(g.cases_run == 1);
  CHECK(good.calls == 3);
  REQUIRE(seen.size() == 3);
  for (const Case& c : seen) {
    const auto& a = std::get<AttentionInput>(c.input);
    CHECK(a.num_heads == 64);
    CHECK(a.num_kv_heads == 64);
    CHECK(a.head_size == 128);
    CHECK(a.seqlens_q == std::vector<int32_t>{130});
    CHECK(a.seqlens_k == std::vector<int32_t>{32 + 61});
    CHECK(int64_t(a.k.size() + a.v.size()) * 2 >= cfg.streamed_kv_bytes);
  }
  // One judgement per case (equal bits), of a slice: KV heads 0 and 63, tokens 0-15 and 114-129.
  CHECK(g.rows_judged == 2 * 32);

  // Wrong only past the bytes: run_to_run's small cases never see it; streamed_kv does at its
  // first case, as a difference between launches when it comes and goes, as an error over budget
  // when it is there on every launch. The case is kept whole.
  fakes::LagsPastBytes lag("attn-lag", cfg.streamed_kv_bytes, false, fakes::kAttnFeatures);
  lag.set_memory(AC_MEMORY_CUDA);
  CHECK(run("run_to_run", lag).status == PropertyResult::Status::passed);
  CHECK(lag.large_calls == 0);
  const PropertyResult l = run_property("streamed_kv", lag, cfg);
  INFO(l.message);
  REQUIRE(l.status == PropertyResult::Status::failed);
  CHECK(l.failure_class == "nondeterministic");
  CHECK(l.message.rfind("launches 1 and 2 on the same input differ at O[token=0,head=0,d=0]", 0) == 0);
  CHECK(l.cases_to_first_failure == 1);
  CHECK(l.counterexample_size.tokens == 130);
  CHECK(l.counterexample_size.keys == 93);
  fakes::LagsPastBytes always("attn-lag-always", cfg.streamed_kv_bytes, true, fakes::kAttnFeatures);
  always.set_memory(AC_MEMORY_CUDA);
  CHECK(run("accuracy", always).status == PropertyResult::Status::passed);
  const PropertyResult w = run_property("streamed_kv", always, cfg);
  INFO(w.message);
  REQUIRE(w.status == PropertyResult::Status::failed);
  CHECK(w.failure_class == "accuracy");
  CHECK(w.message.rfind("launch 1 of 3, on KV heads 0 63, tokens 0-15 and 114-129 (judged as a case of those "
                        "alone, its heads and tokens counted from 0): over budget",
                        0) == 0);
  CHECK(w.message.find("O[token=0,head=0,d=0]") != std::string::npos);
  CHECK(w.counterexample_size.keys == 93);
  // Wrong on every launch at token 129, head 63, d 5: found in the slice's token 31, head 1.
  fakes::LagsPastBytes last("attn-lag-last", cfg.streamed_kv_bytes, true, fakes::kAttnFeatures,
                            (129 * 64 + 63) * 128 + 5);
  last.set_memory(AC_MEMORY_CUDA);
  const PropertyResult wl = run_property("streamed_kv", last, cfg);
  INFO(wl.message);
  REQUIRE(wl.status == PropertyResult::Status::failed);
  CHECK(wl.message.find("O[token=31,head=1,d=5]") != std::string::npos);

  // Nondeterministic within budget (the last bit of O on every other call): a failure unless
  // declared, then every launch judged and the spread over the launch pairs reported.
  Fake flip("attn-flip", AC_OP_ATTENTION, Bug::attention_nondeterministic, 0, -1, fakes::kAttnFeatures);
  flip.set_memory(AC_MEMORY_CUDA);
  const PropertyResult u = run_property("streamed_kv", flip, cfg);
  CHECK(u.status == PropertyResult::Status::failed);
  CHECK(u.failure_class == "nondeterministic");
  CHECK(u.message.rfind("launches 1 and 2 on the same input differ at O[", 0) == 0);
  Fake declared("attn-flip-declared", AC_OP_ATTENTION, Bug::attention_nondeterministic, 0, -1,
                fakes::kAttnFeatures);
  declared.set_memory(AC_MEMORY_CUDA);
  declared.set_flags(AC_CAP_NONDETERMINISTIC);
  const PropertyResult d = run_property("streamed_kv", declared, cfg);
  CHECK(d.status == PropertyResult::Status::passed);
  CHECK(d.spread.differing > 0);
  CHECK(d.spread.max_ulps == 1);
  CHECK(d.rows_judged > 2 * 64);
}

TEST_CASE(
    "several failures: two independent defects both show, each shrunk, saved and replaying; one shows once",
    "[properties][max_failures]") {
  const fs::path dir = fs::temp_directory_path() / ("ac_prop_two_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  Fake both("attn-two-defects", AC_OP_ATTENTION, Bug::attention_two_defects, 0, -1, fakes::kAttnFeatures);
  const PropertyResult r = run("accuracy", both, dir.string());
  INFO(r.signature << " | " << (r.other_failures.empty() ? "-" : r.other_failures[0].signature));
  REQUIRE(r.status == PropertyResult::Status::failed);
  REQUIRE(r.other_failures.size() == 1);
  CHECK(r.failures == 2);
  // One failure in an empty row (the garbage O), the other in a partly masked row (the leak).
  const std::vector<std::string> kinds = {
      r.row_kind, row_kind(read_case_file(r.other_failures[0].corpus_file), r.other_failures[0].quoted.row)};
  CHECK(std::count(kinds.begin(), kinds.end(), "empty row") == 1);
  CHECK(std::count(kinds.begin(), kinds.end(), "partly masked row") == 1);
  REQUIRE(r.corpus_files.size() == 2);
  for (const std::string& f : r.corpus_files) {
    const Case c = read_case_file(f);
    CHECK_FALSE(replay_case(c, both, f).passed);
    Fake good("attn-good", AC_OP_ATTENTION, Bug::none, 0, -1, fakes::kAttnFeatures);
    CHECK(replay_case(c, good, f).passed);
  }
  // Either defect alone: exactly one failure, of that defect's row kind.
  for (const auto& [bug, kind] : {std::pair{Bug::attention_empty_garbage, "empty row"},
                                  std::pair{Bug::attention_mask_leak, "partly masked row"}}) {
    Fake one("attn-one-defect", AC_OP_ATTENTION, bug, 0, -1, fakes::kAttnFeatures);
    const PropertyResult s = run("accuracy", one);
    INFO(s.signature);
    CHECK(s.status == PropertyResult::Status::failed);
    CHECK(s.row_kind == kind);
    CHECK(s.other_failures.empty());
    CHECK(s.failures == 1);
  }
  // --max-failures 1: the first failure only, as before.
  RunConfig cfg = small_config(dir.string());
  cfg.max_failures = 1;
  CHECK(run_property("accuracy", both, cfg).other_failures.empty());
  fs::remove_all(dir);
}

TEST_CASE("several failures: a second defect that shows only beside the first's rows is found too",
          "[properties][max_failures][batch_invariance]") {
  // The first defect lives in empty rows; the second in the sequence after one of no keys, whose
  // queries are those empty rows. A later round that left out every case with empty rows never
  // drew the second; one that judges such cases on their other rows finds it.
  // batch_invariance draws batches with sequences of no keys beside others.
  Fake both("attn-after-empty", AC_OP_ATTENTION, Bug::attention_empty_and_after_empty, 0, -1,
            fakes::kAttnFeatures);
  RunConfig cfg = small_config();
  cfg.shrink = false;
  const PropertyResult r = run_property("batch_invariance", both, cfg);
  INFO(r.signature << " | " << (r.other_failures.empty() ? "-" : r.other_failures[0].signature));
  REQUIRE(r.status == PropertyResult::Status::failed);
  CHECK(r.row_kind == "empty row");
  REQUIRE(r.other_failures.size() == 1);
  CHECK(r.other_failures[0].failure_class == "accuracy");
  CHECK(r.other_failures[0].signature.find("empty row") == std::string::npos);
  CHECK(r.other_failures[0].message.find("over budget") != std::string::npos);
}

TEST_CASE("a pair that judged no case fails (judged_no_case), never passes nor reads as not applicable",
          "[properties][refusals]") {
  // The reference side refusing every case (here raised through the subject's call, which the
  // runner treats as the reference's refusal): the property applies and its domain is not empty,
  // yet nothing is judged.
  struct ReferenceRefusesAll final : Fake {
    ReferenceRefusesAll() : Fake("attn-unjudged", AC_OP_ATTENTION, Bug::none, 0, -1, fakes::kAttnFeatures) {}
    AttentionOutput attention(const AttentionInput&, const AttentionOptions&) override {
      throw ref::ReferenceError("shape outside the reference");
    }
  } unjudged;
  const PropertyResult r = run_property("accuracy", unjudged, small_config());
  INFO(r.message);
  CHECK(r.status == PropertyResult::Status::failed);
  CHECK(r.failure_class == "judged_no_case");
  CHECK(r.cases_run == 0);
  CHECK(r.message.rfind("no drawn case could be judged: ", 0) == 0);
  CHECK(r.message.find(".cpp:") == std::string::npos);
}

TEST_CASE("refusals: a subject refusing every case fails with its reasons counted, a sample kept and a hint",
          "[properties][refusals]") {
  const fs::path dir = fs::temp_directory_path() / ("ac_prop_refuse_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  struct RefusesAll final : Fake {
    RefusesAll() : Fake("attn-refuses", AC_OP_ATTENTION, Bug::none, 0, -1, fakes::kAttnFeatures) {}
    AttentionOutput attention(const AttentionInput&, const AttentionOptions&) override {
      throw SubjectError(SubjectError::Kind::unsupported, "zero keys are not supported by this kernel");
    }
  } refuses;
  const PropertyResult r = run("accuracy", refuses, dir.string());
  INFO(r.message);
  CHECK(r.status == PropertyResult::Status::failed);
  CHECK(r.failure_class == "refused_every_case");
  CHECK(r.message.find("x \"zero keys are not supported by this kernel\"") != std::string::npos);
  CHECK(r.message.find("declare refuses_zero_keys") != std::string::npos);
  REQUIRE(r.corpus_files.size() == 1);
  CHECK(read_case_file(r.corpus_files[0]).note.rfind("refused_every_case: a sample", 0) == 0);
  CHECK(r.reproduce_command.find("replay " + r.corpus_files[0]) != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("batch_invariance: a sequence's bits alone and in a batch, declared or reported",
          "[properties][batch_invariance]") {
  const fs::path dir = fs::temp_directory_path() / ("ac_prop_batch_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  // A correct fake computes each sequence by itself: declared invariant, it passes.
  Fake good("attn-batch-good", AC_OP_ATTENTION, Bug::none, 0, -1, fakes::kAttnFeatures);
  good.set_flags(AC_CAP_BATCH_INVARIANT);
  const PropertyResult ok = run("batch_invariance", good, dir.string());
  INFO(ok.message);
  CHECK(ok.status == PropertyResult::Status::passed);
  CHECK(ok.spread.compared == 0);  // declared: nothing reported, any change fails
  // One whose last bit of O flips in a call of several sequences: declared invariant it fails,
  // shrunk to one neighbour of one query and key (a sequence of no query has no output, one of no
  // key an exact zero the flip leaves alone); the flip is within budget, so nothing else fails.
  Fake variant("attn-batch-variant", AC_OP_ATTENTION, Bug::attention_batch_variant, 0, -1,
               fakes::kAttnFeatures);
  variant.set_flags(AC_CAP_BATCH_INVARIANT);
  const PropertyResult bad = run("batch_invariance", variant, dir.string());
  INFO(bad.message);
  CHECK(bad.status == PropertyResult::Status::failed);
  CHECK(bad.failure_class == "batch_variant");
  CHECK(bad.message.find("of a batch of 2") != std::string::npos);
  CHECK(bad.message.find("differ at O[") != std::string::npos);
  REQUIRE(!bad.corpus_files.empty());
  const Case shrunk = read_case_file(bad.corpus_files.front());
  const auto& a = std::get<AttentionInput>(shrunk.input);
  REQUIRE(a.seqlens_q.size() == 2);
  CHECK(a.seqlens_q[0] + a.seqlens_q[1] <= 2);
  for (int32_t k : a.seqlens_k) CHECK(k <= 1);
  CHECK(run("accuracy", variant, dir.string()).status == PropertyResult::Status::passed);
  // --max-batch bounds the batches: at 1 no call holds two sequences, so the flip never happens.
  RunConfig one = small_config();
  one.max_batch = 1;
  CHECK(run_property("batch_invariance", variant, one).status == PropertyResult::Status::passed);
  // Undeclared, the same kernel passes and the run reports what changed.
  Fake reported("attn-batch-reported", AC_OP_ATTENTION, Bug::attention_batch_variant, 0, -1,
                fakes::kAttnFeatures);
  const PropertyResult rep = run("batch_invariance", reported, dir.string());
  INFO(rep.message);
  CHECK(rep.status == PropertyResult::Status::passed);
  CHECK(rep.spread.differing > 0);
  CHECK(rep.spread.max_ulps == 1);
  CHECK(rep.spread.max_budget > 0);
  CHECK(rep.spread.max_budget <= 1);
  // Undeclared and invariant: what was compared is reported, nothing changed.
  Fake plain("attn-batch-plain", AC_OP_ATTENTION, Bug::none, 0, -1, fakes::kAttnFeatures);
  const PropertyResult same = run("batch_invariance", plain, dir.string());
  CHECK(same.status == PropertyResult::Status::passed);
  CHECK(same.spread.compared > 0);
  CHECK(same.spread.differing == 0);
  // Without varlen there is no batch: not applicable.
  Fake single("attn-one-sequence", AC_OP_ATTENTION, Bug::none, 0, -1, fakes::kAttnFeatures & ~AC_FEAT_VARLEN);
  CHECK(run("batch_invariance", single, dir.string()).status == PropertyResult::Status::not_applicable);
  fs::remove_all(dir);
}

TEST_CASE("batch_invariance names the one scheduling dimension a fake's bits depend on",
          "[properties][batch_invariance]") {
  const fs::path dir = fs::temp_directory_path() / ("ac_prop_batch_dims_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  // Each fake flips the last bit of O where exactly one dimension of the call says so (fakes.hpp):
  // each probe of batch_invariance changes one dimension alone, so each fake is attributed to its
  // own dimension in every case probed, and to no other.
  const std::pair<Bug, BatchDimension> fakes_and_dims[] = {
      {Bug::attention_batch_variant, kBatchSize},
      {Bug::attention_long_query_variant, kNeighbourLengths},
      {Bug::attention_position_variant, kPosition},
      {Bug::attention_mix_variant, kDecodePrefillMix},
  };
  for (const auto& [bug, dim] : fakes_and_dims) {
    const std::string name = kBatchDimensionNames[size_t(dim)];
    INFO("the fake of " << name);
    // Undeclared: the run passes and its spread counts the probed cases under the dimension.
    Fake reported("attn-dim-reported", AC_OP_ATTENTION, bug, 0, -1, fakes::kAttnFeatures);
    const PropertyResult rep = run("batch_invariance", reported, dir.string());
    INFO(rep.message);
    CHECK(rep.status == PropertyResult::Status::passed);
    CHECK(rep.spread.differing > 0);
    CHECK(rep.spread.probed > 0);
    for (int d = 0; d < kBatchDimensions; ++d)
      CHECK(rep.spread.triggered[size_t(d)] == (d == dim ? rep.spread.probed : 0));
    CHECK(rep.spread.none_isolated == 0);
    // Declared: the failure names the dimension (unshrunk here; the shrunk case below).
    Fake declared("attn-dim-declared", AC_OP_ATTENTION, bug, 0, -1, fakes::kAttnFeatures);
    declared.set_flags(AC_CAP_BATCH_INVARIANT);
    RunConfig cfg = small_config(dir.string());
    cfg.shrink = false;
    const PropertyResult bad = run_property("batch_invariance", declared, cfg);
    INFO(bad.message);
    CHECK(bad.status == PropertyResult::Status::failed);
    CHECK(bad.failure_class == "batch_variant");
    const std::string tail = "; triggered by " + name;
    CHECK(bad.message.size() > tail.size());
    CHECK(bad.message.substr(bad.message.size() - tail.size()) == tail);
  }
  // Shrunk, the neighbour set that is left still changes the bits by the same dimension.
  Fake position("attn-dim-position", AC_OP_ATTENTION, Bug::attention_position_variant, 0, -1,
                fakes::kAttnFeatures);
  position.set_flags(AC_CAP_BATCH_INVARIANT);
  const PropertyResult shrunk = run("batch_invariance", position, dir.string());
  INFO(shrunk.message);
  CHECK(shrunk.status == PropertyResult::Status::failed);
  CHECK(shrunk.message.find("of a batch of 2") != std::string::npos);
  CHECK(shrunk.message.find("; triggered by position") != std::string::npos);
  CHECK(batch_dimensions_phrase(0) == "none isolated");
  CHECK(batch_dimensions_phrase((1u << kBatchSize) | (1u << kDecodePrefillMix)) ==
        "batch size, decode/prefill mix");
  fs::remove_all(dir);
}

TEST_CASE("batch_invariance: an inner position of a large batch is a victim in some cases",
          "[properties][batch_invariance]") {
  // The fake changes only the second sequence of a call of 5 or more: in such a batch the first,
  // middle ((n - 1) / 2 >= 2) and last are not it, so only the victim the case's lengths pick finds it.
  Fake second("attn-batch-second", AC_OP_ATTENTION, Bug::attention_second_of_large_batch, 0, -1,
              fakes::kAttnFeatures);
  second.set_flags(AC_CAP_BATCH_INVARIANT);
  RunConfig cfg = small_config();
  cfg.num_cases = 200;
  cfg.shrink = false;
  const PropertyResult r = run_property("batch_invariance", second, cfg);
  INFO(r.message);
  CHECK(r.status == PropertyResult::Status::failed);
  CHECK(r.failure_class == "batch_variant");
  CHECK(r.message.find("sequence 1 of a batch of ") != std::string::npos);
}

TEST_CASE("batch_invariance: a shrink stops at batch_shrink_seconds, whatever --shrink-time",
          "[properties][batch_invariance]") {
  const fs::path dir = fs::temp_directory_path() / ("ac_prop_batch_cut_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  CHECK(RunConfig{}.batch_shrink_seconds == 10);  // the bound the property states
  // A batch-variant fake declared invariant whose every launch sleeps 30 ms: each shrink candidate
  // launches the batch, its victims alone and the probes (10 launches or so, 0.3 s), so shrinking a
  // batch of several sequences takes seconds. With the bound lowered to 0.5 s (and --shrink-time far
  // out of reach) the shrink is cut after about 0.5 s, plus the candidate in flight and the first
  // failure's determinism re-run.
  class Slow final : public Fake {
   public:
    using Fake::Fake;
    AttentionOutput attention(const AttentionInput& in, const AttentionOptions& opt) override {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      return Fake::attention(in, opt);
    }
  } slow("attn-batch-slow", AC_OP_ATTENTION, Bug::attention_batch_variant, 0, -1, fakes::kAttnFeatures);
  slow.set_flags(AC_CAP_BATCH_INVARIANT);
  RunConfig cfg = small_config(dir.string());
  cfg.batch_shrink_seconds = 0.5;
  const PropertyResult r = run_property("batch_invariance", slow, cfg);
  INFO(r.message << " (shrink " << r.shrink_seconds << " s)");
  CHECK(r.status == PropertyResult::Status::failed);
  CHECK(r.failure_class == "batch_variant");
  CHECK(r.shrink_cut);
  CHECK(r.shrink_seconds >= 0.5);
  CHECK(r.shrink_seconds < 3);
  CHECK(r.message.find("(shrinking cut after ") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("batch_invariance: a batch the subject cannot take is skipped and counted, never silently",
          "[properties][batch_invariance]") {
  const fs::path dir = fs::temp_directory_path() / ("ac_prop_batch_skip_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  // A correct kernel that takes at most 2 sequences a call and refuses more before launch (as a
  // kernel past its grid or workspace limit does): the batches it cannot take are skipped, the
  // rest judged, and the pass says how many were skipped and why.
  class TwoAtMost final : public Fake {
   public:
    using Fake::Fake;
    int refused = 0;
    AttentionOutput attention(const AttentionInput& in, const AttentionOptions& opt) override {
      if (in.seqlens_q.size() > 2) {
        ++refused;
        throw SubjectError(SubjectError::Kind::unsupported,
                           "a batch of more than 2 sequences exceeds this kernel");
      }
      return Fake::attention(in, opt);
    }
  } two("attn-two-at-most", AC_OP_ATTENTION, Bug::none, 0, -1, fakes::kAttnFeatures);
  two.set_flags(AC_CAP_BATCH_INVARIANT);
  const PropertyResult r = run("batch_invariance", two, dir.string());
  INFO(r.message);
  CHECK(r.status == PropertyResult::Status::passed);
  CHECK(r.cases_run > 0);
  REQUIRE(two.refused > 0);
  CHECK(r.message.find(std::to_string(two.refused) +
                       " cases skipped, refused by the subject: " + std::to_string(two.refused) +
                       "x \"a batch of more than 2 sequences exceeds this kernel\"") != std::string::npos);
  // A subject that takes every batch skips none, and its pass says nothing of skips.
  Fake all("attn-any-batch", AC_OP_ATTENTION, Bug::none, 0, -1, fakes::kAttnFeatures);
  all.set_flags(AC_CAP_BATCH_INVARIANT);
  CHECK(run("batch_invariance", all, dir.string()).message.find("skipped") == std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("batch_invariance: the batches stay within the subject's declared call limits",
          "[properties][batch_invariance]") {
  const fs::path dir = fs::temp_directory_path() / ("ac_prop_batch_limits_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  // A correct, invariant kernel that records the largest call it was given. Declaring at most 3
  // sequences, 40 query tokens and 50 keys a call, it is never given more (and, its cases all
  // within them, none is skipped); undeclared, the same draws go past each limit, so the bound is
  // the declaration's doing.
  class Recording final : public Fake {
   public:
    using Fake::Fake;
    int64_t most_seqs = 0, most_tokens = 0, most_keys = 0;
    AttentionOutput attention(const AttentionInput& in, const AttentionOptions& opt) override {
      int64_t tokens = 0, keys = 0;
      for (size_t i = 0; i < in.seqlens_q.size(); ++i) tokens += in.seqlens_q[i], keys += in.seqlens_k[i];
      most_seqs = std::max<int64_t>(most_seqs, int64_t(in.seqlens_q.size()));
      most_tokens = std::max(most_tokens, tokens);
      most_keys = std::max(most_keys, keys);
      return Fake::attention(in, opt);
    }
  };
  Recording bounded("attn-bounded", AC_OP_ATTENTION, Bug::none, 0, -1, fakes::kAttnFeatures);
  bounded.set_flags(AC_CAP_BATCH_INVARIANT);
  bounded.set_call_limits(3, 40, 50);
  const PropertyResult r = run("batch_invariance", bounded, dir.string());
  INFO(r.message);
  CHECK(r.status == PropertyResult::Status::passed);
  CHECK(r.cases_run > 0);
  CHECK(r.message.find("skipped") == std::string::npos);
  CHECK(bounded.most_seqs == 3);
  CHECK(bounded.most_tokens <= 40);
  CHECK(bounded.most_keys <= 50);
  Recording free("attn-unbounded", AC_OP_ATTENTION, Bug::none, 0, -1, fakes::kAttnFeatures);
  free.set_flags(AC_CAP_BATCH_INVARIANT);
  CHECK(run("batch_invariance", free, dir.string()).status == PropertyResult::Status::passed);
  CHECK(free.most_seqs > 3);
  CHECK(free.most_tokens > 40);
  CHECK(free.most_keys > 50);
  fs::remove_all(dir);
}

TEST_CASE("chunked_prefill: a prompt's bits whole and in chunks, declared or reported",
          "[properties][chunked_prefill]") {
  const fs::path dir = fs::temp_directory_path() / ("ac_prop_chunk_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  // The correct fake computes each row from its visible keys alone: declared invariant, it passes.
  Fake good("attn-chunk-good", AC_OP_ATTENTION, Bug::none, 0, -1, fakes::kAttnFeatures);
  good.set_flags(AC_CAP_BATCH_INVARIANT);
  const PropertyResult ok = run("chunked_prefill", good, dir.string());
  INFO(ok.message);
  CHECK(ok.status == PropertyResult::Status::passed);
  CHECK(ok.spread.compared == 0);
  // One whose last bit of O flips in a call of fewer queries than keys (every chunk past the first
  // reads a cached prefix): declared, it fails with both bits, shrunk to a prompt of 2 tokens (the
  // second chunk of 1 query over 2 keys); the flip is within budget.
  Fake variant("attn-chunk-variant", AC_OP_ATTENTION, Bug::attention_chunk_variant, 0, -1,
               fakes::kAttnFeatures);
  variant.set_flags(AC_CAP_BATCH_INVARIANT);
  const PropertyResult bad = run("chunked_prefill", variant, dir.string());
  INFO(bad.message);
  CHECK(bad.status == PropertyResult::Status::failed);
  CHECK(bad.failure_class == "chunk_variant");
  CHECK(bad.message.find("whole (first) and in chunks of") != std::string::npos);
  CHECK(bad.message.find("differ at O[") != std::string::npos);
  REQUIRE(!bad.corpus_files.empty());
  const Case shrunk = read_case_file(bad.corpus_files.front());
  const auto& a = std::get<AttentionInput>(shrunk.input);
  REQUIRE(a.seqlens_q.size() == 1);
  CHECK(a.seqlens_q[0] == 2);
  CHECK(a.seqlens_k[0] == 2);
  // Undeclared, it passes and reports what changed, within one budget.
  Fake reported("attn-chunk-reported", AC_OP_ATTENTION, Bug::attention_chunk_variant, 0, -1,
                fakes::kAttnFeatures);
  const PropertyResult rep = run("chunked_prefill", reported, dir.string());
  INFO(rep.message);
  CHECK(rep.status == PropertyResult::Status::passed);
  CHECK(rep.spread.differing > 0);
  CHECK(rep.spread.max_ulps == 1);
  CHECK(rep.spread.max_budget > 0);
  CHECK(rep.spread.max_budget <= 1);
  // Without causal masking a chunk has no prefix to read: not applicable.
  Fake full("attn-no-causal", AC_OP_ATTENTION, Bug::none, 0, -1, fakes::kAttnFeatures & ~AC_FEAT_CAUSAL);
  CHECK(run("chunked_prefill", full, dir.string()).status == PropertyResult::Status::not_applicable);
  fs::remove_all(dir);
}
