#pragma once
// Rollouts of any Policy in any Environment: RolloutCollector plays n episodes of each task turn by
// turn; every turn it asks the ActionCodec for the live episodes' prompts, samples all responses
// in one Policy::generate_turn call (a policy that keeps each episode's sequence between turns
// prefills only the new tokens; end_episodes() after the last turn), and steps all live episodes
// in one EnvironmentPool::step call. With several waves the episodes are split into that many
// groups of episodes, and one wave's environment step (for kernels: evaluation) runs on its own
// thread while the policy samples the next wave's turn (rollout_waves, docs/training.md).
// The result is a RolloutBatch: the flat TurnBatch of the turns (rewards from the environment)
// plus, per row, what the environment saw and said.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

#include "turnrl/core/turn_batch.h"
#include "turnrl/rl/environment.h"
#include "turnrl/model/policy.h"
#include "turnrl/rl/action_codec.h"
#include "turnrl/rl/metrics.h"

namespace turnrl {

struct RolloutBatch {
  // group = the task's slot in the step, traj = episode, turn = 0-based turn; rows ordered by
  // (traj, turn). tokens / attention_mask / response_mask / rollout_logp are [N, L]: each row is
  // the turn's prompt (left-padded) and response, right-padded to the batch's widest row.
  // reward: StepResult::reward; turn_mask starts all true.
  TurnBatch batch;
  std::vector<std::shared_ptr<const StepPayload>> payloads;  // per row: the domain's record
  std::vector<std::string> observations;  // per row: ActionCodec::observation_text of the prompt
  std::vector<std::string> actions;       // per row: the Action text
  // per row: 1 on the last turn of an episode the context ended (its next prompt left no room for
  // a response: ActionCodec::context_length), else 0
  std::vector<uint8_t> truncated;
  std::vector<std::string> task_ids;      // per group id
  std::vector<int> task_levels;           // per group id
  int64_t episodes = 0;
  double generate_seconds = 0;  // sampling actions
  double eval_seconds = 0;      // environment steps (for kernels: evaluation)
};

// The rows where keep (bool [N]) is true, per-row vectors included; ids kept.
RolloutBatch select_rollout_rows(const RolloutBatch& rollouts, const torch::Tensor& keep);

// Rollout statistics of any environment: "rollout/turns", "rollout/episodes",
// "rollout/mean_turns", "rollout/truncated_episodes" (ended by the context length), "reward/mean"
// (over turns), "reward/best_mean" and "reward/last_turn_mean" (over episodes).
Metrics rollout_metrics(const RolloutBatch& rollouts);

class RolloutCollector {
 public:
  // waves: how many groups of episodes take turns (1 = sample all, step all; >= 2 overlaps one
  // wave's environment step with the next wave's sampling). Throws for waves < 1.
  RolloutCollector(EnvironmentPoolFactory environments, std::shared_ptr<const ActionCodec> codec, int64_t waves = 1);

  // Episodes [first_episode, end_episode) of the tasks x samples_per_task episodes (episode e is
  // sample e % n of task e / n): group and traj ids are those of the whole batch. Sampling draws
  // one stream seeded by `seed` across all turns (deterministic given the environment's replies).
  // The policy is put in eval mode while sampling and back in train mode after. With a codec
  // context_length, an episode whose next prompt fills the context ends (marked truncated), and a
  // turn's budget is at most the context less its longest prompt; a first prompt that fills it is
  // an Error naming the task.
  RolloutBatch collect(Policy& policy, const std::vector<Task>& tasks, int64_t samples_per_task,
                       int64_t first_episode, int64_t end_episode, const SamplingOptions& sampling, uint64_t seed) const;
  // All tasks x samples_per_task episodes.
  RolloutBatch collect(Policy& policy, const std::vector<Task>& tasks, int64_t samples_per_task,
                       const SamplingOptions& sampling, uint64_t seed) const;

  const ActionCodec& codec() const { return *codec_; }
  int64_t waves() const { return waves_; }

 private:
  EnvironmentPoolFactory environments_;
  std::shared_ptr<const ActionCodec> codec_;
  int64_t waves_ = 1;
};

// The waves of episodes [first_episode, end_episode): min(waves, units) contiguous lists of
// near-equal size, whose units are whole groups (samples_per_task episodes of one task) when there
// are at least `waves` groups, else single episodes. Never empty lists; one empty list for no
// episodes.
std::vector<std::vector<int64_t>> rollout_waves(int64_t first_episode, int64_t end_episode, int64_t samples_per_task,
                                                int64_t waves);

// `t` [N, W] widened to `width` columns filled with `value` (t itself when already that wide).
torch::Tensor pad_columns(const torch::Tensor& t, int64_t width, double value);

}  // namespace turnrl
