#include "turnrl/model/torchscript_policy.h"

#include <torch/script.h>

#include "turnrl/core/error.h"

namespace turnrl {

namespace {

torch::jit::Module load_module(const std::string& path, torch::Device device) {
  try {
    return torch::jit::load(path, device);
  } catch (const c10::Error& e) {
    fail("TorchScriptPolicy: cannot load '{}' as a TorchScript module: {}", path, e.what_without_backtrace());
  }
}

}  // namespace

TorchScriptPolicy::TorchScriptPolicy(const std::string& path, torch::Device device)
    : module_(std::make_unique<torch::jit::Module>(load_module(path, device))), device_(device) {
  if (!module_->find_method("forward"))
    fail("TorchScriptPolicy: '{}' has no forward(tokens, attention_mask) method", path);
}

TorchScriptPolicy::~TorchScriptPolicy() = default;

torch::Tensor TorchScriptPolicy::logits(const torch::Tensor& tokens, const torch::Tensor& attention_mask) {
  const torch::Tensor mask =
      attention_mask.defined() ? attention_mask.to(torch::kBool) : torch::ones_like(tokens, torch::kBool);
  return module_->forward({tokens, mask}).toTensor();
}

TokenLogp TorchScriptPolicy::forward_logp(const torch::Tensor& tokens, const torch::Tensor& attention_mask,
                                          const torch::Tensor& response_mask) {
  return token_logp_from_logits(logits(tokens, attention_mask), tokens, response_mask, logp_temperature());
}

Rollout TorchScriptPolicy::generate(const torch::Tensor& prompts, const torch::Tensor& prompt_mask,
                                    const SamplingOptions& options) {
  RecomputeNextToken model([this](const torch::Tensor& t, const torch::Tensor& m) { return logits(t, m); });
  return sample(model, prompts, prompt_mask, options);
}

std::vector<torch::Tensor> TorchScriptPolicy::parameters() {
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& p : module_->parameters()) out.push_back(p);
  return out;
}

void TorchScriptPolicy::save(const std::string& path) { module_->save(path); }

void TorchScriptPolicy::load(const std::string& path) {
  // Copy into the existing tensors: an optimizer holding parameters() keeps working.
  const torch::jit::Module loaded = load_module(path, device_);
  torch::NoGradGuard no_grad;
  for (const auto& p : module_->named_parameters()) {
    bool found = false;
    for (const auto& q : loaded.named_parameters()) {
      if (q.name != p.name) continue;
      if (q.value.sizes() != p.value.sizes())
        fail("TorchScriptPolicy.load: parameter '{}' has shape {} in '{}', {} here", p.name, c10::str(q.value.sizes()),
             path, c10::str(p.value.sizes()));
      p.value.copy_(q.value);
      found = true;
      break;
    }
    if (!found) fail("TorchScriptPolicy.load: parameter '{}' is missing from '{}'", p.name, path);
  }
}

void TorchScriptPolicy::train(bool on) { module_->train(on); }

void TorchScriptPolicy::to(torch::Device device) {
  module_->to(device);
  device_ = device;
}

void TorchScriptPolicy::to(torch::Dtype dtype) { module_->to(dtype); }

}  // namespace turnrl
