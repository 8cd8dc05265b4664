#include "policy_loss_kernels.cuh"

#include <cmath>

#include "mismatch_kernels.cuh"  // block_reduce, row_block_threads, row_blocks

namespace turnrl::policy_loss_kernels {
namespace {

using mismatch_kernels::block_reduce;
using mismatch_kernels::row_block_threads;
using mismatch_kernels::row_blocks;

constexpr unsigned kRowThreads = 256;     // the most row_block_threads() gives
constexpr unsigned kFinishThreads = 512;  // one block

// The token loss and its gradient exactly as policy_loss.cpp's CPU loop computes them (double
// arithmetic; a tie between the dual clip and ℓ_clip splits the gradient, as torch's min does).
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    ppo_rows_kernel(const T* logp, const T* old_logp, const T* advantages, const bool* mask, const T* weights,
                    Params p, T* grad, double* rows_buf) {
  const double lo = p.clip_lower, hi = p.clip_upper, c = p.dual_clip, bound = p.ratio_log_bound;
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    double s[kRowFields] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
    const int64_t begin = r * p.len;
    for (int64_t k = threadIdx.x; k < p.len; k += blockDim.x) {
      const int64_t i = begin + k;
      if (!mask[i]) {
        grad[i] = T(0);
        continue;
      }
      const double a = double(advantages[r * p.adv_row_stride + k * p.adv_col_stride]);
      const double d = double(logp[i]) - double(old_logp[i]);
      const double rho = exp(d < -bound ? -bound : (d > bound ? bound : d));
      const double l1 = -a * rho, l2 = -a * (rho < lo ? lo : (rho > hi ? hi : rho));
      // d ℓ / d ρ: the unclipped branch's −A unless the clipped branch strictly wins.
      double loss = l1 < l2 ? l2 : l1, dloss = l2 > l1 ? 0.0 : -a;
      bool dual = false;
      if (c > 0 && a < 0) {
        const double l3 = -a * c;
        dual = l3 < loss;
        if (dual) dloss = 0;
        else if (l3 == loss) dloss *= 0.5;
        loss = l3 < loss ? l3 : loss;
      }
      const double w = weights != nullptr ? double(weights[i]) : 1.0;
      const double inside = (d >= -bound && d <= bound) ? 1.0 : 0.0;
      grad[i] = T(w * dloss * rho * inside);
      s[kLoss] += w * loss;
      s[kCount] += 1;
      s[kLower] += (rho < lo || dual) ? 1 : 0;
      s[kUpper] += (rho > hi && !dual) ? 1 : 0;
      s[kDual] += dual ? 1 : 0;
      s[kRatioSum] += rho;
      if (rho > s[kRatioMax]) s[kRatioMax] = rho;
      s[kKlSum] += -d;
      s[kNonzero] += w != 0 ? 1 : 0;
    }
    block_reduce(s, 1u << kRatioMax);
    if (threadIdx.x != 0) continue;
    for (int f = 0; f < kRowFields; ++f) rows_buf[f * p.rows + r] = s[f];
  }
}

// The row coefficient c_r of the aggregation mode (the scalar definitions; empty rows count
// nowhere): aggregate = Σ_r c_r S_r.
__device__ __forceinline__ double row_coefficient(const Params& p, double count, double tokens, double rows) {
  switch (p.agg_mode) {
    case kTokenMean: return 1.0 / (tokens < 1 ? 1 : tokens);
    case kSeqMeanTokenSum: return 1.0 / rows;
    case kSeqMeanTokenMean: return 1.0 / ((count < 1 ? 1 : count) * rows);
    case kSeqMeanTokenSumNorm: return 1.0 / p.norm_length;
    default: return 1.0;  // kSeqSumNoNorm
  }
}

template <typename T>
__global__ void __launch_bounds__(kFinishThreads)
    ppo_finish_kernel(Params p, const double* rows_buf, T* coef, T* loss, T* metrics) {
  enum { kTokens, kRows, kLowerAll, kUpperAll, kDualAll, kRatioAll, kRatioMaxAll, kKlAll, kNonzeroAll, kSums };
  __shared__ double totals[2];  // valid tokens, non-empty rows
  const int64_t n = p.rows;
  double s[kSums] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t r = threadIdx.x; r < n; r += blockDim.x) {
    const double count = rows_buf[kCount * n + r];
    s[kTokens] += count;
    s[kRows] += count > 0 ? 1 : 0;
    s[kLowerAll] += rows_buf[kLower * n + r];
    s[kUpperAll] += rows_buf[kUpper * n + r];
    s[kDualAll] += rows_buf[kDual * n + r];
    s[kRatioAll] += rows_buf[kRatioSum * n + r];
    const double ratio_max = rows_buf[kRatioMax * n + r];
    if (ratio_max > s[kRatioMaxAll]) s[kRatioMaxAll] = ratio_max;
    s[kKlAll] += rows_buf[kKlSum * n + r];
    s[kNonzeroAll] += rows_buf[kNonzero * n + r];
  }
  block_reduce(s, 1u << kRatioMaxAll);
  if (threadIdx.x == 0) {
    const double tokens = s[kTokens] < 1 ? 1 : s[kTokens];
    double m[kMetricCount];
    m[kMetricClipFracLower] = s[kLowerAll] / tokens;
    m[kMetricClipFracUpper] = s[kUpperAll] / tokens;
    m[kMetricClipFracDual] = s[kDualAll] / tokens;
    m[kMetricClipFrac] = m[kMetricClipFracLower] + m[kMetricClipFracUpper];
    m[kMetricRatioMean] = s[kRatioAll] / tokens;
    m[kMetricRatioMax] = s[kRatioMaxAll];
    m[kMetricApproxKl] = s[kKlAll] / tokens;
    m[kMetricNonzeroWeightFraction] = s[kTokens] > 0 ? s[kNonzeroAll] / tokens : 1.0;
    for (int i = 0; i < kMetricCount; ++i) metrics[i] = T(m[i]);
    totals[0] = s[kTokens];
    totals[1] = s[kRows] < 1 ? 1 : s[kRows];
  }
  __syncthreads();
  const double tokens = totals[0], rows = totals[1];
  double sum[1] = {0};
  for (int64_t r = threadIdx.x; r < n; r += blockDim.x) {
    const double c = row_coefficient(p, rows_buf[kCount * n + r], tokens, rows) / p.loss_scale_factor;
    coef[r] = T(c);
    sum[0] += c * rows_buf[kLoss * n + r];
  }
  block_reduce(sum, 0u);
  if (threadIdx.x == 0) *loss = T(sum[0]);
}

