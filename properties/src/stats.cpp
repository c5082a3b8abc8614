// Statistics over judged elements: the per-(dtype, output) counts, maxima, histogram and samples
// accumulated over a run's judgements, and the quantiles taken when it ends.
#include <algorithm>
#include <cmath>

#include "internal.hpp"

namespace attncheck::detail {

void accumulate_stats(std::vector<OutputStats>& stats, const Judgement& J, StatSamples& samples) {
  const auto& edges = ulp_histogram_edges();
  for (const Elem& e : J.elems) {
    if (J.row_skipped(e.row) || !e.exact_finite) continue;
    const std::string dt = dtype_name(e.dtype), on = out_name(e.out);
    size_t i = 0;
    for (; i < stats.size(); ++i)
      if (stats[i].dtype == dt && stats[i].output == on) break;
    if (i == stats.size()) {
      OutputStats s;
      s.dtype = dt;
      s.output = on;
      s.histogram.assign(edges.size() - 1, 0);
      stats.push_back(s);
      samples.ulp.emplace_back();
      samples.cancel.emplace_back();
      samples.ratio.emplace_back();
    }
    OutputStats& s = stats[i];
    ++s.count;
    if (!e.out_finite) {
      ++s.nonfinite;
      continue;
    }
    s.max_ulp = std::max(s.max_ulp, e.ulp);
    s.max_cancel_ulp = std::max(s.max_cancel_ulp, e.cancel);
    s.max_ratio = std::max(s.max_ratio, e.ratio);
    s.mean_ulp += e.ulp;  // a sum until finish_stats
    samples.ulp[i].push_back(e.ulp);
    samples.cancel[i].push_back(e.cancel);
    samples.ratio[i].push_back(e.ratio);
    size_t bin = 0;
    while (bin + 2 < edges.size() && e.ulp >= edges[bin + 1]) ++bin;
    ++s.histogram[bin];
  }
}

void finish_stats(std::vector<OutputStats>& stats, StatSamples& samples) {
  // The order statistic at ceil(q n) - 1: at most (1 - q) n samples lie above it, the property
  // report merge's bound of a union's quantile rests on.
  auto quantile = [](std::vector<double>& v, double q) {
    if (v.empty()) return 0.0;
    const size_t k = std::min(v.size() - 1, size_t(std::ceil(q * double(v.size()))) - 1);
    std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(k), v.end());
    return v[k];
  };
  for (size_t i = 0; i < stats.size(); ++i) {
    const int64_t finite = stats[i].count - stats[i].nonfinite;
    stats[i].mean_ulp = finite ? stats[i].mean_ulp / double(finite) : 0;
    stats[i].p99_ulp = quantile(samples.ulp[i], 0.99);
    stats[i].p99_cancel_ulp = quantile(samples.cancel[i], 0.99);
    stats[i].p50_ratio = quantile(samples.ratio[i], 0.5);
    stats[i].p99_ratio = quantile(samples.ratio[i], 0.99);
  }
}

}  // namespace attncheck::detail
