#pragma once
// TorchScriptPolicy: a Policy around a TorchScript module file, for models defined and exported in
// Python. The jit headers stay out of this header (the module is held behind a pointer).
#include <memory>
#include <string>

#include "turnrl/model/policy.h"

namespace torch::jit {
struct Module;
}

namespace turnrl {

// A TorchScript module saved from Python, whose forward(tokens: Tensor, attention_mask: Tensor)
// -> Tensor returns logits [B, T, V] (int64 tokens, bool mask; position t predicts token t+1):
//
//   m = torch.jit.script(MyLM(...)); m.save("policy.pt")      # Python
//   turnrl::TorchScriptPolicy policy("policy.pt");            // C++
//
// Training updates its parameters in place; save() writes a TorchScript file again.
class TorchScriptPolicy : public Policy {
 public:
  explicit TorchScriptPolicy(const std::string& path, torch::Device device = torch::kCPU);
  ~TorchScriptPolicy() override;

  TokenLogp forward_logp(const torch::Tensor& tokens, const torch::Tensor& attention_mask = {},
                         const torch::Tensor& response_mask = {}) override;
  Rollout generate(const torch::Tensor& prompts, const torch::Tensor& prompt_mask,
                   const SamplingOptions& options) override;
  std::vector<torch::Tensor> parameters() override;
  void save(const std::string& path) override;
  void load(const std::string& path) override;
  void train(bool on = true) override;
  void to(torch::Device device) override;
  void to(torch::Dtype dtype) override;
  torch::Device device() const override { return device_; }

  torch::jit::Module& module() { return *module_; }

 private:
  torch::Tensor logits(const torch::Tensor& tokens, const torch::Tensor& attention_mask);
  std::unique_ptr<torch::jit::Module> module_;
  torch::Device device_;
};

}  // namespace turnrl
