// CUDA merge (kernels/merge/merge.cu) on the GPU, against the fp64 merge and against its host
// twin: both LSE layouts, bases, every dtype; the 128-bit vector path (head sizes 8, 64, 128,
// 256 with aligned pointers and strides: asserted taken), strided (padded rows) and dense (a row
// a power of two of packs: asserted taken), and the scalar path (odd head sizes,
// forced scalar, a pointer offset by one element); the guards; a launch with many blocks (grid
// stride). Small shapes, so it also serves compute-sanitizer memcheck / racecheck.
#include <catch2/catch.hpp>

#if defined(ATTNCHECK_HAVE_CUDA)
#include <algorithm>
#include <cstring>

#include "kb_device.hpp"
#include "merge/merge_math.h"
#include "merge_cases.hpp"

using namespace attncheck::kern;
using kb::DType;

namespace {

// Runs c on the GPU (optionally with the tensors offset by `shift` elements inside their
// buffers), compares with the twin (equal up to an ulp of the storage type plus the effect of
// expf / logf differing by an ulp or two between CUDA and libm) and with fp64. Returns whether the vector
// path ran.
bool run_and_check(kb::MergeCase& c, bool allow_vector, int shift, const std::string& what) {
  const size_t elem = size_t(dtype_size(c.type));
  const size_t bytes = (c.elements() + size_t(shift)) * elem;
  kb::DeviceBuffer dp(bytes), ds(bytes), dout(bytes);
  kb::DeviceBuffer dpl(c.p_lse), dsl(c.s_lse), dol(c.out_lse);
  KB_CUDA(
      cudaMemcpy(dp.as<char>() + shift * elem, c.prefix.data(), c.elements() * elem, cudaMemcpyHostToDevice));
  KB_CUDA(
      cudaMemcpy(ds.as<char>() + shift * elem, c.suffix.data(), c.elements() * elem, cudaMemcpyHostToDevice));
  KB_CUDA(cudaMemset(dout.ptr, 0x7f, bytes));
  const ac_merge_args a =
      c.args(dout.as<char>() + shift * elem, dp.as<char>() + shift * elem, ds.as<char>() + shift * elem,
             dol.as<float>(), dpl.as<float>(), dsl.as<float>());
  MergeOptions o;
  o.lse_base = c.lse_base;
  o.allow_vector = allow_vector;
  char err[256] = {0};
  const int rc = merge_cuda(a, o, err, sizeof err);
  INFO(what << ": " << err);
  REQUIRE(rc == AC_OK);
  const bool vector = merge_cuda_uses_vector_path(a, o);
  // gather the GPU's output
  KB_CUDA(
      cudaMemcpy(c.out.data(), dout.as<char>() + shift * elem, c.elements() * elem, cudaMemcpyDeviceToHost));
  dol.to_host(c.out_lse);
  const kb::Tensor gpu_out = c.out;
  const std::vector<float> gpu_lse = c.out_lse;
  c.check_against_exact(what + " (gpu)");
  // the twin on the same inputs
  REQUIRE(merge_host(c.host_args(), o, err, sizeof err) == AC_OK);
  for (int t = 0; t < c.tokens; ++t)
    for (int h = 0; h < c.heads; ++h) {
      const float gl = gpu_lse[c.lse_at(t, h)], hl = c.out_lse[c.lse_at(t, h)];
      // out_lse = log(p_se + s_se) + max_lse: its absolute error is a few ulp of the larger of
      // max_lse and the log term, whatever the (possibly cancelled, near zero) result is.
      const auto mag = [](float x) { return std::isfinite(x) ? std::fabs(double(x)) : 0.0; };
      const double lse_scale =
          std::max({mag(hl), mag(c.p_lse[c.lse_at(t, h)]), mag(c.s_lse[c.lse_at(t, h)]), 1.0});
      INFO(what << " lse twin " << hl << " gpu " << gl << " t=" << t << " h=" << h);
      REQUIRE((gl == hl || std::fabs(gl - hl) <= 4 * kb::ulp_at(DType::f32, lse_scale)));
      for (int e = 0; e < c.d; ++e) {
        const size_t i = c.at(t, h, e);
        INFO(what << " twin vs gpu t=" << t << " h=" << h << " e=" << e);
        // one ulp of the result, plus the fp32 weights' few-ulp difference times the inputs'
        // magnitude (large where p and s cancel)
        const double slack =
            16 * std::ldexp(1.0, -24) * (std::fabs(c.prefix.get(i)) + std::fabs(c.suffix.get(i)));
        // equal bits first: the guards write exact zeros even where the inputs hold NaN
        const bool same = gpu_out.get(i) == c.out.get(i);
        REQUIRE(
            (same || std::fabs(gpu_out.get(i) - c.out.get(i)) <= kb::ulp_at(c.type, c.out.get(i)) + slack));
      }
    }
  return vector;
}

}  // namespace

