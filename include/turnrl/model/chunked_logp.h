#pragma once
// Log-probs and entropies of chosen tokens under a linear vocabulary head, computed in chunks of
// rows so that no more than `chunk_rows` x vocab float32 logits exist at any time, in the forward
// pass or the backward pass. On a 151,936-entry vocabulary a full [B, T, V] float32 logits tensor
// is 4.9 GB for B=1, T=8192; verl (`use_fused_kernels`) and OpenRLHF compute this in chunks too.
//
// The backward recomputes each chunk's logits from the saved hidden rows and head weight (a
// custom autograd function), so the graph keeps only `hidden` and `weight`, never the logits:
//   z = hidden · weightᵀ (in their dtype), then in float32: log p = z − logsumexp(z),
//   logp = log p[target], entropy = −Σ p log p,
//   ∂logp/∂z = onehot(target) − p,   ∂entropy/∂z = −p ⊙ (log p + entropy).
// The head weight's gradient accumulates over chunks in float32 and is cast to its dtype once.
#include <cstdint>

#include <torch/types.h>

namespace turnrl {

struct RowLogp {
  torch::Tensor logp;     // float32 [K] log-prob of each row's target
  torch::Tensor entropy;  // float32 [K] entropy of each row's distribution
};

// hidden  [K, H] (float32, bfloat16 or float16), differentiable
// weight  [V, H] the vocabulary projection (same dtype as hidden), differentiable
// targets int64 [K] in [0, V)
// chunk_rows > 0: rows per chunk (the last chunk may be shorter).
// Equal to log_softmax(float(hidden · weightᵀ)) gathered at targets, and its entropy, with the
// same gradients (up to float rounding of a different summation order).
// fused_kernels (CUDA builds, tensors on a GPU; ignored elsewhere): each chunk's logits are read
// once by one kernel that keeps each row's logsumexp, log-prob and entropy (an online softmax),
// and the backward writes their gradient in one pass from the recomputed logits, instead of some
// fifteen float32 passes over [chunk_rows, V] (src/model/fused_decoder.h).
// temperature: the float32 logits are divided by it before the softmax (Policy::logp_temperature).
RowLogp chunked_logp_entropy(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& targets,
                             int64_t chunk_rows, bool fused_kernels = false, double temperature = 1.0);

// The scoring temperature's two shared steps (Policy::logp_temperature, token_logp_from_logits,
// the plan policy's slot logits): the check, which throws naming `caller` unless the temperature
// is finite and > 0, and float logits divided by it (the same tensor at 1, so that temperature 1
// rounds exactly as no temperature).
void check_logp_temperature(double temperature, const char* caller);
torch::Tensor at_temperature(const torch::Tensor& logits, double temperature);

}  // namespace turnrl
