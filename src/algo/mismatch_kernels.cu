#include "mismatch_kernels.cuh"

#include <cmath>

namespace turnrl::mismatch_kernels {
namespace {

constexpr unsigned kRowThreads = 256;       // the most row_block_threads() gives
constexpr unsigned kDiagnoseThreads = 512;  // one block; 1024 threads would need more registers
constexpr unsigned kElementThreads = 256;
constexpr unsigned kMaxFieldsOfRowStats = (1u << kVeto) | (1u << kAbsMax);

__device__ __forceinline__ double clamp(double x, double bound) {
  return x < -bound ? -bound : (x > bound ? bound : x);
}

// The per-token log ratio exactly as the CPU path computes it: NaN counts 0, ±inf saturate.
template <typename T>
__device__ __forceinline__ T log_ratio(T old, T rollout, double limit) {
  T d = old - rollout;
  if (isnan(d)) d = T(0);
  return d < T(-limit) ? T(-limit) : (d > T(limit) ? T(limit) : d);
}

// The trajectory of row r, or -1 when its id is out of range (then flagged by pass 1, and the
// row is treated as a trajectory of its own so that nothing reads out of bounds).
__device__ __forceinline__ int64_t trajectory_of(const Params& p, int64_t r) {
  if (p.traj == nullptr) return r;
  const int64_t t = p.traj[r];
  return (t >= 0 && t < p.trajectories) ? t : -1;
}

// The level's aggregate of a per-token quantity x: Σ x over the row (turn), its mean (turn_geo),
// Σ over the trajectory (sequence), its mean (geometric).
__device__ __forceinline__ double level_aggregate(int level, double row_sum, double row_count, double traj_sum,
                                                  double traj_count) {
  switch (level) {
    case kTurn: return row_sum;
    case kTurnGeo: return row_sum / (row_count < 1 ? 1 : row_count);
    case kSequence: return traj_sum;
    default: return traj_sum / (traj_count < 1 ? 1 : traj_count);  // kGeometric
  }
}

__device__ __forceinline__ bool row_level(int level) { return level != kOff && level != kToken; }

template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    row_stats_kernel(const T* old, const T* rollout, const bool* mask, Params p, double* rows_buf, double* scratch) {
  double* flags = scratch + flag_offset(p.trajectories);
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    double s[kRolloutSum + 1] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
    bool nan = false;
    const int64_t begin = r * p.len;
    for (int64_t k = threadIdx.x; k < p.len; k += blockDim.x) {
      const int64_t i = begin + k;
      if (!mask[i]) continue;
      const T o = old[i], ro = rollout[i];
      nan = nan || isnan(o) || isnan(ro);
      const double lr = double(log_ratio(o, ro, p.log_ratio_limit));
      const double rho = exp(clamp(lr, p.safety_bound));
      const double abs_lr = fabs(lr);
      s[kLrSum] += lr;
      s[kCount] += 1;
      if (lr < p.veto_log) s[kVeto] = 1;
      s[kAbsSum] += abs_lr;
      if (abs_lr > s[kAbsMax]) s[kAbsMax] = abs_lr;
      s[kK3Sum] += rho - lr - 1;
      s[kRho2Sum] += rho * rho;
      s[kOldSum] += double(o);
      s[kRolloutSum] += double(ro);
    }
    if (nan) flags[kFlagNan] = 1;  // every writer stores the same value
    block_reduce(s, kMaxFieldsOfRowStats);
    if (threadIdx.x != 0) continue;
    for (int f = 0; f <= kRolloutSum; ++f) rows_buf[f * p.rows + r] = s[f];
    if (p.traj != nullptr) {
      const int64_t t = p.traj[r];
      if (t < 0 || t >= p.trajectories) flags[kFlagBadTraj] = 1;
      if (r > 0 && p.traj[r - 1] > t) flags[kFlagUnsorted] = 1;
    }
  }
}

// Rows -> trajectories. Non-decreasing ids (the trainer's trajectory-major layout, or no traj):
// each trajectory's first row sums its contiguous rows in order, so the totals are deterministic.
// Otherwise every row adds itself atomically (the order of a trajectory's few rows may then vary
// in the last bit of a double).
__global__ void __launch_bounds__(kElementThreads)
    trajectory_sums_kernel(Params p, const double* rows_buf, double* scratch) {
  const bool sorted = scratch[flag_offset(p.trajectories) + kFlagUnsorted] == 0;
  const int64_t n = p.rows, trajectories = p.trajectories;
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < n; r += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = trajectory_of(p, r);
    if (t < 0) continue;
    if (!sorted) {
      atomicAdd(&scratch[kTrajLr * trajectories + t], rows_buf[kLrSum * n + r]);
      atomicAdd(&scratch[kTrajCount * trajectories + t], rows_buf[kCount * n + r]);
      atomicAdd(&scratch[kTrajK3 * trajectories + t], rows_buf[kK3Sum * n + r]);
      continue;
    }
    if (r > 0 && trajectory_of(p, r - 1) == t) continue;  // not the first row of its trajectory
    double lr = 0, count = 0, k3 = 0;
    for (int64_t q = r; q < n && trajectory_of(p, q) == t; ++q) {
      lr += rows_buf[kLrSum * n + q];
      count += rows_buf[kCount * n + q];
      k3 += rows_buf[kK3Sum * n + q];
    }
    scratch[kTrajLr * trajectories + t] = lr;
    scratch[kTrajCount * trajectories + t] = count;
    scratch[kTrajK3 * trajectories + t] = k3;
  }
}