TEST_CASE("merge gpu: vector path for aligned head sizes, scalar path otherwise") {
  std::mt19937_64 rng(99);
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    for (ac_lse_layout layout : {AC_LSE_HEADS_TOKENS, AC_LSE_TOKENS_HEADS})
      for (int base : {0, 2})
        for (int d : {1, 3, 8, 13, 64, 100, 128, 256, 257, 512}) {
          kb::MergeCase c;
          c.type = t;
          c.layout = layout;
          c.lse_base = base;
          c.d = d;
          c.tokens = 7;
          c.heads = 5;
          c.pad = 8;  // 16 bytes in fp16/bf16, 32 in fp32: strides stay 16-byte multiples
          c.fill(rng);
          const std::string what = "dtype " + std::to_string(int(t)) + " d " + std::to_string(d);
          const bool vector = run_and_check(c, true, 0, what);
          const bool vector_possible = (d * dtype_size(t)) % 16 == 0;
          REQUIRE(vector == vector_possible);
          REQUIRE_FALSE(
              merge_cuda_uses_dense_path(c.args(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr), {}));
          // Dense: rows of 1, 2, 4, ... 64 packs take the dense path (d 8 fp16 is one pack, d 100
          // fp32 is not a whole number of packs, d 64 fp32 is 16).
          c.pad = 0;
          c.fill(rng);
          const int packs = (d * dtype_size(t)) / 16;
          const bool dense_possible = vector_possible && (packs & (packs - 1)) == 0;
          run_and_check(c, true, 0, what + " dense");
          REQUIRE(merge_cuda_uses_dense_path(c.args(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr),
                                             {}) == dense_possible);
          if (vector_possible) {
            c.pad = 8;
            c.fill(rng);
            REQUIRE_FALSE(run_and_check(c, false, 0, what + " forced scalar"));
            c.fill(rng);
            REQUIRE_FALSE(run_and_check(c, true, 1, what + " misaligned by one element"));
          }
        }
}

TEST_CASE("merge gpu: guards (FA2 +inf, both empty) give exact zeros and -inf, never NaN") {
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    for (int d : {7, 128}) {
      kb::MergeCase c;
      c.type = t;
      c.d = d;
      c.tokens = 4;
      c.heads = 1;
      std::mt19937_64 rng(5);
      c.fill(rng);
      const float p[4] = {-INFINITY, INFINITY, INFINITY, -INFINITY};
      const float s[4] = {-INFINITY, INFINITY, -INFINITY, 1.5f};
      for (int tok = 0; tok < 4; ++tok) {
        c.p_lse[c.lse_at(tok, 0)] = p[tok];
        c.s_lse[c.lse_at(tok, 0)] = s[tok];
        if (tok < 3)
          for (int e = 0; e < d; ++e) c.prefix.set(c.at(tok, 0, e), NAN);
      }
      run_and_check(c, true, 0, "guards");
      for (int tok = 0; tok < 3; ++tok) REQUIRE(c.out_lse[c.lse_at(tok, 0)] == -INFINITY);
      REQUIRE(c.out_lse[c.lse_at(3, 0)] == 1.5f);
    }
}

