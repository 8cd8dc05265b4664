#pragma once
// The fused CUDA path of compute_mismatch (private to the library): the CPU path's two passes as
// hand-written kernels (mismatch_kernels.cu) with no [N, L] temporaries, the trajectory sums and
// the diagnostics reduced from per-row statistics, and the NaN check reading a few bytes of flags.
#include <torch/types.h>

#include "turnrl/algo/mismatch.h"

namespace turnrl::detail {

// Whether the fused CUDA path takes these inputs: CUDA tensors on one device, log-probs of the
// same type, float or double, a non-empty mask. (compute_mismatch has checked shapes.)
bool mismatch_cuda_applies(const torch::Tensor& old_logp, const torch::Tensor& rollout_logp,
                           const torch::Tensor& response_mask);

// Throws naming the first row whose traj id lies outside [0, num_trajectories) (mismatch.cpp).
void check_trajectory_ids(const torch::Tensor& traj, int64_t num_trajectories);

// compute_mismatch on contiguous inputs that mismatch_cuda_applies() accepted, with the options
// already checked; veto_log = ln(veto threshold) or -inf. With options.check_finite it reads the
// kernels' flags once (one device synchronisation): a traj id outside [0, num_trajectories)
// throws naming the row; NaN on a valid token returns false with `result` unset (the caller
// raises the error naming the token). Without check_finite nothing synchronises, and rows with
// an out-of-range traj id count as trajectories of their own.
bool compute_mismatch_cuda(const torch::Tensor& old_logp, const torch::Tensor& rollout_logp,
                           const torch::Tensor& response_mask, const torch::Tensor& traj, int64_t num_trajectories,
                           const MismatchOptions& options, double veto_log, MismatchResult& result);

}  // namespace turnrl::detail
