#pragma once
// Statistics of a rollout batch under the names verl and TRL log them, so that a turnrl run reads
// like theirs in TensorBoard: verl's critic/score, critic/rewards, critic/advantages,
// critic/returns (mean/max/min), response_length (mean/max/min/clip_ratio) and TRL's
// frac_reward_zero_std. Turns play the part of verl's samples (one response each).
#include <torch/types.h>

#include "turnrl/core/turn_batch.h"
#include "turnrl/rl/metrics.h"

namespace turnrl {

// From a scored batch (before filters), over its valid turns (turn_mask_or_all):
//   critic/score/{mean,max,min}      the per-turn reward (batch.reward, float [N])
//   critic/rewards/{mean,max,min}    the same: turnrl has no KL term inside the reward
//   response_length/{mean,max,min}   response tokens of a turn (batch.response_mask, bool [N, L])
//   response_length/clip_ratio       share of turns whose response fills all L columns (truncated)
//   frac_reward_zero_std             share of groups whose trajectories' last-turn rewards have
//                                    std 0 (|std| < 1e-6): no group-relative signal; a group with
//                                    one trajectory counts as zero-std
// An empty batch gives no metrics.
Metrics rollout_batch_metrics(const TurnBatch& batch);

// critic/advantages/{mean,max,min} and critic/returns/{mean,max,min} over the valid turns;
// returns and advantages are float [N], turn-level. Also the sizes of the groups a per-turn
// baseline (TRLOO, GRPO with grouping: turn) averages over: for each turn k = 1..max_turns,
// adv/group_size/turn_k/{mean,min,max} over the groups with at least one valid turn k, counting
// the valid turns k of each group (masked turns, e.g. void turns after a success, are out of
// those baselines; turns PRS rejected stay in). A turn no group reaches logs nothing.
Metrics advantage_metrics(const TurnBatch& batch, const torch::Tensor& returns, const torch::Tensor& advantages);

}  // namespace turnrl
