#pragma once
// Device code shared by decoder_kernels.cu and decode_attention.cu: float32 views of the half
// types, LibTorch's rounding of an op's result, and one attention head's RMS norm + rotary as one
// warp computes it. qkv_rotary_store (decoder_kernels.cu) and the split-KV attention that takes
// the step's q, k and v straight from the merged projection (decode_attention.cu) both call
// warp_norm_rotate, so the queries and cached keys they make are equal to the bit, and equal to
// norm_rotary's, which the trainer's forward runs. Free of LibTorch like the kernels that use it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

namespace turnrl::decoder_kernels::device {

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

// What a KV-cache element of type C holds for v, a value the model computes in dtype T: v
// rounded to T, then, for uint8_t e4m3 codes (fp8_e4m3.h), to the nearest code (ties to even,
// saturated at +-448, NaN to 0x7F) as to_e4m3() rounds it.
template <typename T, typename C>
__device__ __forceinline__ C to_cache(float v) {
  if constexpr (std::is_same_v<C, uint8_t>)
    return uint8_t(__nv_cvt_float_to_fp8(rounded<T>(v), __NV_SATFINITE, __NV_E4M3));
  else
    return from_float<C>(v);
}

// One head's vector held by one warp: lane l holds the pairs (i, i + half) for i = l + 32 j,
// j < J (half = 32 J), RMS-normalised with `weight` (skipped when null) and rotated by (c, s), as
// norm_rotary() rounds it. The norm's sum is the warp's, in a fixed order, without a block
// barrier; the head's rsqrt goes to *rstd (lane 0) when not null.
template <typename T, int J>
__device__ __forceinline__ void warp_norm_rotate(float (&a)[J], float (&b)[J], const float (&c)[J], const float (&s)[J],
                                                 const T* weight, int lane, float eps, float* rstd) {
  constexpr int half = 32 * J;
  if (weight != nullptr) {
    float squares = 0.0f;
#pragma unroll
    for (int j = 0; j < J; ++j) squares = __fmaf_rn(b[j], b[j], __fmaf_rn(a[j], a[j], squares));
    for (int offset = 16; offset > 0; offset >>= 1) squares += __shfl_xor_sync(0xffffffffu, squares, offset);
    const float scale = rsqrtf(squares / float(2 * half) + eps);
    if (rstd != nullptr && lane == 0) *rstd = scale;
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const int i = lane + 32 * j;
      a[j] = rounded<T>(to_float(weight[i]) * rounded<T>(a[j] * scale));
      b[j] = rounded<T>(to_float(weight[i + half]) * rounded<T>(b[j] * scale));
    }
  }
  // __fmul_rn: each product rounded on its own, never contracted into a fused multiply-add (the
  // plain path multiplies and adds in separate ops).
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const float rotated_a = rounded<T>(__fmul_rn(a[j], c[j])) - rounded<T>(__fmul_rn(b[j], s[j]));
    b[j] = rounded<T>(__fmul_rn(b[j], c[j])) + rounded<T>(__fmul_rn(a[j], s[j]));
    a[j] = rotated_a;
  }
}

// Loads one head's pairs and its token's angles as warp_norm_rotate holds them.
template <typename T, int J>
__device__ __forceinline__ void load_head_pairs(const T* x, const T* cos, const T* sin, int lane, float (&a)[J],
                                                float (&b)[J], float (&c)[J], float (&s)[J]) {
  constexpr int half = 32 * J;
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const int i = lane + 32 * j;
    a[j] = to_float(x[i]);
    b[j] = to_float(x[i + half]);
    c[j] = to_float(cos[i]);
    s[j] = to_float(sin[i]);
  }
}

// C: where the pairs go, T or e4m3 codes (to_cache).
template <typename T, int J, typename C = T>
__device__ __forceinline__ void store_head_pairs(C* to, int lane, const float (&a)[J], const float (&b)[J]) {
  constexpr int half = 32 * J;
#pragma unroll
  for (int j = 0; j < J; ++j) {
    to[lane + 32 * j] = to_cache<T, C>(a[j]);
    to[lane + 32 * j + half] = to_cache<T, C>(b[j]);
  }
}

}  // namespace turnrl::decoder_kernels::device
