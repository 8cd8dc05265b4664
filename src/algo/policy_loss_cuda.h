#pragma once
// The fused CUDA path of the PPO loss (private to the library): one kernel computes every token's
// loss, its gradient and the per-row sums in one read of the inputs, a one-block kernel the loss,
// the row coefficients and the metrics (policy_loss_kernels.cu).
#include <torch/types.h>

#include "turnrl/algo/policy_loss.h"

namespace turnrl::detail {

// Whether the fused CUDA path takes these inputs: logp a float or double CUDA tensor, a non-empty
// bool mask on its device.
bool ppo_loss_cuda_applies(const torch::Tensor& logp, const torch::Tensor& response_mask);

struct FusedPPOLossCuda {
  torch::Tensor loss;  // 0-dim: Σ_r c_r Σ_k w ℓ (c_r already divided by loss_scale_factor)
  torch::Tensor grad;  // [N, L]: w ∂ℓ/∂logp, before the row coefficient
  torch::Tensor coef;  // [N]: c_r / loss_scale_factor; d loss / d logp = coef[r] · grad
};

// The PPO term and its metrics (all but pg_loss, filled into `metrics`) for inputs that
// ppo_loss_cuda_applies() accepted; advantages [N] or [N, L], weights optional.
FusedPPOLossCuda ppo_loss_cuda(const torch::Tensor& logp, const torch::Tensor& old_logp,
                               const torch::Tensor& advantages, const torch::Tensor& response_mask,
                               const torch::Tensor& weights, const PPOLossOptions& options,
                               PolicyLossMetrics& metrics);

}  // namespace turnrl::detail
