#pragma once
// Segment reductions: statistics of values grouped by an int64 segment id, computed with
// index_add (one pass, no loop over segments), on CPU or CUDA. Used for per-group,
// per-(group, turn) and per-trajectory statistics.
//
// Arguments shared by every function:
//   values        float [N]      the values to reduce
//   segment       int64 [N]      segment id of each value, in [0, num_segments)
//   num_segments  host int       the bound on ids (buffers are [num_segments])
//   mask          bool  [N]      optional: only true entries take part (undefined = all)
#include <cstdint>

#include <torch/types.h>

namespace turnrl {

// Per-segment sum and count of the masked entries, [num_segments] each. The sum ignores
// masked-out entries even when they are NaN. Count has the dtype of values.
struct SegmentSums {
  torch::Tensor sum;
  torch::Tensor count;
};
SegmentSums segment_sums(const torch::Tensor& values, const torch::Tensor& segment,
                         int64_t num_segments, const torch::Tensor& mask = {});

// Per-segment mean (0 for an empty segment), [num_segments].
torch::Tensor segment_mean(const torch::Tensor& values, const torch::Tensor& segment,
                           int64_t num_segments, const torch::Tensor& mask = {});

// Per-segment standard deviation, [num_segments]. unbiased divides by (n-1) and gives NaN for
// n < 2 (callers decide what a singleton means); biased divides by n (0 for n = 1).
// Two-pass (mean first) for accuracy.
torch::Tensor segment_std(const torch::Tensor& values, const torch::Tensor& segment,
                          int64_t num_segments, bool unbiased, const torch::Tensor& mask = {});

// Broadcast a per-segment tensor back to the rows: out[i] = per_segment[segment[i]].
torch::Tensor gather_segments(const torch::Tensor& per_segment, const torch::Tensor& segment);

// Whitening per segment: (x - mean_seg) / (std_seg + eps) on masked rows, 0 elsewhere.
torch::Tensor segment_whiten(const torch::Tensor& values, const torch::Tensor& segment,
                             int64_t num_segments, bool unbiased, double eps,
                             const torch::Tensor& mask = {});

}  // namespace turnrl
