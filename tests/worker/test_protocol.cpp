// The handshake's capability words: every built-in subject's ac_caps written as words and read
// back is the same ac_caps (the C structs of kernels/ are the independent source), and unknown
// words are refused with a message naming the field. Protocol 4's variants: their subject fields,
// and an attention call's variant fields carried from WorkerSubject through a served worker
// (serve.cpp's answer) to the subject bit for bit.
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "attncheck/abi_subject.hpp"
#include "attncheck/case.hpp"
#include "attncheck/plugin.hpp"
#include "process.hpp"
#include "protocol.hpp"
#include "serve.hpp"
#include "worker_subject.hpp"

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
    // Every variant is carried, V inside K too (v_in_k).
    CHECK(d.caps.variants == c.variants);
    REQUIRE(d.caps.num_page_sizes == (c.page_sizes ? c.num_page_sizes : 0));
    for (int32_t i = 0; i < d.caps.num_page_sizes; ++i) CHECK(d.caps.page_sizes[i] == c.page_sizes[i]);
    REQUIRE(d.caps.num_head_pairs == (c.head_pairs ? c.num_head_pairs : 0));
    for (int32_t i = 0; i < d.caps.num_head_pairs; ++i) {
      CHECK(d.caps.head_pairs[i].qk == c.head_pairs[i].qk);
      CHECK(d.caps.head_pairs[i].v == c.head_pairs[i].v);
    }
  }
}

namespace {
// A host subject of head sizes 1..8, LSE [heads, tokens], no tilings, splits or variants.
ac_caps small_caps(uint32_t ops, ac_dtype dtype, int32_t empty_lse_sign, uint32_t features, uint32_t flags) {
  ac_caps c{};
  c.ops = ops;
  c.dtypes = AC_DTYPE_BIT(dtype);
  c.memory = AC_MEMORY_HOST;
  c.head_size_min = 1;
  c.head_size_max = 8;
  c.lse_layout = AC_LSE_HEADS_TOKENS;
  c.empty_lse_sign = empty_lse_sign;
  c.features = features;
  c.flags = flags;
  return c;
}
}  // namespace

TEST_CASE("unknown handshake words are refused, naming the field", "[worker]") {
  auto j = w::caps_to_json("x", "", small_caps(AC_OP_MERGE, AC_DTYPE_F32, -1, 0, 0));
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
  // The quantiser is a protocol-4 operation: refused by name in a version-3 reply.
  bad = j;
  bad["ops"] = {"quantize"};
  CHECK_THROWS_WITH(w::caps_from_json(bad, 3),
                    Catch::Contains("'ops' holds \"quantize\", which needs protocol 4"));
}

