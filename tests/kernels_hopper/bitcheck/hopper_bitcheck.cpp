// hopper_bitcheck: is a change to fused-hopper bit for bit the kernel it replaces? The working
// tree's kernel against the one at a git revision (old_kernel.cu, built by build.sh from that
// revision's files under namespace hopper_old), every tiling, fp16 / bf16, d 64 / 128, causal or
// not, masks, GQA, ragged and long key ranges, CTAs with 0, 1 and 2 key tiles, and logits wide
// enough for p below 2^-126. One line per case; exit 1 on any differing bit of O or the LSE, 77
// without an sm_90a build. Run on the GPU machine; build: tests/kernels_hopper/bitcheck/build.sh.
#include <cstdio>
#include <cstring>

#include "device_case.h"
#include "hopper/hopper.h"

int run_old_hopper(const ac_attention_args& a, char* err, size_t len);

using namespace attncheck;
using namespace attncheck::test;

int main() {
  if (!kern::hopper_built()) {
    std::printf("no sm_90a build\n");
    return 77;
  }
  std::vector<AttnCase> cases;
  uint64_t seed = 1;
  for (DType dt : {DType::f16, DType::bf16})
    for (int d : {64, 128})
      for (bool causal : {false, true}) {
        cases.push_back(
            make_case(seed++, dt, 4, 2, d, {150, 1, 64, 300}, {200, 77, 700, 300}, causal, false));
        cases.push_back(
            make_case(seed++, dt, 8, 2, d, {5, 33, 0, 17, 3, 40}, {40, 33, 7, 0, 130, 300}, causal, true));
        cases.push_back(make_case(seed++, dt, 8, 1, d, {1000}, {1537}, causal, false, 4.0f));
        // Logits with a standard deviation near 90 (base 2): most p of a row below 2^-126.
        cases.push_back(make_case(seed++, dt, 8, 1, d, {256}, {2048}, causal, false, 8.0f));
        cases.push_back(make_case(seed++, dt, 16, 4, d, {2048}, {2048}, causal, false));
        // CTAs with no key tile (causal, tq > tk), one and two key tiles, a tile boundary plus
        // one, rows past tq in a CTA.
        cases.push_back(
            make_case(seed++, dt, 4, 2, d, {500, 64, 65, 129, 7}, {100, 64, 65, 129, 200}, causal, false));
      }
  int bad = 0, n = 0;
  for (const AttnCase& c : cases)
    for (int tiling = 0; tiling < kern::kNumHopperTilings; ++tiling) {
      DeviceCase dn(c), dold(c);
      ac_attention_args an = dn.args(c, tiling), ao = dold.args(c, tiling);
      char err[256] = {0};
      const int rn = kern::hopper_attention_cuda(an, {}, err, sizeof err);
      const int ro = run_old_hopper(ao, err, sizeof err);
      const auto on = dn.out.to_host(), oo = dold.out.to_host();
      const auto ln = dn.lse.to_host(), lo = dold.lse.to_host();
      size_t diff_o = 0, diff_l = 0;
      for (size_t i = 0; i < on.size(); ++i) diff_o += on[i] != oo[i];
      for (size_t i = 0; i < ln.size(); ++i) diff_l += std::memcmp(&ln[i], &lo[i], 4) != 0;
      const bool ok = rn == AC_OK && ro == AC_OK && diff_o == 0 && diff_l == 0;
      bad += !ok;
      ++n;
      std::printf("%s tiling %d: rc %d/%d, O differs in %zu of %zu, LSE in %zu of %zu  %s\n",
                  c.describe().c_str(), tiling, rn, ro, diff_o, on.size(), diff_l, ln.size(),
                  ok ? "IDENTICAL" : "DIFFERENT");
    }
  std::printf("%d passed, %d failed\n", n - bad, bad);
  return bad ? 1 : 0;
}
