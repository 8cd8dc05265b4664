#pragma once
// LoRA (Hu et al. 2021) as peft implements it: a frozen linear layer W (+ b) plus a trainable
// low-rank update, y = x W^T + b + scale * (x A^T) B^T with A [rank, in] drawn like
// peft's default (kaiming-uniform, a = sqrt(5)) and B [out, rank] zero, so a fresh adapter leaves
// the model unchanged. scale = alpha / rank, or alpha / sqrt(rank) with rsLoRA (Kalajdzievski
// 2023). Adapter weights are float32 whatever the base dtype (peft's autocast_adapter_dtype), and
// the update is computed in float32, then added in the base dtype.
#include <cstdint>
#include <string>
#include <vector>

#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/types.h>

namespace turnrl {

struct LoraOptions {
  TORCH_ARG(int64_t, rank) = 0;  // 0 = no adapters (full fine-tuning)
  TORCH_ARG(double, alpha) = 16.0;
  TORCH_ARG(bool, rslora) = false;  // scale alpha / sqrt(rank) instead of alpha / rank
  // Projections that get an adapter, by their transformers name.
  TORCH_ARG(std::vector<std::string>, target_modules) =
      std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

 public:
  bool enabled() const { return rank_ > 0; }
  double scale() const;
};

// The projection names an adapter may target.
const std::vector<std::string>& lora_target_names();

// Throws turnrl::Error naming the field (lora.rank, lora.alpha, lora.target_modules).
void validate(const LoraOptions& options);

// A linear layer whose weights are loaded from a checkpoint (allocated uninitialised), with an
// optional adapter. Parameter names follow transformers and peft: weight, bias, lora_A.weight,
// lora_B.weight.
class LoraLinearImpl : public torch::nn::Module {
 public:
  LoraLinearImpl(int64_t in_features, int64_t out_features, bool bias, const torch::TensorOptions& options);

  torch::Tensor forward(const torch::Tensor& x);

  // Adds a fresh adapter (A kaiming-uniform from the global generator, B zeros) and freezes
  // weight and bias. Throws if one is already there.
  void add_adapter(int64_t rank, double scale);
  bool has_adapter() const { return !lora_A.is_empty(); }
  // W + scale * B A in W's dtype (W itself when there is no adapter).
  torch::Tensor merged_weight() const;
  // Folds the adapter into W and removes it; W stays frozen.
  void merge_adapter();

  torch::Tensor weight, bias;  // [out, in], [out] or undefined
  torch::nn::Linear lora_A{nullptr}, lora_B{nullptr};

 private:
  double scale_ = 0.0;
};
TORCH_MODULE(LoraLinear);

}  // namespace turnrl
