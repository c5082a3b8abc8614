// The case file format: bit-exact JSON round trips (including NaN/Inf LSEs, fp16 bit patterns,
// long tensors in base64), one-line CaseErrors for malformed and truncated input, atomic writes
// that leave no temporary files, and content-derived names.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "attncheck/case.hpp"

using namespace attncheck;
namespace fs = std::filesystem;

namespace {

Case merge_case() {
  Case c;
  c.op = "merge";
  c.subject = "merge";
  c.property = "merge_sentinels";
  c.seed = 18446744073709551615ull;  // the largest seed survives (stored as a string)
  c.rc_reproduce = "BCDE";
  c.note = "both empty";
  MergeInput m;
  m.dtype = AC_DTYPE_F16;
  m.num_tokens = 1;
  m.num_heads = 2;
  m.head_size = 3;
  m.prefix_out = {0x3c00, 0x8000, 0x7bff, 0x0001, 0xfc00, 0x7e00};
  m.suffix_out = {0, 1, 2, 3, 4, 5};
  m.prefix_lse = {-std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity()};
  m.suffix_lse = {std::nanf(""), -0.0f};
  c.input = m;
  return c;
}

Case attention_case(int keys) {
  Case c;
  c.op = "attention";
  c.subject = "fused";
  c.options.tiling = 2;
  AttentionInput a;
  a.dtype = AC_DTYPE_BF16;
  a.num_heads = 2;
  a.num_kv_heads = 1;
  a.head_size = 4;
  a.seqlens_q = {1, 2};
  a.seqlens_k = {keys, 1};
  a.causal = true;
  a.softmax_scale = 0.125f;
  a.mask.assign(size_t(keys + 2), 1);
  a.mask[0] = 0;
  a.q.assign(3 * 2 * 4, 0x3f80);
  for (int i = 0; i < (keys + 1) * 4; ++i) {
    a.k.push_back(uint32_t(i) * 7919u & 0xffffu);
    a.v.push_back(uint32_t(i) * 104729u & 0xffffu);
  }
  c.input = a;
  return c;
}

}  // namespace

TEST_CASE("case JSON round-trips bit-exactly", "[case]") {
  for (const Case& c : {merge_case(), attention_case(3), attention_case(200)}) {
    const std::string text = case_to_json(c);
    const Case back = case_from_json(text);
    CHECK(case_to_json(back) == text);  // the text determines every bit
    CHECK(back.seed == c.seed);
    CHECK(back.op == c.op);
    if (const auto* m = std::get_if<MergeInput>(&c.input)) {
      const auto& b = std::get<MergeInput>(back.input);
      CHECK(b.prefix_out == m->prefix_out);
      CHECK(std::isinf(b.prefix_lse[0]));
      CHECK(b.prefix_lse[0] < 0);
      CHECK(std::isnan(b.suffix_lse[0]));
      CHECK(std::signbit(b.suffix_lse[1]));
    } else {
      const auto& a = std::get<AttentionInput>(c.input);
      const auto& b = std::get<AttentionInput>(back.input);
      CHECK(b.k == a.k);
      CHECK(b.v == a.v);
      CHECK(b.mask == a.mask);
      CHECK(b.softmax_scale == a.softmax_scale);
      CHECK(back.options.tiling == 2);
    }
  }
  // Long tensors go to base64, short ones to hex.
  CHECK(case_to_json(attention_case(200)).find("b64:") != std::string::npos);
  CHECK(case_to_json(merge_case()).find("hex:") != std::string::npos);
}

// The fold order is written as "fold_order" (the worker protocol's word); files written before say
// "fold" and still read. The committed corpus/ files are such files.
TEST_CASE("case files: fold_order is written, and the older fold is read", "[case]") {
  Case c = attention_case(3);
  c.op = "splitkv";
  c.options.num_splits = 3;
  c.options.fold_order = AC_FOLD_TREE;
  const std::string text = case_to_json(c);
  CHECK(text.find("\"fold_order\": \"tree\"") != std::string::npos);
  CHECK(text.find("\"fold\"") == std::string::npos);
  CHECK(case_from_json(text).options.fold_order == AC_FOLD_TREE);
  auto with = [&](const std::string& fields) {
    std::string t = text;
    t.replace(t.find("\"fold_order\": \"tree\""), 20, fields);
    return t;
  };
  CHECK(case_from_json(with("\"fold\": \"right\"")).options.fold_order == AC_FOLD_RIGHT);
  CHECK(case_from_json(with("\"fold\": \"left\"")).options.fold_order == AC_FOLD_LEFT);
  // Both present: one of them would go unread, so the file is refused (even where they agree).
  CHECK_THROWS_WITH(case_from_json(with("\"fold\": \"left\", \"fold_order\": \"right\"")),
                    Catch::Equals("options has both fold_order and fold (its older name): give one"));
  CHECK_THROWS_AS(case_from_json(with("\"fold\": \"right\", \"fold_order\": \"right\"")), CaseError);
  // A wrong word names the field it was read from; neither field is a missing fold_order.
  CHECK_THROWS_WITH(case_from_json(with("\"fold\": \"middle\"")),
                    Catch::Contains("options.fold must be one of left, right, tree, not \"middle\""));
  CHECK_THROWS_WITH(case_from_json(with("\"fold_order\": \"middle\"")),
                    Catch::Contains("options.fold_order must be one of left, right, tree"));
  CHECK_THROWS_WITH(case_from_json(with("\"folds\": \"left\"")),
                    Catch::Contains("options: unknown field \"folds\""));
}

