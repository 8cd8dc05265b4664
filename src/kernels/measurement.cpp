#include "turnrl/kernels/measurement.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>

namespace turnrl {

namespace {

// compare_outputs on [begin, end); failing_index is absolute.
Comparison compare_range(const float* cand, const float* ref, int64_t begin, int64_t end, double atol, double rtol) {
  Comparison c;
  for (int64_t i = begin; i < end; ++i) {
    const double o = cand[i], r = ref[i];
    bool bad;
    if (!std::isfinite(o)) {
      bad = !(o == r);  // same infinity as the reference is fine; NaN never is
      if (bad) c.finite = false;
    } else {
      const double d = std::fabs(o - r);
      c.max_abs_error = std::max(c.max_abs_error, d);
      c.max_rel_error = std::max(c.max_rel_error, d / std::max(std::fabs(r), 1e-12));
      bad = !(d <= atol + rtol * std::fabs(r));
      if (bad) c.within = false;
    }
    if (bad && c.failing_index < 0) c.failing_index = i;
  }
  return c;
}

}  // namespace

Comparison compare_outputs(const float* cand, const float* ref, int64_t n, double atol, double rtol) {
  // Outputs of GPU tasks reach 16 M elements; fixed chunks over LibTorch's intra-op threads, merged
  // in chunk order, give the sequential answer (maxima commute; the first failing index is the
  // first chunk's that has one).
  constexpr int64_t kChunk = int64_t(1) << 18;
  if (n <= kChunk) return compare_range(cand, ref, 0, n, atol, rtol);
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<Comparison> parts(static_cast<size_t>(chunks));
  at::parallel_for(0, chunks, 1, [&](int64_t first, int64_t last) {
    for (int64_t k = first; k < last; ++k)
      parts[size_t(k)] = compare_range(cand, ref, k * kChunk, std::min(n, (k + 1) * kChunk), atol, rtol);
  });
  Comparison c;
  for (const Comparison& p : parts) {
    c.finite = c.finite && p.finite;
    c.within = c.within && p.within;
    c.max_abs_error = std::max(c.max_abs_error, p.max_abs_error);
    c.max_rel_error = std::max(c.max_rel_error, p.max_rel_error);
    if (c.failing_index < 0) c.failing_index = p.failing_index;
  }
  return c;
}

Comparison compare_tensors(const at::Tensor& candidate, const at::Tensor& reference, double atol, double rtol) {
  Comparison c;
  if (candidate.numel() != reference.numel()) {
    c.shape_ok = false;
    return c;
  }
  if (candidate.numel() == 0) return c;
  // compare_range's arithmetic, element for element, in double: the same verdict to the bit.
  const at::Tensor o = candidate.reshape(-1).to(at::kDouble), r = reference.reshape(-1).to(at::kDouble);
  const at::Tensor finite = at::isfinite(o), abs_r = r.abs();
  const at::Tensor d = (o - r).abs().masked_fill(at::logical_not(finite), 0.0);
  const at::Tensor rel = d / abs_r.clamp_min(1e-12);
  const at::Tensor bad_value = at::logical_and(at::logical_not(finite), o.ne(r));  // NaN, or another infinity
  const at::Tensor bad_tolerance = at::logical_and(finite, at::logical_not(d.le(abs_r * rtol + atol)));
  // std::max skips NaN (d or d/|r| of a NaN or infinite reference); so do these maxima.
  const at::Tensor summary = at::stack({bad_value.any().to(at::kDouble), bad_tolerance.any().to(at::kDouble),
                                        d.masked_fill(d.isnan(), 0.0).max(), rel.masked_fill(rel.isnan(), 0.0).max()})
                                 .to(at::kCPU);
  const double* v = summary.data_ptr<double>();
  c.finite = v[0] == 0;
  c.within = v[1] == 0;
  c.max_abs_error = v[2];
  c.max_rel_error = v[3];
  if (!c.ok()) c.failing_index = at::logical_or(bad_value, bad_tolerance).to(at::kByte).argmax().item<int64_t>();
  return c;
}

Comparison merge_in_order(const std::vector<Comparison>& outputs, const std::vector<int64_t>& sizes) {
  Comparison total;
  int64_t offset = 0;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const Comparison& c = outputs[k];
    total.shape_ok = total.shape_ok && c.shape_ok;
    total.finite = total.finite && c.finite;
    total.within = total.within && c.within;
    total.max_abs_error = std::max(total.max_abs_error, c.max_abs_error);
    total.max_rel_error = std::max(total.max_rel_error, c.max_rel_error);
    if (total.failing_index < 0 && c.failing_index >= 0) total.failing_index = offset + c.failing_index;
    offset += k < sizes.size() ? sizes[k] : 0;
  }
  return total;
}

Comparison compare_all(const std::vector<std::vector<float>>& got, const std::vector<at::Tensor>& ref, double atol,
                       double rtol) {
  std::vector<Comparison> parts;
  std::vector<int64_t> sizes;
  for (size_t k = 0; k < ref.size() && got.size() == ref.size(); ++k) {
    sizes.push_back(ref[k].numel());
    parts.push_back(int64_t(got[k].size()) == sizes.back()
                        ? compare_outputs(got[k].data(), ref[k].data_ptr<float>(), sizes.back(), atol, rtol)
                        : Comparison{false});
  }
  Comparison total = merge_in_order(parts, sizes);
  total.shape_ok = total.shape_ok && got.size() == ref.size();
  return total;
}

Comparison compare_all(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& ref, double atol, double rtol) {
  std::vector<Comparison> parts;
  std::vector<int64_t> sizes;
  for (size_t k = 0; k < ref.size() && got.size() == ref.size(); ++k) {
    parts.push_back(compare_tensors(got[k], ref[k], atol, rtol));
    sizes.push_back(ref[k].numel());
  }
  Comparison total = merge_in_order(parts, sizes);
  total.shape_ok = total.shape_ok && got.size() == ref.size();
  return total;
}

TimingStats timing_stats(std::vector<double> s) {
  TimingStats t;
  t.trials = int(s.size());
  if (s.empty()) return t;
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t m = v.size() / 2;
    return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
  };
  t.median_us = median(s);
  t.min_us = *std::min_element(s.begin(), s.end());
  for (auto& x : s) x = std::fabs(x - t.median_us);
  t.spread_us = median(s);
  return t;
}

}  // namespace turnrl
