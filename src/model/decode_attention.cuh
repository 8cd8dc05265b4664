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
//         dim] flattened);
//   out   [rows, heads, dim] in q's head order, in the dtype; a row with no keys gets zeros.
// Softmax and sums in float32. q, keys and values 16-byte aligned. With splits > 1 a second kernel
// merges the splits' partial results from `workspace` (decode_attention_workspace_floats()).
cudaError_t decode_attention(DType dtype, const void* q, const void* keys, const void* values,
                             const int32_t* key_offsets, const int32_t* keys_used, void* out, float* workspace,
                             int64_t rows, int64_t heads, int64_t kv_heads, int64_t dim, bool group_major, float scale,
                             int splits, cudaStream_t stream);

}  // namespace turnrl::decoder_kernels
