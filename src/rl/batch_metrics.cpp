#include "turnrl/rl/batch_metrics.h"

#include <string>

#include "turnrl/core/segment.h"

namespace turnrl {
namespace {

void add_mean_max_min(Metrics& m, const std::string& prefix, const torch::Tensor& values) {
  const torch::Tensor v = values.to(torch::kDouble);
  m[prefix + "/mean"] = v.mean().item<double>();
  m[prefix + "/max"] = v.max().item<double>();
  m[prefix + "/min"] = v.min().item<double>();
}

}  // namespace

Metrics rollout_batch_metrics(const TurnBatch& batch) {
  Metrics m;
  if (batch.size() == 0) return m;
  const torch::Tensor rows = batch.turn_mask_or_all().nonzero().squeeze(1);
  if (rows.numel() == 0) return m;
  const torch::Tensor reward = batch.reward.index_select(0, rows);
  add_mean_max_min(m, "critic/score", reward);
  add_mean_max_min(m, "critic/rewards", reward);

  const torch::Tensor length = batch.response_mask.index_select(0, rows).sum(1);
  add_mean_max_min(m, "response_length", length);
  m["response_length/clip_ratio"] = length.eq(batch.response_mask.size(1)).to(torch::kDouble).mean().item<double>();

  // A trajectory's last valid turn, found without assuming any row order: sorted by (trajectory,
  // turn), a row is its trajectory's last when the next row belongs to another trajectory.
  const torch::Tensor traj = batch.traj.index_select(0, rows), turn = batch.turn.index_select(0, rows);
  const torch::Tensor order = (traj * (turn.max() + 1) + turn).argsort();
  const torch::Tensor sorted_traj = traj.index_select(0, order);
  const torch::Tensor is_last_sorted =
      torch::cat({sorted_traj.slice(0, 1).ne(sorted_traj.slice(0, 0, -1)), torch::ones({1}, traj.options().dtype(torch::kBool))});
  const torch::Tensor is_last = torch::zeros_like(is_last_sorted).scatter_(0, order, is_last_sorted);
  const torch::Tensor last_reward = reward.masked_select(is_last).to(torch::kDouble);
  const torch::Tensor last_group = batch.group.index_select(0, rows).masked_select(is_last);
  const int64_t groups = last_group.max().item<int64_t>() + 1;
  const torch::Tensor count = segment_sums(torch::ones_like(last_reward), last_group, groups).count;
  const torch::Tensor std = segment_std(last_reward, last_group, groups, /*unbiased=*/false);
  const torch::Tensor present = count.gt(0);
  const torch::Tensor zero_std = present & (count.lt(2) | std.abs().lt(1e-6));
  m["frac_reward_zero_std"] = zero_std.sum().item<double>() / present.sum().item<double>();
  return m;
}

Metrics advantage_metrics(const TurnBatch& batch, const torch::Tensor& returns, const torch::Tensor& advantages) {
  Metrics m;
  const torch::Tensor valid = batch.turn_mask_or_all();
  if (!valid.any().item<bool>()) return m;
  add_mean_max_min(m, "critic/advantages", advantages.masked_select(valid));
  add_mean_max_min(m, "critic/returns", returns.masked_select(valid));
  // Valid rows per (group, turn) segment; a segment with none is a group that did not reach it.
  const torch::Tensor size =
      segment_sums(torch::ones_like(returns, torch::kDouble), group_turn_key(batch), batch.num_groups * batch.max_turns, valid)
          .count.view({batch.num_groups, batch.max_turns});
  for (int64_t turn = 0; turn < batch.max_turns; ++turn) {
    const torch::Tensor present = size.select(1, turn).masked_select(size.select(1, turn).gt(0));
    if (present.numel() > 0) add_mean_max_min(m, "adv/group_size/turn_" + std::to_string(turn + 1), present);
  }
  return m;
}

}  // namespace turnrl