template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    apply_kernel(const T* old, const T* rollout, const bool* mask, Params p, double* rows_buf, double* scratch,
                 bool* out_mask, T* out_weights) {
  const int64_t n = p.rows, trajectories = p.trajectories;
  const double bound = p.safety_bound;
  const bool token_rs = p.rs_level == kToken, token_k3 = p.k3_level == kToken, is_on = p.is_level != kOff;
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    // The row's decisions; every thread computes the same values from the same few doubles.
    const int64_t t = trajectory_of(p, r);
    const double row_lr = rows_buf[kLrSum * n + r], row_count = rows_buf[kCount * n + r];
    const double row_k3 = rows_buf[kK3Sum * n + r];
    const double traj_lr = t < 0 ? row_lr : scratch[kTrajLr * trajectories + t];
    const double traj_count = t < 0 ? row_count : scratch[kTrajCount * trajectories + t];
    const double traj_k3 = t < 0 ? row_k3 : scratch[kTrajK3 * trajectories + t];
    bool keep_row = rows_buf[kVeto * n + r] == 0;
    if (row_level(p.rs_level)) {
      const double rho = exp(clamp(level_aggregate(p.rs_level, row_lr, row_count, traj_lr, traj_count), bound));
      keep_row = keep_row && rho >= p.rs_lower && rho <= p.rs_upper;
    }
    if (row_level(p.k3_level))
      keep_row = keep_row && level_aggregate(p.k3_level, row_k3, row_count, traj_k3, traj_count) <= p.k3_upper;
    const bool row_is = row_level(p.is_level);
    const T row_w = row_is ? T(exp(clamp(level_aggregate(p.is_level, row_lr, row_count, traj_lr, traj_count), bound)))
                           : T(0);

    double acc[3] = {0, 0, 0};  // kept, Σ w, Σ w²
    const int64_t begin = r * p.len;
    for (int64_t k = threadIdx.x; k < p.len; k += blockDim.x) {
      const int64_t i = begin + k;
      if (!mask[i]) {
        out_mask[i] = false;
        out_weights[i] = T(0);
        continue;
      }
      const T lr = log_ratio(old[i], rollout[i], p.log_ratio_limit);
      const T rho = exp(lr < T(-bound) ? T(-bound) : (lr > T(bound) ? T(bound) : lr));
      bool keep = keep_row && (!token_rs || (rho >= p.rs_lower && rho <= p.rs_upper));
      if (token_k3 && keep) {
        const double lr_d = double(lr);
        keep = exp(clamp(lr_d, bound)) - lr_d - 1 <= p.k3_upper;
      }
      const T cap = T(p.is_cap);
      const T raw = row_is ? row_w : rho;
      const T w = raw < cap ? raw : cap;
      out_mask[i] = keep;
      out_weights[i] = keep ? (is_on ? w : T(1)) : T(0);
      acc[0] += keep ? 1 : 0;
      acc[1] += double(w);
      acc[2] += double(w) * double(w);
    }
    block_reduce(acc, 0u);
    if (threadIdx.x != 0) continue;
    rows_buf[kKept * n + r] = acc[0];
    rows_buf[kWSum * n + r] = acc[1];
    rows_buf[kW2Sum * n + r] = acc[2];
    if (t >= 0 && acc[0] > 0) atomicAdd(&scratch[kTrajKept * trajectories + t], acc[0]);  // integers: exact
  }
}

