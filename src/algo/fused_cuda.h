#pragma once
// Fused CUDA paths for the hot estimators (private to the library). On a GPU the tensor-op
// versions are launch-bound (about 40 small kernels); these do the same arithmetic in one
// kernel for batches that fit one block's shared memory (the recipe's 768 turns), or a few
// kernels otherwise. Each returns nothing when its preconditions do not hold (dtype, device,
// options), and the caller falls back to the tensor-op path.
#include <optional>

#include <torch/types.h>

#include "turnrl/algo/advantage.h"
#include "turnrl/algo/returns.h"
#include "turnrl/core/turn_batch.h"

namespace turnrl::fused {

// Reward-to-go returns (ReturnMode::reward_to_go) of float32 CUDA rewards.
std::optional<torch::Tensor> returns_cuda(const TurnBatch& batch, const ReturnOptions& options);

// TRLOO advantages of float32 CUDA returns. all_finite is false when an unmasked turn's return is
// NaN/inf (checked only with options.check_finite; one device synchronisation): the caller then
// raises the tensor path's error naming the row.
struct FusedAdvantage {
  torch::Tensor advantages;
  bool all_finite = true;
};
std::optional<FusedAdvantage> trloo_cuda(const TurnBatch& batch, const torch::Tensor& returns,
                                         const AdvantageOptions& options);

}  // namespace turnrl::fused
