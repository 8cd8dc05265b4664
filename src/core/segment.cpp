#include "turnrl/core/segment.h"

#include <limits>

#include "turnrl/core/masked.h"

namespace turnrl {

SegmentSums segment_sums(const torch::Tensor& values, const torch::Tensor& segment, int64_t num_segments,
                         const torch::Tensor& mask) {
  // Two 1-D index_adds: LibTorch's CPU index_add has a tight loop for 1-D tensors but goes row by
  // row for 2-D ones (30x slower at 1M rows); on CUDA both forms are one launch per column.
  const torch::Tensor weight = mask.defined() ? mask.to(values.scalar_type()) : at::ones_like(values);
  const torch::Tensor masked_values = mask.defined() ? masked_fill_zero(values, mask) : values;
  return {at::zeros({num_segments}, values.options()).index_add_(0, segment, masked_values),
          at::zeros({num_segments}, values.options()).index_add_(0, segment, weight)};
}

torch::Tensor segment_mean(const torch::Tensor& values, const torch::Tensor& segment, int64_t num_segments,
                           const torch::Tensor& mask) {
  SegmentSums s = segment_sums(values, segment, num_segments, mask);
  return s.sum / s.count.clamp_min(1);
}

torch::Tensor segment_std(const torch::Tensor& values, const torch::Tensor& segment, int64_t num_segments,
                          bool unbiased, const torch::Tensor& mask) {
  SegmentSums s = segment_sums(values, segment, num_segments, mask);
  const torch::Tensor mean = s.sum / s.count.clamp_min(1);
  const torch::Tensor centred = values - mean.index_select(0, segment);
  SegmentSums sq = segment_sums(centred.square(), segment, num_segments, mask);
  const torch::Tensor denom = unbiased ? s.count - 1 : s.count.clamp_min(1);
  // unbiased with n < 2 divides by <= 0: report NaN rather than a made-up value.
  return at::where(denom > 0, (sq.sum / denom.clamp_min(1)).sqrt(),
                   at::full({}, std::numeric_limits<double>::quiet_NaN(), values.options()));
}

torch::Tensor gather_segments(const torch::Tensor& per_segment, const torch::Tensor& segment) {
  return per_segment.index_select(0, segment);
}

torch::Tensor segment_whiten(const torch::Tensor& values, const torch::Tensor& segment, int64_t num_segments,
                             bool unbiased, double eps, const torch::Tensor& mask) {
  const torch::Tensor mean = segment_mean(values, segment, num_segments, mask);
  const torch::Tensor std = segment_std(values, segment, num_segments, unbiased, mask);
  torch::Tensor out = (values - mean.index_select(0, segment)) / (std.index_select(0, segment) + eps);
  return mask.defined() ? masked_fill_zero(out, mask) : out;
}

}  // namespace turnrl
