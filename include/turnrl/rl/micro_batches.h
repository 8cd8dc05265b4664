#pragma once
// Micro-batches of a policy update: which rows go through one forward/backward together, and the
// gradient accumulation over them that equals one whole-batch backward.
//
// With a token budget (trainer.micro_batch_tokens, verl's ppo_max_token_len_per_gpu with
// use_dynamic_bsz) rows are bucketed by length, longest first, and a micro-batch takes rows while
// rows × width stays within the budget; every micro-batch is cut to the columns its rows use
// (from the first valid token of any row to the last), so short rows do not pay for the longest
// row of the whole batch. The loss of each micro-batch is scaled so that the sum over
// micro-batches is the whole batch's loss under policy_loss.agg_mode, whatever the split
// (split_loss_share); gradients are then the whole-batch gradients up to float summation order.
#include <cstdint>
#include <vector>

#include <torch/types.h>

#include "turnrl/algo/policy_loss.h"
#include "turnrl/model/policy.h"
#include "turnrl/rl/metrics.h"

namespace turnrl {

struct MicroBatch {
  std::vector<int64_t> rows;  // indices into the batch's rows
  int64_t first_column = 0;   // the columns [first_column, end_column) hold every valid token of the rows
  int64_t end_column = 0;
  int64_t width() const { return end_column - first_column; }
};

// attention_mask bool [N, L] (false on padding); order: the rows in the order micro-batches take
// them (a permutation of 0..N-1, or a subset). max_rows >= 1: rows per micro-batch.
// max_tokens = 0: micro-batches of max_rows consecutive rows of `order`. max_tokens > 0: rows sorted
// by their valid span, longest first, then filled greedily while (rows × width) <= max_tokens and
// rows <= max_rows; a row longer than max_tokens goes alone. A row with no valid token spans
// column 0 only. Throws naming trainer.micro_batch_size / trainer.micro_batch_tokens.
std::vector<MicroBatch> plan_micro_batches(const torch::Tensor& attention_mask, const std::vector<int64_t>& order,
                                           int64_t max_rows, int64_t max_tokens = 0);

// The factor s with Σ_parts s(part) · aggregate(part) = aggregate(whole) for every split of the
// whole batch's rows into parts, given norm_length fixed to the whole batch's width (see
// update_loss_options): token-mean: tokens(part) / tokens(whole); seq-mean-*: non-empty rows(part)
// / non-empty rows(whole); seq-mean-token-sum-norm and seq-sum-no-norm: 1.
// part_mask, whole_mask: bool [n, L'] and [N, L] response masks.
double split_loss_share(const torch::Tensor& part_mask, const torch::Tensor& whole_mask, LossAggMode mode);

// The policy-loss options for micro-batches cut from a batch of padded width `whole_width`:
// seq-mean-token-sum-norm's default divisor (the padded width) pinned to the whole batch's.
PPOLossOptions update_loss_options(const PPOLossOptions& options, int64_t whole_width);

// The rows an update trains on: tokens, attention_mask, response_mask, old_logp, weights [N, L]
// (weights optional), advantages [N] or [N, L].
struct UpdateRows {
  torch::Tensor tokens, attention_mask, response_mask, old_logp, advantages, weights;
};

struct AccumulatedLoss {
  double loss = 0;  // this rank's share of the whole batch's loss
  // This rank's share of the "actor/..." metrics: token-weighted means (aggregates weighted as the
  // loss), actor/ratio_max the maximum. Summed over ranks they are the whole batch's.
  Metrics metrics;
};

// Runs forward_logp, the policy loss and backward on every micro-batch of `plan` with index
// ≡ rank (mod world), each loss scaled by split_loss_share: the parameters' .grad then holds (this
// rank's share of) the gradient of the whole batch's policy loss. The caller zeroes the gradients
// before and steps the optimizer after.
AccumulatedLoss accumulate_policy_gradient(Policy& policy, const UpdateRows& rows, const std::vector<MicroBatch>& plan,
                                           const PPOLossOptions& options, int rank = 0, int world = 1);

}  // namespace turnrl
