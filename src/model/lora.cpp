#include "turnrl/model/lora.h"

#include <algorithm>
#include <cmath>

#include <torch/types.h>
#include <torch/nn/init.h>

#include "turnrl/core/error.h"

namespace turnrl {

double LoraOptions::scale() const { return rslora_ ? alpha_ / std::sqrt(double(rank_)) : alpha_ / double(rank_); }

const std::vector<std::string>& lora_target_names() {
  static const std::vector<std::string> names = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                 "gate_proj", "up_proj", "down_proj"};
  return names;
}

void validate(const LoraOptions& o) {
  if (o.rank() < 0) fail("lora.rank: {}; must be >= 0 (0 = no adapters)", o.rank());
  if (!o.enabled()) return;
  if (!(o.alpha() > 0) || !std::isfinite(o.alpha())) fail("lora.alpha: {}; must be finite and > 0", o.alpha());
  if (o.target_modules().empty())
    fail("lora.target_modules: empty; name at least one of {}", fmt::join(lora_target_names(), ", "));
  for (const std::string& name : o.target_modules())
    if (std::find(lora_target_names().begin(), lora_target_names().end(), name) == lora_target_names().end())
      fail("lora.target_modules: unknown module '{}'; allowed: {}", name, fmt::join(lora_target_names(), ", "));
}

LoraLinearImpl::LoraLinearImpl(int64_t in_features, int64_t out_features, bool with_bias,
                               const torch::TensorOptions& options) {
  weight = register_parameter("weight", torch::empty({out_features, in_features}, options));
  if (with_bias) bias = register_parameter("bias", torch::empty({out_features}, options));
}

torch::Tensor LoraLinearImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = torch::linear(x, weight, bias);
  if (!has_adapter()) return y;
  const torch::Tensor update = lora_B(lora_A(x.to(lora_A->weight.scalar_type()))) * scale_;
  return y + update.to(y.scalar_type());
}

void LoraLinearImpl::add_adapter(int64_t rank, double scale) {
  if (has_adapter()) fail("LoRA: this layer already has an adapter");
  const auto adapter_options = weight.options().dtype(torch::kFloat);
  lora_A = register_module("lora_A", torch::nn::Linear(torch::nn::LinearOptions(weight.size(1), rank).bias(false)));
  lora_B = register_module("lora_B", torch::nn::Linear(torch::nn::LinearOptions(rank, weight.size(0)).bias(false)));
  lora_A->to(adapter_options.device(), adapter_options.dtype().toScalarType());
  lora_B->to(adapter_options.device(), adapter_options.dtype().toScalarType());
  {
    torch::NoGradGuard no_grad;
    torch::nn::init::kaiming_uniform_(lora_A->weight, std::sqrt(5.0));
    lora_B->weight.zero_();
  }
  scale_ = scale;
  weight.set_requires_grad(false);
  if (bias.defined()) bias.set_requires_grad(false);
}

torch::Tensor LoraLinearImpl::merged_weight() const {
  if (!has_adapter()) return weight;
  torch::NoGradGuard no_grad;
  const torch::Tensor delta = torch::mm(lora_B->weight, lora_A->weight) * scale_;
  return (weight.to(torch::kFloat) + delta.to(torch::kFloat)).to(weight.scalar_type());
}

void LoraLinearImpl::merge_adapter() {
  if (!has_adapter()) return;
  torch::NoGradGuard no_grad;
  weight.copy_(merged_weight());
  unregister_module("lora_A");
  unregister_module("lora_B");
  lora_A = torch::nn::Linear(nullptr);
  lora_B = torch::nn::Linear(nullptr);
}

}  // namespace turnrl
