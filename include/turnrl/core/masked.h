#pragma once
// Masked reductions over whole tensors, with verl's semantics (verl_F.masked_mean): entries under a
// false mask contribute nothing, even when they are NaN or inf; an empty mask gives 0, not NaN.
// All functions take a value tensor x and a bool (or 0/1) mask of the same shape.
#include <torch/types.h>

namespace turnrl {

// x where mask, 0 elsewhere (NaN-safe: a masked-out NaN becomes 0).
torch::Tensor masked_fill_zero(const torch::Tensor& x, const torch::Tensor& mask);

// Σ x·m over `dim` (all dimensions when dim is omitted).
torch::Tensor masked_sum(const torch::Tensor& x, const torch::Tensor& mask);
torch::Tensor masked_sum(const torch::Tensor& x, const torch::Tensor& mask, int64_t dim);

// Σ x·m / (Σ m + 1e-8): an all-false mask gives 0.
torch::Tensor masked_mean(const torch::Tensor& x, const torch::Tensor& mask);
torch::Tensor masked_mean(const torch::Tensor& x, const torch::Tensor& mask, int64_t dim);

// Variance of the masked entries; unbiased multiplies by n/(n-1). Throws when the mask has fewer
// than 2 (unbiased) or 1 (biased) entries.
torch::Tensor masked_var(const torch::Tensor& x, const torch::Tensor& mask, bool unbiased = true);

// (x - mean) * rsqrt(var + 1e-8) over all masked entries; masked-out entries become 0.
// shift_mean=false keeps the mean (scales only), as verl's option does.
torch::Tensor masked_whiten(const torch::Tensor& x, const torch::Tensor& mask, bool shift_mean = true);

}  // namespace turnrl
