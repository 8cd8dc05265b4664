#pragma once
// Per-turn returns G from per-turn rewards r (docs/algorithms.md). Turns whose turn_mask is false have
// their reward zeroed first, so they vanish from the returns of earlier turns too (the
// reference's behaviour). Computed on a dense [trajectories, max_turns] view, one vectorised
// column update per turn position: no loop over samples.
#include <string>

#include <torch/types.h>

#include "turnrl/core/turn_batch.h"

namespace turnrl {

class ConfigReader;
class ConfigWriter;

enum class ReturnMode {
  reward_to_go,  // G_t = r_t + gamma * G_{t+1} over the trajectory's real turns (the recipe)
  outcome,       // only the last turn's reward counts: G_t = gamma^(k-1-t) * r_{k-1}
  residual,      // shaped rewards s'_t = r_t - r_{t-1} (s'_0 = r_0), then reward-to-go
};

struct ReturnOptions {
  ReturnMode mode = ReturnMode::reward_to_go;
  double gamma = 1.0;
  // residual only: scale the last turn's reward by (1 - gamma) before differencing, the
  // reference's UNBIASED_SHAPING (default on there). With gamma = 1 every G_0 is then 0.
  bool unbiased_shaping = true;
  // reward_to_go of float32 CUDA rewards in one fused kernel (off = always the tensor-op path).
  bool fused_cuda = true;

  ReturnOptions& with_mode(ReturnMode v) { mode = v; return *this; }
  ReturnOptions& with_gamma(double v) { gamma = v; return *this; }
  ReturnOptions& with_unbiased_shaping(bool v) { unbiased_shaping = v; return *this; }
  ReturnOptions& with_fused_cuda(bool v) { fused_cuda = v; return *this; }
};

// Reads the YAML keys mode, gamma, unbiased_shaping into `options`.
void read_options(ConfigReader& reader, ReturnOptions& options);
// Writes the section's keys (what read_options reads), with their help when annotating.
void write_options(ConfigWriter& writer, const ReturnOptions& options);

// Parses "reward_to_go" | "outcome" | "residual"; throws naming `field` and the allowed values.
ReturnMode parse_return_mode(const std::string& name, const std::string& field = "returns.mode");
const char* to_string(ReturnMode mode);

// Returns G, float [N], in the batch's row order. gamma must lie in [0, 1].
torch::Tensor compute_returns(const TurnBatch& batch, const ReturnOptions& options = {});

// out[:, t] = sum_{s >= t} gamma^(s - t) x[:, s] for a dense [rows, turns] tensor: one vectorised
// column update per turn position (turns are few; no loop over rows).
torch::Tensor discounted_reverse_cumsum(const torch::Tensor& dense, double gamma);

// The batch's rewards with masked turns zeroed (NaN-safe), float [N].
torch::Tensor masked_turn_rewards(const TurnBatch& batch);

}  // namespace turnrl
