#pragma once
// What every backend measures the same way: a candidate's outputs against the reference's
// (element-wise, host copies or tensors on their own device) and timing statistics of trials.
#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "turnrl/kernels/evaluator.h"

namespace turnrl {

// Element-wise comparison of a candidate's output with the reference's.
struct Comparison {
  bool shape_ok = true;
  bool finite = true;
  bool within = true;          // every element within atol + rtol * |ref|
  double max_abs_error = 0;
  double max_rel_error = 0;
  int64_t failing_index = -1;  // first element out of tolerance (or non-finite)
  bool ok() const { return shape_ok && finite && within; }
};
Comparison compare_outputs(const float* candidate, const float* reference, int64_t n, double atol, double rtol);
// compare_outputs over a call's outputs in order (host copies against CPU float tensors): shape_ok
// is false when the counts or sizes differ, and failing_index counts across the outputs.
Comparison compare_all(const std::vector<std::vector<float>>& got, const std::vector<at::Tensor>& ref, double atol,
                       double rtol);
// One call's verdict from its outputs' verdicts, in output order: shape_ok, finite and within
// hold when they hold for every output, the maxima are the largest, and failing_index counts
// across the outputs (sizes[k] elements in output k).
Comparison merge_in_order(const std::vector<Comparison>& outputs, const std::vector<int64_t>& sizes);
// compare_outputs's verdict, bit for bit, from whole-tensor ATen ops on the tensors' own device
// (equal element counts; any floating dtype): GPU outputs are compared where they are, and only the
// verdict reaches the host.
Comparison compare_tensors(const at::Tensor& candidate, const at::Tensor& reference, double atol, double rtol);
// compare_all for outputs that are tensors (on any device), with compare_tensors.
Comparison compare_all(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& ref, double atol, double rtol);

// Median, minimum and median absolute deviation of samples (microseconds).
TimingStats timing_stats(std::vector<double> samples_us);

}  // namespace turnrl
