#include "merged_linear.h"

#include <torch/types.h>

namespace turnrl::detail {
namespace {

std::array<int64_t, 3> state_of(const torch::Tensor& t) {
  return {reinterpret_cast<int64_t>(t.unsafeGetTensorImpl()), reinterpret_cast<int64_t>(t.data_ptr()), int64_t(t._version())};
}

}  // namespace

bool MergedLinear::refresh(const std::vector<const LoraLinearImpl*>& parts, const torch::Tensor& column_order) {
  std::vector<std::array<int64_t, 3>> now;
  bool biased = false;
  for (const LoraLinearImpl* part : parts) {
    if (part->has_adapter()) {
      clear();
      return false;
    }
    now.push_back(state_of(part->weight));
    if (part->bias.defined()) {
      now.push_back(state_of(part->bias));
      biased = true;
    }
  }
  if (ready() && now == seen_) return true;
  torch::NoGradGuard no_grad;
  int64_t rows = 0;
  for (const LoraLinearImpl* part : parts) rows += part->weight.size(0);
  const torch::Tensor& first = parts.front()->weight;
  const bool same_place = ready() && weight_.size(0) == rows && weight_.size(1) == first.size(1) &&
                          weight_.options().type_equal(first.options()) && weight_.device() == first.device() &&
                          biased == bias_.defined();
  if (!same_place) {
    ++placements_;
    weight_ = torch::empty({rows, first.size(1)}, first.options());
    bias_ = biased ? torch::zeros({rows}, first.options()) : torch::Tensor();
  }
  int64_t offset = 0;
  for (const LoraLinearImpl* part : parts) {
    const int64_t n = part->weight.size(0);
    const torch::Tensor w = column_order.defined() ? part->weight.index_select(1, column_order.to(first.device())) : part->weight;
    weight_.narrow(0, offset, n).copy_(w);
    if (biased) {
      if (part->bias.defined()) bias_.narrow(0, offset, n).copy_(part->bias);
      else bias_.narrow(0, offset, n).zero_();
    }
    offset += n;
  }
  seen_ = std::move(now);
  return true;
}

void MergedLinear::clear() {
  if (ready()) ++placements_;
  weight_ = bias_ = torch::Tensor();
  seen_.clear();
}

torch::Tensor MergedLinear::operator()(const torch::Tensor& x) const {
  return torch::linear(x, weight_, bias_);
}

}  // namespace turnrl::detail
