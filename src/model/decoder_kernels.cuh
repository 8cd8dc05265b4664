#pragma once
// Launchers of the decoder's fused kernels (decoder_kernels.cu), free of LibTorch
// so that nvcc builds them without its headers. Each replaces a chain of LibTorch elementwise ops
// with one kernel that rounds to the model dtype exactly where that chain does (transformers'
// RMSNorm, rotate_half rotation and SiLU-gated MLP), so the fused path computes what the plain one
// does up to the order of the float32 sums in a norm. Tensors are contiguous; dtype says what
// every T* pointer holds.
#include <cstdint>
#include <initializer_list>

#include <cuda_runtime.h>

namespace turnrl::decoder_kernels {

enum class DType { f32, f16, bf16 };

// Whether every pointer starts 16-byte aligned, as the kernels' 16-byte packed loads need (a null
// pointer counts as aligned).
inline bool aligned16(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

// Whether the decoder's kernels (these and decode_attention.cuh's) are launched as programmatic
// dependent launches on GPUs that take them (dependent_launch.cuh): on by default; off launches
// them plainly, for a benchmark's comparison. Process-wide.
void set_dependent_launch(bool on);
bool dependent_launch_enabled();

// out[r] = weight * to_dtype(s[r] * rsqrt(mean(s[r]^2) + eps)) over rows of `dim`, where
// s = x, or s = to_dtype(x + delta) written to `sum` when delta is not null (a residual add).
// rstd (float32 [rows], may be null) receives each row's rsqrt(mean(s^2) + eps) for the backward.
cudaError_t rms_norm(DType dtype, const void* x, const void* delta, void* sum, const void* weight, void* out,
                     float* rstd, int64_t rows, int64_t dim, float eps, cudaStream_t stream);

// The gradients of rms_norm (no residual add) from dy: dx [rows, dim] in the dtype, and the
// weight's gradient summed over the rows into dweight (float32 [dim], zeroed by the caller).
// x's rstd as the forward wrote it.
cudaError_t rms_norm_backward(DType dtype, const void* dy, const void* x, const void* weight, const float* rstd,
                              void* dx, float* dweight, int64_t rows, int64_t dim, cudaStream_t stream);

// x [tokens, heads, dim]: each head's vector RMS-normalised with `weight` [dim] (skipped when null),
// then rotated (rotate_half layout) by cos, sin [tokens, dim / 2] given in the model dtype.
// rstd (float32 [tokens * heads], may be null) as for rms_norm.
cudaError_t norm_rotary(DType dtype, const void* x, const void* weight, const void* cos, const void* sin, void* out,
                        float* rstd, int64_t tokens, int64_t heads, int64_t dim, float eps, cudaStream_t stream);

// The gradients of norm_rotary: dx, and (with a weight) its gradient summed into dweight
// (float32 [dim], zeroed by the caller).
cudaError_t norm_rotary_backward(DType dtype, const void* dy, const void* x, const void* weight, const void* cos,
                                 const void* sin, const float* rstd, void* dx, float* dweight, int64_t tokens,
                                 int64_t heads, int64_t dim, cudaStream_t stream);

// out = to_dtype(silu(gate)) * up, elementwise over n values.
cudaError_t silu_mul(DType dtype, const void* gate, const void* up, void* out, int64_t n, cudaStream_t stream);

// Its gradients: dgate = dy * up * silu'(gate), dup = dy * silu(gate).
cudaError_t silu_mul_backward(DType dtype, const void* dy, const void* gate, const void* up, void* dgate, void* dup,
                              int64_t n, cudaStream_t stream);

// silu_mul over one merged projection's output gate_up [rows, 2 * width] (gate columns, then up
// columns): out [rows, width].
cudaError_t silu_mul_merged(DType dtype, const void* gate_up, void* out, int64_t rows, int64_t width,
                            cudaStream_t stream);

// The merged q/k/v projection's output qkv [tokens, heads + 2 * kv_heads, dim] (query heads, then
// key heads, then value heads) into attention's inputs, in one kernel: the query heads through
// norm_rotary (q_weight) into q_out [tokens, heads, dim], the key heads through norm_rotary
// (k_weight) and the value heads as they are into row write_index[t] of keys and values
// [rows, kv_heads, dim] (the generation engine's slot cache, flattened). With group_major, query
// head h = j * groups + i (groups = heads / kv_heads, served by key/value head j) goes to place
// i * kv_heads + j of its token: the layout in which FlashAttention reads a decode token's heads
// as `groups` query rows of kv_heads heads. fp8_cache: keys and values hold uint8 e4m3 codes
// (fp8_e4m3.h), written as to_e4m3() rounds the values in dtype.
cudaError_t qkv_rotary_store(DType dtype, bool fp8_cache, const void* qkv, const void* q_weight, const void* k_weight,
                             const void* cos, const void* sin, void* q_out, void* keys, void* values,
                             const int64_t* write_index, int64_t tokens, int64_t heads, int64_t kv_heads, int64_t dim,
                             float eps, bool group_major, cudaStream_t stream);

// One token per row of logits [rows, vocab] without top-k or top-p: the inverse CDF of
// softmax(logits / temperature) at uniform (float64 in (0, 1]): the first token whose running
// probability reaches u times the row's total and whose probability is positive; where
// temperature is 0, the first argmax. logp: the token's log-prob under that distribution
// (temperature 1 for a greedy row), as log_softmax computes it. token int64, logp float32 [rows].
cudaError_t sample_unfiltered(DType dtype, const void* logits, const float* temperature, const double* uniform,
                              int64_t* token, float* logp, int64_t rows, int64_t vocab, cudaStream_t stream);

// Per row of logits [rows, vocab] (read once, in float32, each divided by temperature first: z =
// logit / temperature): lse = logsumexp(z), logp = z[target] - lse, entropy = lse - sum(softmax(z)
// * z). All outputs float32 [rows].
cudaError_t logp_entropy(DType dtype, const void* logits, const int64_t* targets, float* lse, float* logp,
                         float* entropy, int64_t rows, int64_t vocab, float temperature, cudaStream_t stream);

// The gradient of g_logp * logp + g_entropy * entropy with respect to the logits, in the dtype:
// ((onehot(target) - p) * g_logp - p * (log p + entropy) * g_entropy) / temperature,
// p = exp(z - lse). g_logp or g_entropy null: that term is absent.
cudaError_t logp_entropy_backward(DType dtype, const void* logits, const int64_t* targets, const float* lse,
                                  const float* entropy, const float* g_logp, const float* g_entropy, void* grad_logits,
                                  int64_t rows, int64_t vocab, float temperature, cudaStream_t stream);

}  // namespace turnrl::decoder_kernels
