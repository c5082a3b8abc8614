// CUDA row softmax (kernels/softmax/softmax.cu) on the GPU: the same suite as the host twin
// (fp64 oracle, every variant and dtype, all -inf rows, a late outlier), the fp16 overflow band
// of the naive variant at 11.0859375 / 11.09375, long rows, and agreement with the twin (same
// fold tree: within 2 ulps of a 16-bit type, 8 of fp32, NaN where the twin has NaN).
#include <catch2/catch.hpp>

#if defined(ATTNCHECK_HAVE_CUDA)
#include "kb_device.hpp"
#include "softmax_cases.hpp"

using namespace attncheck::kern;
using kb::DType;

namespace {

void run_gpu(const ac_softmax_args& host, SoftmaxVariant v, kb::Tensor& y) {
  const size_t elem = size_t(dtype_size(DType(host.dtype)));
  const size_t n = host.rows == 0 ? 0 : size_t(host.rows - 1) * size_t(host.row_stride) + size_t(host.cols);
  std::vector<unsigned char> xin(static_cast<const unsigned char*>(host.x),
                                 static_cast<const unsigned char*>(host.x) + n * elem);
  kb::DeviceBuffer dx(xin), dy(y.bytes.size());
  KB_CUDA(cudaMemset(dy.ptr, 0, y.bytes.size()));
  ac_softmax_args a = host;
  a.x = dx.ptr;
  a.y = dy.ptr;
  char err[256] = {0};
  const int rc = softmax_cuda(a, v, err, sizeof err);
  INFO(err);
  REQUIRE(rc == AC_OK);
  dy.to_host(y.bytes);
  // the twin on the same input: same function, same fold tree
  kb::Tensor twin(y.type, y.size());
  ac_softmax_args t = host;
  t.y = twin.data();
  REQUIRE(softmax_host(t, v, err, sizeof err) == AC_OK);
  for (int r = 0; r < host.rows; ++r)
    for (int j = 0; j < host.cols; ++j) {
      const size_t i = size_t(r) * size_t(host.row_stride) + size_t(j);
      const double g = y.get(i), h = twin.get(i);
      INFO("gpu vs twin row " << r << " col " << j << " gpu " << g << " twin " << h);
      if (std::isnan(h)) {
        REQUIRE(std::isnan(g));
      } else {
        REQUIRE(std::fabs(g - h) <=
                (y.type == DType::f32 ? 8 : 2) * kb::ulp_at(y.type, h));  // CUDA expf: 2 ulp
      }
    }
}

}  // namespace

TEST_CASE("softmax gpu: every variant and dtype against fp64 and the twin") {
  kb::check_softmax_suite(run_gpu, 8);
}

TEST_CASE("softmax gpu: naive overflows in fp16 at 11.09375 and not at 11.0859375") {
  kb::check_naive_overflow_band(run_gpu);
}

TEST_CASE("softmax gpu: long rows (many columns per thread) and many rows") {
  std::mt19937_64 rng(21);
  for (SoftmaxVariant v : {SoftmaxVariant::safe, SoftmaxVariant::online}) {
    const int rows = 70, cols = 5000;
    const kb::Tensor x = kb::softmax_rows(DType::bf16, rows, cols, cols, rng, false);
    kb::Tensor y(DType::bf16, x.size());
    run_gpu(kb::softmax_args(x, y, rows, cols, cols), v, y);
    kb::check_softmax_exact(x, y, rows, cols, cols, false, "long rows");
  }
}
#endif