__device__ __forceinline__ double fraction(double part, double whole) { return whole > 0 ? part / whole : 0.0; }

// Single block: the diagnostics from the row and trajectory statistics, as mismatch.cpp's
// diagnose() defines them.
template <typename T>
__global__ void __launch_bounds__(kDiagnoseThreads)
    diagnose_kernel(Params p, const double* rows_buf, const double* scratch, T* out) {
  enum {
    kTokens, kAbs, kAbsMaxAll, kK3, kLr, kRho2, kRows, kTrainPpl, kRolloutPpl, kKeptAll, kW, kW2, kRowsRejected,
    kRowsVetoed, kTrajs, kRho2Seq, kTrajsRejected, kSums
  };
  double s[kSums] = {0};
  const int64_t n = p.rows, trajectories = p.trajectories;
  for (int64_t r = threadIdx.x; r < n; r += blockDim.x) {
    const double count = rows_buf[kCount * n + r], kept = rows_buf[kKept * n + r];
    s[kTokens] += count;
    s[kAbs] += rows_buf[kAbsSum * n + r];
    const double abs_max = rows_buf[kAbsMax * n + r];
    if (abs_max > s[kAbsMaxAll]) s[kAbsMaxAll] = abs_max;
    s[kK3] += rows_buf[kK3Sum * n + r];
    s[kLr] += rows_buf[kLrSum * n + r];
    s[kRho2] += rows_buf[kRho2Sum * n + r];
    s[kKeptAll] += kept;
    s[kW] += rows_buf[kWSum * n + r];
    s[kW2] += rows_buf[kW2Sum * n + r];
    if (count > 0) {
      s[kRows] += 1;
      // Perplexity exp(−mean logp), the log capped at 80.
      s[kTrainPpl] += exp(fmin(-rows_buf[kOldSum * n + r] / count, 80.0));
      s[kRolloutPpl] += exp(fmin(-rows_buf[kRolloutSum * n + r] / count, 80.0));
      if (kept == 0) s[kRowsRejected] += 1;
      if (rows_buf[kVeto * n + r] != 0) s[kRowsVetoed] += 1;
    }
  }
  for (int64_t t = threadIdx.x; t < trajectories; t += blockDim.x) {
    if (scratch[kTrajCount * trajectories + t] <= 0) continue;
    const double rho = exp(clamp(scratch[kTrajLr * trajectories + t], p.safety_bound));
    s[kTrajs] += 1;
    s[kRho2Seq] += rho * rho;
    if (scratch[kTrajKept * trajectories + t] == 0) s[kTrajsRejected] += 1;
  }
  block_reduce(s, 1u << kAbsMaxAll);
  if (threadIdx.x != 0) return;
  const double tokens = s[kTokens], per_token = tokens < 1 ? 1 : tokens;
  double d[kDiagCount];
  d[kDiagAbsMean] = s[kAbs] / per_token;
  d[kDiagAbsMax] = s[kAbsMaxAll];
  d[kDiagK3] = s[kK3] / per_token;
  d[kDiagMismatchKl] = -(s[kLr] / per_token);
  d[kDiagChi2Token] = tokens > 0 ? s[kRho2] / per_token - 1 : 0.0;
  d[kDiagChi2Sequence] = s[kTrajs] > 0 ? s[kRho2Seq] / s[kTrajs] - 1 : 0.0;
  d[kDiagTrainingPpl] = s[kTrainPpl] / (s[kRows] < 1 ? 1 : s[kRows]);
  d[kDiagRolloutPpl] = s[kRolloutPpl] / (s[kRows] < 1 ? 1 : s[kRows]);
  // ESS = (Σw)² / (n Σw²), 1 when Σw² = 0.
  const double ess_den = tokens * s[kW2];
  d[kDiagEss] = s[kW2] > 0 ? s[kW] * s[kW] / (ess_den < 1e-300 ? 1e-300 : ess_den) : 1.0;
  d[kDiagRejectedTokens] = fraction(tokens - s[kKeptAll], tokens);
  d[kDiagRejectedRows] = fraction(s[kRowsRejected], s[kRows]);
  d[kDiagRejectedTrajectories] = fraction(s[kTrajsRejected], s[kTrajs]);
  d[kDiagVetoedRows] = fraction(s[kRowsVetoed], s[kRows]);
  for (int i = 0; i < kDiagCount; ++i) out[i] = T(d[i]);
}

