#pragma once
// Launchers of the generation engine's fused decode kernels (decode_kernels.cu), free of LibTorch
// so that nvcc builds them without its headers. Each replaces a chain of LibTorch elementwise ops
// with one kernel that rounds to the model dtype exactly where that chain does (transformers'
// RMSNorm, rotate_half rotation and SiLU-gated MLP), so the fused path computes what the plain one
// does up to the order of the float32 sums in a norm. Tensors are contiguous; dtype says what
// every T* pointer holds.
#include <cstdint>

#include <cuda_runtime.h>

namespace turnrl::decode_kernels {

enum class DType { f32, f16, bf16 };

// out[r] = weight * to_dtype(s[r] * rsqrt(mean(s[r]^2) + eps)) over rows of `dim`, where
// s = x, or s = to_dtype(x + delta) written to `sum` when delta is not null (a residual add).
cudaError_t rms_norm(DType dtype, const void* x, const void* delta, void* sum, const void* weight, void* out,
                     int64_t rows, int64_t dim, float eps, cudaStream_t stream);

// x [tokens, heads, dim]: each head's vector RMS-normalised with `weight` [dim] (skipped when null),
// then rotated (rotate_half layout) by cos, sin [tokens, dim / 2] given in the model dtype.
cudaError_t norm_rotary(DType dtype, const void* x, const void* weight, const void* cos, const void* sin, void* out,
                        int64_t tokens, int64_t heads, int64_t dim, float eps, cudaStream_t stream);

// out = to_dtype(silu(gate)) * up, elementwise over n values.
cudaError_t silu_mul(DType dtype, const void* gate, const void* up, void* out, int64_t n, cudaStream_t stream);

}  // namespace turnrl::decode_kernels
