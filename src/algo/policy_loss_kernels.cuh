#pragma once
// Launchers of the fused PPO loss kernels (policy_loss_kernels.cu) on raw device pointers; no
// LibTorch here. The LibTorch side is policy_loss_cuda.cpp.
//
//   1. launch_ppo_rows:   one block per row reads logp, old_logp, advantages, mask and weights
//                         once, writes w ∂ℓ/∂logp per token (before the row coefficient) and
//                         the row's sums (loss, valid tokens, clip counts, ratio, KL, weights).
//   2. launch_ppo_finish: one block turns the row sums into the aggregation mode's row
//                         coefficients c_r, the loss Σ_r c_r S_r and the metrics.
// The backward multiplies the saved gradient by c_r and the incoming gradient.
#include <cstdint>

#include <cuda_runtime_api.h>

namespace turnrl::policy_loss_kernels {

// LossAggMode, in its order.
enum AggMode : int { kTokenMean = 0, kSeqMeanTokenSum, kSeqMeanTokenMean, kSeqMeanTokenSumNorm, kSeqSumNoNorm };

// Per-row sums, double, field-major: rows_buf[field * rows + r].
enum RowField : int {
  kLoss,      // Σ w ℓ
  kCount,     // valid tokens
  kLower,     // ρ < 1 − ε_low or dual-clipped
  kUpper,     // ρ > 1 + ε_high and not dual-clipped
  kDual,      // dual-clipped
  kRatioSum,  // Σ ρ
  kRatioMax,  // max ρ (0 for an empty row)
  kKlSum,     // Σ (old_logp − logp)
  kNonzero,   // valid tokens with w ≠ 0
  kRowFields
};

// The metrics written by launch_ppo_finish, in this order.
enum Metric : int {
  kMetricClipFracLower,
  kMetricClipFracUpper,
  kMetricClipFracDual,
  kMetricClipFrac,
  kMetricRatioMean,
  kMetricRatioMax,
  kMetricApproxKl,
  kMetricNonzeroWeightFraction,
  kMetricCount
};

struct Params {
  int64_t rows = 0, len = 0;
  int64_t adv_row_stride = 0, adv_col_stride = 0;  // advantages [N]: (1, 0); [N, L]: (len, 1)
  double clip_lower = 0, clip_upper = 0;           // 1 − ε_low, 1 + ε_high
  double dual_clip = 0;                            // c; 0 disables
  double ratio_log_bound = 0;                      // logp − old_logp clamp before exp
  int agg_mode = kTokenMean;
  double norm_length = 1;                          // seq-mean-token-sum-norm divisor (> 0, resolved)
  double loss_scale_factor = 1;
};

// weights may be nullptr (all 1). grad [rows, len] receives w ∂ℓ/∂logp (0 on masked tokens).
cudaError_t launch_ppo_rows(const float* logp, const float* old_logp, const float* advantages, const bool* mask,
                            const float* weights, const Params& p, float* grad, double* rows_buf, cudaStream_t stream);
cudaError_t launch_ppo_rows(const double* logp, const double* old_logp, const double* advantages, const bool* mask,
                            const double* weights, const Params& p, double* grad, double* rows_buf,
                            cudaStream_t stream);

// coef [rows]: c_r / loss_scale_factor; loss: one value; metrics: kMetricCount values.
cudaError_t launch_ppo_finish(const Params& p, const double* rows_buf, float* coef, float* loss, float* metrics,
                              cudaStream_t stream);
cudaError_t launch_ppo_finish(const Params& p, const double* rows_buf, double* coef, double* loss, double* metrics,
                              cudaStream_t stream);

}  // namespace turnrl::policy_loss_kernels
