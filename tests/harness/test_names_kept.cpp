// The one file-name rule (file_name_part, case.hpp) and the one message rule (json_fields::printable)
// each replaced two rules that differed, and each is the stricter of its two. What both old rules
// accepted comes out as before: every name the built-in subjects, the properties and the ops have
// (so every case file the gate writes keeps its name), and every quoted text of printable ASCII
// (so the worker's messages keep their wording). Only names and texts the stricter rule refuses
// change: a '.' in a plugin's subject name becomes '_', a control byte in a worker's reply \xNN.
#include <rapidcheck.h>
#include <rapidcheck/catch.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "attncheck/case.hpp"
#include "attncheck/json_fields.hpp"
#include "attncheck/names.hpp"
#include "attncheck/plugin_abi.h"
#include "attncheck/properties.hpp"
#include "common/registry.h"

namespace ac = attncheck;
namespace fs = std::filesystem;

namespace {

// Strings of the bytes both file-name rules kept: letters, digits, '-' and '_'.
rc::Gen<std::string> kept_name() {
  const std::string alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_";
  return rc::gen::nonEmpty(rc::gen::container<std::string>(rc::gen::elementOf(alphabet)));
}

}  // namespace

TEST_CASE("file_name_part keeps every op, property and built-in subject name", "[names]") {
  for (uint32_t op : {AC_OP_MERGE, AC_OP_SOFTMAX, AC_OP_ATTENTION, AC_OP_SPLITKV})
    CHECK(ac::file_name_part(ac::op_name(op)) == ac::op_name(op));
  for (const ac::PropertyInfo& p : ac::all_properties()) CHECK(ac::file_name_part(p.name) == p.name);
  std::vector<ac_subject> subjects = ac::kern::builtin_subjects(false);
  if (ac::kern::built_with_cuda()) {
    const std::vector<ac_subject> cuda = ac::kern::builtin_subjects(true);
    subjects.insert(subjects.end(), cuda.begin(), cuda.end());
  }
  ac::kern::append_mutant_subjects(subjects, false);
  REQUIRE(subjects.size() > 10);
  for (const ac_subject& s : subjects) CHECK(ac::file_name_part(s.name) == s.name);
}

TEST_CASE("file_name_part: letters, digits, '-' and '_' kept, any other byte '_', never empty", "[names]") {
  rc::prop("a name of kept bytes within kMaxFileNamePart is unchanged", [] {
    const std::string name = *kept_name();
    RC_PRE(name.size() <= ac::kMaxFileNamePart);
    RC_ASSERT(ac::file_name_part(name) == name);
  });
  CHECK(ac::file_name_part("") == "none");
  CHECK(ac::file_name_part("my.kernel") == "my_kernel");  // the one change for a valid plugin name
  CHECK(ac::file_name_part("../x") == "___x");
  CHECK(ac::file_name_part("a/b c\n") == "a_b_c_");
  CHECK(ac::file_name_part("\xc3\xa9") == "__");  // one '_' a byte
}

TEST_CASE("a case file is named <op>-<subject>-<property>-<hash>.json", "[names]") {
  const fs::path dir = fs::temp_directory_path() / ("ac_names_kept_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  ac::Case c;
  c.op = "softmax";
  c.subject = "fused-hopper";
  c.property = "no_spurious_nonfinite";
  ac::SoftmaxInput in;
  in.dtype = AC_DTYPE_F32;
  in.rows = 1;
  in.cols = 1;
  in.x = {0x3f800000u};
  c.input = in;
  const std::string name = fs::path(ac::write_case_atomic(dir.string(), c)).filename().string();
  CHECK(name.rfind("softmax-fused-hopper-no_spurious_nonfinite-", 0) == 0);
  CHECK(name.size() == std::string("softmax-fused-hopper-no_spurious_nonfinite-").size() + 16 + 5);
  CHECK(name.substr(name.size() - 5) == ".json");
  fs::remove_all(dir);
}

TEST_CASE("printable: printable ASCII is quoted as before, cut after max characters", "[names]") {
  // The worker's messages quoted with this rule: the first max characters, then "..." when cut.
  rc::prop("printable ASCII", [] {
    const std::string text = *rc::gen::container<std::string>(rc::gen::inRange<char>(0x20, 0x7f));
    const size_t max = *rc::gen::inRange<size_t>(1, 300);
    RC_ASSERT(ac::json_fields::printable(text, max) ==
              text.substr(0, max) + (text.size() > max ? "..." : ""));
  });
  // The boundary: exactly max characters are not cut.
  CHECK(ac::json_fields::printable(std::string(60, 'a'), 60) == std::string(60, 'a'));
  CHECK(ac::json_fields::printable(std::string(61, 'a'), 60) == std::string(60, 'a') + "...");
  // Other bytes are escaped (the worker's quotes wrote '?'): the byte stays readable.
  CHECK(ac::json_fields::printable("a\tb\xff", 60) == "a\\x09b\\xff");
}
