#include "fused_cuda.h"

#include <ATen/cuda/CUDAContext.h>

#include "fused_kernels.cuh"

namespace turnrl::fused {
namespace {

bool eligible(const torch::Tensor& x) { return x.defined() && x.is_cuda() && x.scalar_type() == at::kFloat; }

// Contiguous copies (no-ops when already contiguous) kept alive for the launch.
struct Rows {
  torch::Tensor group, traj, turn, mask;
  explicit Rows(const TurnBatch& b)
      : group(b.group.contiguous()), traj(b.traj.contiguous()), turn(b.turn.contiguous()),
        mask(b.turn_mask.defined() ? b.turn_mask.contiguous() : torch::Tensor()) {}
  const bool* mask_ptr() const { return mask.defined() ? mask.data_ptr<bool>() : nullptr; }
};

}  // namespace

std::optional<torch::Tensor> returns_cuda(const TurnBatch& b, const ReturnOptions& o) {
  if (!o.fused_cuda || o.mode != ReturnMode::reward_to_go || !eligible(b.reward) || b.size() == 0) return std::nullopt;
  const Rows rows(b);
  const torch::Tensor reward = b.reward.contiguous();
  torch::Tensor out = at::empty_like(reward);
  torch::Tensor dense;
  if (!reward_to_go_fits_block(b.size(), b.num_trajectories, b.max_turns))
    dense = at::zeros({b.num_trajectories * b.max_turns}, reward.options());
  launch_reward_to_go(rows.traj.data_ptr<int64_t>(), rows.turn.data_ptr<int64_t>(), reward.data_ptr<float>(),
                      rows.mask_ptr(), b.size(), b.num_trajectories, b.max_turns, float(o.gamma),
                      dense.defined() ? dense.data_ptr<float>() : nullptr, out.data_ptr<float>(),
                      at::cuda::getCurrentCUDAStream());
  return out;
}

std::optional<FusedAdvantage> trloo_cuda(const TurnBatch& b, const torch::Tensor& returns, const AdvantageOptions& o) {
  if (!o.fused_cuda || !eligible(returns) || b.size() == 0 || b.size() >= (int64_t(1) << 31)) return std::nullopt;
  const Rows rows(b);
  const torch::Tensor g = returns.contiguous();
  const int64_t segments = b.num_groups * b.max_turns;
  torch::Tensor out = at::empty_like(g);
  torch::Tensor sums, counts, bad;
  if (trloo_fits_block(b.size(), segments)) {
    bad = at::empty({1}, g.options().dtype(at::kInt));
  } else {
    sums = at::zeros({segments}, g.options().dtype(at::kDouble));
    counts = at::zeros({segments}, g.options().dtype(at::kInt));
    bad = at::full({1}, b.size(), g.options().dtype(at::kInt));
  }
  launch_trloo(rows.group.data_ptr<int64_t>(), rows.turn.data_ptr<int64_t>(), g.data_ptr<float>(), rows.mask_ptr(),
               b.size(), b.max_turns, segments, o.singleton == SingletonAdvantage::raw_return,
               sums.defined() ? sums.data_ptr<double>() : nullptr, counts.defined() ? counts.data_ptr<int>() : nullptr,
               bad.data_ptr<int>(), out.data_ptr<float>(), at::cuda::getCurrentCUDAStream());
  const bool all_finite = !o.check_finite || bad.item<int>() >= b.size();
  return FusedAdvantage{out, all_finite};
}

}  // namespace turnrl::fused
