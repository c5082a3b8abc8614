// One set of numbers: a failure's quoted element (the one its message names) is the same element,
// with the same exact value, output bits, ulp, cancellation-aware ulp and err/budget, in
//   - the run's result (PropertyResult::quoted, which report.json, report.md and junit.xml print),
//   - report.json read back,
//   - the replay of the shrunk case the run wrote (ReplayResult::worst_elements, first),
// and the replay names the same context. Every failure this test produces is replayed: planted
// bugs of the host twins (the mutants), one per kind of quoted element (an O over budget, a
// non-finite O, an LSE in the wrong base), and a subject that flushes fp32 subnormal outputs to zero
// (split_equals_whole's merged element and accuracy's, where err/budget above 1 must come with the
// ulps that make it so, or with the reason it does not).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "attncheck/abi_subject.hpp"
#include "attncheck/case.hpp"
#include "attncheck/properties.hpp"
#include "attncheck/report.hpp"
#include "common/registry.h"

using namespace attncheck;
namespace fs = std::filesystem;

namespace {

// A correct host subject whose fp32 outputs below 2^-126 are flushed to zero, undeclared.
class FlushingSubject final : public Subject {
 public:
  explicit FlushingSubject(Subject& inner) : inner_(inner), name_("flushing-" + inner.name()) {}
  const std::string& name() const override { return name_; }
  const std::string& description() const override { return inner_.description(); }
  const ac_caps& caps() const override { return inner_.caps(); }
  std::string backend() const override { return inner_.backend(); }
  std::string origin() const override { return "test"; }
  MergeOutput merge(const MergeInput& in) override { return inner_.merge(in); }
  SoftmaxOutput softmax(const SoftmaxInput& in) override { return inner_.softmax(in); }
  AttentionOutput attention(const AttentionInput& in, const AttentionOptions& opt) override {
    AttentionOutput out = inner_.attention(in, opt);
    if (in.dtype == AC_DTYPE_F32)
      for (uint32_t& b : out.out)
        if ((b & 0x7f800000u) == 0) b &= 0x80000000u;  // a subnormal keeps only its sign
    return out;
  }

 private:
  Subject& inner_;
  std::string name_;
};

void same_element(const WorstElement& a, const WorstElement& b) {
  CHECK(a.where == b.where);
  CHECK(a.input_bits == b.input_bits);
  CHECK(a.exact == b.exact);
  CHECK(a.rounded_exact == b.rounded_exact);
  CHECK(a.output_bits == b.output_bits);
  CHECK(a.row == b.row);
  // Bit for bit, NaN included: the same computation on the same case.
  for (auto [x, y] :
       {std::pair{a.ulp, b.ulp}, {a.cancel_ulp, b.cancel_ulp}, {a.ratio, b.ratio}, {a.allowed, b.allowed}})
    CHECK(std::memcmp(&x, &y, sizeof x) == 0);
}

// Runs the property, replays the case it wrote, compares; returns the result for more checks.
PropertyResult run_and_replay(Subject& s, const std::string& property, ac_dtype dtype,
                              const fs::path& corpus) {
  RunConfig cfg;
  cfg.seed = 1;
  cfg.num_cases = 200;
  cfg.corpus_dir = corpus.string();
  cfg.shrink_seconds = 10;
  cfg.dtypes = {dtype};
  const PropertyResult r = run_property(property, s, cfg);
  INFO(s.name() << " / " << property << ": " << r.message);
  REQUIRE(r.status == RunStatus::failed);
  REQUIRE(r.corpus_files.size() == 1);
  REQUIRE(!r.quoted.where.empty());
  REQUIRE(!r.context.empty());
  // An err/budget above 1 beside a plain ulp error of 0 must say why.
  if (r.quoted.ratio > 1 && r.quoted.ulp == 0) CHECK(r.message.find("allowance") != std::string::npos);

  // report.json keeps the quoted element and the context.
  const Report back = [&] {
    Report rep;
    rep.backend = "host";
    rep.entries = {entry_from_result(r, s, 0)};
    return report_from_json(nlohmann::json::parse(report_to_json(rep).dump()));
  }();
  same_element(back.entries.at(0).quoted, r.quoted);
  CHECK(back.entries.at(0).context == r.context);

  const ReplayResult rr = replay_case(read_case_file(r.corpus_files[0]), s, r.corpus_files[0]);
  CHECK(!rr.passed);
  CHECK(rr.context == r.context);
  REQUIRE(!rr.worst_elements.empty());
  same_element(rr.worst_elements.front(), r.quoted);
  CHECK(element_line(rr.worst_elements.front()) == element_line(back.entries.at(0).quoted));
  if (!r.shrink_cut) CHECK(rr.verdict == "FAIL " + r.failure_class + ": " + r.message);
  return r;
}

struct Planted {
  const char* subject;
  const char* property;
  ac_dtype dtype;
};

}  // namespace

TEST_CASE("the quoted element of every planted failure is the same in the result, report.json and the replay",
          "[report][replay]") {
  const fs::path corpus = fs::temp_directory_path() / ("ac_quoted_" + std::to_string(::getpid()));
  std::vector<ac_subject> raw;
  kern::append_mutant_subjects(raw, false);
  const Planted planted[] = {
      {"mutant-fused-causal-off-by-one", "accuracy", AC_DTYPE_F16},  // an O over budget
      {"mutant-merge-no-inf-map", "merge_sentinels", AC_DTYPE_F32},  // a non-finite O
      {"mutant-merge-base2-as-e", "lse_convention", AC_DTYPE_F32},   // an LSE in the other base
  };
  for (const Planted& p : planted) {
    const auto it = std::find_if(raw.begin(), raw.end(),
                                 [&](const ac_subject& s) { return s.name == std::string(p.subject); });
    REQUIRE(it != raw.end());
    AbiSubject s(*it, "builtin-mutant");
    const PropertyResult r = run_and_replay(s, p.property, p.dtype, corpus);
    if (std::string(p.subject) == "mutant-fused-causal-off-by-one")
      CHECK(r.context.find("causal (bottom-right)") != std::string::npos);
  }
  fs::remove_all(corpus);
}

TEST_CASE("a flushed fp32 subnormal is quoted with its ulps in the result and the replay",
          "[report][replay]") {
  const fs::path corpus = fs::temp_directory_path() / ("ac_flush_" + std::to_string(::getpid()));
  auto builtins = load_builtin_subjects(Backend::host);
  const auto textbook =
      std::find_if(builtins.begin(), builtins.end(), [](const auto& s) { return s->name() == "textbook"; });
  REQUIRE(textbook != builtins.end());
  FlushingSubject s(**textbook);
  for (const char* property : {"accuracy", "split_equals_whole"}) {
    const PropertyResult r = run_and_replay(s, property, AC_DTYPE_F32, corpus);
    // The flushed output is 0 where the exact value is a subnormal: at least one fp32 ulp off.
    CHECK(r.quoted.ulp >= 1);
  }
  fs::remove_all(corpus);
}
