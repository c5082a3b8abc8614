// Replays every case file of the repository's corpus/ against correct fake subjects (they must
// pass or be not applicable), checks that the curated cases catch the bugs they were written for,
// that a malformed file met in the directory is reported and skipped, and reproduces the chunked-
// prefill NaN: the guarded merge passes the scenario, the unguarded one gives NaN at the merge of
// two empty context states of the request that missed the prefix cache.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "attncheck/properties.hpp"
#include "fakes.hpp"

using namespace attncheck;
using fakes::Bug;
using fakes::Fake;
namespace fs = std::filesystem;

namespace {
const std::string kCorpus = ATTNCHECK_CORPUS_DIR;
std::vector<std::string> case_files() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(kCorpus))
    if (e.is_regular_file() && e.path().extension() == ".json") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}
}  // namespace

TEST_CASE("every corpus case replays clean against the correct fakes", "[corpus]") {
  Fake merge("merge", AC_OP_MERGE), softmax("softmax-safe", AC_OP_SOFTMAX),
      attention("attention", AC_OP_ATTENTION, Bug::none, 0, -1, fakes::kAttnFeatures);
  const auto files = case_files();
  REQUIRE(files.size() >= 6);
  for (const std::string& f : files) {
    const Case c = read_case_file(f);
    Subject& s = c.op == "merge"     ? static_cast<Subject&>(merge)
                 : c.op == "softmax" ? static_cast<Subject&>(softmax)
                                     : attention;
    const ReplayResult r = replay_case(c, s, f);
    INFO(f << ": " << r.verdict);
    CHECK(r.passed);
    CHECK(r.applicable);
    CHECK(r.reproduce_command == "attncheck replay " + f + " --subject " + s.name());
  }
}

TEST_CASE("a case's tiling past the subject's is run as tiling 0, and the verdict says so", "[corpus]") {
  // The fake declares one tiling; the worked example asks for the third.
  Fake attention("attention", AC_OP_ATTENTION, Bug::none, 0, -1, fakes::kAttnFeatures);
  REQUIRE(attention.caps().num_tilings <= 1);
  Case c = read_case_file(kCorpus + "/attention-seed-worked-example.json");
  c.options.tiling = 2;
  const ReplayResult r = replay_case(c, attention);
  INFO(r.verdict);
  CHECK(r.passed);
  CHECK(r.verdict == "pass (accuracy; ran tiling 0: the case's tiling 2 is past the 1 of subject attention)");
  c.options.tiling = 0;
  CHECK(replay_case(c, attention).verdict == "pass (accuracy)");
}

TEST_CASE("curated cases catch the bugs they were written for", "[corpus]") {
  Fake no_guard("merge-no-guard", AC_OP_MERGE, Bug::merge_no_both_empty_guard);
  const ReplayResult r1 =
      replay_case(read_case_file(kCorpus + "/merge-chunked-prefill-both-empty.json"), no_guard);
  INFO(r1.verdict);
  CHECK_FALSE(r1.passed);
  REQUIRE_FALSE(r1.worst_elements.empty());
  CHECK(r1.worst_elements[0].input_bits.find("prefix_lse=0xff800000") != std::string::npos);
  Fake no_map("merge-no-inf-map", AC_OP_MERGE, Bug::merge_no_inf_map);
  CHECK_FALSE(replay_case(read_case_file(kCorpus + "/merge-fa2-plus-inf-sentinels.json"), no_map).passed);
  Fake undeclared("softmax-naive-undeclared", AC_OP_SOFTMAX, Bug::softmax_naive_undeclared);
  const ReplayResult r3 =
      replay_case(read_case_file(kCorpus + "/softmax-fp16-overflow-band.json"), undeclared);
  INFO(r3.verdict);
  CHECK_FALSE(r3.passed);
  CHECK(r3.verdict.find("overflow") != std::string::npos);
  // The declared naive softmax overflows exactly on the predicted rows: the property holds.
  Fake naive("softmax-naive", AC_OP_SOFTMAX, Bug::softmax_naive_declared, 0, -1, AC_FEAT_NAIVE_EXP);
  CHECK(replay_case(read_case_file(kCorpus + "/softmax-fp16-overflow-band.json"), naive).passed);
  // A subject without the op or head size: not applicable, not a failure.
  Fake merge_only("merge", AC_OP_MERGE);
  const ReplayResult na =
      replay_case(read_case_file(kCorpus + "/attention-seed-worked-example.json"), merge_only);
  CHECK_FALSE(na.applicable);
}

TEST_CASE("a malformed file in a directory is reported by name and the rest still replays", "[corpus]") {
  const fs::path dir = fs::temp_directory_path() / ("ac_corpus_bad_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(kCorpus + "/merge-fa2-plus-inf-sentinels.json", dir / "a.json");
  {
    std::ofstream f(dir / "b.json");
    f << "{\"format\": \"attncheck-case\", \"version\": 1, \"op\": \"merge\", \"input\": {\"dtype\": \"fp1";
  }
  Fake merge("merge", AC_OP_MERGE);
  int replayed = 0, bad = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    try {
      const Case c = read_case_file(e.path().string());
      replayed += replay_case(c, merge).passed ? 1 : 0;
    } catch (const CaseError& err) {
      ++bad;
      CHECK(std::string(err.what()).find("b.json") != std::string::npos);
    }
  }
  CHECK(replayed == 1);
  CHECK(bad == 1);
  fs::remove_all(dir);
}

TEST_CASE("chunked prefill: the unguarded merge reproduces the NaN with provenance", "[prefill]") {
  Fake attention("attention", AC_OP_ATTENTION, Bug::none, 0, -1, fakes::kAttnFeatures);
  Fake guarded("merge", AC_OP_MERGE),
      unguarded("merge-no-guard", AC_OP_MERGE, Bug::merge_no_both_empty_guard);
  const std::string miss = kCorpus + "/prefill/miss-in-batch.json", hit = kCorpus + "/prefill/all-hit.json";
  const PrefillReport ok = run_prefill(miss, attention, guarded);
  INFO(ok.summary);
  CHECK(ok.ok);
  CHECK(ok.requests == 2);
  CHECK(ok.chunks == 4);  // request 0: 6 new tokens in chunks of 4; request 1: 5
  const PrefillReport nan = run_prefill(miss, attention, unguarded);
  INFO(nan.summary);
  REQUIRE_FALSE(nan.ok);
  const PrefillFinding& f = nan.findings.front();
  CHECK(f.request == 1);  // the request that missed the prefix cache
  CHECK(f.chunk == 0);
  CHECK(f.token == 0);
  CHECK(f.stage == "prefix_merge");
  CHECK(f.value == "nan");
  // With every prefix hit, the unguarded merge never meets two empty states.
  CHECK(run_prefill(hit, attention, unguarded).ok);
  // Bad scenarios are one-line errors.
  CHECK_THROWS_AS(run_prefill_text("{", attention, guarded), PrefillScenarioError);
  CHECK_THROWS_AS(run_prefill_text("{\"format\":\"attncheck-prefill\"}", attention, guarded),
                  PrefillScenarioError);
  CHECK_THROWS_AS(run_prefill(kCorpus + "/prefill/missing.json", attention, guarded), PrefillScenarioError);
}
