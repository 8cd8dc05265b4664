#pragma once
// Launchers of the mismatch-correction kernels (mismatch_kernels.cu) on raw device pointers; no
// LibTorch here, so that nvcc compiles them quickly. The LibTorch side is mismatch_cuda.cpp.
//
// The work is the CPU path's two passes (mismatch.cpp), as four small launches:
//   1. launch_row_stats:    one block per row reads old/rollout/mask once and writes the row's
//                           statistics; flags NaN on a valid token and bad trajectory ids.
//   2. launch_trajectory_sums: rows -> trajectories (segment sums of Σ lr, count, Σ k3).
//   3. launch_apply:        one block per row takes the row's decisions (rejection levels, k3
//                           rejection, veto, TIS level) and writes the new mask and the weights.
//   4. launch_diagnose:     one block reduces the row and trajectory statistics to the
//                           diagnostics (no [N, L] pass).
// The caller reads the flags (a few bytes) between 2 and 3 when it checks for NaN.
#include <cstdint>

#include <cuda_runtime_api.h>

#ifdef __CUDACC__
#define TURNRL_HOST_DEVICE __host__ __device__
#else
#define TURNRL_HOST_DEVICE
#endif

namespace turnrl::mismatch_kernels {

// MismatchLevel, in its order.
enum Level : int { kOff = 0, kToken, kTurn, kTurnGeo, kSequence, kGeometric };

// Per-row statistics, double, field-major: rows_buf[field * rows + r]. Pass 1 writes the fields
// up to kRollout, pass 2 the rest.
enum RowField : int {
  kLrSum,       // Σ lr over valid tokens
  kCount,       // valid tokens
  kVeto,        // 1 when a valid token has lr < ln(veto threshold)
  kAbsSum,      // Σ |lr|
  kAbsMax,      // max |lr| (0 for an empty row)
  kK3Sum,       // Σ (ρ − lr − 1), ρ = exp(clamp(lr, ±bound))
  kRho2Sum,     // Σ ρ²
  kOldSum,      // Σ old_logp
  kRolloutSum,  // Σ rollout_logp
  kKept,        // valid tokens kept (pass 2)
  kWSum,        // Σ w over valid tokens, w the TIS ratio capped at is_cap (pass 2; for the ESS)
  kW2Sum,       // Σ w² (pass 2)
  kRowFields
};

// Per-trajectory totals, double, field-major: scratch[field * trajectories + t], then the flags.
// The caller zeroes the whole scratch buffer (scratch_size doubles) before pass 1.
enum TrajField : int { kTrajLr, kTrajCount, kTrajK3, kTrajKept, kTrajFields };
enum Flag : int {
  kFlagNan,       // a valid token has a NaN log-prob
  kFlagBadTraj,   // a traj id lies outside [0, trajectories)
  kFlagUnsorted,  // traj ids are not non-decreasing (trajectory sums then use atomics)
  kFlagCount
};
TURNRL_HOST_DEVICE inline int64_t scratch_size(int64_t trajectories) { return kTrajFields * trajectories + kFlagCount; }
TURNRL_HOST_DEVICE inline int64_t flag_offset(int64_t trajectories) { return kTrajFields * trajectories; }

// The diagnostics, in MismatchDiagnostics' order.
enum Diagnostic : int {
  kDiagAbsMean,
  kDiagAbsMax,
  kDiagK3,
  kDiagMismatchKl,
  kDiagChi2Token,
  kDiagChi2Sequence,
  kDiagTrainingPpl,
  kDiagRolloutPpl,
  kDiagEss,
  kDiagRejectedTokens,
  kDiagRejectedRows,
  kDiagRejectedTrajectories,
  kDiagVetoedRows,
  kDiagCount
};

struct Params {
  int64_t rows = 0, len = 0;
  int64_t trajectories = 0;      // the number of trajectory ids; rows when traj is nullptr
  const int64_t* traj = nullptr; // [rows] trajectory of each row; nullptr: row r is trajectory r
  int rs_level = kOff, k3_level = kOff, is_level = kOff;
  double rs_lower = 0, rs_upper = 0;  // keep iff ρ_level in [rs_lower, rs_upper]
  double k3_upper = 0;                // keep iff k3_level's statistic <= k3_upper
  double is_cap = 0;                  // TIS weight = min(ρ_is_level, is_cap)
  double veto_log = 0;                // ln(veto threshold); -inf disables
  double log_ratio_limit = 0;         // per-token |lr| clamp before any sum
  double safety_bound = 0;            // exponent clamp before exp
};

// float and double inputs; `old`, `rollout`, `mask` are contiguous [rows, len].
cudaError_t launch_row_stats(const float* old, const float* rollout, const bool* mask, const Params& p,
                             double* rows_buf, double* scratch, cudaStream_t stream);
cudaError_t launch_row_stats(const double* old, const double* rollout, const bool* mask, const Params& p,
                             double* rows_buf, double* scratch, cudaStream_t stream);

cudaError_t launch_trajectory_sums(const Params& p, const double* rows_buf, double* scratch, cudaStream_t stream);

// Writes out_mask [rows, len] and out_weights [rows, len] (the inputs' type).
cudaError_t launch_apply(const float* old, const float* rollout, const bool* mask, const Params& p, double* rows_buf,
                         double* scratch, bool* out_mask, float* out_weights, cudaStream_t stream);
cudaError_t launch_apply(const double* old, const double* rollout, const bool* mask, const Params& p,
                         double* rows_buf, double* scratch, bool* out_mask, double* out_weights, cudaStream_t stream);

// Writes the kDiagCount diagnostics to `out` (device memory of the inputs' type).
cudaError_t launch_diagnose(const Params& p, const double* rows_buf, const double* scratch, float* out,
                            cudaStream_t stream);
cudaError_t launch_diagnose(const Params& p, const double* rows_buf, const double* scratch, double* out,
                            cudaStream_t stream);

}  // namespace turnrl::mismatch_kernels

