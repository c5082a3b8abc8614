// Statistics over judged elements: the per-(dtype, output) counts, maxima, histogram and samples
// accumulated over a run's judgements, and the quantiles taken when it ends.
#include <algorithm>
#include <cmath>
#include <limits>

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
    samples.ulp[i].add(e.ulp);
    samples.cancel[i].add(e.cancel);
    samples.ratio[i].add(e.ratio);
    size_t bin = 0;
    while (bin + 2 < edges.size() && e.ulp >= edges[bin + 1]) ++bin;
    ++s.histogram[bin];
  }
}

void QuantileSketch::bin(double x) {
  // Zero has a bin of its own, +inf the last; a finite x > 0 the bin floor(32 log2 x), magnitudes
  // below 2^-64 sharing the one below and above 2^64 the one above (their quantile is then the
  // bin's largest sample: still never below the order statistic). Neighbouring bins hold only
  // larger or only smaller samples (log2 is monotone; its rounding at most moves one across an edge).
  constexpr int32_t lo = -kOctaves * kBinsPerOctave - 1, hi = kOctaves * kBinsPerOctave;
  int32_t b = INT32_MIN;
  if (!(x <= std::numeric_limits<double>::max()))
    b = INT32_MAX;
  else if (x > 0)
    b = int32_t(std::clamp(std::floor(std::log2(x) * kBinsPerOctave), double(lo), double(hi)));
  auto& [count, largest] = bins_[b];
  largest = count ? std::max(largest, x) : x;
  ++count;
}

void QuantileSketch::add(double x) {
  if (std::isnan(x)) x = INFINITY;
  ++n_;
  if (bins_.empty() && exact_.size() < kExactSamples) {
    exact_.push_back(x);
    return;
  }
  if (!exact_.empty()) {
    for (double e : exact_) bin(e);
    exact_ = {};
  }
  bin(x);
}

double QuantileSketch::quantile(double q) {
  // The order statistic at ceil(q n) - 1: at most (1 - q) n samples lie above it, the property
  // report merge's bound of a union's quantile rests on.
  if (n_ == 0) return 0.0;
  const int64_t k = std::min(n_ - 1, int64_t(std::ceil(q * double(n_))) - 1);
  if (bins_.empty()) {
    std::nth_element(exact_.begin(), exact_.begin() + std::ptrdiff_t(k), exact_.end());
    return exact_[size_t(k)];
  }
  int64_t below = 0;
  for (const auto& [b, cl] : bins_) {
    below += cl.first;
    if (below > k) return cl.second;
  }
  return bins_.rbegin()->second.second;
}

double QuantileSketch::peak_bytes() {
  // The exact samples with a vector's doubling slack, or every bin (2 kOctaves octaves and the four
  // at the ends) as a map node of about 64 B.
  return std::max(2.0 * kExactSamples * sizeof(double), (2.0 * kOctaves * kBinsPerOctave + 4) * 64);
}

void finish_stats(std::vector<OutputStats>& stats, StatSamples& samples) {
  for (size_t i = 0; i < stats.size(); ++i) {
    const int64_t finite = stats[i].count - stats[i].nonfinite;
    stats[i].mean_ulp = finite ? stats[i].mean_ulp / double(finite) : 0;
    stats[i].p99_ulp = samples.ulp[i].quantile(0.99);
    stats[i].p99_cancel_ulp = samples.cancel[i].quantile(0.99);
    stats[i].p50_ratio = samples.ratio[i].quantile(0.5);
    stats[i].p99_ratio = samples.ratio[i].quantile(0.99);
  }
}

}  // namespace attncheck::detail
