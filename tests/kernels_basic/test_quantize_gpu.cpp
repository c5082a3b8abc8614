// The KV-cache quantiser on the GPU (kernels/quantize/quantize.cu) against its host twin, bit for
// bit: both saturation modes, all three formats and input dtypes, a scale per head, random codes
// across the formats' ranges plus the specials, a shape past one block. Small, so it also serves
// compute-sanitizer.
#include <catch2/catch.hpp>

#if defined(ATTNCHECK_HAVE_CUDA)
#include <cstring>
#include <random>
#include <vector>

#include "common/storage.h"
#include "kb_device.hpp"
#include "quantize/quantize.h"

using namespace attncheck::kern;

TEST_CASE("quantize: CUDA kernel equals its host twin bit for bit", "[gpu][quantize]") {
  std::mt19937 rng(11);
  const int T = 37, H = 3, D = 40;
  const size_t n = size_t(T) * H * D;
  for (int dtype : {AC_DTYPE_F32, AC_DTYPE_F16, AC_DTYPE_BF16})
    for (int out : {AC_DTYPE_E4M3, AC_DTYPE_E5M2, AC_DTYPE_E4M3FNUZ})
      for (bool saturate : {false, true}) {
        std::vector<uint32_t> x32(n);
        std::vector<uint16_t> x16(n);
        for (size_t i = 0; i < n; ++i) {
          float v =
              std::ldexp(float(rng() % 2048) / 1024.0f, int(rng() % 40) - 24) * ((rng() & 1) ? -1.0f : 1.0f);
          if (i % 97 == 0) v = INFINITY;
          if (i % 89 == 0) v = NAN;
          std::memcpy(&x32[i], &v, 4);
          x16[i] = dtype == AC_DTYPE_F16 ? float_to_f16(v) : float_to_bf16(v);
        }
        const std::vector<float> scales = {0.75f, 1.0f, 3.0e-3f};
        std::vector<uint8_t> host(n), dev(n);
        ac_quantize_args a{};
        a.dtype = ac_dtype(dtype);
        a.out_dtype = ac_dtype(out);
        a.num_tokens = T;
        a.num_heads = H;
        a.head_size = D;
        a.x = dtype == AC_DTYPE_F32 ? static_cast<const void*>(x32.data()) : x16.data();
        a.y = host.data();
        a.scale = scales.data();
        a.num_scales = H;
        QuantizeOptions o;
        o.saturate = saturate;
        char err[256] = {0};
        REQUIRE(quantize_host(a, o, err, sizeof err) == AC_OK);
        kb::DeviceBuffer dx = dtype == AC_DTYPE_F32 ? kb::DeviceBuffer(x32) : kb::DeviceBuffer(x16);
        kb::DeviceBuffer dy(n), ds(scales);
        a.x = dx.ptr;
        a.y = dy.as<uint8_t>();
        a.scale = ds.as<float>();
        REQUIRE(quantize_cuda(a, o, err, sizeof err) == AC_OK);
        dy.to_host(dev);
        INFO("dtype " << dtype << ", out " << out << (saturate ? ", saturating" : ""));
        CHECK(dev == host);
      }
}
#endif
