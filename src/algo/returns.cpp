#include "turnrl/algo/returns.h"

#include "turnrl/core/config_fields.h"
#include "turnrl/core/error.h"
#include "turnrl/core/masked.h"

#ifdef TURNRL_WITH_CUDA
#include "fused_cuda.h"
#endif

namespace turnrl {

ReturnMode parse_return_mode(const std::string& name, const std::string& field) {
  if (name == "reward_to_go") return ReturnMode::reward_to_go;
  if (name == "outcome") return ReturnMode::outcome;
  if (name == "residual") return ReturnMode::residual;
  fail("{}: unknown return mode '{}'; allowed: reward_to_go, outcome, residual", field, name);
}

template <typename V>
static void describe(V& v, ReturnOptions& o) {
  v.choice("mode", o.mode, {"reward_to_go", "outcome", "residual"}, parse_return_mode, "reward_to_go | outcome | residual");
  v.number("gamma", o.gamma, 0.0, 1.0, "[0, 1]");
  v.flag("unbiased_shaping", o.unbiased_shaping, "residual: scale the last reward by 1 - gamma");
}

void read_options(ConfigReader& r, ReturnOptions& o) { read_described(r, o); }

void write_options(ConfigWriter& w, const ReturnOptions& o) { write_described(w, o); }

const char* to_string(ReturnMode mode) {
  switch (mode) {
    case ReturnMode::reward_to_go: return "reward_to_go";
    case ReturnMode::outcome: return "outcome";
    case ReturnMode::residual: return "residual";
  }
  return "?";
}

torch::Tensor masked_turn_rewards(const TurnBatch& batch) {
  return batch.turn_mask.defined() ? masked_fill_zero(batch.reward, batch.turn_mask) : batch.reward;
}

torch::Tensor discounted_reverse_cumsum(const torch::Tensor& dense, double gamma) {
  // The reference's recursion out_t = x_t + gamma * out_{t+1}, one in-place column update per turn
  // position (T - 1 of them; turns are few), so float results match the sequential definition.
  torch::Tensor out = dense.clone();
  for (int64_t t = dense.size(1) - 2; t >= 0; --t) out.select(1, t).add_(out.select(1, t + 1), gamma);
  return out;
}

torch::Tensor compute_returns(const TurnBatch& batch, const ReturnOptions& options) {
  if (!(options.gamma >= 0.0 && options.gamma <= 1.0))
    fail("returns.gamma: {} is out of range; allowed: [0, 1]", options.gamma);
  const int64_t n = batch.size();
  if (n == 0) return at::zeros({0}, batch.reward.defined() ? batch.reward.options() : at::TensorOptions(at::kFloat));
#ifdef TURNRL_WITH_CUDA
  if (auto fused = fused::returns_cuda(batch, options)) return *fused;
#endif
  const int64_t turns = batch.max_turns;
  const int64_t trajectories = batch.num_trajectories;
  torch::Tensor dense = to_dense_turns(batch, masked_turn_rewards(batch));

  if (options.mode != ReturnMode::reward_to_go) {
    const torch::Tensor length = at::zeros({trajectories}, batch.turn.options()).index_add_(0, batch.traj, at::ones_like(batch.turn));
    const torch::Tensor column = at::arange(turns, batch.turn.options()).unsqueeze(0);
    const torch::Tensor is_last = column == (length - 1).unsqueeze(1);
    const torch::Tensor is_real = column < length.unsqueeze(1);
    if (options.mode == ReturnMode::outcome) {
      dense = dense * is_last;
    } else {
      if (options.unbiased_shaping) dense = at::where(is_last, dense * (1.0 - options.gamma), dense);
      const torch::Tensor previous = at::constant_pad_nd(dense, {1, 0}).narrow(1, 0, turns);
      dense = (dense - previous) * is_real;
    }
  }
  return from_dense_turns(batch, discounted_reverse_cumsum(dense, options.gamma));
}

}  // namespace turnrl
