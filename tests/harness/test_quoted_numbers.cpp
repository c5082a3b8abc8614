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
// A small failing run (four mutants, one or two properties each) written as a report directory: every
// failure it holds is replayed, and the numbers of its quoted element (exact value, output, ulp,
// err/budget) read the same in report.json, in report.md's text and in the element line replay prints.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <regex>
#include <sstream>

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
  // One corpus file per distinct failure (--max-failures): the first, then each further one.
  REQUIRE(r.corpus_files.size() == 1 + r.other_failures.size());
  REQUIRE(!r.quoted.where.empty());
  REQUIRE(!r.context.empty());
  // An err/budget above 1 beside a plain ulp error of 0 must say why.
  // An err/budget above 1 beside a plain ulp error of 0 must say why: only a zero allowance makes it
  // (any error fails), and the message and the element line both name it.
  if (r.quoted.ratio > 1 && r.quoted.ulp == 0) {
    CHECK(r.quoted.allowed == 0);
    CHECK(r.message.find("the allowance is 0") != std::string::npos);
    CHECK(element_line(r.quoted).find("allowance 0") != std::string::npos);
  }

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
  // Every further distinct failure quotes, in report.json and in its replay, the same numbers.
  for (size_t i = 0; i < r.other_failures.size(); ++i) {
    const DistinctFailure& f = r.other_failures[i];
    INFO("further failure " << i + 2 << ": " << f.signature);
    REQUIRE(!f.corpus_file.empty());
    same_element(back.entries.at(0).other_failures.at(i).quoted, f.quoted);
    const ReplayResult fr = replay_case(read_case_file(f.corpus_file), s, f.corpus_file);
    CHECK(!fr.passed);
    CHECK(fr.context == f.context);
    REQUIRE(!fr.worst_elements.empty());
    if (!f.quoted.where.empty()) same_element(fr.worst_elements.front(), f.quoted);
  }
  return r;
}

// The numbers an element line prints ("  exact X", "  output 0x... (hexfloat)", "  ulp U",
// "  err/budget R"), read back from the text.
struct PrintedNumbers {
  std::string exact, output;
  double ulp = 0, ratio = 0;
};
PrintedNumbers read_element_line(const std::string& line) {
  PrintedNumbers n;
  std::smatch m;
  auto field = [&](const char* pattern) {
    REQUIRE(std::regex_search(line, m, std::regex(pattern)));
    return m[1].str();
  };
  n.exact = field("  exact (\\S+)");
  n.output = field("  output (\\S+(?: \\([^)]*\\))?)");
  n.ulp = std::strtod(field("  ulp (\\S+)").c_str(), nullptr);
  n.ratio = std::strtod(field("  err/budget (\\S+)").c_str(), nullptr);
  return n;
}

// A number printed to 3 significant digits against the one stored: NaN and infinities as such.
void same_printed(double printed, double stored) {
  INFO("printed " << printed << ", stored " << stored);
  if (!std::isfinite(stored)) {
    CHECK((std::isnan(stored) ? std::isnan(printed) : printed == stored));
    return;
  }
  CHECK(std::fabs(printed - stored) <= 5e-3 * std::fabs(stored));
}

// report.md's quoted element of one failure: the line under its "**subject / property**" heading.
std::string md_quoted_element(const std::string& md, const std::string& subject,
                              const std::string& property) {
  const size_t at = md.find("\n**" + subject + " / " + property + "**");
  REQUIRE(at != std::string::npos);
  const std::string open = "- quoted element: `";
  const size_t from = md.find(open, at);
  REQUIRE(from != std::string::npos);
  REQUIRE(md.find("\n**", at + 1) > from);  // still within this failure's section
  const size_t begin = from + open.size();
  return md.substr(begin, md.find('`', begin) - begin);
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

TEST_CASE(
    "every failure of a small failing run quotes the same numbers in report.json, report.md and its replay",
    "[report][replay]") {
  const fs::path dir = fs::temp_directory_path() / ("ac_quoted_run_" + std::to_string(::getpid()));
  std::vector<ac_subject> raw;
  kern::append_mutant_subjects(raw, false);
  const Planted run[] = {
      {"mutant-fused-causal-off-by-one", "accuracy", AC_DTYPE_F16},
      {"mutant-fused-no-o-rescale", "accuracy", AC_DTYPE_F16},
      {"mutant-fused-no-o-rescale", "split_equals_whole", AC_DTYPE_F16},
      {"mutant-merge-no-inf-map", "merge_sentinels", AC_DTYPE_F32},
      {"mutant-merge-no-inf-map", "accuracy", AC_DTYPE_F32},
      {"mutant-merge-base2-as-e", "lse_convention", AC_DTYPE_F32},
      {"mutant-merge-base2-as-e", "accuracy", AC_DTYPE_F32},
  };
  std::vector<std::unique_ptr<AbiSubject>> subjects;
  auto subject = [&](const std::string& name) -> AbiSubject& {
    for (auto& s : subjects)
      if (s->name() == name) return *s;
    const auto it = std::find_if(raw.begin(), raw.end(), [&](const ac_subject& s) { return s.name == name; });
    REQUIRE(it != raw.end());
    subjects.push_back(std::make_unique<AbiSubject>(*it, "builtin-mutant"));
    return *subjects.back();
  };
  Report rep;
  rep.backend = "host";
  for (const Planted& p : run) {
    RunConfig cfg;
    cfg.seed = 1;
    cfg.num_cases = 100;
    cfg.corpus_dir = (dir / "corpus").string();
    cfg.shrink_seconds = 5;
    cfg.dtypes = {p.dtype};
    cfg.max_failures = 1;  // the first failure of each pair; run_and_replay covers the further ones
    rep.entries.push_back(
        entry_from_result(run_property(p.property, subject(p.subject), cfg), subject(p.subject), 0));
  }
  write_report_dir(dir.string(), rep);

  auto read = [](const fs::path& f) {
    std::ifstream in(f);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  const Report back = report_from_json(nlohmann::json::parse(read(dir / "report.json")));
  const std::string md = read(dir / "report.md");
  int replayed = 0;
  for (const ReportEntry& e : back.entries) {
    INFO(e.subject << " / " << e.property << ": " << e.status << " " << e.message);
    REQUIRE(e.status == "failed");
    REQUIRE(e.corpus_files.size() == 1);
    REQUIRE(!e.quoted.where.empty());
    const ReplayResult rr =
        replay_case(read_case_file(e.corpus_files[0]), subject(e.subject), e.corpus_files[0]);
    CHECK(!rr.passed);
    CHECK(rr.context == e.context);
    REQUIRE(!rr.worst_elements.empty());
    // What replay prints after its verdict, and report.md's quoted element.
    const std::string replay_line = element_line(rr.worst_elements.front());
    const std::string md_line = md_quoted_element(md, e.subject, e.property);
    CHECK(md_line == replay_line);
    for (const std::string& line : {md_line, replay_line}) {
      INFO(line);
      const PrintedNumbers n = read_element_line(line);
      CHECK(n.exact == e.quoted.exact);
      CHECK(n.output == e.quoted.output_bits);
      same_printed(n.ulp, e.quoted.ulp);
      same_printed(n.ratio, e.quoted.ratio);
    }
    ++replayed;
  }
  // Each pair is one that kills its mutant (kernels/mutants/README.md): every pair failed, and every
  // failure was replayed.
  CHECK(replayed == int(std::size(run)));
  fs::remove_all(dir);
}