template <typename T>
cudaError_t rows(const T* logp, const T* old_logp, const T* advantages, const bool* mask, const T* weights,
                 const Params& p, T* grad, double* rows_buf, cudaStream_t stream) {
  if (p.rows > 0)
    ppo_rows_kernel<T><<<row_blocks(p.rows), row_block_threads(p.len), 0, stream>>>(logp, old_logp, advantages, mask,
                                                                                     weights, p, grad, rows_buf);
  return cudaGetLastError();
}

template <typename T>
cudaError_t finish(const Params& p, const double* rows_buf, T* coef, T* loss, T* metrics, cudaStream_t stream) {
  ppo_finish_kernel<T><<<1, kFinishThreads, 0, stream>>>(p, rows_buf, coef, loss, metrics);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_ppo_rows(const float* logp, const float* old_logp, const float* advantages, const bool* mask,
                            const float* weights, const Params& p, float* grad, double* rows_buf, cudaStream_t stream) {
  return rows(logp, old_logp, advantages, mask, weights, p, grad, rows_buf, stream);
}
cudaError_t launch_ppo_rows(const double* logp, const double* old_logp, const double* advantages, const bool* mask,
                            const double* weights, const Params& p, double* grad, double* rows_buf,
                            cudaStream_t stream) {
  return rows(logp, old_logp, advantages, mask, weights, p, grad, rows_buf, stream);
}

cudaError_t launch_ppo_finish(const Params& p, const double* rows_buf, float* coef, float* loss, float* metrics,
                              cudaStream_t stream) {
  return finish(p, rows_buf, coef, loss, metrics, stream);
}
cudaError_t launch_ppo_finish(const Params& p, const double* rows_buf, double* coef, double* loss, double* metrics,
                              cudaStream_t stream) {
  return finish(p, rows_buf, coef, loss, metrics, stream);
}

}  // namespace turnrl::policy_loss_kernels
