// Plugin loading: the example plugin (examples/plugin_wrap_builtin) loads and runs through the
// same adapter as built-ins; the deliberately broken plugins are refused with one line naming the
// file and the problem. The merge expectation is hand-derived: prefix LSE 0 and suffix LSE ln 3
// weigh prefix 4 and suffix 8 as 1/4 and 3/4, giving 7 (fp32, within an ulp or two of the
// kernel's expf/logf); the merged LSE is ln 4.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "attncheck/plugin.hpp"

#ifndef AC_EXAMPLE_PLUGIN
#error "AC_EXAMPLE_PLUGIN must name the example plugin's path"
#endif

namespace {
std::string load_error(const std::string& path) {
  try {
    attncheck::load_plugin(path);
  } catch (const attncheck::PluginError& e) {
    return e.what();
  }
  return "";
}
float as_float(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
uint32_t as_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
}  // namespace

TEST_CASE("the example plugin loads and merges", "[plugin]") {
  attncheck::LoadedPlugin p = attncheck::load_plugin(AC_EXAMPLE_PLUGIN);
  REQUIRE(!p.subjects.empty());
  attncheck::Subject& s = *p.subjects.front();
  CHECK(s.name() == "example-merge");
  CHECK(s.backend() == "host");
  CHECK(s.origin() == AC_EXAMPLE_PLUGIN);
  CHECK(s.has_op(AC_OP_MERGE));
  attncheck::MergeInput in;
  in.dtype = AC_DTYPE_F32;
  in.num_tokens = 1;
  in.num_heads = 2;
  in.head_size = 3;
  in.prefix_out.assign(6, as_bits(4.0f));
  in.suffix_out.assign(6, as_bits(8.0f));
  in.prefix_lse.assign(2, 0.0f);
  in.suffix_lse.assign(2, float(std::log(3.0)));
  const attncheck::MergeOutput out = s.merge(in);
  for (uint32_t b : out.out) CHECK(as_float(b) == Approx(7.0).epsilon(1e-6));
  for (float l : out.lse) CHECK(l == Approx(std::log(4.0)).epsilon(1e-6));
}

TEST_CASE("broken plugins are refused with one line naming file and problem", "[plugin]") {
  const std::string dir = AC_PLUGIN_DIR;
  const std::string wrong = load_error(dir + "/libattncheck_bad_wrong_abi.so");
  CHECK(wrong.find("libattncheck_bad_wrong_abi.so") != std::string::npos);
  CHECK(wrong.find("ABI version 99") != std::string::npos);
  const std::string missing = load_error(dir + "/libattncheck_bad_missing_symbol.so");
  CHECK(missing.find("missing symbol attncheck_plugin_abi_version") != std::string::npos);
  const std::string caps = load_error(dir + "/libattncheck_bad_bad_caps.so");
  CHECK(caps.find("'no-tilings'") != std::string::npos);
  const std::string absent = load_error(dir + "/no-such-plugin.so");
  CHECK(absent.find("cannot load") != std::string::npos);
  for (const std::string* m : {&wrong, &missing, &caps, &absent}) CHECK(m->find('\n') == std::string::npos);
}

TEST_CASE("validate_subject names each missing piece", "[plugin]") {
  static const ac_tiling tilings[] = {{64, 64}};
  ac_subject s{};
  s.name = "ok-name";
  s.description = "d";
  s.caps.ops = AC_OP_SPLITKV;
  s.caps.dtypes = AC_DTYPE_BIT(AC_DTYPE_F16);
  s.caps.head_size_min = 64;
  s.caps.head_size_max = 128;
  s.caps.empty_lse_sign = -1;
  s.caps.tilings = tilings;
  s.caps.num_tilings = 1;
  s.caps.max_splits = 4;
  s.caps.fold_orders = AC_FOLD_BIT(AC_FOLD_LEFT);
  s.attention = [](void*, const ac_attention_args*, char*, size_t) { return 0; };
  CHECK(attncheck::validate_subject(s).empty());

  ac_subject bad_name = s;
  bad_name.name = "has space";
  CHECK(attncheck::validate_subject(bad_name).size() == 1);
  ac_subject no_fn = s;
  no_fn.attention = nullptr;
  CHECK(attncheck::validate_subject(no_fn).size() == 1);
  ac_subject no_splits = s;
  no_splits.caps.max_splits = 0;
  CHECK(attncheck::validate_subject(no_splits).size() == 1);
  ac_subject zero_tile = s;
  static const ac_tiling zero[] = {{0, 64}};
  zero_tile.caps.tilings = zero;
  CHECK(attncheck::validate_subject(zero_tile).size() == 1);
  ac_subject bad_sign = s;
  bad_sign.caps.empty_lse_sign = 0;
  CHECK(attncheck::validate_subject(bad_sign).size() == 1);
}
