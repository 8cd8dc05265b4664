#include "turnrl/core/masked.h"

#include "turnrl/core/error.h"

namespace turnrl {

namespace {
constexpr double kEps = 1e-8;
}

torch::Tensor masked_fill_zero(const torch::Tensor& x, const torch::Tensor& mask) {
  return at::where(mask.to(at::kBool), x, 0);  // scalar: no extra launch for a zero tensor
}

torch::Tensor masked_sum(const torch::Tensor& x, const torch::Tensor& mask) { return masked_fill_zero(x, mask).sum(); }

torch::Tensor masked_sum(const torch::Tensor& x, const torch::Tensor& mask, int64_t dim) {
  return masked_fill_zero(x, mask).sum(dim);
}

torch::Tensor masked_mean(const torch::Tensor& x, const torch::Tensor& mask) {
  return masked_sum(x, mask) / (mask.to(x.scalar_type()).sum() + kEps);
}

torch::Tensor masked_mean(const torch::Tensor& x, const torch::Tensor& mask, int64_t dim) {
  return masked_sum(x, mask, dim) / (mask.to(x.scalar_type()).sum(dim) + kEps);
}

torch::Tensor masked_var(const torch::Tensor& x, const torch::Tensor& mask, bool unbiased) {
  const double count = mask.to(at::kDouble).sum().item<double>();
  if (count < (unbiased ? 2 : 1))
    fail("masked_var: the mask selects {} entries; an {} variance needs at least {}", count,
         unbiased ? "unbiased" : "biased", unbiased ? 2 : 1);
  const torch::Tensor mean = masked_mean(x, mask);
  const torch::Tensor var = masked_mean((x - mean).square(), mask);
  return unbiased ? var * (count / (count - 1)) : var;
}

torch::Tensor masked_whiten(const torch::Tensor& x, const torch::Tensor& mask, bool shift_mean) {
  const torch::Tensor mean = masked_mean(x, mask);
  const torch::Tensor scaled = (x - mean) * at::rsqrt(masked_var(x, mask) + kEps);
  return masked_fill_zero(shift_mean ? scaled : scaled + mean, mask);
}

}  // namespace turnrl
