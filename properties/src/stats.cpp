// Statistics over judged elements: the per-(dtype, output) counts, maxima, histogram and samples
// accumulated over a run's judgements, and the quantiles taken when it ends.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "internal.hpp"

namespace attncheck::detail {

void accumulate_stats(std::vector<OutputStats>& stats, const Judgement& J, StatSamples& samples) {
  const auto& edges = ulp_histogram_edges();
  for (const Elem& e : J.elems) {
    if (J.row_skipped(e.row) || !e.exact_finite) continue;
    const std::string dt = is_fp8(e.dtype) ? kv_dtype_name(e.dtype) : dtype_name(e.dtype),
                      on = out_name(e.out);
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
  // Bins in increasing order of magnitude: 0 for zero, 1 below 2^-64, then 32 per octave from the
  // exponent and the significand's top five bits (monotone in x: a larger positive double has
  // larger bits), kBins - 2 at or above 2^64, kBins - 1 for +inf.
  size_t b = 0;
  if (!(x <= std::numeric_limits<double>::max())) {
    b = kBins - 1;
  } else if (x > 0) {
    const uint64_t bits = std::bit_cast<uint64_t>(x);
    const int64_t e = int64_t(bits >> 52) - 1023;
    if (e < -kOctaves)
      b = 1;
    else if (e >= kOctaves)
      b = kBins - 2;
    else
      b = 2 + size_t((e + kOctaves) * kBinsPerOctave) + size_t((bits >> 47) & (kBinsPerOctave - 1));
  }
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
  if (bins_.empty()) {
    bins_.assign(kBins, {0, 0.0});
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
  for (const auto& [count, largest] : bins_) {
    below += count;
    if (below > k) return largest;
  }
  return INFINITY;
}

double QuantileSketch::peak_bytes() {
  // The exact samples with a vector's doubling slack, or the bins (16 B each).
  return std::max(2.0 * kExactSamples * sizeof(double), double(kBins) * 16);
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
