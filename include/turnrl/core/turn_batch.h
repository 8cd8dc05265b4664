#pragma once
// TurnBatch: a rollout batch stored flat, one row per turn. Groups (one prompt each) hold
// trajectories (n samples), trajectories hold turns 0..k-1. Every estimator works on these flat
// tensors with segment reductions, on CPU or CUDA alike.
#include <cstdint>
#include <string>

#include <torch/types.h>

namespace turnrl {

struct TurnBatch {
  // Turn level, all [N]. Ids are non-negative; they need not be dense.
  torch::Tensor group;        // int64 [N]  group (prompt) id
  torch::Tensor traj;         // int64 [N]  trajectory id, unique in the batch
  torch::Tensor turn;         // int64 [N]  0-based turn index inside its trajectory
  torch::Tensor reward;       // float [N]  reward of this turn (after the reward policy)
  // bool [N]: false for a turn that is meaningless for training (the reference's loss_mask: a
  // regression after a success, an errored trajectory). Such turns are excluded from every
  // baseline and their reward is zeroed before returns. Undefined means all true.
  torch::Tensor turn_mask;

  // Token level, all [N, L]; optional for turn-level computations (returns, advantages).
  torch::Tensor tokens;         // int64 [N, L] response tokens, padded
  torch::Tensor response_mask;  // bool  [N, L] true on the policy's own tokens. Rejection steps
                                //              (MRS, PRS) clear rows here; rejected turns keep
                                //              their place in the baselines.
  torch::Tensor rollout_logp;   // float [N, L] log-probs from the rollout engine
  torch::Tensor attention_mask; // bool  [N, L] optional: false on padding (undefined = all valid)
  torch::Tensor old_logp;       // float [N, L] optional: trainer log-probs before the update
  torch::Tensor ref_logp;       // float [N, L] optional: reference-policy log-probs
  torch::Tensor values;         // float [N]    optional: critic value of each turn (GAE)

  // Host-side sizes, filled by finalize(): every id is below its bound. Kept on the host so
  // that estimators can size their segment buffers without a device synchronisation.
  int64_t num_groups = 0;
  int64_t num_trajectories = 0;
  int64_t max_turns = 0;

  int64_t size() const { return group.defined() ? group.size(0) : 0; }

  // turn_mask, materialised (all true when undefined).
  torch::Tensor turn_mask_or_all() const;
};

struct ValidateOptions {
  // Accept NaN/inf rewards on turns whose turn_mask is false (they are zeroed before returns).
  // Off by default: a non-finite reward is an upstream bug that would poison a whole group.
  bool allow_nonfinite_in_masked_turns = false;
  ValidateOptions& allow_nonfinite_masked(bool v) { allow_nonfinite_in_masked_turns = v; return *this; }
};

// Throws turnrl::Error naming the field (and the first offending row) when: a tensor has the
// wrong dtype, rank or leading dimension; an id is negative; a trajectory's turns are not exactly
// 0..k-1; a trajectory appears in two groups; a reward is NaN/inf (see ValidateOptions); the
// host-side sizes do not bound the ids.
void validate(const TurnBatch& batch, const ValidateOptions& options = {});

// Computes num_groups / num_trajectories / max_turns from the ids (one synchronisation), then
// validates. Call once after filling the tensors.
void finalize(TurnBatch& batch, const ValidateOptions& options = {});

// Convenience constructor for turn-level work: ids and rewards from host vectors or tensors.
TurnBatch make_turn_batch(torch::Tensor group, torch::Tensor traj, torch::Tensor turn,
                          torch::Tensor reward, torch::Tensor turn_mask = {});

// Segment keys used by the estimators, [N] int64:
//   group_turn_key = group * max_turns + turn   (range num_groups * max_turns)
torch::Tensor group_turn_key(const TurnBatch& batch);

// Dense trajectory-major view of a per-turn tensor: [num_trajectories, max_turns], row j holding
// trajectory j's turns in order; slots past a trajectory's last turn (and unused ids) are 0.
torch::Tensor to_dense_turns(const TurnBatch& batch, const torch::Tensor& per_turn);
// The inverse: picks each row's slot out of a [num_trajectories, max_turns] tensor, [N].
torch::Tensor from_dense_turns(const TurnBatch& batch, const torch::Tensor& dense);

}  // namespace turnrl
