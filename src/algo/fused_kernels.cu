#include "fused_kernels.cuh"

#include <cmath>

namespace turnrl::fused {
namespace {

constexpr int kBlock = 1024;
constexpr int64_t kSharedBytes = 48 * 1024;  // the default dynamic shared memory limit
constexpr int64_t kMaxBlockRows = 1 << 16;   // beyond this, many blocks beat one

__device__ __forceinline__ float masked(const float* x, const bool* m, int64_t r) {
  return (m == nullptr || m[r]) ? x[r] : 0.0f;  // NaN-safe: a masked NaN is 0
}

__device__ void to_go_in_place(float* dense, int64_t j, int64_t turns, float gamma) {
  float run = 0.0f;
  for (int64_t t = turns - 1; t >= 0; --t) {
    run = dense[j * turns + t] + gamma * run;
    dense[j * turns + t] = run;
  }
}

__global__ void reward_to_go_block(const int64_t* traj, const int64_t* turn, const float* reward, const bool* mask,
                                   int64_t rows, int64_t trajectories, int64_t turns, float gamma, float* out) {
  extern __shared__ float dense[];
  for (int64_t i = threadIdx.x; i < trajectories * turns; i += blockDim.x) dense[i] = 0.0f;
  __syncthreads();
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) dense[traj[r] * turns + turn[r]] = masked(reward, mask, r);
  __syncthreads();
  for (int64_t j = threadIdx.x; j < trajectories; j += blockDim.x) to_go_in_place(dense, j, turns, gamma);
  __syncthreads();
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) out[r] = dense[traj[r] * turns + turn[r]];
}

__global__ void scatter_rewards(const int64_t* traj, const int64_t* turn, const float* reward, const bool* mask,
                                int64_t rows, int64_t turns, float* dense) {
  const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r < rows) dense[traj[r] * turns + turn[r]] = masked(reward, mask, r);
}

__global__ void to_go_rows(float* dense, int64_t trajectories, int64_t turns, float gamma) {
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j < trajectories) to_go_in_place(dense, j, turns, gamma);
}

__global__ void gather_rows(const int64_t* traj, const int64_t* turn, const float* dense, int64_t rows, int64_t turns,
                            float* out) {
  const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r < rows) out[r] = dense[traj[r] * turns + turn[r]];
}

__device__ __forceinline__ void accumulate(const int64_t* group, const int64_t* turn, const float* g, const bool* mask,
                                           int64_t r, int64_t turns, double* sums, int* counts, int* bad_row) {
  if (mask != nullptr && !mask[r]) return;
  const float v = g[r];
  if (!isfinite(v)) atomicMin(bad_row, int(r));
  const int64_t key = group[r] * turns + turn[r];
  atomicAdd(&sums[key], double(v));
  atomicAdd(&counts[key], 1);
}

__device__ __forceinline__ float leave_one_out(const int64_t* group, const int64_t* turn, const float* g,
                                               const bool* mask, int64_t r, int64_t turns, const double* sums,
                                               const int* counts, bool singleton_raw) {
  if (mask != nullptr && !mask[r]) return 0.0f;
  const int64_t key = group[r] * turns + turn[r];
  const int n = counts[key];
  const double v = g[r];
  if (n > 1) return float(v - (sums[key] - v) / double(n - 1));
  return singleton_raw ? float(v) : 0.0f;
}

__global__ void trloo_block(const int64_t* group, const int64_t* turn, const float* g, const bool* mask, int64_t rows,
                            int64_t turns, int64_t segments, bool singleton_raw, int* bad_row, float* out) {
  extern __shared__ double shared[];
  double* sums = shared;
  int* counts = reinterpret_cast<int*>(shared + segments);
  __shared__ int bad;
  if (threadIdx.x == 0) bad = int(rows);
  for (int64_t i = threadIdx.x; i < segments; i += blockDim.x) sums[i] = 0.0, counts[i] = 0;
  __syncthreads();
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) accumulate(group, turn, g, mask, r, turns, sums, counts, &bad);
  __syncthreads();
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)
    out[r] = leave_one_out(group, turn, g, mask, r, turns, sums, counts, singleton_raw);
  if (threadIdx.x == 0) *bad_row = bad;
}

__global__ void trloo_accumulate(const int64_t* group, const int64_t* turn, const float* g, const bool* mask,
                                 int64_t rows, int64_t turns, double* sums, int* counts, int* bad_row) {
  const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r < rows) accumulate(group, turn, g, mask, r, turns, sums, counts, bad_row);
}

__global__ void trloo_finish(const int64_t* group, const int64_t* turn, const float* g, const bool* mask, int64_t rows,
                             int64_t turns, const double* sums, const int* counts, bool singleton_raw, float* out) {
  const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r < rows) out[r] = leave_one_out(group, turn, g, mask, r, turns, sums, counts, singleton_raw);
}

unsigned blocks_for(int64_t n) { return unsigned((n + kBlock - 1) / kBlock); }

}  // namespace

bool reward_to_go_fits_block(int64_t rows, int64_t trajectories, int64_t turns) {
  return rows <= kMaxBlockRows && trajectories * turns * int64_t(sizeof(float)) <= kSharedBytes;
}

bool trloo_fits_block(int64_t rows, int64_t segments) {
  return rows <= kMaxBlockRows && segments * int64_t(sizeof(double) + sizeof(int)) <= kSharedBytes;
}

void launch_reward_to_go(const int64_t* traj, const int64_t* turn, const float* reward, const bool* mask, int64_t rows,
                         int64_t trajectories, int64_t turns, float gamma, float* dense, float* out,
                         cudaStream_t stream) {
  if (reward_to_go_fits_block(rows, trajectories, turns)) {
    reward_to_go_block<<<1, kBlock, size_t(trajectories * turns) * sizeof(float), stream>>>(
        traj, turn, reward, mask, rows, trajectories, turns, gamma, out);
    return;
  }
  scatter_rewards<<<blocks_for(rows), kBlock, 0, stream>>>(traj, turn, reward, mask, rows, turns, dense);
  to_go_rows<<<blocks_for(trajectories), kBlock, 0, stream>>>(dense, trajectories, turns, gamma);
  gather_rows<<<blocks_for(rows), kBlock, 0, stream>>>(traj, turn, dense, rows, turns, out);
}

void launch_trloo(const int64_t* group, const int64_t* turn, const float* returns, const bool* mask, int64_t rows,
                  int64_t turns, int64_t segments, bool singleton_raw, double* sums, int* counts, int* bad_row,
                  float* out, cudaStream_t stream) {
  if (trloo_fits_block(rows, segments)) {
    trloo_block<<<1, kBlock, size_t(segments) * (sizeof(double) + sizeof(int)), stream>>>(
        group, turn, returns, mask, rows, turns, segments, singleton_raw, bad_row, out);
    return;
  }
  trloo_accumulate<<<blocks_for(rows), kBlock, 0, stream>>>(group, turn, returns, mask, rows, turns, sums, counts,
                                                            bad_row);
  trloo_finish<<<blocks_for(rows), kBlock, 0, stream>>>(group, turn, returns, mask, rows, turns, sums, counts,
                                                        singleton_raw, out);
}

}  // namespace turnrl::fused
