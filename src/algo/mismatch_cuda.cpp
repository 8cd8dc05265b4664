#include "mismatch_cuda.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "mismatch_kernels.cuh"
#include "turnrl/core/error.h"

namespace turnrl::detail {
namespace {

namespace mk = mismatch_kernels;

int level_code(MismatchLevel level) {
  switch (level) {
    case MismatchLevel::off: return mk::kOff;
    case MismatchLevel::token: return mk::kToken;
    case MismatchLevel::turn: return mk::kTurn;
    case MismatchLevel::turn_geo: return mk::kTurnGeo;
    case MismatchLevel::sequence: return mk::kSequence;
    case MismatchLevel::geometric: return mk::kGeometric;
  }
  fail("mismatch: unknown level {}", int(level));
}

void check_launch(cudaError_t error, const char* kernel) {
  if (error != cudaSuccess) fail("mismatch: CUDA kernel {} failed to launch: {}", kernel, cudaGetErrorString(error));
}

template <typename T>
bool run(const torch::Tensor& old, const torch::Tensor& rollout, const torch::Tensor& mask, const torch::Tensor& traj,
         int64_t num_trajectories, const MismatchOptions& o, double veto_log, MismatchResult& result) {
  const c10::cuda::CUDAGuard device_guard(mask.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const torch::Tensor traj_ids = traj.defined() ? traj.to(mask.device()).contiguous() : torch::Tensor();

  mk::Params p;
  p.rows = mask.size(0);
  p.len = mask.size(1);
  p.trajectories = traj_ids.defined() ? num_trajectories : p.rows;
  p.traj = traj_ids.defined() ? traj_ids.data_ptr<int64_t>() : nullptr;
  p.rs_level = level_code(o.rs_level);
  p.k3_level = level_code(o.rs_k3_level);
  p.is_level = level_code(o.is_level);
  p.rs_lower = o.rs_lower;
  p.rs_upper = o.rs_upper;
  p.k3_upper = o.rs_k3_upper;
  p.is_cap = o.is_cap;
  p.veto_log = veto_log;
  p.log_ratio_limit = kMismatchLogRatioLimit;
  p.safety_bound = kMismatchSafetyBound;

  const at::TensorOptions doubles = mask.options().dtype(at::kDouble);
  torch::Tensor rows_buf = at::empty({mk::kRowFields, p.rows}, doubles);
  torch::Tensor scratch = at::zeros({mk::scratch_size(p.trajectories)}, doubles);
  const T* old_p = old.data_ptr<T>();
  const T* rollout_p = rollout.data_ptr<T>();
  const bool* mask_p = mask.data_ptr<bool>();
  double* rows_p = rows_buf.data_ptr<double>();
  double* scratch_p = scratch.data_ptr<double>();

  check_launch(mk::launch_row_stats(old_p, rollout_p, mask_p, p, rows_p, scratch_p, stream), "row_stats");
  check_launch(mk::launch_trajectory_sums(p, rows_p, scratch_p, stream), "trajectory_sums");
  if (o.check_finite) {
    const torch::Tensor flags = scratch.narrow(0, mk::flag_offset(p.trajectories), mk::kFlagCount).cpu();
    const double* f = flags.data_ptr<double>();
    if (f[mk::kFlagBadTraj] != 0) {
      check_trajectory_ids(traj_ids, num_trajectories);
      fail("mismatch: a traj id is out of range; allowed: [0, num_trajectories = {})", num_trajectories);
    }
    if (f[mk::kFlagNan] != 0) return false;
  }

  result.response_mask = at::empty_like(mask);
  result.weights = at::empty_like(old);
  const torch::Tensor diagnostics = at::empty({mk::kDiagCount}, old.options());
  check_launch(mk::launch_apply(old_p, rollout_p, mask_p, p, rows_p, scratch_p, result.response_mask.data_ptr<bool>(),
                                result.weights.data_ptr<T>(), stream),
               "apply");
  check_launch(mk::launch_diagnose(p, rows_p, scratch_p, diagnostics.data_ptr<T>(), stream), "diagnose");

  MismatchDiagnostics& d = result.diagnostics;
  d.log_ratio_abs_mean = diagnostics[mk::kDiagAbsMean];
  d.log_ratio_abs_max = diagnostics[mk::kDiagAbsMax];
  d.k3_kl = diagnostics[mk::kDiagK3];
  d.mismatch_kl = diagnostics[mk::kDiagMismatchKl];
  d.chi2_token = diagnostics[mk::kDiagChi2Token];
  d.chi2_sequence = diagnostics[mk::kDiagChi2Sequence];
  d.training_ppl = diagnostics[mk::kDiagTrainingPpl];
  d.rollout_ppl = diagnostics[mk::kDiagRolloutPpl];
  d.ess = diagnostics[mk::kDiagEss];
  d.rejected_token_fraction = diagnostics[mk::kDiagRejectedTokens];
  d.rejected_row_fraction = diagnostics[mk::kDiagRejectedRows];
  d.rejected_trajectory_fraction = diagnostics[mk::kDiagRejectedTrajectories];
  d.vetoed_row_fraction = diagnostics[mk::kDiagVetoedRows];
  return true;
}

}  // namespace

bool mismatch_cuda_applies(const torch::Tensor& old_logp, const torch::Tensor& rollout_logp,
                           const torch::Tensor& response_mask) {
  const at::ScalarType type = old_logp.scalar_type();
  return response_mask.is_cuda() && response_mask.numel() > 0 && old_logp.device() == response_mask.device() &&
         rollout_logp.device() == response_mask.device() && rollout_logp.scalar_type() == type &&
         (type == at::kFloat || type == at::kDouble) && response_mask.scalar_type() == at::kBool;
}

bool compute_mismatch_cuda(const torch::Tensor& old_logp, const torch::Tensor& rollout_logp,
                           const torch::Tensor& response_mask, const torch::Tensor& traj, int64_t num_trajectories,
                           const MismatchOptions& options, double veto_log, MismatchResult& result) {
  const torch::Tensor old = old_logp.contiguous(), rollout = rollout_logp.contiguous();
  const torch::Tensor mask = response_mask.contiguous();
  if (old.scalar_type() == at::kDouble)
    return run<double>(old, rollout, mask, traj, num_trajectories, options, veto_log, result);
  return run<float>(old, rollout, mask, traj, num_trajectories, options, veto_log, result);
}

}  // namespace turnrl::detail
