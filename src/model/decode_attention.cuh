#pragma once
// Split-KV ("flash-decoding") attention for the generation engine's decode step, one query token a
// row (decode_attention.cu), free of LibTorch like decoder_kernels.cuh. Each row reads its own
// cached keys in place, each key and value once per key/value head for all the query heads it
// serves, with a row's keys split over several blocks and the blocks' partial softmaxes merged
// after: FlashAttention's variable-length forward computes a 128-row query tile of which only
// `groups` rows are real, with no split over the keys.
#include <cstdint>

#include <cuda_runtime.h>

#include "decoder_kernels.cuh"  // DType

namespace turnrl::decoder_kernels {

// Whether decode_attention() takes this dtype (float16, bfloat16), head dim (64, 128, 256) and
// groups = heads / kv_heads (1 to 8); for anything else it returns cudaErrorInvalidValue and the
// caller takes another attention.
bool decode_attention_supports(DType dtype, int64_t dim, int64_t groups);

// How many blocks share each row's keys for `rows` rows of kv_heads heads on a GPU of sm_count
// SMs, when no row reads more than max_keys keys: one for about every 640 keys and at least one
// block a SM, at most 16 and at most one per 64 keys; at least 1 (measurements in the .cu). A
// function of shapes only, never of the rows' key counts: a CUDA graph captures the grid once and
// replays it while the counts change.
int decode_attention_splits(int64_t rows, int64_t kv_heads, int64_t max_keys, int sm_count);

// float32 values of the workspace that decode_attention() needs with `splits` > 1 (unused with 1).
int64_t decode_attention_workspace_floats(int64_t rows, int64_t heads, int64_t dim, int splits);

// out[b, p] = softmax(scale * q[b, p] . K_b^T) V_b for each row b and query head p, where
//   q     [rows, heads, dim]: head h = j * groups + i (served by key/value head j) at place p = h,
//         or p = i * kv_heads + j with group_major (qkv_rotary_store's order);
//   keys, values [total, kv_heads, dim]: row b's keys are rows key_offsets[b] .. key_offsets[b] +
//         keys_used[b] - 1 (int32 [rows] each; the slot cache [slots + 1, capacity, kv_heads,
//         dim] flattened), in the dtype, or e4m3 codes (uint8, fp8_e4m3.h) with fp8_cache;
//   out   [rows, heads, dim] in q's head order, in the dtype; a row with no keys gets zeros.
// Softmax and sums in float32. q, keys and values 16-byte aligned. With splits > 1 a second kernel
// merges the splits' partial results from `workspace` (decode_attention_workspace_floats()).
cudaError_t decode_attention(DType dtype, bool fp8_cache, const void* q, const void* keys, const void* values,
                             const int32_t* key_offsets, const int32_t* keys_used, void* out, float* workspace,
                             int64_t rows, int64_t heads, int64_t kv_heads, int64_t dim, bool group_major, float scale,
                             int splits, cudaStream_t stream);

// The decode step's own queries, keys and values, as the merged q/k/v projection made them and
// before qkv_rotary_store (decoder_kernels.cuh) would norm, rotate and store them.
struct FreshTokens {
  const void* qkv = nullptr;       // [rows, heads + 2 kv_heads, dim]: query, key, value heads of each row
  const void* q_weight = nullptr;  // [dim]: the query heads' RMS norm weight, or null (no norm)
  const void* k_weight = nullptr;  // [dim]: the key heads', or null
  const void* cos = nullptr;       // [rows, dim / 2]: each row's rotary angles, in the dtype
  const void* sin = nullptr;
  const int64_t* write_index = nullptr;  // [rows]: the row of the flattened caches that takes the new key and value
  void* keys = nullptr;    // the key cache, flattened [total, kv_heads, dim]
  void* values = nullptr;  // the value cache
  float eps = 0;
};

// decode_attention() with the step's own q, k and v taken straight from the projection: each block
// norms and rotates its queries, and the block that reads a row's new key also makes that key and
// value and writes them to the caches at write_index (which must be key_offsets[b] + keys_used[b] -
// 1 for a row whose output is used: the new key is its last); with fp8_cache as e4m3 codes of the
// values rounded to the dtype first. Computes what qkv_rotary_store +
// decode_attention() compute, to the bit, in one launch instead of two (no q buffer). Head dims
// 64, 128 and 256 (the warp-per-head norm + rotary).
cudaError_t decode_attention_from_qkv(DType dtype, bool fp8_cache, const FreshTokens& fresh,
                                      const int32_t* key_offsets, const int32_t* keys_used, void* out,
                                      float* workspace, int64_t rows, int64_t heads, int64_t kv_heads, int64_t dim,
                                      bool group_major, float scale, int splits, cudaStream_t stream);

// Whether the fused decode path calls decode_attention_from_qkv() or qkv_rotary_store then
// decode_attention() (the default until the one launch has run on a GPU: its test and
// engine_bench's row). Process-wide; engine_bench times both.
void set_decode_attention_from_qkv(bool on);
bool decode_attention_from_qkv_enabled();

// Whether decode_attention() does its two products on the tensor cores (mma.sync, compute
// capability 8.0 on, head_dim 64 or 128; others keep the scalar kernel): the same softmax, with
// the attention weights rounded to the dtype (float16 over e4m3 codes) for the product with the
// values, as FlashAttention rounds them. About a fifth of the scalar kernel's instructions a key,
// for the fp8 cache, whose halved bytes leave the scalar kernel bound by its instructions. Off by
// default until measured on a GPU (its test and engine_bench's rows); process-wide.
// decode_attention_from_qkv() keeps the scalar kernel.
void set_decode_attention_tensor_cores(bool on);
bool decode_attention_tensor_cores_enabled();

}  // namespace turnrl::decoder_kernels
