#include "turnrl/rl/master_weights.h"

#include <torch/serialize.h>

#include "turnrl/core/error.h"

namespace turnrl {
namespace {

bool narrower_than_float(const torch::Tensor& t) {
  return at::isFloatingType(t.scalar_type()) && c10::elementSize(t.scalar_type()) < c10::elementSize(torch::kFloat);
}

}  // namespace

MasterWeights::MasterWeights(std::vector<torch::Tensor> params, bool enabled) : params_(std::move(params)) {
  torch::NoGradGuard no_grad;
  for (const torch::Tensor& p : params_) {
    if (enabled && narrower_than_float(p)) {
      masters_.push_back(p.detach().to(torch::kFloat).clone().requires_grad_(true));
      ++separate_;
    } else {
      masters_.push_back(p);
    }
  }
}

void MasterWeights::zero_gradients() {
  torch::NoGradGuard no_grad;
  for (const std::vector<torch::Tensor>* list : {&params_, &masters_})
    for (const torch::Tensor& t : *list)
      if (t.grad().defined()) t.mutable_grad().zero_();
}

void MasterWeights::gather_gradients() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (masters_[i].is_same(params_[i])) continue;
    const torch::Tensor& grad = params_[i].grad();
    masters_[i].mutable_grad() = grad.defined() ? grad.to(torch::kFloat) : torch::zeros_like(masters_[i]);
    params_[i].mutable_grad() = torch::Tensor();
  }
}

void MasterWeights::publish() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!masters_[i].is_same(params_[i])) params_[i].copy_(masters_[i]);
}

void MasterWeights::reset_from_model() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!masters_[i].is_same(params_[i])) masters_[i].copy_(params_[i]);
}

void MasterWeights::save(const std::string& path) const {
  std::vector<torch::Tensor> separate;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!masters_[i].is_same(params_[i])) separate.push_back(masters_[i].detach().cpu());
  torch::save(separate, path);
}

void MasterWeights::load(const std::string& path) {
  std::vector<torch::Tensor> stored;
  try {
    torch::load(stored, path);
  } catch (const c10::Error& e) {
    fail("master weights '{}': cannot read: {}", path, e.what_without_backtrace());
  }
  if (stored.size() != separate_)
    fail("master weights '{}': {} tensors, this model has {} parameters with float32 masters", path, stored.size(),
         separate_);
  torch::NoGradGuard no_grad;
  size_t next = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (masters_[i].is_same(params_[i])) continue;
    const torch::Tensor& t = stored[next++];
    if (t.sizes() != masters_[i].sizes())
      fail("master weights '{}': tensor {} has shape {}, the parameter {}", path, next - 1, c10::str(t.sizes()),
           c10::str(masters_[i].sizes()));
    masters_[i].copy_(t);
  }
}

}  // namespace turnrl
