#include "turnrl/core/turn_batch.h"

#include <algorithm>
#include <vector>

#include "turnrl/core/error.h"

namespace turnrl {
namespace {

void check_turn_tensor(const char* name, const torch::Tensor& t, int64_t n, bool integral) {
  if (!t.defined()) fail("TurnBatch.{}: required tensor is undefined", name);
  if (t.dim() != 1 || t.size(0) != n)
    fail("TurnBatch.{}: shape {} does not match [N] with N = {} (the length of TurnBatch.group)",
         name, fmt::join(t.sizes(), "x"), n);
  if (integral && t.scalar_type() != at::kLong)
    fail("TurnBatch.{}: dtype {} not allowed; must be int64", name, c10::toString(t.scalar_type()));
  if (!integral && !at::isFloatingType(t.scalar_type()))
    fail("TurnBatch.{}: dtype {} not allowed; must be a floating type", name, c10::toString(t.scalar_type()));
}

void check_token_tensor(const char* name, const torch::Tensor& t, int64_t n, const torch::Tensor& like) {
  if (!t.defined()) return;
  if (t.dim() != 2 || t.size(0) != n)
    fail("TurnBatch.{}: shape {} does not match [N, L] with N = {}", name, fmt::join(t.sizes(), "x"), n);
  if (like.defined() && t.sizes() != like.sizes())
    fail("TurnBatch.{}: shape {} differs from response_mask's {}", name, fmt::join(t.sizes(), "x"),
         fmt::join(like.sizes(), "x"));
}

int64_t first_true(const torch::Tensor& flags) { return flags.nonzero().view(-1)[0].item<int64_t>(); }

}  // namespace

torch::Tensor TurnBatch::turn_mask_or_all() const {
  if (turn_mask.defined()) return turn_mask;
  return at::ones({size()}, group.options().dtype(at::kBool));
}

torch::Tensor group_turn_key(const TurnBatch& batch) { return batch.group * batch.max_turns + batch.turn; }

namespace {
torch::Tensor dense_slot(const TurnBatch& batch) { return batch.traj * batch.max_turns + batch.turn; }
}  // namespace

torch::Tensor to_dense_turns(const TurnBatch& batch, const torch::Tensor& per_turn) {
  return at::zeros({batch.num_trajectories * batch.max_turns}, per_turn.options())
      .index_copy_(0, dense_slot(batch), per_turn)
      .view({batch.num_trajectories, batch.max_turns});
}

torch::Tensor from_dense_turns(const TurnBatch& batch, const torch::Tensor& dense) {
  return dense.reshape(-1).index_select(0, dense_slot(batch));
}

void validate(const TurnBatch& b, const ValidateOptions& options) {
  if (!b.group.defined()) fail("TurnBatch.group: required tensor is undefined");
  const int64_t n = b.size();
  check_turn_tensor("group", b.group, n, true);
  check_turn_tensor("traj", b.traj, n, true);
  check_turn_tensor("turn", b.turn, n, true);
  check_turn_tensor("reward", b.reward, n, false);
  if (b.turn_mask.defined()) {
    if (b.turn_mask.dim() != 1 || b.turn_mask.size(0) != n)
      fail("TurnBatch.turn_mask: shape {} does not match [N] with N = {}", fmt::join(b.turn_mask.sizes(), "x"), n);
    if (b.turn_mask.scalar_type() != at::kBool)
      fail("TurnBatch.turn_mask: dtype {} not allowed; must be bool", c10::toString(b.turn_mask.scalar_type()));
  }
  if (b.values.defined()) check_turn_tensor("values", b.values, n, false);
  if (b.response_mask.defined() && b.response_mask.scalar_type() != at::kBool)
    fail("TurnBatch.response_mask: dtype {} not allowed; must be bool", c10::toString(b.response_mask.scalar_type()));
  check_token_tensor("response_mask", b.response_mask, n, {});
  check_token_tensor("tokens", b.tokens, n, b.response_mask);
  check_token_tensor("rollout_logp", b.rollout_logp, n, b.response_mask);
  check_token_tensor("attention_mask", b.attention_mask, n, b.response_mask);
  if (b.attention_mask.defined() && b.attention_mask.scalar_type() != at::kBool)
    fail("TurnBatch.attention_mask: dtype {} not allowed; must be bool", c10::toString(b.attention_mask.scalar_type()));
  check_token_tensor("old_logp", b.old_logp, n, b.response_mask);
  check_token_tensor("ref_logp", b.ref_logp, n, b.response_mask);
  if (b.tokens.defined() && b.tokens.scalar_type() != at::kLong)
    fail("TurnBatch.tokens: dtype {} not allowed; must be int64", c10::toString(b.tokens.scalar_type()));
  if (n == 0) return;
  if (b.num_groups <= 0 || b.num_trajectories <= 0 || b.max_turns <= 0)
    fail("TurnBatch: host sizes num_groups={}, num_trajectories={}, max_turns={} must be positive; call finalize()",
         b.num_groups, b.num_trajectories, b.max_turns);

  // Every check below builds a bool tensor of offending rows; one transfer decides them all and
  // only a failing check pays for locating its first row.
  const auto out_of_range = [](const torch::Tensor& ids, int64_t bound) { return (ids < 0) | (ids >= bound); };
  const torch::Tensor bad_group = out_of_range(b.group, b.num_groups);
  const torch::Tensor bad_traj = out_of_range(b.traj, b.num_trajectories);
  const torch::Tensor bad_turn = out_of_range(b.turn, b.max_turns);
  const torch::Tensor ids_ok = ~(bad_group | bad_traj | bad_turn);

  // Turns of a trajectory are exactly 0..k-1: no (traj, turn) twice, and every turn t > 0 has a
  // turn t-1 beside it. (Plain index_add only: scatter_reduce is beta in LibTorch 1.13.)
  const torch::Tensor traj_c = b.traj.clamp(0, b.num_trajectories - 1);
  const torch::Tensor turn_c = b.turn.clamp(0, b.max_turns - 1);
  const auto ones = at::ones({n}, b.group.options());
  const torch::Tensor key = traj_c * b.max_turns + turn_c;
  const torch::Tensor key_count = at::zeros({b.num_trajectories * b.max_turns}, b.group.options()).index_add_(0, key, ones);
  const torch::Tensor duplicate_turn = key_count.index_select(0, key) > 1;
  const torch::Tensor gap_in_turns = (turn_c > 0) & (key_count.index_select(0, (key - 1).clamp_min(0)) == 0);
  // One group per trajectory: every row's group equals the mean group of its trajectory.
  const torch::Tensor group_c = b.group.clamp(0, b.num_groups - 1);
  const torch::Tensor traj_rows = at::zeros({b.num_trajectories}, b.group.options()).index_add_(0, traj_c, ones);
  const torch::Tensor traj_group_sum = at::zeros({b.num_trajectories}, b.group.options()).index_add_(0, traj_c, group_c);
  const torch::Tensor two_groups = group_c * traj_rows.index_select(0, traj_c) != traj_group_sum.index_select(0, traj_c);

  torch::Tensor nonfinite = ~at::isfinite(b.reward);
  if (options.allow_nonfinite_in_masked_turns && b.turn_mask.defined()) nonfinite = nonfinite & b.turn_mask;

  const std::vector<torch::Tensor> flags = {bad_group, bad_traj, bad_turn, duplicate_turn & ids_ok,
                                            gap_in_turns & ids_ok, two_groups & ids_ok, nonfinite};
  std::vector<torch::Tensor> any;
  for (const auto& f : flags) any.push_back(f.any());
  const torch::Tensor verdict = at::stack(any).cpu();
  const bool* v = verdict.data_ptr<bool>();
  if (v[0]) { int64_t r = first_true(bad_group); fail("TurnBatch.group: row {} has id {}; allowed: 0..{} (num_groups - 1)", r, b.group[r].item<int64_t>(), b.num_groups - 1); }
  if (v[1]) { int64_t r = first_true(bad_traj); fail("TurnBatch.traj: row {} has id {}; allowed: 0..{} (num_trajectories - 1)", r, b.traj[r].item<int64_t>(), b.num_trajectories - 1); }
  if (v[2]) { int64_t r = first_true(bad_turn); fail("TurnBatch.turn: row {} has turn {}; allowed: 0..{} (max_turns - 1)", r, b.turn[r].item<int64_t>(), b.max_turns - 1); }
  if (v[3]) { int64_t r = first_true(duplicate_turn & ids_ok); fail("TurnBatch.turn: row {} repeats turn {} of trajectory {}; each turn appears once", r, b.turn[r].item<int64_t>(), b.traj[r].item<int64_t>()); }
  if (v[4]) {
    const int64_t r = first_true(gap_in_turns & ids_ok);
    fail("TurnBatch.turn: trajectory {} (row {}) has turn {} but no turn {}; turns must be exactly 0..k-1",
         b.traj[r].item<int64_t>(), r, b.turn[r].item<int64_t>(), b.turn[r].item<int64_t>() - 1);
  }
  if (v[5]) {
    const int64_t r = first_true(two_groups & ids_ok);
    const int64_t t = b.traj[r].item<int64_t>();
    const torch::Tensor other = (b.traj == t) & (b.group != b.group[r]);
    fail("TurnBatch.group: trajectory {} appears in groups {} (row {}) and {} (row {}); a trajectory belongs to one group",
         t, b.group[r].item<int64_t>(), r, b.group[first_true(other)].item<int64_t>(), first_true(other));
  }
  if (v[6]) {
    int64_t r = first_true(nonfinite);
    fail("TurnBatch.reward: row {} is {}; rewards must be finite{}", r, b.reward[r].item<double>(),
         b.turn_mask.defined() ? " (or the turn masked with allow_nonfinite_in_masked_turns)" : "");
  }
}

void finalize(TurnBatch& b, const ValidateOptions& options) {
  if (!b.group.defined()) fail("TurnBatch.group: required tensor is undefined");
  if (b.size() > 0) {
    check_turn_tensor("traj", b.traj, b.size(), true);
    check_turn_tensor("turn", b.turn, b.size(), true);
    const torch::Tensor maxima = at::stack({b.group.max(), b.traj.max(), b.turn.max()}).cpu();
    const int64_t* m = maxima.data_ptr<int64_t>();
    // At least 1, so that negative ids reach validate() and get its message.
    b.num_groups = std::max<int64_t>(m[0] + 1, 1);
    b.num_trajectories = std::max<int64_t>(m[1] + 1, 1);
    b.max_turns = std::max<int64_t>(m[2] + 1, 1);
  }
  validate(b, options);
}

TurnBatch make_turn_batch(torch::Tensor group, torch::Tensor traj, torch::Tensor turn, torch::Tensor reward,
                          torch::Tensor turn_mask) {
  TurnBatch b;
  b.group = std::move(group);
  b.traj = std::move(traj);
  b.turn = std::move(turn);
  b.reward = std::move(reward);
  b.turn_mask = std::move(turn_mask);
  finalize(b);
  return b;
}

}  // namespace turnrl
