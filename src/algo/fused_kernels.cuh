#pragma once
// Launchers of the fused kernels (fused_kernels.cu), on raw device pointers; no LibTorch here so
// that nvcc compiles the kernels quickly.
#include <cstdint>

#include <cuda_runtime_api.h>

namespace turnrl::fused {

// G[r] = sum_{s >= turn[r]} gamma^(s - turn[r]) reward of trajectory traj[r] (masked turns count 0).
// `dense` is scratch of trajectories * turns floats (used by the multi-block path only).
void launch_reward_to_go(const int64_t* traj, const int64_t* turn, const float* reward, const bool* turn_mask,
                         int64_t rows, int64_t trajectories, int64_t turns, float gamma, float* dense, float* out,
                         cudaStream_t stream);

// TRLOO per row. `sums`/`counts` are scratch of segments entries (multi-block path only); `bad_row`
// receives the smallest row with a non-finite return on an unmasked turn (rows when none).
void launch_trloo(const int64_t* group, const int64_t* turn, const float* returns, const bool* turn_mask,
                  int64_t rows, int64_t turns, int64_t segments, bool singleton_raw, double* sums, int* counts,
                  int* bad_row, float* out, cudaStream_t stream);

// Whether the single-block (shared memory) path applies for these sizes.
bool reward_to_go_fits_block(int64_t rows, int64_t trajectories, int64_t turns);
bool trloo_fits_block(int64_t rows, int64_t segments);

}  // namespace turnrl::fused