TEST_CASE("merge gpu: many blocks (grid-stride), fp16 d = 128, both layouts") {
  std::mt19937_64 rng(17);
  for (ac_lse_layout layout : {AC_LSE_HEADS_TOKENS, AC_LSE_TOKENS_HEADS}) {
    kb::MergeCase c;
    c.type = DType::f16;
    c.layout = layout;
    c.d = 128;
    c.tokens = 300;
    c.heads = 8;
    c.fill(rng);
    REQUIRE(run_and_check(c, true, 0, "many blocks"));
    const ac_merge_args a = c.args(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
    MergeOptions o;
    REQUIRE(merge_cuda_uses_dense_path(a, o));
    o.mutation = MergeMutation::base_swap;
    REQUIRE_FALSE(merge_cuda_uses_dense_path(a, o));
  }
}

TEST_CASE("merge gpu: refusals before launch; CUDA subjects") {
  kb::MergeCase c;
  std::mt19937_64 rng(5);
  c.fill(rng);
  ac_merge_args a = c.host_args();
  a.head_size = 600;
  char err[256] = {0};
  REQUIRE(merge_cuda(a, {}, err, sizeof err) == AC_ERR_UNSUPPORTED);
  REQUIRE(std::strstr(err, "head_size") != nullptr);
  std::vector<ac_subject> s;
  append_merge_subjects(s, true);
  REQUIRE(s.size() == 4);  // merge, merge-th, merge-log2, merge-fp8
  for (const ac_subject& x : s) REQUIRE(x.caps.memory == AC_MEMORY_CUDA);
}
TEST_CASE("merge gpu: an FP8 output equals the twin's bit for bit") {
  // Random states of every dtype, the three formats, an output scale that saturates some outputs.
  std::mt19937 rng(3);
  const int T = 19, H = 3, D = 24;
  const size_t n = size_t(T) * H * D;
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    for (int kv : {AC_DTYPE_E4M3, AC_DTYPE_E5M2, AC_DTYPE_E4M3FNUZ}) {
      std::vector<uint32_t> p32(n), s32(n);
      std::vector<uint16_t> p16(n), s16(n);
      for (size_t i = 0; i < n; ++i) {
        const float a = std::ldexp(float(rng() % 4096) / 2048.0f - 1.0f, int(rng() % 20) - 6);
        const float b = std::ldexp(float(rng() % 4096) / 2048.0f - 1.0f, int(rng() % 20) - 6);
        std::memcpy(&p32[i], &a, 4);
        std::memcpy(&s32[i], &b, 4);
        p16[i] = uint16_t(store_from_float(t == DType::f32 ? DType::f16 : t, a));
        s16[i] = uint16_t(store_from_float(t == DType::f32 ? DType::f16 : t, b));
      }
      std::vector<float> pl(size_t(T) * H), sl(size_t(T) * H);
      for (size_t i = 0; i < pl.size(); ++i) {
        pl[i] = i % 7 == 0 ? -INFINITY : float(int(rng() % 200) - 100) / 10.0f;
        sl[i] = i % 5 == 0 ? INFINITY : float(int(rng() % 200) - 100) / 10.0f;
      }
      const float scale = 0.01f;
      std::vector<uint8_t> host(n), dev(n);
      std::vector<float> host_lse(pl.size()), dev_lse(pl.size());
      ac_merge_args a{};
      a.dtype = ac_dtype(t);
      a.num_tokens = T;
      a.num_heads = H;
      a.head_size = D;
      a.out_stride_token = a.prefix_stride_token = a.suffix_stride_token = int64_t(H) * D;
      a.out_stride_head = a.prefix_stride_head = a.suffix_stride_head = D;
      a.lse_stride_token = 1;
      a.lse_stride_head = T;
      a.out_dtype = ac_dtype(kv);
      const bool f32 = t == DType::f32;
      a.prefix_out = f32 ? static_cast<const void*>(p32.data()) : p16.data();
      a.suffix_out = f32 ? static_cast<const void*>(s32.data()) : s16.data();
      a.prefix_lse = pl.data();
      a.suffix_lse = sl.data();
      a.out = host.data();
      a.out_lse = host_lse.data();
      a.output_scale = &scale;
      char err[256] = {0};
      REQUIRE(merge_host(a, MergeOptions{}, err, sizeof err) == AC_OK);
      kb::DeviceBuffer dp = f32 ? kb::DeviceBuffer(p32) : kb::DeviceBuffer(p16);
      kb::DeviceBuffer ds = f32 ? kb::DeviceBuffer(s32) : kb::DeviceBuffer(s16);
      kb::DeviceBuffer dpl(pl), dsl(sl), dout(n), dlse(pl.size() * 4), dscale(std::vector<float>{scale});
      a.prefix_out = dp.ptr;
      a.suffix_out = ds.ptr;
      a.prefix_lse = dpl.as<float>();
      a.suffix_lse = dsl.as<float>();
      a.out = dout.ptr;
      a.out_lse = dlse.as<float>();
      a.output_scale = dscale.as<float>();
      REQUIRE(merge_cuda(a, MergeOptions{}, err, sizeof err) == AC_OK);
      dout.to_host(dev);
      dlse.to_host(dev_lse);
      INFO("dtype " << int(t) << ", format " << kv);
      // The weights' exp / log differ by an ulp between CUDA and libm: codes one apart at most, and
      // equal on all but a few elements.
      auto line = [](uint8_t c) { return (c & 0x80) ? -int(c & 0x7f) : int(c & 0x7f); };
      size_t differ = 0;
      for (size_t i = 0; i < n; ++i) {
        if (dev[i] != host[i]) ++differ;
        CHECK(std::abs(line(dev[i]) - line(host[i])) <= 1);
      }
      CHECK(differ * 100 <= n);
    }
}
#endif
