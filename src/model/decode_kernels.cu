#include "decode_kernels.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace turnrl::decode_kernels {
namespace {

template <typename T>
__device__ __forceinline__ float to_float(T v);
template <>
__device__ __forceinline__ float to_float(float v) { return v; }
template <>
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
template <>
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float(float v) { return __float2bfloat16_rn(v); }

// v as a LibTorch op in dtype T stores it: computed in float32, rounded to T.
template <typename T>
__device__ __forceinline__ float rounded(float v) { return to_float(from_float<T>(v)); }

// The sum of v over the block (blockDim.x a multiple of 32, at most 1024), returned to every thread.
__device__ float block_sum(float v) {
  __shared__ float partial[32];
  __shared__ float total;
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < int(blockDim.x / 32) ? partial[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if (lane == 0) total = v;
  }
  __syncthreads();
  return total;
}

template <typename T>
__global__ void rms_norm_rows(const T* x, const T* delta, T* sum, const T* weight, T* out, int64_t dim, float eps) {
  const int64_t row = blockIdx.x;
  const T* xr = x + row * dim;
  float squares = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    float s = to_float(xr[i]);
    if (delta != nullptr) {
      s = rounded<T>(s + to_float(delta[row * dim + i]));
      sum[row * dim + i] = from_float<T>(s);
    }
    squares += s * s;
  }
  const float scale = rsqrtf(block_sum(squares) / float(dim) + eps);
  // Each thread reads back only what it wrote itself: no barrier needed between the passes.
  const T* s = delta != nullptr ? sum + row * dim : xr;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
    out[row * dim + i] = from_float<T>(to_float(weight[i]) * rounded<T>(to_float(s[i]) * scale));
}

// One block per (token, head), thread i owns the pair (i, i + dim / 2).
template <typename T>
__global__ void norm_rotary_heads(const T* x, const T* weight, const T* cos, const T* sin, T* out, int64_t heads,
                                  int64_t dim, float eps) {
  const int64_t row = blockIdx.x, token = row / heads, half = dim / 2;
  const int64_t i = threadIdx.x;
  const bool mine = i < half;
  float a = mine ? to_float(x[row * dim + i]) : 0.0f, b = mine ? to_float(x[row * dim + i + half]) : 0.0f;
  if (weight != nullptr) {
    const float scale = rsqrtf(block_sum(a * a + b * b) / float(dim) + eps);
    if (mine) {
      a = rounded<T>(to_float(weight[i]) * rounded<T>(a * scale));
      b = rounded<T>(to_float(weight[i + half]) * rounded<T>(b * scale));
    }
  }
  if (!mine) return;
  const float c = to_float(cos[token * half + i]), s = to_float(sin[token * half + i]);
  // __fmul_rn: each product rounded on its own, never contracted into a fused multiply-add (the
  // plain path multiplies and adds in separate ops).
  out[row * dim + i] = from_float<T>(rounded<T>(__fmul_rn(a, c)) - rounded<T>(__fmul_rn(b, s)));
  out[row * dim + i + half] = from_float<T>(rounded<T>(__fmul_rn(b, c)) + rounded<T>(__fmul_rn(a, s)));
}

template <typename T>
__global__ void silu_mul_values(const T* gate, const T* up, T* out, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float g = to_float(gate[i]);
    out[i] = from_float<T>(rounded<T>(g / (1.0f + expf(-g))) * to_float(up[i]));
  }
}

int threads_for(int64_t work) {
  int threads = 32;
  while (threads < work && threads < 1024) threads *= 2;
  return threads;
}

template <typename T>
cudaError_t rms_norm_typed(const void* x, const void* delta, void* sum, const void* weight, void* out, int64_t rows,
                           int64_t dim, float eps, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  rms_norm_rows<T><<<unsigned(rows), threads_for(dim / 4), 0, stream>>>(
      static_cast<const T*>(x), static_cast<const T*>(delta), static_cast<T*>(sum), static_cast<const T*>(weight),
      static_cast<T*>(out), dim, eps);
  return cudaGetLastError();
}

template <typename T>
cudaError_t norm_rotary_typed(const void* x, const void* weight, const void* cos, const void* sin, void* out,
                              int64_t tokens, int64_t heads, int64_t dim, float eps, cudaStream_t stream) {
  if (tokens * heads == 0) return cudaSuccess;
  norm_rotary_heads<T><<<unsigned(tokens * heads), threads_for(dim / 2), 0, stream>>>(
      static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const T*>(cos), static_cast<const T*>(sin),
      static_cast<T*>(out), heads, dim, eps);
  return cudaGetLastError();
}

template <typename T>
cudaError_t silu_mul_typed(const void* gate, const void* up, void* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  silu_mul_values<T><<<unsigned(blocks < 65535 ? blocks : 65535), threads, 0, stream>>>(
      static_cast<const T*>(gate), static_cast<const T*>(up), static_cast<T*>(out), n);
  return cudaGetLastError();
}

}  // namespace

cudaError_t rms_norm(DType dtype, const void* x, const void* delta, void* sum, const void* weight, void* out,
                     int64_t rows, int64_t dim, float eps, cudaStream_t stream) {
  switch (dtype) {
    case DType::f32: return rms_norm_typed<float>(x, delta, sum, weight, out, rows, dim, eps, stream);
    case DType::f16: return rms_norm_typed<__half>(x, delta, sum, weight, out, rows, dim, eps, stream);
    case DType::bf16: return rms_norm_typed<__nv_bfloat16>(x, delta, sum, weight, out, rows, dim, eps, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t norm_rotary(DType dtype, const void* x, const void* weight, const void* cos, const void* sin, void* out,
                        int64_t tokens, int64_t heads, int64_t dim, float eps, cudaStream_t stream) {
  switch (dtype) {
    case DType::f32: return norm_rotary_typed<float>(x, weight, cos, sin, out, tokens, heads, dim, eps, stream);
    case DType::f16: return norm_rotary_typed<__half>(x, weight, cos, sin, out, tokens, heads, dim, eps, stream);
    case DType::bf16: return norm_rotary_typed<__nv_bfloat16>(x, weight, cos, sin, out, tokens, heads, dim, eps, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t silu_mul(DType dtype, const void* gate, const void* up, void* out, int64_t n, cudaStream_t stream) {
  switch (dtype) {
    case DType::f32: return silu_mul_typed<float>(gate, up, out, n, stream);
    case DType::f16: return silu_mul_typed<__half>(gate, up, out, n, stream);
    case DType::bf16: return silu_mul_typed<__nv_bfloat16>(gate, up, out, n, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace turnrl::decode_kernels