#ifdef __CUDACC__
namespace turnrl::mismatch_kernels {

// Reduces v[0..K) over the block (blockDim.x a multiple of 32, at most 1024): sums, except the
// fields whose bit is set in max_fields, which take the maximum (those must be >= 0: 0 is the
// identity). The result is valid in thread 0. Safe to call repeatedly (it synchronises first).
template <int K>
__device__ void block_reduce(double (&v)[K], unsigned max_fields) {
  __shared__ double partial[K][32];
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5, warps = int(blockDim.x) >> 5;
  __syncthreads();
#pragma unroll
  for (int f = 0; f < K; ++f) {
    const bool is_max = (max_fields >> f) & 1u;
    for (int offset = 16; offset > 0; offset >>= 1) {
      const double other = __shfl_down_sync(0xffffffffu, v[f], offset);
      v[f] = is_max ? (v[f] < other ? other : v[f]) : v[f] + other;
    }
    if (lane == 0) partial[f][warp] = v[f];
  }
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int f = 0; f < K; ++f) {
    const bool is_max = (max_fields >> f) & 1u;
    v[f] = lane < warps ? partial[f][lane] : 0.0;
    for (int offset = 16; offset > 0; offset >>= 1) {
      const double other = __shfl_down_sync(0xffffffffu, v[f], offset);
      v[f] = is_max ? (v[f] < other ? other : v[f]) : v[f] + other;
    }
  }
}

// Threads per row block: enough warps to cover the row, at most 256.
inline unsigned row_block_threads(int64_t len) {
  int64_t threads = 32;
  while (threads < len && threads < 256) threads *= 2;
  return unsigned(threads);
}

// Blocks for a grid-stride loop over rows (one row per block at a time).
inline unsigned row_blocks(int64_t rows) { return unsigned(rows < (int64_t(1) << 20) ? rows : (int64_t(1) << 20)); }

}  // namespace turnrl::mismatch_kernels
#endif