unsigned element_blocks(int64_t n) {
  const int64_t blocks = (n + kElementThreads - 1) / kElementThreads;
  return unsigned(blocks < 65536 ? (blocks < 1 ? 1 : blocks) : 65536);
}

template <typename T>
cudaError_t row_stats(const T* old, const T* rollout, const bool* mask, const Params& p, double* rows_buf,
                      double* scratch, cudaStream_t stream) {
  if (p.rows > 0)
    row_stats_kernel<T><<<row_blocks(p.rows), row_block_threads(p.len), 0, stream>>>(old, rollout, mask, p, rows_buf,
                                                                                      scratch);
  return cudaGetLastError();
}

template <typename T>
cudaError_t apply(const T* old, const T* rollout, const bool* mask, const Params& p, double* rows_buf, double* scratch,
                  bool* out_mask, T* out_weights, cudaStream_t stream) {
  if (p.rows > 0)
    apply_kernel<T><<<row_blocks(p.rows), row_block_threads(p.len), 0, stream>>>(old, rollout, mask, p, rows_buf,
                                                                                  scratch, out_mask, out_weights);
  return cudaGetLastError();
}

template <typename T>
cudaError_t diagnose(const Params& p, const double* rows_buf, const double* scratch, T* out, cudaStream_t stream) {
  diagnose_kernel<T><<<1, kDiagnoseThreads, 0, stream>>>(p, rows_buf, scratch, out);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_row_stats(const float* old, const float* rollout, const bool* mask, const Params& p,
                             double* rows_buf, double* scratch, cudaStream_t stream) {
  return row_stats(old, rollout, mask, p, rows_buf, scratch, stream);
}
cudaError_t launch_row_stats(const double* old, const double* rollout, const bool* mask, const Params& p,
                             double* rows_buf, double* scratch, cudaStream_t stream) {
  return row_stats(old, rollout, mask, p, rows_buf, scratch, stream);
}

cudaError_t launch_trajectory_sums(const Params& p, const double* rows_buf, double* scratch, cudaStream_t stream) {
  if (p.rows > 0)
    trajectory_sums_kernel<<<element_blocks(p.rows), kElementThreads, 0, stream>>>(p, rows_buf, scratch);
  return cudaGetLastError();
}

cudaError_t launch_apply(const float* old, const float* rollout, const bool* mask, const Params& p, double* rows_buf,
                         double* scratch, bool* out_mask, float* out_weights, cudaStream_t stream) {
  return apply(old, rollout, mask, p, rows_buf, scratch, out_mask, out_weights, stream);
}
cudaError_t launch_apply(const double* old, const double* rollout, const bool* mask, const Params& p,
                         double* rows_buf, double* scratch, bool* out_mask, double* out_weights, cudaStream_t stream) {
  return apply(old, rollout, mask, p, rows_buf, scratch, out_mask, out_weights, stream);
}

cudaError_t launch_diagnose(const Params& p, const double* rows_buf, const double* scratch, float* out,
                            cudaStream_t stream) {
  return diagnose(p, rows_buf, scratch, out, stream);
}
cudaError_t launch_diagnose(const Params& p, const double* rows_buf, const double* scratch, double* out,
                            cudaStream_t stream) {
  return diagnose(p, rows_buf, scratch, out, stream);
}

}  // namespace turnrl::mismatch_kernels
