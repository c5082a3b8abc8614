// AbiSubject against a fake host subject written here (a merge that declares the [heads, tokens]
// LSE layout, and leaves one element unwritten on purpose). Expected values are hand-derived:
// with prefix LSE ln 1 = 0 and suffix LSE ln 3, the weights are 1/4 and 3/4, so prefix 4 and
// suffix 8 merge to 1 + 6 = 7 exactly, and the merged LSE is ln 4.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "attncheck/abi_subject.hpp"

namespace {

float f(uint32_t b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}
uint32_t b(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

struct FakeState {
  int calls = 0;
  bool skip_last = false;  // leave the last output element unwritten
  int fail_with = AC_OK;
  int64_t seen_lse_stride_token = -1, seen_lse_stride_head = -1;
};

int fake_merge(void* self, const ac_merge_args* a, char* err, size_t err_len) {
  auto* st = static_cast<FakeState*>(self);
  ++st->calls;
  st->seen_lse_stride_token = a->lse_stride_token;
  st->seen_lse_stride_head = a->lse_stride_head;
  if (st->fail_with != AC_OK) {
    std::snprintf(err, err_len, "fake failure");
    return st->fail_with;
  }
  const auto* p = static_cast<const float*>(a->prefix_out);
  const auto* s = static_cast<const float*>(a->suffix_out);
  auto* o = static_cast<float*>(a->out);
  for (int t = 0; t < a->num_tokens; ++t)
    for (int h = 0; h < a->num_heads; ++h) {
      const int64_t li = t * a->lse_stride_token + h * a->lse_stride_head;
      const float lp = a->prefix_lse[li], ls = a->suffix_lse[li];
      const float m = std::max(lp, ls);
      const float wp = std::exp(lp - m), ws = std::exp(ls - m);
      for (int d = 0; d < a->head_size; ++d) {
        const int64_t oi = t * a->out_stride_token + h * a->out_stride_head + d;
        const bool last = t == a->num_tokens - 1 && h == a->num_heads - 1 && d == a->head_size - 1;
        if (st->skip_last && last) continue;
        o[oi] = (wp * p[t * a->prefix_stride_token + h * a->prefix_stride_head + d] +
                 ws * s[t * a->suffix_stride_token + h * a->suffix_stride_head + d]) /
                (wp + ws);
      }
      // Encode (t, h) into the LSE so the test sees the layout mapping: lse = merged + 100 t + 10 h
      a->out_lse[li] = m + std::log(wp + ws) + 100.0f * float(t) + 10.0f * float(h);
    }
  return AC_OK;
}

ac_subject fake_subject(FakeState* st, ac_lse_layout layout) {
  ac_subject s{};
  s.name = "fake-merge";
  s.description = "test double";
  s.caps.ops = AC_OP_MERGE;
  s.caps.dtypes = AC_DTYPE_BIT(AC_DTYPE_F32);
  s.caps.memory = AC_MEMORY_HOST;
  s.caps.head_size_min = 1;
  s.caps.head_size_max = 256;
  s.caps.lse_layout = layout;
  s.caps.empty_lse_sign = -1;
  s.merge = fake_merge;
  s.self = st;
  return s;
}

attncheck::MergeInput two_by_three_case() {
  attncheck::MergeInput in;
  in.dtype = AC_DTYPE_F32;
  in.num_tokens = 2;
  in.num_heads = 3;
  in.head_size = 2;
  in.prefix_out.assign(12, b(4.0f));
  in.suffix_out.assign(12, b(8.0f));
  in.prefix_lse.assign(6, 0.0f);
  in.suffix_lse.assign(6, std::log(3.0f));
  return in;
}

}  // namespace

TEST_CASE("AbiSubject maps LSE layouts to logical [tokens, heads]", "[abi_subject]") {
  for (ac_lse_layout layout : {AC_LSE_HEADS_TOKENS, AC_LSE_TOKENS_HEADS}) {
    FakeState st;
    attncheck::AbiSubject subj(fake_subject(&st, layout), "test");
    const attncheck::MergeOutput out = subj.merge(two_by_three_case());
    REQUIRE(st.calls == 1);
    if (layout == AC_LSE_HEADS_TOKENS) {
      CHECK(st.seen_lse_stride_token == 1);
      CHECK(st.seen_lse_stride_head == 2);  // num_tokens
    } else {
      CHECK(st.seen_lse_stride_token == 3);  // num_heads
      CHECK(st.seen_lse_stride_head == 1);
    }
    REQUIRE(out.out.size() == 12);
    for (uint32_t bits : out.out) CHECK(f(bits) == Approx(7.0f).epsilon(1e-6));
    REQUIRE(out.lse.size() == 6);
    for (int t = 0; t < 2; ++t)
      for (int h = 0; h < 3; ++h)
        CHECK(out.lse[size_t(t * 3 + h)] == Approx(std::log(4.0) + 100.0 * t + 10.0 * h).epsilon(1e-6));
  }
}

TEST_CASE("AbiSubject poisons outputs so unwritten elements show as NaN", "[abi_subject]") {
  FakeState st;
  st.skip_last = true;
  attncheck::AbiSubject subj(fake_subject(&st, AC_LSE_TOKENS_HEADS), "test");
  const attncheck::MergeOutput out = subj.merge(two_by_three_case());
  CHECK(out.out.back() == attncheck::kPoisonF32);
  CHECK(std::isnan(f(out.out.back())));
  CHECK(f(out.out.front()) == Approx(7.0f));
}

TEST_CASE("AbiSubject maps error codes to SubjectError kinds", "[abi_subject]") {
  using Kind = attncheck::SubjectError::Kind;
  const std::pair<int, Kind> table[] = {{AC_ERR_UNSUPPORTED, Kind::unsupported},
                                        {AC_ERR_DEVICE, Kind::device_fault},
                                        {AC_ERR_INTERNAL, Kind::internal},
                                        {42, Kind::internal}};
  for (const auto& [code, kind] : table) {
    FakeState st;
    st.fail_with = code;
    attncheck::AbiSubject subj(fake_subject(&st, AC_LSE_TOKENS_HEADS), "test");
    try {
      subj.merge(two_by_three_case());
      FAIL("no exception for code " << code);
    } catch (const attncheck::SubjectError& e) {
      CHECK(e.kind == kind);
      CHECK(std::string(e.what()).find("fake failure") != std::string::npos);
    }
  }
}

TEST_CASE("AbiSubject refuses operations the subject does not declare", "[abi_subject]") {
  FakeState st;
  attncheck::AbiSubject subj(fake_subject(&st, AC_LSE_TOKENS_HEADS), "test");
  attncheck::SoftmaxInput in;
  in.rows = 1;
  in.cols = 1;
  in.x = {0};
  try {
    subj.softmax(in);
    FAIL("softmax accepted");
  } catch (const attncheck::SubjectError& e) {
    CHECK(e.kind == attncheck::SubjectError::Kind::unsupported);
  }
}

TEST_CASE("AbiSubject calls the before-call hook before the subject runs", "[abi_subject]") {
  FakeState st;
  attncheck::AbiSubject subj(fake_subject(&st, AC_LSE_TOKENS_HEADS), "test");
  int calls_seen_by_hook = -1;
  subj.set_before_call([&] { calls_seen_by_hook = st.calls; });
  subj.merge(two_by_three_case());
  CHECK(calls_seen_by_hook == 0);
  CHECK(st.calls == 1);
}

TEST_CASE("parse_backend accepts auto, cuda, host only", "[abi_subject]") {
  CHECK(attncheck::parse_backend("auto") == attncheck::Backend::automatic);
  CHECK(attncheck::parse_backend("host") == attncheck::Backend::host);
  CHECK(attncheck::parse_backend("cuda") == attncheck::Backend::cuda);
  CHECK_THROWS_AS(attncheck::parse_backend("gpu"), std::invalid_argument);
  CHECK(attncheck::resolve_backend(attncheck::Backend::host).backend == attncheck::Backend::host);
}

TEST_CASE("AbiSubject skips an attention call past the declared call limits, before the subject runs",
          "[abi_subject]") {
  // An attention subject declaring at most 2 sequences, 5 query tokens and 9 keys a call; it counts
  // its calls and writes nothing (only the calls within the limits reach it).
  static int calls = 0;
  ac_subject s{};
  s.name = "fake-bounded";
  s.description = "test double";
  s.caps.ops = AC_OP_ATTENTION;
  s.caps.dtypes = AC_DTYPE_BIT(AC_DTYPE_F32);
  s.caps.memory = AC_MEMORY_HOST;
  s.caps.head_size_min = 1;
  s.caps.head_size_max = 256;
  s.caps.lse_layout = AC_LSE_TOKENS_HEADS;
  s.caps.empty_lse_sign = -1;
  s.caps.max_call_seqs = 2;
  s.caps.max_call_tokens = 5;
  s.caps.max_call_keys = 9;
  s.attention = [](void*, const ac_attention_args*, char*, size_t) {
    ++calls;
    return int(AC_OK);
  };
  attncheck::AbiSubject subj(s, "test");
  // One query and one key per sequence unless given: every tensor sized for its shape.
  auto input = [](std::vector<int32_t> q, std::vector<int32_t> k) {
    attncheck::AttentionInput in;
    in.dtype = AC_DTYPE_F32;
    in.num_heads = in.num_kv_heads = 1;
    in.head_size = 1;
    in.softmax_scale = 1;
    int64_t tq = 0, tk = 0;
    for (size_t i = 0; i < q.size(); ++i) tq += q[i], tk += k[i];
    in.seqlens_q = std::move(q);
    in.seqlens_k = std::move(k);
    in.q.assign(size_t(tq), b(1.0f));
    in.k.assign(size_t(tk), b(1.0f));
    in.v.assign(size_t(tk), b(1.0f));
    return in;
  };
  const struct {
    attncheck::AttentionInput in;
    const char* past;  // "" where the call fits
  } cases[] = {{input({1, 4}, {4, 5}), ""},
               {input({1, 1, 1}, {1, 1, 1}), "3 sequences, max_call_seqs 2"},
               {input({3, 3}, {1, 1}), "6 query tokens, max_call_tokens 5"},
               {input({1, 1}, {5, 5}), "10 keys, max_call_keys 9"}};
  for (const auto& c : cases) {
    const int before = calls;
    INFO("expected: " << c.past);
    if (*c.past == 0) {
      subj.attention(c.in, {});
      CHECK(calls == before + 1);
      continue;
    }
    try {
      subj.attention(c.in, {});
      FAIL("a call past the limits reached the subject");
    } catch (const attncheck::SubjectError& e) {
      CHECK(e.kind == attncheck::SubjectError::Kind::unsupported);
      CHECK(std::string(e.what()) == std::string("past fake-bounded's declared call limits: ") + c.past);
    }
    CHECK(calls == before);
  }
}
