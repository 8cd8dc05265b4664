#include "policy_loss_cuda.h"

#include <algorithm>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "policy_loss_kernels.cuh"
#include "turnrl/core/error.h"

namespace turnrl::detail {
namespace {

namespace pk = policy_loss_kernels;

int agg_mode_code(LossAggMode mode) {
  switch (mode) {
    case LossAggMode::token_mean: return pk::kTokenMean;
    case LossAggMode::seq_mean_token_sum: return pk::kSeqMeanTokenSum;
    case LossAggMode::seq_mean_token_mean: return pk::kSeqMeanTokenMean;
    case LossAggMode::seq_mean_token_sum_norm: return pk::kSeqMeanTokenSumNorm;
    case LossAggMode::seq_sum_no_norm: return pk::kSeqSumNoNorm;
  }
  fail("policy_loss: unknown aggregation mode {}", int(mode));
}

void check_launch(cudaError_t error, const char* kernel) {
  if (error != cudaSuccess)
    fail("policy_loss: CUDA kernel {} failed to launch: {}", kernel, cudaGetErrorString(error));
}

template <typename T>
FusedPPOLossCuda run(const torch::Tensor& logp, const torch::Tensor& old, const torch::Tensor& adv,
                     const torch::Tensor& mask, const torch::Tensor& weights, const PPOLossOptions& o,
                     PolicyLossMetrics& m) {
  const c10::cuda::CUDAGuard device_guard(logp.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  pk::Params p;
  p.rows = logp.size(0);
  p.len = logp.size(1);
  p.adv_row_stride = adv.dim() == 1 ? 1 : p.len;
  p.adv_col_stride = adv.dim() == 1 ? 0 : 1;
  p.clip_lower = 1 - o.clip_low;
  p.clip_upper = 1 + o.clip_high;
  p.dual_clip = o.dual_clip;
  p.ratio_log_bound = kPPORatioLogBound;
  p.agg_mode = agg_mode_code(o.agg_mode);
  p.norm_length = o.norm_length > 0 ? o.norm_length : double(std::max<int64_t>(p.len, 1));
  p.loss_scale_factor = o.loss_scale_factor;

  FusedPPOLossCuda out;
  out.grad = at::empty_like(logp);
  out.coef = at::empty({p.rows}, logp.options());
  out.loss = at::empty({}, logp.options());
  torch::Tensor rows_buf = at::empty({pk::kRowFields, p.rows}, logp.options().dtype(at::kDouble));
  const torch::Tensor metrics = at::empty({pk::kMetricCount}, logp.options());
  check_launch(pk::launch_ppo_rows(logp.data_ptr<T>(), old.data_ptr<T>(), adv.data_ptr<T>(), mask.data_ptr<bool>(),
                                   weights.defined() ? weights.data_ptr<T>() : nullptr, p, out.grad.data_ptr<T>(),
                                   rows_buf.data_ptr<double>(), stream),
               "ppo_rows");
  check_launch(pk::launch_ppo_finish(p, rows_buf.data_ptr<double>(), out.coef.data_ptr<T>(), out.loss.data_ptr<T>(),
                                     metrics.data_ptr<T>(), stream),
               "ppo_finish");
  m.clip_frac_lower = metrics[pk::kMetricClipFracLower];
  m.clip_frac_upper = metrics[pk::kMetricClipFracUpper];
  m.clip_frac_dual = metrics[pk::kMetricClipFracDual];
  m.clip_frac = metrics[pk::kMetricClipFrac];
  m.ratio_mean = metrics[pk::kMetricRatioMean];
  m.ratio_max = metrics[pk::kMetricRatioMax];
  m.approx_kl = metrics[pk::kMetricApproxKl];
  m.nonzero_weight_fraction = metrics[pk::kMetricNonzeroWeightFraction];
  return out;
}

}  // namespace

bool ppo_loss_cuda_applies(const torch::Tensor& logp, const torch::Tensor& response_mask) {
  return logp.is_cuda() && (logp.scalar_type() == at::kFloat || logp.scalar_type() == at::kDouble) &&
         response_mask.numel() > 0 && response_mask.device() == logp.device() &&
         response_mask.scalar_type() == at::kBool;
}

FusedPPOLossCuda ppo_loss_cuda(const torch::Tensor& logp, const torch::Tensor& old_logp,
                               const torch::Tensor& advantages, const torch::Tensor& response_mask,
                               const torch::Tensor& weights, const PPOLossOptions& options,
                               PolicyLossMetrics& metrics) {
  const at::ScalarType type = logp.scalar_type();
  const torch::Device device = logp.device();
  const torch::Tensor lp = logp.detach().contiguous();
  const torch::Tensor old = old_logp.to(device, type).contiguous();
  const torch::Tensor adv = advantages.to(device, type).contiguous();
  const torch::Tensor mask = response_mask.contiguous();
  const torch::Tensor w = weights.defined() ? weights.to(device, type).contiguous() : torch::Tensor();
  if (type == at::kDouble) return run<double>(lp, old, adv, mask, w, options, metrics);
  return run<float>(lp, old, adv, mask, w, options, metrics);
}

}  // namespace turnrl::detail