// A field a reader does not know is refused by name at every level, never read as absent: a case
// with "amx": true would otherwise run without the maxima it asks for. Fields that belong to
// another one are refused without it.
TEST_CASE("case files: an unknown or orphaned field is a CaseError naming it", "[case]") {
  const std::string text = case_to_json(attention_case(5));
  REQUIRE_NOTHROW(case_from_json(text));
  auto with_after = [&](const std::string& anchor, const std::string& field) {
    std::string t = text;
    const size_t at = t.find(anchor);
    REQUIRE(at != std::string::npos);
    t.insert(at + anchor.size(), field + ", ");
    return t;
  };
  CHECK_THROWS_WITH(case_from_json(with_after("\"input\": {", "\"amx\": true")),
                    Catch::Equals("input: unknown field \"amx\""));
  CHECK_THROWS_WITH(case_from_json(with_after("{", "\"comment\": \"x\"")),
                    Catch::Equals("case: unknown field \"comment\""));
  CHECK_THROWS_WITH(case_from_json(with_after("\"conventions\": {", "\"lse_bse\": 2")),
                    Catch::Equals("conventions: unknown field \"lse_bse\""));
  CHECK_THROWS_WITH(case_from_json(with_after("\"options\": {", "\"splits\": 2")),
                    Catch::Equals("options: unknown field \"splits\""));
  CHECK_THROWS_WITH(case_from_json(with_after("\"input\": {", "\"k_descale\": \"hex:0000803f\"")),
                    Catch::Equals("input.k_descale without kv_dtype (an FP8 cache's format)"));
  CHECK_THROWS_WITH(case_from_json(with_after("\"input\": {", "\"block_table\": [0]")),
                    Catch::Equals("input.block_table without page_size (paged K / V)"));
  // Every field the writer puts in a case of each op is one the reader knows: the round trips of
  // "case JSON round-trips bit-exactly" read them all back.
  const std::string merge_text = case_to_json(merge_case());
  std::string bad = merge_text;
  bad.insert(bad.find("\"input\": {") + 10, "\"seqlens_q\": [1], ");
  CHECK_THROWS_WITH(case_from_json(bad), Catch::Equals("input: unknown field \"seqlens_q\""));
}

TEST_CASE("malformed and truncated case files give a one-line CaseError", "[case]") {
  const std::string good = case_to_json(attention_case(40));
  std::vector<std::string> bad = {"", "{", "[]", "{\"format\":\"other\"}", good.substr(0, good.size() / 2)};
  // Every truncation point of a small case, and a few corruptions.
  const std::string small = case_to_json(merge_case());
  for (size_t n = 0; n < small.size() - 2; n += 7) bad.push_back(small.substr(0, n));
  std::string wrong_size = small;
  wrong_size.replace(wrong_size.find("\"num_heads\": 2"), 14, "\"num_heads\": 3");
  bad.push_back(wrong_size);
  std::string bad_hex = small;
  bad_hex.replace(bad_hex.find("hex:") + 4, 1, "z");
  bad.push_back(bad_hex);
  std::string bad_op = small;
  bad_op.replace(bad_op.find("\"merge\""), 7, "\"mergx\"");
  bad.push_back(bad_op);
  for (const std::string& text : bad) {
    try {
      (void)case_from_json(text);
      FAIL("accepted: " << text.substr(0, 80));
    } catch (const CaseError& e) {
      const std::string what = e.what();
      CHECK(!what.empty());
      CHECK(what.find('\n') == std::string::npos);
    }
  }
}

TEST_CASE("atomic write: content-named file, no temporaries, missing file is a CaseError", "[case]") {
  const fs::path dir = fs::temp_directory_path() / ("ac_case_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string p1 = write_case_atomic(dir.string(), merge_case());
  const std::string p2 = write_case_atomic(dir.string(), merge_case());
  CHECK(p1 == p2);
  const std::string p3 = write_case_atomic(dir.string(), attention_case(5));
  CHECK(p3 != p1);
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    ++files;
    CHECK(e.path().filename().string().rfind(".tmp", 0) != 0);
  }
  CHECK(files == 2);
  CHECK(case_to_json(read_case_file(p1)) == case_to_json(merge_case()));
  CHECK_THROWS_AS(read_case_file((dir / "missing.json").string()), CaseError);
  {
    std::ofstream f(dir / "trunc.json");
    f << case_to_json(merge_case()).substr(0, 100);
  }
  try {
    (void)read_case_file((dir / "trunc.json").string());
    FAIL("truncated file accepted");
  } catch (const CaseError& e) {
    CHECK(std::string(e.what()).find("trunc.json") != std::string::npos);
  }
  CHECK(describe_size(case_size(attention_case(5))) == "tokens=3 keys=5 heads=2 d=4");
  fs::remove_all(dir);
}

