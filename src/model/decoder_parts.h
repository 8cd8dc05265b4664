#pragma once
// Pieces shared by the decoders (transformer.cpp, hf_decoder.cpp): RMSNorm, the rotate_half
// rotation, attention with grouped key/value heads, the masks and positions of a forward call
// with or without a KV cache, and the sampler's KV-cache adapter.
#include <cstdint>
#include <functional>
#include <utility>

#include <torch/types.h>

#include "turnrl/model/kv_cache.h"
#include "turnrl/model/sampler.h"

namespace turnrl::detail {

// RMSNorm as transformers' LlamaRMSNorm / Qwen3RMSNorm: normalised in float32, cast back to x's
// dtype, then scaled by the weight.
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

// cos and sin of positions [B, T] times inv_freq [D/2]: float32 [B, 1, T, D/2].
std::pair<torch::Tensor, torch::Tensor> rotary_angles(const torch::Tensor& positions, const torch::Tensor& inv_freq);

// Rotates pairs (x_i, x_{i+D/2}) of x [B, H, T, D] (rotate_half layout). Computed in the dtype
// that x and cos/sin promote to, then cast to x's dtype: transformers casts cos/sin to the model
// dtype first; the built-in transformer passes them in float32.
torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

// Softmax attention with scale head_dim^-0.5. q [B, H, Tq, D]; k, v [B, Hkv, Tk, D] with H a
// multiple of Hkv (each key/value head serves H / Hkv query heads, as transformers' repeat_kv);
// mask bool [B, 1, Tq, Tk] (true = attend) or undefined for plain causal attention, Tq == Tk.
// at::scaled_dot_product_attention where LibTorch has it (2.0+; enable_gqa from 2.5), a plain
// float32-softmax implementation otherwise.
torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& mask);

// Positions and attention mask of one forward call of tokens [B, T].
struct AttentionLayout {
  torch::Tensor positions;  // int64 [B, T], counted from each row's first valid token
  torch::Tensor attend;     // bool [B, 1, T, past + T]; undefined = plain causal attention
  torch::Tensor valid;      // bool [B, T]; defined whenever a cache is used
};

// Without a cache, plain causal attention is exact unless padding precedes a valid token (left
// padding): then the fast path is taken. With a cache, records the tokens' validity in its key
// mask; call advance() after the layers ran.
AttentionLayout attention_layout(const torch::Tensor& tokens, const torch::Tensor& attention_mask, KVCache* cache);
void advance(KVCache& cache, const AttentionLayout& layout);

// Appends k, v [B, Hkv, T, D] to layer `layer` of the cache and returns every cached key and value.
std::pair<torch::Tensor, torch::Tensor> append_to_cache(KVCache& cache, size_t layer, const torch::Tensor& k,
                                                        const torch::Tensor& v);

// Positions, attention mask and cache targets of one forward call over a SlotKVCache (kv_cache.h).
// Built from tensors only, without reading them on the host: a CUDA graph can capture it.
struct SlotLayout {
  SlotKVCache* cache = nullptr;
  const SlotBatch* batch = nullptr;
  torch::Tensor positions;    // int64 [B, T] start + t
  torch::Tensor attend;       // bool  [B, 1, T, read_width] key j <= start + t
  torch::Tensor write_index;  // int64 [B * T] row of the flattened cache [(slots + 1) * capacity] per token
  // Calls of the fused path on a GPU (batch.fused_kernels): the variable-length attention kernel's
  // arguments, built once for all layers (fused_decoder.h): each row's first key in the flattened
  // cache (+ one past the cache), the offsets of each row's real tokens among all real tokens
  // (0..B for decode), how many keys each row reads (start + count, at least 1), all int32; with
  // more than one token a row, the flattened [B * T] positions of the real tokens (the others are
  // padding) and the longest row's count. Undefined (0) otherwise.
  torch::Tensor key_offsets, query_offsets, keys_used, real_tokens;
  int64_t longest_count = 0;
  bool padded = false;  // with more than one token a row: some row has fewer real tokens than T
  // And over an e4m3 cache with more than one token a row: the flattened cache rows that the rows
  // read, each row's keys_used[b] of them in turn (int64 [sum of keys_used]), and each row's first
  // among them (+ their count; int32 [B + 1]): the packed copy in the model's dtype that
  // FlashAttention reads in place of the codes (fused_decoder.h).
  torch::Tensor decoded_rows, decoded_key_offsets;
  // Decode calls whose query heads are in group-major order (fused_decoder.h): the query offsets
  // of `groups` rows a token, 0, groups, 2 groups, ... (int32); set by the decoder, which knows
  // the head counts.
  torch::Tensor grouped_query_offsets;
};
SlotLayout slot_layout(const torch::Tensor& tokens, const SlotBatch& batch, SlotKVCache& cache);

// Writes k, v [B, Hkv, T, D] into layer `layer` and returns the keys and values each row
// attends to, [B, Hkv, read_width, D] (views of the cache rows when batch.leading_slots).
std::pair<torch::Tensor, torch::Tensor> store_in_slots(const SlotLayout& layout, size_t layer, const torch::Tensor& k,
                                                       const torch::Tensor& v);
// The keys and values each row attends to, as store_in_slots() returns them, without writing.
std::pair<torch::Tensor, torch::Tensor> slot_rows(const SlotLayout& layout, size_t layer);

// Query heads of D values each in group-major order: head h = j * groups + i (groups = heads /
// kv_heads, served by key/value head j) at place i * kv_heads + j, the order in which
// FlashAttention reads a decode token's grouped heads. The natural columns in that order (int64
// [heads * D]): column c of a group-major vector is column result[c] of the natural one.
torch::Tensor group_major_columns(int64_t heads, int64_t kv_heads, int64_t dim);

// attention() for q [B, H, T, D] against k, v [B, Hkv, W, D] with mask [B, 1, T, W], the H / Hkv
// query heads of each key/value head folded into its query axis ([B, Hkv, H / Hkv * T, D]): grouped
// heads without copying keys (repeat_kv) and with a mask, which SDPA's enable_gqa paths lack.
torch::Tensor grouped_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const torch::Tensor& mask);

// The sampler's KV-cache path for a decoder: prefill the prompts once, then one token per step.
class CachedNextToken : public NextTokenModel {
 public:
  using Forward = std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&, KVCache*)>;
  using MakeCache = std::function<KVCache(int64_t batch, int64_t capacity)>;
  CachedNextToken(Forward forward, MakeCache make_cache, int64_t capacity)
      : forward_(std::move(forward)), make_cache_(std::move(make_cache)), capacity_(capacity) {}
  torch::Tensor prefill(const torch::Tensor& prompts, const torch::Tensor& prompt_mask) override;
  torch::Tensor extend(const torch::Tensor& token, const torch::Tensor& valid) override;

 private:
  Forward forward_;
  MakeCache make_cache_;
  int64_t capacity_;
  KVCache cache_;
};

}  // namespace turnrl::detail
