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

// A valid split-KV subject (four splits, one tiling) for validate_subject's tests to spoil.
static ac_subject valid_splitkv_subject() {
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
  return s;
}

TEST_CASE("validate_subject names each missing piece", "[plugin]") {
  const ac_subject s = valid_splitkv_subject();
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

// Every declared number has a range (plugin_abi.h, AC_MAX_*), checked with one line naming it: a
// declaration past it would make attncheck allocate or loop without bound before any call.
TEST_CASE("validate_subject refuses declared numbers outside their ranges", "[plugin]") {
  ac_subject s = valid_splitkv_subject();
  s.caps.max_splits = AC_MAX_SPLITS;
  REQUIRE(attncheck::validate_subject(s).empty());
  const auto only = [](const ac_subject& x) {
    const auto p = attncheck::validate_subject(x);
    // Built with append rather than operator+: GCC 12 -Wrestrict misfires on that.
    return p.size() == 1 ? p.front() : std::string("problems: ").append(std::to_string(p.size()));
  };

  ac_subject splits = s;
  splits.caps.max_splits = INT32_MAX;
  CHECK(only(splits) == "caps.max_splits 2147483647 is out of range 0..1024");
  splits.caps.max_splits = -1;
  CHECK(attncheck::validate_subject(splits).front() == "caps.max_splits -1 is out of range 0..1024");
  ac_subject sizes = s;
  static const int32_t huge[] = {64, 1 << 30};
  sizes.caps.head_sizes = huge;
  sizes.caps.num_head_sizes = 2;
  CHECK(only(sizes) == "caps.head_sizes[1] 1073741824 is out of range 1..1024");
  sizes.caps.num_head_sizes = AC_MAX_HEAD_SIZES + 1;
  CHECK(only(sizes) == "caps.num_head_sizes 65 is out of range 1..64");
  ac_subject range = s;
  range.caps.head_size_min = AC_MAX_HEAD_SIZE + 1;
  range.caps.head_size_max = INT32_MAX;
  CHECK(only(range) == "caps.head_size_min 1025 is out of range 1..1024");
  range.caps.head_size_min = 1;  // open-ended: only sizes up to AC_MAX_HEAD_SIZE are drawn
  CHECK(attncheck::validate_subject(range).empty());
  ac_subject tile = s;
  static const ac_tiling wide[] = {{64, 1 << 20}};
  tile.caps.tilings = wide;
  CHECK(only(tile) == "tiling 0 (64, 1048576): Br or Bc is out of range 1..1024");
  tile.caps.tilings = s.caps.tilings;
  tile.caps.num_tilings = AC_MAX_TILINGS + 1;
  CHECK(only(tile).find("caps.num_tilings 65 is out of range 0..64") == 0);
  ac_subject named = s;
  const std::string long_name(AC_MAX_NAME_CHARS + 1, 'n');
  named.name = long_name.c_str();
  CHECK(only(named) == "name is 65 characters long, more than 64");
  const std::string just(AC_MAX_NAME_CHARS, 'n');
  named.name = just.c_str();
  CHECK(attncheck::validate_subject(named).empty());
}

// Version 2's contract word: read only from version-2 plugins; the version-1 rules still hold for
// version-1 subjects (no flags, at least one tiling).
TEST_CASE("ABI versions: v1 and v2 plugins load, flags are read only from v2", "[plugin][abi2]") {
  attncheck::LoadedPlugin v1 = attncheck::load_plugin(AC_EXAMPLE_PLUGIN);
  REQUIRE(!v1.subjects.empty());
  CHECK(v1.subjects.front()->caps().flags == 0u);
  CHECK(v1.subjects.front()->caps().empty_lse_sign == -1);
  CHECK(v1.subjects.front()->caps().head_size_max == 512);

  attncheck::LoadedPlugin v2 = attncheck::load_plugin(AC_EXAMPLE_PLUGIN_V2);
  REQUIRE(v2.subjects.size() == 1);
  attncheck::Subject& s = *v2.subjects.front();
  CHECK(s.name() == "example-merge-v2");
  CHECK(s.caps().flags == AC_CAP_FLUSHES_SUBNORMALS);
  attncheck::MergeInput in;
  in.dtype = AC_DTYPE_F32;
  in.num_tokens = 1;
  in.num_heads = 1;
  in.head_size = 1;
  in.prefix_out = {as_bits(4.0f)};
  in.suffix_out = {as_bits(8.0f)};
  in.prefix_lse = {0.0f};
  in.suffix_lse = {float(std::log(3.0))};
  CHECK(as_float(s.merge(in).out[0]) == Approx(7.0).epsilon(1e-6));
}

TEST_CASE("a version-1 subject read through the frozen layout keeps every field", "[plugin][abi2]") {
  static const int32_t sizes[] = {64, 128};
  ac_subject_v1 v{};
  v.name = "v1";
  v.description = "d";
  v.caps.ops = AC_OP_MERGE;
  v.caps.dtypes = AC_DTYPE_BIT(AC_DTYPE_F16);
  v.caps.head_sizes = sizes;
  v.caps.num_head_sizes = 2;
  v.caps.lse_base = 2;
  v.caps.lse_layout = AC_LSE_TOKENS_HEADS;
  v.caps.empty_lse_sign = 1;
  v.caps.fold_orders = 5;
  v.merge = [](void*, const ac_merge_args*, char*, size_t) { return 0; };
  const ac_subject s = attncheck::subject_from_v1(v);
  CHECK(std::string(s.name) == "v1");
  CHECK(s.caps.head_sizes == sizes);
  CHECK(s.caps.num_head_sizes == 2);
  CHECK(s.caps.lse_base == 2);
  CHECK(s.caps.lse_layout == AC_LSE_TOKENS_HEADS);
  CHECK(s.caps.empty_lse_sign == 1);
  CHECK(s.caps.fold_orders == 5u);
  CHECK(s.caps.flags == 0u);
  CHECK(s.merge == v.merge);
  CHECK(attncheck::validate_subject(s, 1).empty());
}

TEST_CASE("validate_subject: version-2 flags, undefined empty LSE, optional tilings", "[plugin][abi2]") {
  ac_subject s{};
  s.name = "black-box";
  s.description = "d";
  s.caps.ops = AC_OP_ATTENTION;
  s.caps.dtypes = AC_DTYPE_BIT(AC_DTYPE_F16);
  s.caps.head_size_min = 64;
  s.caps.head_size_max = 128;
  s.caps.empty_lse_sign = -1;
  s.attention = [](void*, const ac_attention_args*, char*, size_t) { return 0; };
  // No tilings: fine in version 2, refused in version 1.
  CHECK(attncheck::validate_subject(s, 2).empty());
  CHECK(attncheck::validate_subject(s, 1).size() == 1);
  ac_subject flagged = s;
  flagged.caps.flags = AC_CAP_REFUSES_ZERO_KEYS | AC_CAP_FLUSHES_SUBNORMALS;
  CHECK(attncheck::validate_subject(flagged, 2).empty());
  flagged.caps.flags = AC_CAP_EMPTY_STATES_ZERO_O;  // the latest bit within version 2
  CHECK(attncheck::validate_subject(flagged, 2).empty());
  ac_subject unknown = s;
  unknown.caps.flags = 1u << 20;
  CHECK(attncheck::validate_subject(unknown, 2).size() == 1);
  ac_subject undefined = s;
  undefined.caps.flags = AC_CAP_EMPTY_LSE_UNDEFINED;
  undefined.caps.empty_lse_sign = 0;
  CHECK(attncheck::validate_subject(undefined, 2).empty());
  undefined.caps.empty_lse_sign = -1;  // undefined with a sentinel: ambiguous
  CHECK(attncheck::validate_subject(undefined, 2).size() == 1);
  ac_subject zero_sign = s;
  zero_sign.caps.empty_lse_sign = 0;  // 0 without the flag
  CHECK(attncheck::validate_subject(zero_sign, 2).size() == 1);
}

TEST_CASE("validate_subject: a quantiser declares its function, its formats and nothing of attention's",
          "[plugin][quantize]") {
  ac_subject q{};
  q.name = "q";
  q.description = "d";
  q.caps.ops = AC_OP_QUANTIZE;
  q.caps.dtypes = AC_DTYPE_BIT(AC_DTYPE_F16);
  q.caps.head_size_min = 1;
  q.caps.head_size_max = 256;
  q.caps.empty_lse_sign = -1;
  q.caps.kv_dtypes = AC_DTYPE_BIT(AC_DTYPE_E4M3);
  q.caps.fp8 = AC_FP8_SATURATE | AC_FP8_DESCALE_PER_KV_HEAD;
  q.quantize = [](void*, const ac_quantize_args*, char*, size_t) { return 0; };
  CHECK(attncheck::validate_subject(q, 3).empty());
  // The FP8 cache's attention-only declarations mean nothing to a quantiser.
  ac_subject fp8_q = q;
  fp8_q.caps.fp8 |= AC_FP8_Q;
  CHECK(attncheck::validate_subject(fp8_q, 3).size() == 1);
  ac_subject no_fn = q;
  no_fn.quantize = nullptr;
  CHECK(attncheck::validate_subject(no_fn, 3) ==
        std::vector<std::string>{"declares quantize but the quantize function is NULL"});
  ac_subject no_format = q;
  no_format.caps.kv_dtypes = 0;
  no_format.caps.fp8 = 0;
  CHECK(attncheck::validate_subject(no_format, 3) ==
        std::vector<std::string>{"declares quantize but no FP8 format to write (caps.kv_dtypes)"});
  // Saturation is a quantiser's, a merge's or an FP8 output's declaration: an attention subject
  // makes it only beside AC_FP8_OUT, which only an attention or split-KV subject makes.
  ac_subject attention = valid_splitkv_subject();
  attention.caps.kv_dtypes = AC_DTYPE_BIT(AC_DTYPE_E4M3);
  attention.caps.fp8 = AC_FP8_SATURATE;
  CHECK(attncheck::validate_subject(attention, 3) ==
        std::vector<std::string>{
            "caps.fp8 declares AC_FP8_SATURATE (a quantiser's, a merge's or an FP8 output's "
            "casts) without AC_OP_QUANTIZE, AC_OP_MERGE or AC_FP8_OUT"});
  attention.caps.fp8 = AC_FP8_SATURATE | AC_FP8_OUT;
  CHECK(attncheck::validate_subject(attention, 3).empty());
  ac_subject quantiser_out = q;
  quantiser_out.caps.fp8 |= AC_FP8_OUT;
  CHECK(attncheck::validate_subject(quantiser_out, 3) ==
        std::vector<std::string>{
            "caps.fp8 declares AC_FP8_OUT (an attention's FP8 output) without attention or split-KV"});
  // The maxima are an attention's outputs too.
  ac_subject quantiser_amax = q;
  quantiser_amax.caps.fp8 |= AC_FP8_AMAX;
  CHECK(
      attncheck::validate_subject(quantiser_amax, 3) ==
      std::vector<std::string>{
          "caps.fp8 declares AC_FP8_AMAX (an attention's maxima of P and O) without attention or split-KV"});
  attention.caps.fp8 = AC_FP8_AMAX;
  CHECK(attncheck::validate_subject(attention, 3).empty());
  attention.caps.fp8 = AC_FP8_Q_REQUIRED;
  CHECK(attncheck::validate_subject(attention, 3) ==
        std::vector<std::string>{
            "caps.fp8 declares AC_FP8_Q_REQUIRED (every FP8 call with Q in FP8) without AC_FP8_Q"});
  // A merge writing FP8 outputs declares their saturating cast.
  ac_subject merge = q;
  merge.caps.ops = AC_OP_MERGE;
  merge.quantize = nullptr;
  merge.merge = [](void*, const ac_merge_args*, char*, size_t) { return 0; };
  CHECK(attncheck::validate_subject(merge, 3).empty());
  merge.caps.fp8 = 0;
  CHECK(attncheck::validate_subject(merge, 3) ==
        std::vector<std::string>{
            "a merge writing FP8 outputs (caps.kv_dtypes) declares their saturating cast (AC_FP8_SATURATE)"});
}