// The work bound: 2^32, or 2^13 per element of q, k and v the file holds. 2048 queries over 2048
// keys, 32 heads over 8, d = 128 (2^34 of work over 12.6 million elements, 1365 each: the long
// suite's layer at a quarter of its tokens) reads back. 16384 queries over 16384 keys, 32 heads
// over 1, d = 1 (2^33 of work over 557,056 elements, 15420 each) is refused before its tensors are
// decoded.
TEST_CASE("attention work: a large case reads back, one with too much work per element is refused",
          "[case]") {
  auto make = [](int32_t tokens, int32_t heads, int32_t kv_heads, int32_t d) {
    Case c;
    c.op.assign("attention");
    c.subject.assign("fused");
    AttentionInput a;
    a.num_heads = heads;
    a.num_kv_heads = kv_heads;
    a.head_size = d;
    a.seqlens_q = {tokens};
    a.seqlens_k = {tokens};
    a.q.assign(size_t(tokens) * heads * d, 0x3c00);
    a.k.resize(size_t(tokens) * kv_heads * d);
    for (size_t i = 0; i < a.k.size(); ++i) a.k[i] = uint32_t(i * 2654435761u) & 0x7bffu;
    a.v = a.k;
    c.input = std::move(a);
    return c;
  };
  const Case big = make(2048, 32, 8, 128);
  const Case back = case_from_json(case_to_json(big));
  CHECK(std::get<AttentionInput>(back.input).k == std::get<AttentionInput>(big.input).k);
  try {
    (void)case_from_json(case_to_json(make(16384, 32, 1, 1)));
    FAIL("accepted 15420 of work per element");
  } catch (const CaseError& e) {
    CHECK(std::string(e.what()).find("attention work") != std::string::npos);
  }
}

// Tensor texts of 2^16 characters and more are spliced into the dumped JSON (case.cpp). A case
// whose k and v are that long (80,004 elements each), with a note that holds what k's placeholder
// dumps as, reads back as written and writes the same text again.
TEST_CASE("long tensors are spliced into the text and read back; a note cannot pose as one", "[case]") {
  Case c = attention_case(20000);
  c.note = "\"k\": \"\x01k\x01\" and \x01v\x01";
  const auto& a = std::get<AttentionInput>(c.input);
  const std::string text = case_to_json(c);
  CHECK(text.find("\"k\": \"b64:") != std::string::npos);
  const Case back = case_from_json(text);
  CHECK(back.note == c.note);
  const auto& b = std::get<AttentionInput>(back.input);
  CHECK(b.q == a.q);
  CHECK(b.k == a.k);
  CHECK(b.v == a.v);
  CHECK(b.mask == a.mask);
  CHECK(case_to_json(back) == text);
}

// A subject's name is part of every corpus and write-ahead file name: however long it is, each
// part fits (three parts, a hash and a temporary suffix within NAME_MAX), and two long names that
// share their start stay two files.
TEST_CASE("case file names fit NAME_MAX and stay unique for long subject names", "[case]") {
  const std::string a(300, 'a'), b = a + "b", c = a + "c";
  CHECK(file_name_part(b).size() <= kMaxFileNamePart);
  CHECK(file_name_part(b) != file_name_part(c));
  CHECK(file_name_part(b).rfind(std::string(40, 'a'), 0) == 0);
  CHECK(file_name_part("merge-np") == "merge-np");  // a short name is as it was
  const fs::path dir = fs::temp_directory_path() / ("ac_case_names_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  Case k = merge_case();
  k.subject = b;
  const std::string kept = write_case_atomic(dir.string(), k);
  CHECK(fs::path(kept).filename().string().size() < 200);
  CHECK(read_case_file(kept).subject == b);
  CHECK(write_ahead_path(dir.string(), b, "accuracy") != write_ahead_path(dir.string(), c, "accuracy"));
  fs::remove_all(dir);
}

// A NaN or infinite softmax scale has no exact answer: the file is malformed (CaseError), never a
// case that fails.
TEST_CASE("a case file with a NaN or infinite softmax_scale is refused", "[case]") {
  const std::string text = case_to_json(attention_case(5));
  const std::string bits = "0x3e000000";  // 0.125f
  REQUIRE(text.find(bits) != std::string::npos);
  for (const char* bad : {"0x7fc00000", "0x7f800000", "0xff800000"}) {
    std::string t = text;
    t.replace(t.find(bits), bits.size(), bad);
    try {
      (void)case_from_json(t);
      FAIL("accepted softmax_scale_bits " << bad);
    } catch (const CaseError& e) {
      CHECK(std::string(e.what()).find("is not a finite float") != std::string::npos);
    }
  }
}
