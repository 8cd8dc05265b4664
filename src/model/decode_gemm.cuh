#pragma once
// The decode step's projections at rollout batch sizes on Hopper: out = x W^T (+ bias) for at most
// 64 rows of x, the regime where a GEMM reads its weights once and does little else. There cuBLAS
// takes 1.5-2.5x the weight bytes' time at the copy bandwidth (benchmarks/device/
// decode_gemm_probe.py), because each call starts from an idle GPU: its grid's launch, then the
// first loads' latency, then the split-K reduce as another kernel. This kernel starts streaming its
// weights before the kernel ahead of it has finished (a programmatic dependent launch; only the
// activations wait for it), and sums split-K partials inside the launch, through the distributed
// shared memory of a thread-block cluster, in a fixed order (the same bits every call). Free of
// LibTorch so that nvcc builds it without its headers.
#include <cstdint>

#include <cuda_runtime.h>

#include "decoder_kernels.cuh"

namespace turnrl::decoder_kernels {

// The tiling decode_linear picks: a block computes all rows of `cols` outputs over 1/splits of the
// inputs, and the `splits` blocks of the same outputs form one cluster that sums their partials.
struct DecodeGemmTiling {
  int cols = 0;    // 64 or 128
  int splits = 0;  // 1, 2, 4 or 8; divides in_features / 64
  int stages = 0;  // pipeline steps of 64 inputs in shared memory: 4, 6 or 8 (0: 8)
};

// The tiling for a projection of in_features -> out_features on a GPU of sm_count SMs: the one whose busiest SM reads the fewest weight bytes (blocks are spread evenly
// over the SMs), then the fewest splits; {0, 0} where the shapes do not fit (out_features or
// in_features not a multiple of 64).
DecodeGemmTiling decode_gemm_tiling(int64_t out_features, int64_t in_features, int sm_count);

// Whether decode_linear takes the problem on the current device: float16 or bfloat16, 1 to 64
// rows, in_features and out_features multiples of 64, a GPU of compute capability 9.0 or later
// (thread-block clusters) with a CUDA 12.3 runtime or later, and the kernel on (set_decode_gemm).
bool decode_linear_supported(DType dtype, int64_t rows, int64_t out_features, int64_t in_features);

// out [rows, out_features] = x [rows, in_features] W^T + bias, W [out_features, in_features],
// bias [out_features] or null; all contiguous, in the dtype, 16-byte aligned. Float32 products
// and sums (tensor cores), one rounding to the dtype at the end. The kernel reads W before the
// kernel ahead of it in the stream has finished: W and bias must not be that kernel's output.
// tiling {0, 0}: decode_gemm_tiling() for this GPU. cudaErrorInvalidValue where unsupported.
cudaError_t decode_linear(DType dtype, const void* x, const void* weight, const void* bias, void* out, int64_t rows,
                          int64_t out_features, int64_t in_features, DecodeGemmTiling tiling, cudaStream_t stream);

// Whether the fused decode path uses decode_linear where it takes the shapes, or cuBLAS
// everywhere. Off by default: on an H100 its first form (four pipeline steps) took 0.63-1.13x
// cuBLAS's time a projection and made the engine 5.6 % slower at Qwen3-0.6B B = 64 (docs/
// benchmarks.md); this form (eight steps) is not measured yet. engine_bench times both. Process-wide.
void set_decode_gemm(bool on);
bool decode_gemm_enabled();

}  // namespace turnrl::decoder_kernels