// The words every set field is written with, in order, as harness/WORKER_PROTOCOL.md lists them and
// the Python SDK declares them (python/attncheck/_caps.py): a subject with every bit set.
TEST_CASE("the handshake's words are the protocol document's, in its order", "[worker]") {
  ac_caps c{};
  c.ops = AC_OP_MERGE | AC_OP_SOFTMAX | AC_OP_ATTENTION | AC_OP_SPLITKV | AC_OP_QUANTIZE;
  c.dtypes = AC_DTYPE_BIT(AC_DTYPE_F32) | AC_DTYPE_BIT(AC_DTYPE_F16) | AC_DTYPE_BIT(AC_DTYPE_BF16);
  c.head_size_min = 1;
  c.head_size_max = 8;
  c.empty_lse_sign = -1;
  c.features = 0xffu;
  c.max_splits = 4;
  c.fold_orders = AC_FOLD_BIT(AC_FOLD_LEFT) | AC_FOLD_BIT(AC_FOLD_RIGHT) | AC_FOLD_BIT(AC_FOLD_TREE);
  const auto j = w::caps_to_json("x", "", c);
  using L = std::vector<std::string>;
  CHECK(j["ops"].get<L>() == L{"merge", "softmax", "attention", "splitkv", "quantize"});
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
  auto j = w::caps_to_json(
      "x", "",
      small_caps(AC_OP_ATTENTION, AC_DTYPE_F16, 0, AC_FEAT_LSE,
                 AC_CAP_REFUSES_ZERO_KEYS | AC_CAP_FLUSHES_SUBNORMALS | AC_CAP_EMPTY_LSE_UNDEFINED |
                     AC_CAP_NONDETERMINISTIC | AC_CAP_FTZ_ARITHMETIC | AC_CAP_BATCH_INVARIANT |
                     AC_CAP_EMPTY_STATES_ZERO_O));
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
  auto merge =
      w::caps_to_json("m", "", small_caps(AC_OP_MERGE, AC_DTYPE_F16, -1, 0, AC_CAP_EMPTY_STATES_ZERO_O));
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

namespace {

const int32_t kPageSizes[] = {1, 2, 16, 4096};  // 2: variant_input's
const ac_head_pair kHeadPairs[] = {{192, 128}, {8, 4}};

// An attention subject declaring every variant, its page sizes and head pairs.
ac_caps variant_caps(uint32_t variants) {
  ac_caps c{};
  c.ops = AC_OP_ATTENTION;
  c.dtypes = AC_DTYPE_BIT(AC_DTYPE_F16) | AC_DTYPE_BIT(AC_DTYPE_F32);
  c.memory = AC_MEMORY_HOST;
  c.head_size_min = 1;
  c.head_size_max = 256;
  c.empty_lse_sign = -1;
  c.features = AC_FEAT_CAUSAL | AC_FEAT_MASK | AC_FEAT_VARLEN | AC_FEAT_GQA | AC_FEAT_LSE;
  c.variants = variants;
  if (variants & AC_VAR_PAGED_KV) {
    c.page_sizes = kPageSizes;
    c.num_page_sizes = 4;
  }
  if (variants & AC_VAR_HEAD_SIZE_V) {
    c.head_pairs = kHeadPairs;
    c.num_head_pairs = 2;
  }
  return c;
}

bool one_line(const std::string& s) { return s.find('\n') == std::string::npos; }

}  // namespace

TEST_CASE("protocol 4 subject fields: variants, page sizes and head pairs round-trip", "[worker]") {
  // V inside K is carried like the others (the request's v_in_k, no v input).
  const uint32_t all = AC_VAR_KNOWN_V3;
  const auto j = w::caps_to_json("v", "", variant_caps(all));
  using L = std::vector<std::string>;
  CHECK(j["variants"].get<L>() == L{"paged_kv", "head_size_v", "softcap", "window", "sinks", "v_in_k"});
  CHECK(j["page_sizes"] == nlohmann::json({1, 2, 16, 4096}));
  CHECK(j["head_pairs"] == nlohmann::json({{192, 128}, {8, 4}}));
  auto d = std::make_unique<w::DeclaredSubject>(w::caps_from_json(j, 4));
  // A copy owns its arrays: the original's are gone when it is read.
  const w::DeclaredSubject copy = *d;
  d.reset();
  CHECK(copy.caps.variants == all);
  REQUIRE(copy.caps.num_page_sizes == 4);
  CHECK(copy.caps.page_sizes == copy.page_sizes.data());
  CHECK(std::vector<int32_t>(copy.caps.page_sizes, copy.caps.page_sizes + 4) ==
        std::vector<int32_t>{1, 2, 16, 4096});
  REQUIRE(copy.caps.num_head_pairs == 2);
  CHECK(copy.caps.head_pairs == copy.head_pairs.data());
  CHECK((copy.caps.head_pairs[0].qk == 192 && copy.caps.head_pairs[0].v == 128));
  CHECK((copy.caps.head_pairs[1].qk == 8 && copy.caps.head_pairs[1].v == 4));
  // Validated as ABI version 3 declarations: accepted from protocol 4, not as version 2.
  ac_subject s{};
  s.name = "v";
  s.description = "";
  s.caps = copy.caps;
  s.attention = [](void*, const ac_attention_args*, char*, size_t) { return AC_OK; };
  CHECK(w::abi_version_of_protocol(4) == 3u);
  CHECK(w::abi_version_of_protocol(3) == 2u);
  CHECK(w::abi_version_of_protocol(1) == 1u);
  CHECK(ac::validate_subject(s, w::abi_version_of_protocol(4)).empty());
  CHECK(!ac::validate_subject(s, w::abi_version_of_protocol(3)).empty());
  // One word alone is its one word; a subject without variants is written as in version 3.
  CHECK(w::caps_to_json("v", "", variant_caps(AC_VAR_SINKS))["variants"].get<L>() == L{"sinks"});
  const auto plain = w::caps_to_json("v", "", variant_caps(0));
  CHECK(!plain.contains("variants"));
  CHECK(!plain.contains("page_sizes"));
  CHECK(!plain.contains("head_pairs"));
  CHECK(w::caps_from_json(plain, 3).caps.variants == 0u);
}

TEST_CASE("protocol 4 subject fields are refused in older replies and out of range", "[worker]") {
  const auto j = w::caps_to_json("v", "", variant_caps(AC_VAR_KNOWN_V3));
  auto refused = [](const nlohmann::json& decl, int protocol) {
    try {
      w::caps_from_json(decl, protocol);
    } catch (const w::ProtocolError& e) {
      CHECK(one_line(e.what()));
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  // A version-3 reply that uses them: refused, naming the field.
  auto v3 = j;
  CHECK(refused(v3, 3) == "'variants' needs protocol 4 (the worker answered protocol 3)");
  v3.erase("variants");
  CHECK(refused(v3, 3) == "'page_sizes' needs protocol 4 (the worker answered protocol 3)");
  v3.erase("page_sizes");
  CHECK(refused(v3, 2) == "'head_pairs' needs protocol 4 (the worker answered protocol 2)");
  // Empty lists declare nothing: a version-3 reader ignored them, and so does this one.
  v3["variants"] = nlohmann::json::array();
  v3["page_sizes"] = nlohmann::json::array();
  v3["head_pairs"] = nlohmann::json::array();
  CHECK(refused(v3, 3) == "accepted");
  // Bad values, each one line naming the field.
  auto bad = j;
  bad["page_sizes"] = {16, 0};
  CHECK(refused(bad, 4) == "'page_sizes[1]' 0 is out of range 1..4096");
  bad["page_sizes"] = {4097};
  CHECK(refused(bad, 4) == "'page_sizes[0]' 4097 is out of range 1..4096");
  bad["page_sizes"] = std::vector<int>(AC_MAX_PAGE_SIZES + 1, 16);
  CHECK(refused(bad, 4) == "'page_sizes' holds 17 sizes, more than 16");
  bad["page_sizes"] = "16";
  CHECK(refused(bad, 4) == "'page_sizes' must be a list of integers");
  bad["page_sizes"] = {1.5};
  CHECK(refused(bad, 4) == "'page_sizes[0]' must be an integer");
  bad = j;
  bad["head_pairs"] = {{192, 0}};
  CHECK(refused(bad, 4) == "'head_pairs[0]' 0 is out of range 1..1024");
  bad["head_pairs"] = {{192, 128}, {0, 64}};
  CHECK(refused(bad, 4) == "'head_pairs[1]' 0 is out of range 1..1024");
  bad["head_pairs"] = {{192, 128, 1}};
  CHECK(refused(bad, 4) == "'head_pairs[0]' must be a [qk, v] pair of integers");
  bad["head_pairs"] = {{2000, 128}};
  CHECK(refused(bad, 4) == "'head_pairs[0]' 2000 is out of range 1..1024");
  bad = j;
  bad["variants"] = {"paged"};
  CHECK(refused(bad, 4) ==
        "unknown word 'paged' in 'variants' (known: paged_kv, head_size_v, softcap, window, sinks, v_in_k)");
  // Lists that disagree with the variants are validate_subject's to refuse, as for a plugin.
  bad = j;
  bad["variants"] = {"softcap"};
  const w::DeclaredSubject d = w::caps_from_json(bad, 4);
  ac_subject s{};
  s.name = "v";
  s.description = "";
  s.caps = d.caps;
  s.attention = [](void*, const ac_attention_args*, char*, size_t) { return AC_OK; };
  const auto problems = ac::validate_subject(s, 3);
  REQUIRE(!problems.empty());
  CHECK(problems.front() == "caps.page_sizes given without AC_VAR_PAGED_KV");
  // A page size named twice, and V inside K with no pair whose V is narrower than K (V inside K is
  // drawn only for such a pair, so the declaration would never run).
  bad = j;
  bad["page_sizes"] = {16, 64, 16};
  const w::DeclaredSubject twice = w::caps_from_json(bad, 4);
  s.caps = twice.caps;
  CHECK(ac::validate_subject(s, 3) == std::vector<std::string>{"caps.page_sizes[2] 16 is named twice"});
  bad = j;
  bad["head_pairs"] = {{64, 128}, {128, 128}};
  const w::DeclaredSubject wide_v = w::caps_from_json(bad, 4);
  s.caps = wide_v.caps;
  CHECK(ac::validate_subject(s, 3) ==
        std::vector<std::string>{
            "declares AC_VAR_V_IN_K (V inside K) but no caps.head_pairs entry has V's head size below K's"});
}

namespace {

// A subject that records the inputs it is called with and answers with outputs derived from nothing
// but their shapes, so that a call's inputs and outputs can be compared bit for bit across the
// protocol.
class RecordingSubject final : public ac::Subject {
 public:
  // kv_dtypes: the FP8 KV cache formats it declares (descales per KV head with them).
  RecordingSubject(std::string name, uint32_t variants, uint32_t kv_dtypes = 0)
      : name_(std::move(name)), caps_(variant_caps(variants)) {
    caps_.kv_dtypes = kv_dtypes;
    caps_.fp8 = kv_dtypes ? AC_FP8_DESCALE_PER_KV_HEAD : 0u;
  }
  const std::string& name() const override { return name_; }
  const std::string& description() const override { return name_; }
  const ac_caps& caps() const override { return caps_; }
  std::string backend() const override { return "host"; }
  std::string origin() const override { return "test"; }
  ac::MergeOutput merge(const ac::MergeInput&) override {
    throw ac::SubjectError(ac::SubjectError::Kind::unsupported, "no merge");
  }
  ac::SoftmaxOutput softmax(const ac::SoftmaxInput&) override {
    throw ac::SubjectError(ac::SubjectError::Kind::unsupported, "no softmax");
  }
  ac::AttentionOutput attention(const ac::AttentionInput& in, const ac::AttentionOptions& opt) override {
    // As AbiSubject does: an undeclared variant is refused.
    if (const std::string what = ac::undeclared_variant(in, caps_.variants); !what.empty())
      throw ac::SubjectError(ac::SubjectError::Kind::unsupported, name_ + " does not declare " + what);
    seen.push_back(in);
    options.push_back(opt);
    int64_t tq = 0;
    for (int32_t t : in.seqlens_q) tq += t;
    ac::AttentionOutput o;
    const size_t n = size_t(tq * in.num_heads * in.dv());
    for (size_t i = 0; i < n; ++i) o.out.push_back(uint32_t(0x3000u + (i * 37u) % 0x0bffu));  // finite fp16
    for (int64_t i = 0; i < tq * in.num_heads; ++i) o.lse.push_back(0.25f * float(i) - 3.0f);
    return o;
  }
  std::vector<ac::AttentionInput> seen;
  std::vector<ac::AttentionOptions> options;

 private:
  std::string name_;
  ac_caps caps_;
};

// A device server in a thread (serve.hpp's protocol over a Unix socket: the arena's fd first, then
// request lines), answering with serve.cpp's answer(), hello answered as `protocol` (a version-3
// server leaves its subjects' variant fields out, as a version-3 worker would).
class TestServer {
 public:
  TestServer(std::vector<std::unique_ptr<ac::Subject>> subjects, int protocol)
      : subjects_(std::move(subjects)), protocol_(protocol) {
    char dir[] = "/tmp/ac-proto-XXXXXX";
    REQUIRE(::mkdtemp(dir) != nullptr);
    dir_ = dir;
    path = dir_ + "/s";
    listen_ = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    REQUIRE(::bind(listen_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(::listen(listen_, 4) == 0);
    thread_ = std::thread([this] { serve(); });
  }
  ~TestServer() {
    ::shutdown(listen_, SHUT_RDWR);
    ::close(listen_);
    thread_.join();
    ::unlink(path.c_str());
    ::rmdir(dir_.c_str());
  }
  ac::Subject& subject(size_t i) { return *subjects_[i]; }
  std::string path;

 private:
  void serve() {
    const int fd = ::accept(listen_, nullptr, nullptr);
    if (fd < 0) return;
    w::ArenaMap arena;
    arena.fd = w::receive_fd(fd);
    std::string buf;
    char chunk[4096];
    for (;;) {
      const size_t nl = buf.find('\n');
      if (nl == std::string::npos) {
        const ssize_t n = ::read(fd, chunk, sizeof chunk);
        if (n <= 0) break;
        buf.append(chunk, size_t(n));
        continue;
      }
      const nlohmann::json r = nlohmann::json::parse(buf.substr(0, nl));
      buf.erase(0, nl + 1);
      nlohmann::json out;
      if (r.at("op") == "hello") {
        out = w::hello_reply(subjects_, "test server");
        out["protocol"] = protocol_;
        if (protocol_ < 4)
          for (auto& d : out["subjects"])
            for (const char* f : {"variants", "page_sizes", "head_pairs"}) d.erase(f);
      } else {
        out = w::answer(r, subjects_, arena);
      }
      const std::string line = w::with_seq(r, out).dump() + "\n";
      if (::write(fd, line.data(), line.size()) != ssize_t(line.size())) break;
    }
    if (arena.base) ::munmap(arena.base, arena.size);
    if (arena.fd >= 0) ::close(arena.fd);
    ::close(fd);
  }

  std::vector<std::unique_ptr<ac::Subject>> subjects_;
  int protocol_;
  std::string dir_;
  int listen_ = -1;
  std::thread thread_;
};

ac::Bits pattern(size_t n, uint32_t seed) {
  ac::Bits b(n);
  for (size_t i = 0; i < n; ++i)
    b[i] = 0x2c00u + uint32_t((i * 2654435761u + seed) % 0x1000u);  // finite fp16
  return b;
}

// Two sequences (2 x 5 and 3 x 3 keys) of four query heads over two KV heads, QK head size 8 and V
// head size 4, K / V in pages of 2 (five named by the table, one never named, the entries past a
// sequence's last page naming page 0), a causal mask, a softcap, a window and sinks.
ac::AttentionInput variant_input() {
  ac::AttentionInput a;
  a.dtype = AC_DTYPE_F16;
  a.num_heads = 4;
  a.num_kv_heads = 2;
  a.head_size = 8;
  a.head_size_v = 4;
  a.seqlens_q = {2, 3};
  a.seqlens_k = {5, 3};
  a.causal = true;
  a.softmax_scale = 0.35355339f;
  a.softcap = 11.3f;
  a.window_left = 3;
  a.window_right = 0;
  a.sinks = {0.5f, -1.25f, 12.1f, -30.3f};
  a.page_size = 2;
  a.num_pages = 7;
  a.max_blocks = 4;
  a.block_table = {6, 1, 3, 0, 2, 5, 0, 0};
  a.mask.resize(2 * 5 + 3 * 3);
  for (size_t i = 0; i < a.mask.size(); ++i) a.mask[i] = uint8_t(i % 3 != 1);
  a.q = pattern(5 * 4 * 8, 1);
  a.k = pattern(7 * 2 * 2 * 8, 2);
  a.v = pattern(7 * 2 * 2 * 4, 3);
  return a;
}

uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

void require_same_input(const ac::AttentionInput& got, const ac::AttentionInput& want) {
  CHECK(got.dtype == want.dtype);
  CHECK(got.num_heads == want.num_heads);
  CHECK(got.num_kv_heads == want.num_kv_heads);
  CHECK(got.head_size == want.head_size);
  CHECK(got.head_size_v == want.head_size_v);
  CHECK(got.seqlens_q == want.seqlens_q);
  CHECK(got.seqlens_k == want.seqlens_k);
  CHECK(got.causal == want.causal);
  CHECK(got.mask == want.mask);
  CHECK(bits_of(got.softmax_scale) == bits_of(want.softmax_scale));
  CHECK(bits_of(got.softcap) == bits_of(want.softcap));
  CHECK(got.window_left == want.window_left);
  CHECK(got.window_right == want.window_right);
  REQUIRE(got.sinks.size() == want.sinks.size());
  for (size_t i = 0; i < got.sinks.size(); ++i) CHECK(bits_of(got.sinks[i]) == bits_of(want.sinks[i]));
  CHECK(got.page_size == want.page_size);
  CHECK(got.num_pages == want.num_pages);
  CHECK(got.max_blocks == want.max_blocks);
  CHECK(got.block_table == want.block_table);
  CHECK(got.q == want.q);
  CHECK(got.k == want.k);
  CHECK(got.v == want.v);
  CHECK(got.kv_dtype == want.kv_dtype);
  REQUIRE(got.k_descale.size() == want.k_descale.size());
  for (size_t i = 0; i < got.k_descale.size(); ++i)
    CHECK(bits_of(got.k_descale[i]) == bits_of(want.k_descale[i]));
  REQUIRE(got.v_descale.size() == want.v_descale.size());
  for (size_t i = 0; i < got.v_descale.size(); ++i)
    CHECK(bits_of(got.v_descale[i]) == bits_of(want.v_descale[i]));
}

// The subjects of a test server, served to this process as served_subjects serves the built-ins.
std::vector<std::unique_ptr<ac::Subject>> served(TestServer& server, std::vector<std::string> names,
                                                 uint32_t variants, uint32_t kv_dtypes = 0) {
  std::vector<std::unique_ptr<ac::Subject>> local;
  for (auto& n : names) local.push_back(std::make_unique<RecordingSubject>(n, variants, kv_dtypes));
  return w::served_subjects(std::move(local), server.path, 30.0, [](const ac::Subject&) { return true; });
}

}  // namespace

TEST_CASE("protocol 4 carries an attention call's variants to the subject bit for bit", "[worker]") {
  std::vector<std::unique_ptr<ac::Subject>> remote;
  remote.push_back(std::make_unique<RecordingSubject>("all", AC_VAR_KNOWN_V3));
  remote.push_back(std::make_unique<RecordingSubject>("softcap-only", AC_VAR_SOFTCAP));
  TestServer server(std::move(remote), 4);
  auto subjects = served(server, {"all", "softcap-only"}, AC_VAR_KNOWN_V3);
  auto& all = static_cast<RecordingSubject&>(server.subject(0));
  auto& softcap_only = static_cast<RecordingSubject&>(server.subject(1));
  const ac::AttentionInput in = variant_input();
  REQUIRE(ac::attention_variant_problem(in).empty());

  // Every variant declared: the pools, the table, the sinks and every number arrive as they left.
  ac::AttentionOptions opt;
  opt.tiling = 0;
  const ac::AttentionOutput o = subjects[0]->attention(in, opt);
  REQUIRE(all.seen.size() == 1);
  require_same_input(all.seen[0], in);
  // The outputs come back as the subject wrote them: [total_q, heads, head_size_v] and the LSE.
  ac::AttentionInput expect_shape = in;
  const ac::AttentionOutput direct = RecordingSubject("x", AC_VAR_KNOWN_V3).attention(expect_shape, opt);
  CHECK(o.out.size() == size_t(5 * 4 * 4));
  CHECK(o.out == direct.out);
  CHECK(o.lse == direct.lse);

  // The plain contract through the same subject: each variant at its neutral value.
  ac::AttentionInput plain = ac::gather_pages(in);
  plain.head_size_v = 0;
  plain.v = pattern(8 * 2 * 8, 4);
  plain.softcap = 0.0f;
  plain.window_left = plain.window_right = -1;
  plain.sinks.clear();
  subjects[0]->attention(plain, opt);
  REQUIRE(all.seen.size() == 2);
  require_same_input(all.seen[1], plain);

  // A worker that declares the softcap alone: paged K / V arrives gathered, the softcap as sent.
  ac::AttentionInput capped = plain;
  capped.softcap = 0.1f;
  capped.page_size = 3;
  capped.num_pages = 4;
  capped.max_blocks = 2;
  capped.block_table = {2, 0, 3, 1};
  capped.k = pattern(4 * 3 * 2 * 8, 5);
  capped.v = pattern(4 * 3 * 2 * 8, 6);
  REQUIRE(ac::attention_variant_problem(capped).empty());
  subjects[1]->attention(capped, opt);
  REQUIRE(softcap_only.seen.size() == 1);
  require_same_input(softcap_only.seen[0], ac::gather_pages(capped));
  // A variant it does not declare never reaches it: refused before the request (the call is then
  // made by the local subject, as served_subjects does with every refusal).
  capped.sinks.assign(4, 1.0f);
  subjects[1]->attention(capped, opt);
  CHECK(softcap_only.seen.size() == 1);
}

TEST_CASE("a protocol-3 worker is sent no variant: pages gathered, the others refused", "[worker]") {
  std::vector<std::unique_ptr<ac::Subject>> remote;
  remote.push_back(std::make_unique<RecordingSubject>("all", AC_VAR_KNOWN_V3));
  TestServer server(std::move(remote), 3);
  auto subjects = served(server, {"all"}, AC_VAR_KNOWN_V3);
  auto& all = static_cast<RecordingSubject&>(server.subject(0));
  ac::AttentionInput paged = variant_input();
  paged.head_size_v = 0;
  paged.v = pattern(7 * 2 * 2 * 8, 7);
  paged.softcap = 0.0f;
  paged.window_left = paged.window_right = -1;
  paged.sinks.clear();
  ac::AttentionOptions opt;
  subjects[0]->attention(paged, opt);
  REQUIRE(all.seen.size() == 1);
  require_same_input(all.seen[0], ac::gather_pages(paged));
  ac::AttentionInput windowed = ac::gather_pages(paged);
  windowed.window_left = 2;
  subjects[0]->attention(windowed, opt);
  CHECK(all.seen.size() == 1);
}

namespace {

// A subject that counts its attention calls and makes them through another.
class Counting final : public ac::Subject {
 public:
  explicit Counting(std::unique_ptr<ac::Subject> s) : s_(std::move(s)) {}
  const std::string& name() const override { return s_->name(); }
  const std::string& description() const override { return s_->description(); }
  const ac_caps& caps() const override { return s_->caps(); }
  std::string backend() const override { return s_->backend(); }
  std::string origin() const override { return s_->origin(); }
  ac::MergeOutput merge(const ac::MergeInput& in) override { return s_->merge(in); }
  ac::SoftmaxOutput softmax(const ac::SoftmaxInput& in) override { return s_->softmax(in); }
  ac::AttentionOutput attention(const ac::AttentionInput& in, const ac::AttentionOptions& opt) override {
    ++calls;
    return s_->attention(in, opt);
  }
  int calls = 0;

 private:
  std::unique_ptr<ac::Subject> s_;
};

}  // namespace

// The device server serves the built-ins, whose fused and split-KV subjects declare variants: a
// served call with every variant they take gives the bits of the same call made directly.
TEST_CASE("built-in subjects declaring variants answer served calls exactly as direct ones", "[worker]") {
  std::vector<std::unique_ptr<ac::Subject>> remote;
  for (auto& s : ac::load_builtin_subjects(ac::Backend::host, nullptr))
    if (s->caps().variants) remote.push_back(std::make_unique<Counting>(std::move(s)));
  REQUIRE(remote.size() >= 4);  // fused, fused-fa2, fused-log2, splitkv
  std::vector<std::string> names;
  for (const auto& s : remote) names.push_back(s->name());
  TestServer server(std::move(remote), w::kProtocolVersion);
  auto direct = ac::load_builtin_subjects(ac::Backend::host, nullptr);
  auto local = ac::load_builtin_subjects(ac::Backend::host, nullptr);
  auto served = w::served_subjects(std::move(local), server.path, 30.0, [&](const ac::Subject& s) {
    return std::find(names.begin(), names.end(), s.name()) != names.end();
  });
  for (size_t i = 0; i < names.size(); ++i) {
    INFO(names[i]);
    auto find = [&](auto& list) -> ac::Subject& {
      for (auto& s : list)
        if (s->name() == names[i]) return *s;
      FAIL("no subject " << names[i]);
      throw 0;
    };
    ac::Subject &d = find(direct), &s = find(served);
    const ac_caps& c = d.caps();
    // Two sequences of 3 x 20 and 2 x 7 keys, head size 64, two query heads on one KV head, in
    // pages of 5 (four and two of a pool of eight), or of the subject's smallest page size where it
    // does not declare 5 (fused-hopper's 16: two and one), where it declares pages; causal,
    // softcapped, windowed, with sinks (each where declared).
    ac::AttentionInput in;
    in.dtype = AC_DTYPE_F16;
    in.num_heads = 2;
    in.num_kv_heads = 1;
    in.head_size = 64;
    in.seqlens_q = {3, 2};
    in.seqlens_k = {20, 7};
    in.causal = true;
    in.softmax_scale = 0.125f;
    in.softcap = (c.variants & AC_VAR_SOFTCAP) ? 30.0f : 0.0f;
    if (c.variants & AC_VAR_WINDOW) {
      in.window_left = 6;
      in.window_right = 0;
    }
    if (c.variants & AC_VAR_SINKS) in.sinks = {0.75f, -2.5f};
    const bool paged = (c.variants & AC_VAR_PAGED_KV) != 0;
    int page = 0;
    if (paged) {
      const bool five =
          std::find(c.page_sizes, c.page_sizes + c.num_page_sizes, 5) != c.page_sizes + c.num_page_sizes;
      page = five ? 5 : *std::min_element(c.page_sizes, c.page_sizes + c.num_page_sizes);
      const int blocks0 = (20 + page - 1) / page, blocks1 = (7 + page - 1) / page;
      REQUIRE(blocks0 + blocks1 <= 8);
      const int32_t order[] = {7, 2, 4, 0, 1, 5, 6, 3};  // a shuffled pool of eight pages
      in.page_size = page;
      in.num_pages = 8;
      in.max_blocks = blocks0;
      in.block_table.assign(size_t(2 * blocks0), 0);
      // Sequence 0's blocks, then sequence 1's from its row (blocks1 <= blocks0).
      for (int b = 0; b < blocks0 + blocks1; ++b) in.block_table[size_t(b)] = order[b];
    }
    in.q = pattern(5 * 2 * 64, 11);
    in.k = pattern(paged ? 8 * size_t(page) * 64 : 27 * 64, 12);
    in.v = pattern(paged ? 8 * size_t(page) * 64 : 27 * 64, 13);
    REQUIRE(ac::attention_variant_problem(in).empty());
    ac::AttentionOptions opt;
    opt.tiling = 0;
    if (c.ops & AC_OP_SPLITKV) {
      opt.num_splits = std::min(2, c.max_splits);
      opt.fold_order = ac::folds_in(c.fold_orders).front();
    }
    const ac::AttentionOutput want = d.attention(in, opt);
    auto& counting = static_cast<Counting&>(server.subject(i));
    const ac::AttentionOutput got = s.attention(in, opt);
    CHECK(counting.calls == 1);  // made by the server, not redone here
    CHECK(got.out == want.out);
    REQUIRE(got.lse.size() == want.lse.size());
    for (size_t j = 0; j < got.lse.size(); ++j) CHECK(bits_of(got.lse[j]) == bits_of(want.lse[j]));
  }
}

TEST_CASE("protocol 4 call limits: written where declared, read back, refused when negative or older",
          "[worker]") {
  ac_caps c = variant_caps(0);
  c.max_call_seqs = 8;
  c.max_call_tokens = 4096;
  c.max_call_keys = int64_t(1) << 40;  // past 32 bits: read as the 64-bit field it is
  const auto j = w::caps_to_json("v", "", c);
  CHECK(j["max_call_seqs"] == 8);
  CHECK(j["max_call_tokens"] == 4096);
  CHECK(j["max_call_keys"] == int64_t(1) << 40);
  const w::DeclaredSubject d = w::caps_from_json(j, 4);
  CHECK(d.caps.max_call_seqs == 8);
  CHECK(d.caps.max_call_tokens == 4096);
  CHECK(d.caps.max_call_keys == int64_t(1) << 40);
  // None declared: none written, and 0 read (no limit).
  const auto plain = w::caps_to_json("v", "", variant_caps(0));
  CHECK(!plain.contains("max_call_seqs"));
  CHECK(!plain.contains("max_call_keys"));
  CHECK(w::caps_from_json(plain, 4).caps.max_call_seqs == 0);
  auto refused = [](const nlohmann::json& decl, int protocol) {
    try {
      w::caps_from_json(decl, protocol);
    } catch (const w::ProtocolError& e) {
      CHECK(one_line(e.what()));
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK(refused(j, 3) == "'max_call_seqs' needs protocol 4 (the worker answered protocol 3)");
  auto bad = j;
  bad["max_call_seqs"] = -1;
  CHECK(refused(bad, 4) == "'max_call_seqs' -1 is out of range 0..2147483647");
  bad = j;
  bad["max_call_tokens"] = "many";
  CHECK(refused(bad, 4) == "'max_call_tokens' must be an integer");
  bad = j;
  bad["max_call_keys"] = -5;
  CHECK(refused(bad, 4) == "'max_call_keys' must be an integer from 0 (no limit) to 2^63 - 1");
  // A plugin's negative limit is refused where it loads, naming the field.
  ac_subject s{};
  s.name = "v";
  s.description = "";
  s.caps = variant_caps(0);
  s.caps.max_call_keys = -1;
  s.attention = [](void*, const ac_attention_args*, char*, size_t) { return AC_OK; };
  const std::vector<std::string> problems = ac::validate_subject(s, 3);
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].find("caps.max_call_keys -1 is negative (0: no limit)") != std::string::npos);
  s.caps.max_call_keys = 100;
  CHECK(ac::validate_subject(s, 3).empty());
}

TEST_CASE("protocol 4 carries an FP8 KV cache: its formats declared, codes and descales bit for bit",
          "[worker]") {
  ac_caps c = variant_caps(0);
  const uint32_t both = ac::kFp8DtypeBits;  // e4m3fn, e5m2 and e4m3fnuz
  c.kv_dtypes = both;
  c.fp8 = AC_FP8_DESCALE_PER_KV_HEAD;
  const auto j = w::caps_to_json("f", "", c);
  using L = std::vector<std::string>;
  CHECK(j["kv_dtypes"].get<L>() == L{"e4m3fn", "e5m2", "e4m3fnuz"});
  CHECK(j["fp8"].get<L>() == L{"descale_per_kv_head"});
  const w::DeclaredSubject d = w::caps_from_json(j, 4);
  CHECK(d.caps.kv_dtypes == both);
  CHECK(d.caps.fp8 == AC_FP8_DESCALE_PER_KV_HEAD);
  // Not declared: not written, and nothing read.
  const auto plain = w::caps_to_json("p", "", variant_caps(0));
  CHECK(!plain.contains("kv_dtypes"));
  CHECK(!plain.contains("fp8"));
  CHECK(w::caps_from_json(plain, 4).caps.kv_dtypes == 0u);
  CHECK_THROWS_WITH(w::caps_from_json(j, 3), "'kv_dtypes' needs protocol 4 (the worker answered protocol 3)");
  auto bad = j;
  bad["kv_dtypes"] = {"e4m3"};
  CHECK_THROWS_WITH(w::caps_from_json(bad, 4),
                    Catch::Contains("unknown word 'e4m3' in 'kv_dtypes' (known: e4m3fn, e5m2, e4m3fnuz)"));

  // A call: the one-byte codes of each format, with their descales.
  std::vector<std::unique_ptr<ac::Subject>> remote;
  remote.push_back(std::make_unique<RecordingSubject>("fp8", 0, both));
  remote.push_back(std::make_unique<RecordingSubject>("plain", 0));
  TestServer server(std::move(remote), 4);
  auto subjects = served(server, {"fp8", "plain"}, 0, both);
  auto& fp8 = static_cast<RecordingSubject&>(server.subject(0));
  auto& plain_subject = static_cast<RecordingSubject&>(server.subject(1));
  ac::AttentionInput in;
  in.dtype = AC_DTYPE_F16;
  in.num_heads = 4;
  in.num_kv_heads = 2;
  in.head_size = 8;
  in.seqlens_q = {2, 3};
  in.seqlens_k = {5, 3};
  in.softmax_scale = 0.35355339f;
  in.q = pattern(5 * 4 * 8, 1);
  for (const ac_dtype f : {AC_DTYPE_E4M3, AC_DTYPE_E5M2, AC_DTYPE_E4M3FNUZ}) {
    in.kv_dtype = f;
    in.k.clear();
    in.v.clear();
    for (uint32_t i = 0; i < 8 * 2 * 8; ++i) {
      in.k.push_back((i * 37u + 11u) % 0x7fu);  // every code below 0x7f: finite in each format
      in.v.push_back((i * 53u + 3u) % 0x7bu | (i % 2 ? 0x80u : 0u));
    }
    // Per KV head for e4m3fn, per tensor for e5m2 (K's and V's granularity is one).
    in.k_descale = f == AC_DTYPE_E4M3 ? std::vector<float>{0.015625f, 3.0e-3f} : std::vector<float>{3.0e-3f};
    in.v_descale = f == AC_DTYPE_E4M3 ? std::vector<float>{1.7f, 0.5f} : std::vector<float>{1.7f};
    REQUIRE(ac::attention_variant_problem(in).empty());
    ac::AttentionOptions opt;
    opt.tiling = 0;
    subjects[0]->attention(in, opt);
    REQUIRE(!fp8.seen.empty());
    require_same_input(fp8.seen.back(), in);
  }
  CHECK(fp8.seen.size() == 3);
  // A worker that does not declare an FP8 cache is never sent one (refused before the request; the
  // local subject, declaring it, answers).
  subjects[1]->attention(in, ac::AttentionOptions{});
  CHECK(plain_subject.seen.empty());
}
